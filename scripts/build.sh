#!/usr/bin/env bash
# Configures and builds ciuic. Usage: scripts/build.sh [release|asan|debug|fuzz] [ninja targets...]
# Output goes to build/<preset>/. The fuzz preset is clang-14 with libFuzzer, ASan and UBSan
# (fuzz/README.md); name the *_fuzz targets, it has no tests.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
case "$preset" in
  release) flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  debug) flags=(-DCMAKE_BUILD_TYPE=Debug) ;;
  # -g1 (line tables): sanitizer reports still name lines, and the objects and links of some
  # fifty test binaries shrink several times over (CI builds this tree on two cores).
  asan) flags=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1" "-DCMAKE_C_FLAGS_DEBUG=-g1"
    -DCIUIC_SANITIZE=ON -DCIUIC_WERROR=ON) ;;
  fuzz)
    export CC=clang-14 CXX=clang++-14
    # -O1 and line tables only, as OSS-Fuzz builds: quicker to compile (CI builds this tree on
    # two cores), and the stacks of a crash still name lines.
    flags=(-DCMAKE_BUILD_TYPE=Fuzz "-DCMAKE_CXX_FLAGS_FUZZ=-O1 -gline-tables-only"
      "-DCMAKE_C_FLAGS_FUZZ=-O1 -gline-tables-only" -DCIUIC_BUILD_FUZZ=ON -DCIUIC_BUILD_TESTS=OFF
      -DCIUIC_BUILD_BENCH=OFF)
    ;;
  *) echo "build.sh: unknown preset '$preset' (release, asan, debug, fuzz)" >&2; exit 2 ;;
esac
if [ "${CI:-}" = "true" ]; then
  flags+=(-DCIUIC_WERROR=ON)
fi
cmake -S . -B "build/$preset" -G Ninja "${flags[@]}" >/dev/null
ninja -C "build/$preset" "$@"
