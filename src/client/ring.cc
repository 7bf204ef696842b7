// Rings (include/ciuic/ring.h): prepared IOs started as async File IO into one region, their
// completions gathered under one lock for Wait.
#include "ciuic/ring.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace ciuic {
namespace {

constexpr uint32_t kMaxEntries = 65536;

// Bumped in the child at every fork(), so a ring can tell it changed process without a getpid()
// system call per call.
std::atomic<uint64_t> fork_generation{0};

uint64_t ForkGeneration() {
  static std::once_flag once;
  std::call_once(once,
                 [] { pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1); }); });
  return fork_generation.load(std::memory_order_relaxed);
}
constexpr uint64_t kMaxIoBytes = uint64_t{64} << 20;

// What the IOs' callbacks reach: it outlives the Ring while IOs are in flight.
struct RingState {
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0;  // guarded by mu
  // Completed and not yet taken: a circular buffer of the ring's size (a ring never holds more
  // IOs than that), so completing allocates nothing.
  explicit RingState(uint32_t entries) : slots(entries) {}
  std::vector<RingCompletion> slots;  // guarded by mu
  size_t head = 0;                    // guarded by mu; the oldest
  size_t count = 0;                   // guarded by mu
  void Push(const RingCompletion& c) {
    slots[(head + count) % slots.size()] = c;
    ++count;
  }
  RingCompletion Pop() {
    RingCompletion c = slots[head];
    head = (head + 1) % slots.size();
    --count;
    return c;
  }
  // Registered files: the ring's references. An unregistered one is kept here until its IOs
  // are done (each IO holds its own reference too).
  std::unordered_map<int32_t, std::shared_ptr<File>> files;  // guarded by mu
  int32_t next_file = 0;                                     // guarded by mu
  // References to files whose IOs completed, dropped by the next user call: the last one may
  // close the file, a blocking call that must not run on the client's network thread.
  std::vector<std::shared_ptr<File>> retired;  // guarded by mu
  // The completions each waiter needs: a completion wakes waiters only when the fewest needed
  // are ready (one wake per batch of completions, not one per completion).
  std::vector<size_t> wants;  // guarded by mu; one entry per waiter (few: no allocation after
                              // the first)
  size_t MinWant() const {
    size_t m = SIZE_MAX;
    for (size_t w : wants)
      m = std::min(m, w);
    return m;
  }
  // Woken with a completion when the ring's end waits for the IOs in flight.
  bool draining = false;  // guarded by mu
};

class RingImpl final : public Ring {
 public:
  RingImpl(std::shared_ptr<SharedMemory> region, uint32_t entries)
      : region_(std::move(region)),
        entries_(entries),
        pid_(getpid()),
        generation_(ForkGeneration()),
        state_(std::make_shared<RingState>(entries)) {}

  ~RingImpl() override {
    if (ForkGeneration() != generation_)
      return;                                  // a forked child: the IOs are the parent's
    std::vector<std::shared_ptr<File>> files;  // closed after the lock (declared first)
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->draining = true;
    state_->cv.wait(lock, [&] { return state_->in_flight == 0; });
    files.swap(state_->retired);
    for (auto& [index, f] : state_->files)
      files.push_back(std::move(f));
    state_->files.clear();
  }

  Result<int32_t> RegisterFile(std::shared_ptr<File> file) override {
    CIUIC_RETURN_IF_ERROR(CheckProcess());
    if (file == nullptr)
      return Status::InvalidArgument("ring: RegisterFile of no file");
    std::lock_guard<std::mutex> lock(state_->mu);
    const int32_t index = state_->next_file++;
    state_->files.emplace(index, std::move(file));
    return index;
  }

  Status UnregisterFile(int32_t index) override {
    CIUIC_RETURN_IF_ERROR(CheckProcess());
    std::shared_ptr<File> dropped;  // closed outside the lock (IOs in flight hold their own)
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->files.find(index);
    if (it == state_->files.end())
      return Status::InvalidArgument(fmt::format("ring: file {} is not registered", index));
    dropped = std::move(it->second);
    state_->files.erase(it);
    return Status::OK();
  }

  Status Prepare(const RingIo& io) override {
    CIUIC_RETURN_IF_ERROR(CheckProcess());
    if (io.len == 0 || io.len > kMaxIoBytes) {
      return Status::InvalidArgument(
          fmt::format("ring: IO of {} bytes (1 to {} per IO)", io.len, kMaxIoBytes));
    }
    if (io.region_offset > region_->size() || io.len > region_->size() - io.region_offset) {
      return Status::InvalidArgument(
          fmt::format("ring: IO of {} bytes at region offset {} is outside the {}-byte region",
                      io.len, io.region_offset, region_->size()));
    }
    Pending p{io, nullptr};
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (io.fixed_file >= 0) {
        auto it = state_->files.find(io.fixed_file);
        if (it == state_->files.end()) {
          return Status::InvalidArgument(
              fmt::format("ring: file {} is not registered", io.fixed_file));
        }
        p.file = it->second;
      } else if (io.file == nullptr) {
        return Status::InvalidArgument("ring: IO without a file");
      }
      std::lock_guard<std::mutex> plock(prep_mu_);
      if (prepared_.size() + state_->in_flight + state_->count >= entries_) {
        return Status::Busy(fmt::format(
            "ring: {} IOs held already (prepared, in flight or not yet waited for)", entries_));
      }
      prepared_.push_back(std::move(p));
    }
    return Status::OK();
  }

  Result<size_t> Submit() override {
    CIUIC_RETURN_IF_ERROR(CheckProcess());
    std::vector<Pending> batch;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      std::lock_guard<std::mutex> plock(prep_mu_);
      batch.swap(prepared_);
      prepared_.swap(spare_);  // the capacity of an earlier batch
      state_->in_flight += batch.size();
    }
    for (Pending& p : batch) {
      File* f = p.file != nullptr ? p.file.get() : p.io.file;
      uint8_t* at = region_->data() + p.io.region_offset;
      // The callback holds the state, the region and the registered file until it has run.
      auto done = [state = state_, region = region_, file = std::move(p.file),
                   user = p.io.user_data](Result<size_t> r) mutable {
        RingCompletion c;
        c.user_data = user;
        c.result = r.ok() ? static_cast<int64_t>(*r) : -static_cast<int64_t>(r.status().ToErrno());
        std::lock_guard<std::mutex> lock(state->mu);
        if (file != nullptr)
          state->retired.push_back(std::move(file));
        state->Push(c);
        --state->in_flight;
        if ((!state->wants.empty() && state->count >= state->MinWant()) ||
            (state->draining && state->in_flight == 0))
          state->cv.notify_all();
      };
      if (p.io.write) {
        f->PwriteAsync(at, p.io.len, p.io.offset, std::move(done));
      } else {
        f->PreadAsync(at, p.io.len, p.io.offset, std::move(done));
      }
    }
    const size_t n = batch.size();
    batch.clear();
    {
      std::lock_guard<std::mutex> plock(prep_mu_);
      if (spare_.capacity() < batch.capacity())
        spare_.swap(batch);
    }
    return n;
  }

  Result<size_t> Wait(std::span<RingCompletion> out, size_t min_complete, int timeout_ms) override {
    CIUIC_RETURN_IF_ERROR(CheckProcess());
    std::vector<std::shared_ptr<File>> retired;  // released after the lock (declared first)
    std::unique_lock<std::mutex> lock(state_->mu);
    if (min_complete > out.size() || min_complete > state_->in_flight + state_->count) {
      return Status::InvalidArgument(fmt::format(
          "ring: waits for {} completions with room for {}, {} in flight and {} complete",
          min_complete, out.size(), state_->in_flight, state_->count));
    }
    auto enough = [&] { return state_->count >= min_complete; };
    if (!enough()) {
      state_->wants.push_back(min_complete);
      bool ok = true;
      if (timeout_ms < 0) {
        state_->cv.wait(lock, enough);
      } else {
        ok = state_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), enough);
      }
      state_->wants.erase(std::find(state_->wants.begin(), state_->wants.end(), min_complete));
      if (!ok) {
        return Status::TimedOut(fmt::format("ring: {} of {} completions within {} ms",
                                            state_->count, min_complete, timeout_ms));
      }
    }
    retired.swap(state_->retired);
    size_t n = 0;
    while (n < out.size() && state_->count > 0) {
      out[n++] = state_->Pop();
    }
    return n;
  }

  SharedMemory& region() const override { return *region_; }
  uint32_t entries() const override { return entries_; }
  size_t prepared() const override {
    std::lock_guard<std::mutex> plock(prep_mu_);
    return prepared_.size();
  }
  size_t in_flight() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->in_flight;
  }
  size_t ready() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->count;
  }

 private:
  struct Pending {
    RingIo io;
    std::shared_ptr<File> file;  // a registered file, held until the IO is done
  };

  Status CheckProcess() const {
    if (ForkGeneration() != generation_) {
      return Status::NotSupported(fmt::format(
          "ring made in process {} used in process {} (after fork, make a new client and ring)",
          pid_, getpid()));
    }
    return Status::OK();
  }

  const std::shared_ptr<SharedMemory> region_;
  const uint32_t entries_;
  const pid_t pid_;
  const uint64_t generation_;  // ForkGeneration() when made
  const std::shared_ptr<RingState> state_;
  mutable std::mutex prep_mu_;     // taken after state_->mu when both are held
  std::vector<Pending> prepared_;  // guarded by prep_mu_
  std::vector<Pending> spare_;     // guarded by prep_mu_; an emptied batch kept for its capacity
};

}  // namespace

Result<std::unique_ptr<Ring>> Ring::Create(std::shared_ptr<SharedMemory> region, uint32_t entries) {
  if (region == nullptr)
    return Status::InvalidArgument("ring: no region");
  if (entries == 0 || entries > kMaxEntries) {
    return Status::InvalidArgument(
        fmt::format("ring of {} entries (1 to {})", entries, kMaxEntries));
  }
  return std::unique_ptr<Ring>(new RingImpl(std::move(region), entries));
}

}  // namespace ciuic
