#!/usr/bin/env bash
# Installs the Debian 12 packages ciuic needs to build, test and benchmark. Idempotent: runs
# `apt-get update` once (only when something is missing) and installs only what is absent.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config ccache git clang-14 libclang-rt-14-dev libomp-14-dev
  librocksdb-dev liburing-dev libfuse3-dev fuse3 libasio-dev libprotobuf-dev protobuf-compiler
  libssl-dev libcurl4-openssl-dev libisal-dev libzstd-dev libcli11-dev libfmt-dev libspdlog-dev
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-dev python3-numpy python3-pytest python3-fsspec python3-torch python3-torchvision pybind11-dev
  python3-botocore nodejs s3fs
  fio procps psmisc rsync sqlite3 tar iproute2 gnuplot-nox python3-matplotlib
)

# npm's s3rver, the S3-compatible server the objstore tests start (tests/s3/package.json and
# its package-lock.json), unpacked by scripts/npm_lock_install.py rather than npm: Debian's npm
# package brings about 420 packages, minutes of every fresh CI machine, and the lock file pins
# every tarball and its hash anyway. Node itself is one package. Reinstalled only when
# node_modules is missing or older than the lock file.
install_npm_deps() {
  local top dir
  top="$(cd "$(dirname "$0")/.." && pwd)"
  dir="$top/tests/s3"
  if [ -f "$dir/node_modules/.package-lock.json" ] &&
    [ ! "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    return 0
  fi
  echo "install-deps: s3rver's packages in tests/s3/node_modules"
  /usr/bin/python3 "$top/scripts/npm_lock_install.py" "$dir"
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  install_npm_deps
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
install_npm_deps
