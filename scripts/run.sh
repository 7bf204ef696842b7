#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts a local cluster (1 MDS + 2 OSS x 2 OSTs
# on 127.0.0.1, data under $CIUIC_DIR, default ~/ciuic), shows it working on a small data set
# (CLI, FUSE mount, Python data loader, checkpoint) and runs `ciuic-benchmark --quick`, which
# compares a fresh local cluster with the local disk. The cluster stays up afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release ciuic ciuic-mds ciuic-oss ciuic-fuse ciuic-benchmark _ciuic

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
echo "== the FUSE mount: ordinary tools see the cluster as a directory tree"
if [ -e /dev/fuse ]; then
  mkdir -p "$work/mnt"
  ciuic mount "$CIUIC_CLUSTER" "$work/mnt"
  trap 'ciuic umount "$work/mnt" 2>/dev/null || true; rm -rf "$work"' EXIT
  ls -l "$work/mnt/datasets/ds/train" | sed -n 1,5p  # sed reads all: no SIGPIPE under pipefail
  du -sh "$work/mnt/datasets/ds/train"
  (cd "$work/ds" && find train -type f | sort | sed -n 1,50p | xargs md5sum) > "$work/local.md5"
  (cd "$work/mnt/datasets/ds" && md5sum -c --quiet "$work/local.md5") && echo "50 samples read through the mount: identical"
  ciuic getstripe "$work/mnt/datasets/ds/shard-000.tar" | sed -n 1,3p
  ciuic umount "$work/mnt"
else
  echo "no /dev/fuse on this machine: mount skipped"
fi

echo
echo "== Python: pack into tar shards, one shuffled epoch with CiuicDataLoader, a checkpoint"
ciuic pack "$work/ds/train" /datasets/ds-shards --shard-mib 4
PYTHONPATH="$PWD/build/release/python" /usr/bin/python3 - <<'PY'
import time
import numpy as np
import torch
import ciuic, ciuic.checkpoint as ckpt

fs = ciuic.connect()
ds = ciuic.ShardDataset(fs, "/datasets/ds-shards")
dl = ciuic.CiuicDataLoader(ds, batch_size=32, shuffle=True, seed=0,
                           transform=lambda b: torch.tensor(len(b)))
t = time.monotonic(); n = 0
for x, y in dl:
    n += len(y)
print("CiuicDataLoader: %d samples from %d shard(s) in one shuffled epoch, %.0f samples/s"
      % (n, sum(1 for e in fs.listdir("/datasets/ds-shards") if e.endswith(".tar")),
         n / (time.monotonic() - t)))
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters())
model(torch.randn(4, 256)).sum().backward(); opt.step()
state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 1}
ckpt.save(state, "/ckpt/step-1", convert={"model/*": "bfloat16"})
back = ckpt.load("/ckpt/step-1", upcast=True)
same = all(torch.equal(back["model"][k], v.to(torch.bfloat16).to(torch.float32))
           for k, v in state["model"].items())
print("checkpoint /ckpt/step-1: saved (weights as bf16) and loaded, step=%d, weights %s"
      % (back["step"], "identical to torch's bf16 cast" if same else "DIFFER"))
assert same
PY
ciuic rm -r /datasets/ds /datasets/ds-shards /ckpt

echo
echo "== ciuic-benchmark --quick: a fresh local cluster vs the local disk, same method"
ciuic-benchmark --quick

echo
echo "The cluster is still running. Try:"
echo "  export PATH=$BIN:\$PATH CIUIC_CLUSTER=$CIUIC_CLUSTER"
echo "  ciuic ls -l /    |  ciuic cluster status $DIR  |  ciuic cluster down $DIR"
