#!/usr/bin/env bash
# Runs the crash-loop harness (ciuic-crashloop, src/testing/crashloop_main.cc) for long loops:
# power cuts of random servers of an in-process cluster, then kill -9 of random real server
# processes, each under a mixed data and metadata workload whose acknowledged state is verified
# after every crash. CI runs short loops (ctest -L crashloop); this is for the long ones.
# Usage: scripts/crashloop.sh [power|kill|both] [ciuic-crashloop options, e.g. --cycles 200]
# Exits non-zero when anything acknowledged was lost or reported corrupt.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-both}"
shift || true
case "$mode" in
  power|kill|both) ;;
  *) echo "crashloop.sh: unknown mode '$mode' (power, kill or both)" >&2; exit 2 ;;
esac
scripts/build.sh release ciuic-crashloop ciuic ciuic-mds ciuic-oss >/dev/null
bin=build/release/src/testing/ciuic-crashloop
status=0
for m in power kill; do
  if [ "$mode" = both ] || [ "$mode" = "$m" ]; then
    # Server log lines go to stderr; keep them out of the report, in a file.
    log=$(mktemp "/tmp/ciuic-crashloop-$m-XXXXXX.log")
    if ! "$bin" "$m" --bin-dir build/release/apps --quiet "$@" 2>"$log"; then
      status=1
      echo "crashloop $m FAILED; server and error lines in $log" >&2
      tail -n 5 "$log" >&2
    else
      rm -f "$log"
    fi
  fi
done
exit $status
