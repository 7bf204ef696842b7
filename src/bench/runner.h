// The benchmark driver: sets up the targets (a fresh local cluster unless --cluster is given, the
// FUSE mount, peers), measures the physical limits, runs the phases with caches dropped before
// each, and prints the table, JSON and charts. Everything it starts is stopped again, also on
// errors and SIGINT/SIGTERM (the caller installs InstallSignalCleanup first).
#pragma once

#include <string>
#include <vector>

namespace ciuic::bench {

// Runs `ciuic-benchmark` with `args` (argv without argv[0]); returns the exit code: 0 when every
// phase that ran succeeded, 1 when one failed, 2 on bad options.
int RunBenchmark(const std::vector<std::string>& args);

// Writes "3" to /proc/sys/vm/drop_caches after sync(); false when not allowed.
bool DropCaches();

}  // namespace ciuic::bench
