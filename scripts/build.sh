#!/usr/bin/env bash
# Configures and builds ciuic. Usage: scripts/build.sh [release|asan|debug] [ninja targets...]
# Output goes to build/<preset>/.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
case "$preset" in
  release) flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  debug) flags=(-DCMAKE_BUILD_TYPE=Debug) ;;
  asan) flags=(-DCMAKE_BUILD_TYPE=Debug -DCIUIC_SANITIZE=ON -DCIUIC_WERROR=ON) ;;
  *) echo "build.sh: unknown preset '$preset' (release, asan, debug)" >&2; exit 2 ;;
esac
if [ "${CI:-}" = "true" ]; then
  flags+=(-DCIUIC_WERROR=ON)
fi
cmake -S . -B "build/$preset" -G Ninja "${flags[@]}" >/dev/null
ninja -C "build/$preset" "$@"
