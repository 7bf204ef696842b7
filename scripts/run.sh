#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts a local cluster (1 MDS + 2 OSS x 2 OSTs
# on 127.0.0.1, data under $CIUIC_DIR, default ~/ciuic), shows it working on a small data set and
# runs the quick benchmark side by side with the local disk. The cluster stays up afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release ciuic ciuic-mds ciuic-oss ciuic-benchmark

BIN="$PWD/build/release/apps"
DIR="${CIUIC_DIR:-$HOME/ciuic}"
export PATH="$BIN:$PATH"
export CIUIC_CLUSTER="$DIR/cluster.conf"

ciuic cluster up "$DIR"
ciuic cluster status "$DIR"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo
echo "== a small data set: 200 samples of 16-128 KiB in 4 classes, plus a 64 MiB shard"
/usr/bin/python3 - "$work/ds" <<'PY'
import os, random, sys
root = sys.argv[1]
rnd = random.Random(0)
for c in range(4):
    d = os.path.join(root, "train", "class%d" % c)
    os.makedirs(d, exist_ok=True)
    for i in range(50):
        with open(os.path.join(d, "s%03d.bin" % i), "wb") as f:
            f.write(rnd.randbytes(rnd.randint(16, 128) * 1024))
with open(os.path.join(root, "shard-000.tar"), "wb") as f:
    f.write(rnd.randbytes(64 << 20))
PY
ciuic mkdir -p /datasets
ciuic put -r "$work/ds" /datasets/
ciuic ls -l /datasets/ds
ciuic getstripe /datasets/ds/train/class0/s000.bin
ciuic getstripe /datasets/ds/shard-000.tar
ciuic get /datasets/ds/shard-000.tar "$work/shard.back"
cmp "$work/ds/shard-000.tar" "$work/shard.back" && echo "round trip of the shard: identical"
ciuic df -h

echo
echo "== quick benchmark: ciuic vs the local disk, same method"
ciuic-benchmark --quick --local-dir "$work/bench-local"
ciuic rm -r /datasets/ds

echo
echo "The cluster is still running. Try:"
echo "  export PATH=$BIN:\$PATH CIUIC_CLUSTER=$CIUIC_CLUSTER"
echo "  ciuic ls -l /    |  ciuic cluster status $DIR  |  ciuic cluster down $DIR"
