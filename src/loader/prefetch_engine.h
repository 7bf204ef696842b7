// PrefetchEngine: reads the samples of an epoch in exactly the order it is given, ahead of the
// consumer, with a bounded memory budget. The storage never guesses what comes next: the loader
// computed the epoch's order and hands it over whole.
//
// A sample is (source, offset, length): a byte range of one of the data set's source files (a tar
// shard, or one sample file with offset 0 and its full length). Sources are resolved once per
// engine: shards stay open (an LRU of open Files), so a sample costs one read and no MDS round
// trip (shards resolved once per data set reopen without one after the LRU dropped them);
// one-file-per-sample sources are either resolved once per data set (ResolveSources: then a
// sample is one read and no MDS round trip either) or opened, read and closed per sample.
//
// Threads: `opener_threads` issuer threads claim samples in order, open their source if needed
// (blocking MDS call) and start the read with the client's async API (PreadAsync: all OSTs in
// flight at once); completions land on the client's network threads. Next() blocks (callers drop
// the GIL) until the next sample in order is ready and hands its bytes out.
// Memory: bytes of samples claimed but not yet taken by Next() stay <= budget_bytes (a single
// sample larger than the budget is still read, alone).
// Thread-safety: Next() from one consumer thread at a time; stats() from any thread. The
// destructor stops the threads and waits for reads in flight.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic::loader {

struct SampleRef {
  uint32_t source = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct PrefetchOptions {
  size_t budget_bytes = size_t{256} << 20;  // bytes read ahead and not yet consumed
  int max_inflight = 256;                   // reads in flight (the OSTs need depth)
  int opener_threads = 8;                   // threads that open sources and issue reads
  int max_open_sources = 64;                // open shard Files kept (LRU)
  bool keep_sources_open = true;            // false: one file per sample (open, read, close)
  // Sample buffers in a SharedMemory of the client, so that OSSes on this host place samples
  // straight into them (Client::NewSharedMemory). Off, or when it cannot be created: heap.
  // Used when the engine makes its own pool (none given).
  bool shared_memory = true;
  // The order the next epoch will read (this rank's share; a loader knows it from its seed).
  // With resolved sources and a node cache, it follows this epoch's order in the cache's plan,
  // so what the next epoch reads first stays cached past the end of this one.
  std::vector<SampleRef> next_order;
};

struct PrefetchStats {
  uint64_t samples = 0;            // handed out by Next()
  uint64_t bytes = 0;              // handed out by Next()
  uint64_t opens = 0;              // source opens that went to the MDS (not resolved ones)
  uint64_t peak_buffered = 0;      // peak bytes held (claimed, not yet consumed)
  uint64_t consumer_waits = 0;     // Next() calls that had to wait for data
  double consumer_wait_s = 0;      // total time Next() waited
  uint64_t pool_shared_bytes = 0;  // shared memory the sample pool has in use (allocated pages)
};

// A source file resolved once per data set (FID, layout, size): reads of it then need no MDS
// round trip at all (Client::OpenResolved), instead of an open and a close per sample.
struct ResolvedSource {
  FileId id;
  FileLayout layout;
  uint64_t size = 0;
  uint64_t data_version = 0;   // at the resolve: keys the node cache's blocks of the file
  bool no_node_cache = false;  // excluded from node caches: read past them
};
using ResolvedSources = std::vector<ResolvedSource>;

// Resolves `paths` (regular files; symlinks followed) with `threads` MDS requests in flight: a
// stat and a layout request per path. Errors name the path (kInvalidArgument for a path that is
// not a regular file).
Result<std::shared_ptr<const ResolvedSources>> ResolveSources(Client& client,
                                                              const std::vector<std::string>& paths,
                                                              int threads);

class SamplePool;

// A pool of sample buffers for engines of one client, one after another (or at once). Keep one
// across epochs: its buffers - in a SharedMemory of `client` when `shared_memory` (see
// PrefetchOptions) - stay mapped, where a fresh pool per epoch has every page faulted in again
// (in a VM each first touch of a page is a trap: 17-19k instead of 22k samples/s from the
// second epoch on, measured). Its shared memory is twice `budget_bytes` (only used pages are
// allocated); buffers beyond it come from the heap.
std::shared_ptr<SamplePool> NewSamplePool(Client* client, size_t budget_bytes, bool shared_memory);

// The bytes of one sample handed out by Next(). Its memory comes from the engine's pool of
// sample buffers and goes back there when the SampleBuffer is destroyed, so that in steady state
// a sample lands in memory that is already mapped and nothing is zero-filled first (in a VM each
// first touch of a fresh page is a trap). May outlive the engine. Move-only.
class SampleBuffer {
 public:
  SampleBuffer() = default;
  SampleBuffer(SampleBuffer&& o) noexcept;
  SampleBuffer& operator=(SampleBuffer&& o) noexcept;
  ~SampleBuffer();

  const char* data() const { return buf_ + off_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {buf_ + off_, size_}; }

 private:
  friend class PrefetchEngine;
  friend class SamplePool;
  void Release();

  char* buf_ = nullptr;  // the allocation: the 4 KiB blocks around the sample
  size_t off_ = 0;       // where the sample starts in it
  size_t size_ = 0;
  size_t cap_ = 0;
  std::shared_ptr<SamplePool> pool_;
};

class PrefetchEngine {
 public:
  // `client` must outlive the engine (the shared_ptr keeps it alive). `sources` are cluster paths.
  // `resolved` (optional, one entry per source): open sources from it (no MDS round trips).
  PrefetchEngine(std::shared_ptr<Client> client,
                 std::vector<std::string> sources,
                 std::vector<SampleRef> order,
                 PrefetchOptions options,
                 std::shared_ptr<const ResolvedSources> resolved = nullptr,
                 std::shared_ptr<SamplePool> pool = nullptr);
  ~PrefetchEngine();
  PrefetchEngine(const PrefetchEngine&) = delete;
  PrefetchEngine& operator=(const PrefetchEngine&) = delete;

  // Checks the order (kInvalidArgument for a source index out of range) and starts the threads.
  Status Start();
  // The next sample's bytes in order, or nullopt after the last. A failed read returns its error
  // (naming the source path and offset); the engine is then finished.
  Result<std::optional<SampleBuffer>> Next();
  // The next min(n, remaining) samples in order, appended to *out (one lock round trip and at
  // most one wait per sample not yet read, instead of a call per sample). Returns how many were
  // appended: 0 after the last. Errors as Next(); samples of a failed batch are dropped.
  Result<size_t> NextBatch(size_t n, std::vector<SampleBuffer>* out);
  // Stops issuing and waits for reads in flight (also done by the destructor).
  void Stop();

  PrefetchStats stats() const;
  size_t size() const { return order_.size(); }

 private:
  struct Slot {
    SampleBuffer data;
    bool ready = false;
    Status status;
  };
  void IssuerLoop();
  bool CanIssue() const;          // with mu_ held: the next sample may be claimed now
  bool ShouldWakeIssuer() const;  // with mu_ held: worth waking a sleeping issuer
  void HandOff();                 // before a blocking open: wake a sleeping issuer if there is work
  Result<std::shared_ptr<File>> Source(uint32_t index);
  void Complete(uint64_t seq, Result<size_t> r, std::shared_ptr<File> close_after);

  std::shared_ptr<Client> client_;
  std::vector<std::string> sources_;
  std::shared_ptr<const ResolvedSources> resolved_;
  std::vector<SampleRef> order_;
  PrefetchOptions options_;

  mutable std::mutex mu_;
  std::condition_variable issue_cv_;    // budget or inflight freed, or stop
  std::condition_variable ready_cv_;    // a slot became ready
  std::condition_variable drained_cv_;  // inflight reached 0
  uint64_t next_issue_ = 0;             // next seq to claim
  uint64_t next_take_ = 0;              // next seq Next() returns
  uint64_t waiting_for_ = UINT64_MAX;   // the seq the consumer sleeps on (none: UINT64_MAX)
  int issuers_waiting_ = 0;             // issuer threads asleep on issue_cv_
  uint64_t buffered_ = 0;               // bytes claimed and not consumed
  int inflight_ = 0;
  bool stop_ = false;
  std::unordered_map<uint64_t, Slot> slots_;
  std::shared_ptr<SamplePool> pool_;
  std::vector<std::shared_ptr<File>> to_close_;  // per-sample Files whose read finished
  PrefetchStats stats_;

  std::mutex open_mu_;
  std::list<uint32_t> lru_;  // most recent first
  std::unordered_map<uint32_t, std::pair<std::shared_ptr<File>, std::list<uint32_t>::iterator>>
      open_;
  std::vector<std::thread> threads_;
  bool started_ = false;
};

}  // namespace ciuic::loader
