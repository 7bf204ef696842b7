#!/usr/bin/env bash
# Runs every test: installs dependencies, builds the release and the ASan+UBSan trees, runs the
# unit, integration, end-to-end (real binaries) and FUSE-mount tests in both, and the Python tests
# in the release tree (each starts and stops its own local cluster or MiniCluster, and unmounts
# what it mounted; under ASan the binaries they start are the ASan ones). Python tests use
# Debian's /usr/bin/python3 (its extension module is not built with the sanitizers).
# Then every libFuzzer target runs for 20 s (scripts/fuzz.sh; --no-fuzz skips it); the fuzz
# corpus is also replayed by ctest in both trees (label fuzz).
# Usage: scripts/test.sh [--no-asan] [--no-fuzz]
set -euo pipefail
cd "$(dirname "$0")/.."

asan=1
fuzz=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    --no-fuzz) fuzz=0 ;;
    *) echo "test.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

# Seconds per phase go in the summary: CI's time limit is the whole run, so know where it goes.
start=$SECONDS
phase_start=$SECONDS
timings=()
phase_done() {  # name
  timings+=("$(printf '%-14s %5d s' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}

scripts/install-deps.sh
phase_done "dependencies"
export CTEST_OUTPUT_ON_FAILURE=1
jobs=$(nproc)
status=0
rm -f build/release/ctest-*.log build/asan/ctest-*.log
summary=()

run_ctest() {  # name build-dir ctest-args...
  local name="$1" dir="$2"
  shift 2
  local log="$dir/ctest-$name.log"
  if ctest --test-dir "$dir" -j "$jobs" --timeout 900 "$@" 2>&1 | tee "$log"; then
    :
  else
    status=1
  fi
  summary+=("$name: $(grep -E 'tests passed|tests failed' "$log" | tail -1)")
}

echo "== release build"
scripts/build.sh release
phase_done "release build"
run_ctest release build/release
phase_done "release tests"

if [ "$asan" = 1 ]; then
  echo "== ASan+UBSan build (the 100,000-entry readdir runs in the release tree only: ~150 s under ASan)"
  scripts/build.sh asan
  phase_done "asan build"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest asan build/asan -LE 'python' -E 'ReadDirOf100000Entries'
  phase_done "asan tests"
fi

if [ "$fuzz" = 1 ]; then
  echo "== libFuzzer targets, 20 s each (clang-14 build of the libraries they need)"
  if scripts/fuzz.sh 20 2>&1 | tee build/fuzz-ci.log; then
    summary+=("fuzz: every target ran 20 s without a crash")
  else
    status=1
    summary+=("fuzz: FAILED (build/fuzz-ci.log)")
  fi
  phase_done "fuzz"
fi

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${timings[@]}"
echo "total          $((SECONDS - start)) s"
passed=0 failed=0
for d in build/release/ctest-release.log build/asan/ctest-asan.log; do
  [ -f "$d" ] || continue
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$d" | tail -1 || true)
  if [ -n "$line" ]; then
    total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) tests failed.*/\1/' <<<"$line")
    passed=$((passed + total - f))
    failed=$((failed + f))
  fi
done
echo "$passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then status=1; fi
exit $status
