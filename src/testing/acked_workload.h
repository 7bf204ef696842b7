// AckedWorkload: a mixed data and metadata workload for crash tests, with a verifier of
// everything the cluster acknowledged as durable (ARCHITECTURE Decision 2).
//
// Threads write files (most with fsync, some without), append to files and fsync, rename and
// unlink files and make directories (each followed by Client::FsyncDir), under `root`. Every
// operation whose durability the cluster acknowledged (Fsync or FsyncDir returned OK; with
// process_crash, any call that returned OK) is recorded;
// an operation whose acknowledgement never came (a crash cut it short) is recorded as either
// outcome. Verify() then checks, through a fresh client after the crash:
//   - every acknowledged file exists with at least its acknowledged size, its acknowledged bytes
//     exact, and any 4 KiB block beyond them either the bytes written or zeros;
//   - every acknowledged rename, unlink and mkdir is there;
//   - an unacknowledged change shows either its old or its new state, never a third one;
//   - no read fails with kCorruption (a false corruption report: a crash must never turn data
//     into "corrupt").
// What Verify observed becomes the state the next Run() and Verify() build on, so one workload
// can be crashed and verified over and over (a crash loop).
//
// Thread-safety: Run() and Verify() must not be called concurrently; Stop() may be called from
// any thread while Run() is running.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "common/status.h"

namespace ciuic::testing {

struct AckedWorkloadOptions {
  std::string root = "/crash";  // created by Run() if missing
  int threads = 3;
  uint32_t max_file_bytes = 256 * 1024;
  uint64_t seed = 1;
  // The crash is a kill of server processes, not a power cut: the page cache survives it, so
  // every change a call answered OK for is acknowledged (ARCHITECTURE Decision 2), synced or
  // not. Half the appends, renames, unlinks and mkdirs then skip their fsync.
  bool process_crash = false;
};

struct AckedWorkloadStats {
  uint64_t ops = 0;                   // operations started
  uint64_t acked = 0;                 // operations whose durability was acknowledged
  uint64_t failed = 0;                // operations that failed (expected once the crash happens)
  uint64_t files = 0;                 // files checked by Verify
  uint64_t bytes_verified = 0;        // acknowledged bytes compared by Verify
  uint64_t losses = 0;                // acknowledged state missing or wrong after the crash
  uint64_t false_corruptions = 0;     // reads that failed with kCorruption
  std::vector<std::string> problems;  // one line each (the first 20)
};

class AckedWorkload {
 public:
  explicit AckedWorkload(AckedWorkloadOptions options);

  // Runs the threads on `client` until Stop() is called or each thread meets its first error
  // (the crash), whichever comes first. Returns the counts of this run.
  AckedWorkloadStats Run(Client& client);
  void Stop() { stop_.store(true); }

  // Checks the recorded state through `client` (see above) and adopts what it observed.
  AckedWorkloadStats Verify(Client& client);

  // Paths recorded as acknowledged and present (for tests).
  size_t durable_files() const;
  // Those files, with their acknowledged sizes (for tests that damage one behind its back).
  std::map<std::string, uint64_t> AcknowledgedFiles() const;
  // Operations acknowledged so far, over every Run (any thread may read it while Run runs).
  uint64_t acked() const { return acked_.load(); }

 private:
  // What a path is expected to hold.
  struct Expect {
    bool dir = false;
    uint64_t seed = 0;        // content is Pattern(.., seed)
    uint64_t acked_size = 0;  // bytes that must be there
    uint64_t max_size = 0;    // bytes that may be there (writes not acknowledged)
  };
  // A change whose acknowledgement was cut short: `path` holds either `before` or `after`
  // (nullopt-like: `exists` false means absent).
  struct Entry {
    bool exists = false;
    Expect e;
  };
  struct Either {
    std::string path;
    Entry before;
    Entry after;
    std::string twin;  // a rename's other name: exactly one of the two exists
  };
  struct ThreadState {
    std::map<std::string, Expect> present;  // acknowledged present
    std::vector<std::string> absent;        // acknowledged absent
    std::vector<Either> maybe;              // outcomes not known
    uint64_t next = 0;                      // name counter
  };

  void Worker(Client* client, int t, AckedWorkloadStats* stats);
  // Checks `path` against `want` and fills `seen` with what is there. Returns false when it is
  // missing or wrong (the reason is appended to stats->problems).
  bool Check(Client& client,
             const std::string& path,
             const Entry& want,
             Entry* seen,
             bool report,
             AckedWorkloadStats* stats);
  void Problem(AckedWorkloadStats* stats, std::string line);

  AckedWorkloadOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> acked_{0};
  std::mutex mu_;  // guards stats merging only
  std::vector<ThreadState> state_;
  uint64_t round_ = 0;
};

}  // namespace ciuic::testing
