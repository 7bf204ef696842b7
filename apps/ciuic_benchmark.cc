// ciuic-benchmark: measures ciuic side by side with a local directory, a FUSE mount and peer file
// systems in one invocation, with the same method on every target. The logic is in src/bench
// (docs/benchmark.md); this is its main().
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/proc.h"
#include "bench/runner.h"

int main(int argc, char** argv) {
  // Before any thread starts: SIGINT/SIGTERM run the cleanups (servers, mounts, namespaces).
  ciuic::bench::InstallSignalCleanup();
  try {
    return ciuic::bench::RunBenchmark(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ciuic-benchmark: internal error: %s\n", e.what());
    ciuic::bench::RunAllCleanups();
    return 1;
  }
}
