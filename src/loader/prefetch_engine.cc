#include "loader/prefetch_engine.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/buffer.h"
#include "common/crc32c.h"

namespace ciuic::loader {
namespace {

// The data version reads of a resolved source go through the node cache at; none (past the
// cache) for a file excluded from it.
std::optional<uint64_t> CacheVersion(const ResolvedSource& r) {
  if (r.no_node_cache)
    return std::nullopt;
  return r.data_version;
}

}  // namespace

// Sample buffers by size class (16 KiB steps up to 1 MiB; larger samples are allocated and freed
// one by one). They are carved from the engine's SharedMemory while it has room, so that a
// co-located OSS places each sample straight into its buffer (no socket crossing); otherwise
// from the heap, keeping at most `limit` bytes of free heap buffers. Thread-safe.
class SamplePool {
 public:
  static constexpr size_t kStep = size_t{16} << 10;
  static constexpr size_t kClasses = 64;

  SamplePool(size_t limit, std::shared_ptr<SharedMemory> shm)
      : limit_(limit), shm_(std::move(shm)) {}
  ~SamplePool() {
    for (auto& v : free_) {
      for (char* p : v)
        delete[] p;
    }
  }

  // An uninitialized buffer of at least max(len, 1) bytes; *cap gets its capacity.
  char* Get(size_t len, size_t* cap) {
    const size_t c = std::max<size_t>(1, (len + kStep - 1) / kStep);
    if (c > kClasses) {
      *cap = len;
      return new char[len];
    }
    *cap = c * kStep;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shm_) {
        auto& v = shm_free_[c - 1];
        if (!v.empty()) {
          char* p = v.back();
          v.pop_back();
          return p;
        }
        if (shm_next_ + *cap <= shm_->size()) {
          char* p = reinterpret_cast<char*>(shm_->data()) + shm_next_;
          shm_next_ += *cap;
          return p;
        }
        // Full: a free buffer of a larger class before the heap.
        for (size_t k = c; k < kClasses; ++k) {
          if (!shm_free_[k].empty()) {
            char* p = shm_free_[k].back();
            shm_free_[k].pop_back();
            *cap = (k + 1) * kStep;
            return p;
          }
        }
      }
      auto& v = free_[c - 1];
      if (!v.empty()) {
        char* p = v.back();
        v.pop_back();
        pooled_ -= *cap;
        return p;
      }
    }
    return new char[*cap];
  }

  // Bytes of shared memory handed out so far (allocated pages, at most its size).
  size_t shared_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return shm_next_;
  }

  void Put(char* p, size_t cap) {
    const size_t c = cap / kStep;
    if (shm_ && shm_->data() <= reinterpret_cast<uint8_t*>(p) &&
        reinterpret_cast<uint8_t*>(p) < shm_->data() + shm_->size()) {
      std::lock_guard<std::mutex> lock(mu_);
      shm_free_[c - 1].push_back(p);
      return;
    }
    if (cap % kStep == 0 && c >= 1 && c <= kClasses) {
      std::lock_guard<std::mutex> lock(mu_);
      if (pooled_ + cap <= limit_) {
        free_[c - 1].push_back(p);
        pooled_ += cap;
        return;
      }
    }
    delete[] p;
  }

 private:
  const size_t limit_;
  const std::shared_ptr<SharedMemory> shm_;  // null: heap buffers only
  std::mutex mu_;
  std::array<std::vector<char*>, kClasses> free_;      // CIUIC_GUARDED_BY(mu_)
  size_t pooled_ = 0;                                  // CIUIC_GUARDED_BY(mu_)
  std::array<std::vector<char*>, kClasses> shm_free_;  // CIUIC_GUARDED_BY(mu_)
  size_t shm_next_ = 0;                                // carved so far; CIUIC_GUARDED_BY(mu_)
};

std::shared_ptr<SamplePool> NewSamplePool(Client* client, size_t budget_bytes, bool shared_memory) {
  // Shared memory for the samples in flight and buffered: twice the budget leaves room for the
  // size classes' free lists.
  std::shared_ptr<SharedMemory> shm;
  if (shared_memory && client != nullptr) {
    const size_t bytes = std::clamp<size_t>(2 * budget_bytes, size_t{16} << 20, size_t{8} << 30);
    auto r = client->NewSharedMemory(bytes);
    if (r.ok())
      shm = std::move(*r);
  }
  // Free heap buffers are memory on top of the budget: keep a bounded reserve of them (in steady
  // state a consumed sample's buffer is reused by the next read almost at once).
  return std::make_shared<SamplePool>(
      std::clamp<size_t>(budget_bytes / 4, size_t{4} << 20, size_t{64} << 20), std::move(shm));
}

SampleBuffer::SampleBuffer(SampleBuffer&& o) noexcept
    : buf_(std::exchange(o.buf_, nullptr)),
      off_(std::exchange(o.off_, 0)),
      size_(std::exchange(o.size_, 0)),
      cap_(std::exchange(o.cap_, 0)),
      pool_(std::move(o.pool_)) {}

SampleBuffer& SampleBuffer::operator=(SampleBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    buf_ = std::exchange(o.buf_, nullptr);
    off_ = std::exchange(o.off_, 0);
    size_ = std::exchange(o.size_, 0);
    cap_ = std::exchange(o.cap_, 0);
    pool_ = std::move(o.pool_);
  }
  return *this;
}

SampleBuffer::~SampleBuffer() {
  Release();
}

void SampleBuffer::Release() {
  if (buf_ != nullptr) {
    if (pool_)
      pool_->Put(buf_, cap_);
    else
      delete[] buf_;
  }
  buf_ = nullptr;
  off_ = size_ = cap_ = 0;
  pool_.reset();
}

PrefetchEngine::PrefetchEngine(std::shared_ptr<Client> client,
                               std::vector<std::string> sources,
                               std::vector<SampleRef> order,
                               PrefetchOptions options,
                               std::shared_ptr<const ResolvedSources> resolved,
                               std::shared_ptr<SamplePool> pool)
    : client_(std::move(client)),
      sources_(std::move(sources)),
      resolved_(std::move(resolved)),
      order_(std::move(order)),
      options_(options),
      pool_(std::move(pool)) {
  if (!pool_)
    pool_ = NewSamplePool(client_.get(), options_.budget_bytes, options_.shared_memory);
  if (options_.max_inflight < 1) {
    options_.max_inflight = 1;
  }
  if (options_.opener_threads < 1) {
    options_.opener_threads = 1;
  }
  if (options_.max_open_sources < 1) {
    options_.max_open_sources = 1;
  }
}

Result<std::shared_ptr<const ResolvedSources>> ResolveSources(Client& client,
                                                              const std::vector<std::string>& paths,
                                                              int threads) {
  auto out = std::make_shared<ResolvedSources>(paths.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;  // CIUIC_GUARDED_BY(mu)
  auto work = [&] {
    while (true) {
      const size_t i = next.fetch_add(1);
      if (i >= paths.size())
        return;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!first.ok())
          return;
      }
      Status st = [&]() -> Status {
        CIUIC_ASSIGN_OR_RETURN(FileStat attr, client.Stat(paths[i]));
        if (!attr.is_reg())
          return Status::InvalidArgument(fmt::format("{}: not a regular file", paths[i]));
        ResolvedSource& r = (*out)[i];
        r.id = IdOf(attr);
        r.size = attr.size;
        r.data_version = attr.data_version;
        r.no_node_cache = attr.no_node_cache;
        auto layout = client.GetLayoutAt(r.id);
        if (!layout.ok())
          return layout.status().WithContext(paths[i]);
        r.layout = std::move(*layout);
        return Status::OK();
      }();
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok())
          first = std::move(st);
        return;
      }
    }
  };
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(paths.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t)
    pool.emplace_back(work);
  work();
  for (auto& t : pool)
    t.join();
  if (!first.ok())
    return first;
  return std::shared_ptr<const ResolvedSources>(std::move(out));
}

PrefetchEngine::~PrefetchEngine() {
  Stop();
}

Status PrefetchEngine::Start() {
  if (started_) {
    return Status::InvalidArgument("prefetch engine already started");
  }
  if (resolved_ && resolved_->size() != sources_.size()) {
    return Status::InvalidArgument(
        fmt::format("{} resolved sources for {} sources", resolved_->size(), sources_.size()));
  }
  for (size_t i = 0; i < order_.size(); ++i) {
    if (order_[i].source >= sources_.size()) {
      return Status::InvalidArgument(
          fmt::format("sample {} names source {} but the data set has {}", i, order_[i].source,
                      sources_.size()));
    }
  }
  for (size_t i = 0; i < options_.next_order.size(); ++i) {
    if (options_.next_order[i].source >= sources_.size()) {
      return Status::InvalidArgument(
          fmt::format("sample {} of the next epoch names source {} but the data set has {}", i,
                      options_.next_order[i].source, sources_.size()));
    }
  }
  if (resolved_ && client_->HasNodeCache()) {
    // The epoch's exact order, then the next epoch's, drive the node cache's eviction
    // (docs/design.md "Node cache"): what is needed soonest stays.
    std::vector<Client::PlannedRead> plan;
    plan.reserve(order_.size() + options_.next_order.size());
    for (const auto* o : {&order_, &options_.next_order}) {
      for (const SampleRef& ref : *o) {
        const ResolvedSource& r = (*resolved_)[ref.source];
        if (r.no_node_cache)
          continue;
        plan.push_back(Client::PlannedRead{"", ref.offset, ref.length, r.id, r.data_version});
      }
    }
    CIUIC_RETURN_IF_ERROR(client_->SetNodeCachePlan(plan));
  }
  started_ = true;
  for (int i = 0; i < options_.opener_threads; ++i) {
    threads_.emplace_back([this] { IssuerLoop(); });
  }
  return Status::OK();
}

void PrefetchEngine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  issue_cv_.notify_all();
  ready_cv_.notify_all();
  for (auto& t : threads_) {
    t.join();
  }
  threads_.clear();
  std::vector<std::shared_ptr<File>> closing;
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_cv_.wait(lock, [&] { return inflight_ == 0; });
    closing.swap(to_close_);
    slots_.clear();
    buffered_ = 0;
  }
  closing.clear();  // closes per-sample Files (blocking MDS calls, on this thread)
  std::lock_guard<std::mutex> lock(open_mu_);
  open_.clear();
  lru_.clear();
}

Result<std::shared_ptr<File>> PrefetchEngine::Source(uint32_t index) {
  OpenOptions oo;
  oo.random_access = true;  // the engine knows the order: no readahead guesses
  const std::string& path = sources_[index];
  if (resolved_ && !options_.keep_sources_open) {
    const ResolvedSource& r = (*resolved_)[index];
    CIUIC_ASSIGN_OR_RETURN(auto f,
                           client_->OpenResolved(r.id, r.layout, r.size, path, CacheVersion(r)));
    return std::shared_ptr<File>(std::move(f));
  }
  if (!options_.keep_sources_open) {
    HandOff();
    CIUIC_ASSIGN_OR_RETURN(auto f, client_->Open(path, O_RDONLY, 0, oo));
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.opens;
    return std::shared_ptr<File>(std::move(f));
  }
  // Opens of shards are rare (once per shard per engine): doing them under the lock keeps two
  // issuers from opening the same shard twice.
  std::shared_ptr<File> evicted;  // closed after the lock is released
  std::lock_guard<std::mutex> lock(open_mu_);
  auto it = open_.find(index);
  if (it != open_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  std::shared_ptr<File> f;
  if (resolved_) {
    // Resolved shards open without an MDS round trip, so an LRU miss costs nothing remote.
    const ResolvedSource& r = (*resolved_)[index];
    CIUIC_ASSIGN_OR_RETURN(auto opened,
                           client_->OpenResolved(r.id, r.layout, r.size, path, CacheVersion(r)));
    f = std::shared_ptr<File>(std::move(opened));
  } else {
    HandOff();
    CIUIC_ASSIGN_OR_RETURN(auto opened, client_->Open(path, O_RDONLY, 0, oo));
    f = std::shared_ptr<File>(std::move(opened));
    std::lock_guard<std::mutex> stats_lock(mu_);
    ++stats_.opens;
  }
  lru_.push_front(index);
  open_.emplace(index, std::make_pair(f, lru_.begin()));
  if (open_.size() > static_cast<size_t>(options_.max_open_sources)) {
    auto victim = open_.find(lru_.back());
    evicted = std::move(victim->second.first);
    open_.erase(victim);
    lru_.pop_back();
  }
  return f;
}

bool PrefetchEngine::CanIssue() const {
  if (stop_ || next_issue_ >= order_.size())
    return false;
  const uint64_t len = order_[next_issue_].length;
  return inflight_ < options_.max_inflight &&
         (buffered_ == 0 || buffered_ + len <= options_.budget_bytes);
}

bool PrefetchEngine::ShouldWakeIssuer() const {
  // Hysteresis: a sleeping issuer is woken when a quarter of the read slots (or of the budget) is
  // free, and then issues until all are in use again: one wake-up per many reads instead of a
  // wake-up per completed read (each a futex system call and a context switch).
  if (issuers_waiting_ == 0 || !CanIssue())
    return false;
  const int slack = std::max(1, options_.max_inflight / 4);
  if (options_.max_inflight - inflight_ < slack)
    return false;
  return buffered_ == 0 || options_.budget_bytes - buffered_ >= options_.budget_bytes / 4;
}

void PrefetchEngine::HandOff() {
  // About to block in an MDS call: wake a sleeping issuer if there is work it could start.
  std::lock_guard<std::mutex> lock(mu_);
  if (issuers_waiting_ > 0 && CanIssue())
    issue_cv_.notify_one();
}

void PrefetchEngine::IssuerLoop() {
  while (true) {
    std::vector<std::shared_ptr<File>> closing;
    uint64_t seq = 0;
    Slot* slot = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      closing.swap(to_close_);
      if (closing.empty()) {
        // Sleepers are woken one at a time (a completion, a consumed sample, a hand-off): the
        // issuer that wakes claims everything it can before it sleeps again.
        ++issuers_waiting_;
        issue_cv_.wait(lock, [&] {
          return stop_ || next_issue_ >= order_.size() || !to_close_.empty() || CanIssue();
        });
        --issuers_waiting_;
        if (!to_close_.empty()) {
          continue;  // close them first (at the top of the loop)
        }
        if (stop_ || next_issue_ >= order_.size()) {
          issue_cv_.notify_all();  // the others are done too
          return;
        }
        seq = next_issue_++;
        buffered_ += order_[seq].length;
        stats_.peak_buffered = std::max<uint64_t>(stats_.peak_buffered, buffered_);
        ++inflight_;
        slot = &slots_[seq];  // element references survive rehashing
      }
    }
    if (!slot) {
      closing.clear();  // File destructors close (blocking MDS calls) outside the lock
      continue;
    }
    const SampleRef& ref = order_[seq];
    auto file = Source(ref.source);
    if (!file.ok()) {
      Complete(seq, file.status(), nullptr);
      continue;
    }
    // The read covers the sample's whole 4 KiB checksum blocks, so the OSS replies land straight
    // in the sample's buffer: one read per stripe touched, no scratch copy. (A sample that is not
    // block-aligned would otherwise be a copied head and tail read around a direct middle: up to
    // three OST requests.) The sample starts `off_` bytes into it.
    const uint64_t a0 = AlignDown(ref.offset, kCrcBlockSize);
    const uint64_t want =
        ref.length == 0 ? 0 : AlignUp(ref.offset + ref.length, kCrcBlockSize) - a0;
    // No other thread touches the slot until Complete() marks it ready.
    slot->data.buf_ = pool_->Get(want, &slot->data.cap_);
    slot->data.off_ = ref.length == 0 ? 0 : ref.offset - a0;
    slot->data.size_ = ref.length;
    slot->data.pool_ = pool_;
    std::shared_ptr<File> f = std::move(*file);
    File* raw = f.get();
    // The callback keeps the File alive and hands it back to an issuer thread, so that no File is
    // ever destroyed (a blocking close) on a network thread.
    raw->PreadAsync(slot->data.buf_, want, ref.length == 0 ? ref.offset : a0,
                    [this, seq, f = std::move(f)](Result<size_t> r) mutable {
                      Complete(seq, std::move(r), std::move(f));
                    });
  }
}

void PrefetchEngine::Complete(uint64_t seq, Result<size_t> r, std::shared_ptr<File> close_after) {
  const SampleRef& ref = order_[seq];
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[seq];
  if (!r.ok()) {
    slot.status = r.status().WithContext(fmt::format("{} (sample at offset {}, {} bytes)",
                                                     sources_[ref.source], ref.offset, ref.length));
  } else if (*r < slot.data.off_ + ref.length) {
    // The read ends at the end of the file (or of the covering blocks, whichever comes first).
    slot.status = Status::Corruption(fmt::format(
        "{}: sample at offset {} should have {} bytes, the file has {}", sources_[ref.source],
        ref.offset, ref.length, *r > slot.data.off_ ? *r - slot.data.off_ : 0));
  }
  slot.ready = true;
  --inflight_;
  if (close_after) {
    to_close_.push_back(std::move(close_after));
  }
  // Wake only who can make progress: the consumer if this is the sample it waits for, one issuer
  // if one sleeps and enough read slots are free (or a File needs closing).
  if (seq == waiting_for_)
    ready_cv_.notify_one();
  // Files opened per sample hold an MDS open until closed: have them closed in small batches.
  // (Shard and resolved Files are closed whenever an issuer wakes anyway.)
  const bool close_now = !resolved_ && !options_.keep_sources_open && to_close_.size() >= 16;
  if (ShouldWakeIssuer() || (issuers_waiting_ > 0 && close_now))
    issue_cv_.notify_one();
  if (inflight_ == 0) {
    drained_cv_.notify_all();
  }
}

Result<std::optional<SampleBuffer>> PrefetchEngine::Next() {
  std::vector<SampleBuffer> one;
  CIUIC_ASSIGN_OR_RETURN(size_t n, NextBatch(1, &one));
  if (n == 0)
    return std::optional<SampleBuffer>();
  return std::optional<SampleBuffer>(std::move(one.back()));
}

Result<size_t> PrefetchEngine::NextBatch(size_t n, std::vector<SampleBuffer>* out) {
  if (!started_) {
    return Status::InvalidArgument("prefetch engine not started");
  }
  const size_t first = out->size();
  std::unique_lock<std::mutex> lock(mu_);
  bool freed = false;  // consumed budget no issuer was told about yet
  // strict: about to wait for a sample not even issued yet, so any room must be used now.
  auto wake_issuer = [&](bool strict) {
    if (freed && (strict ? issuers_waiting_ > 0 && CanIssue() : ShouldWakeIssuer()))
      issue_cv_.notify_one();
    freed = false;
  };
  size_t taken = 0;
  while (taken < n && next_take_ < order_.size()) {
    const uint64_t seq = next_take_;
    auto it = slots_.find(seq);
    if (it == slots_.end() || !it->second.ready) {
      if (stop_)
        break;
      wake_issuer(seq >= next_issue_);  // the budget this batch freed may be what reads need
      auto t0 = std::chrono::steady_clock::now();
      waiting_for_ = seq;
      ready_cv_.wait(lock, [&] {
        it = slots_.find(seq);
        return stop_ || (it != slots_.end() && it->second.ready);
      });
      waiting_for_ = UINT64_MAX;
      ++stats_.consumer_waits;
      stats_.consumer_wait_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (it == slots_.end() || !it->second.ready)
        break;  // stopped
    }
    Slot slot = std::move(it->second);
    slots_.erase(it);
    ++next_take_;
    buffered_ -= order_[seq].length;
    freed = true;
    if (!slot.status.ok()) {
      stop_ = true;
      issue_cv_.notify_all();
      lock.unlock();
      out->resize(first);
      return slot.status;
    }
    ++stats_.samples;
    stats_.bytes += slot.data.size();
    out->push_back(std::move(slot.data));
    ++taken;
  }
  wake_issuer(false);
  if (taken < n && next_take_ < order_.size()) {
    lock.unlock();
    out->resize(first);
    return Status::Aborted("prefetch engine stopped");
  }
  return taken;
}

PrefetchStats PrefetchEngine::stats() const {
  PrefetchStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = stats_;
  }
  s.pool_shared_bytes = pool_->shared_bytes();
  return s;
}

}  // namespace ciuic::loader
