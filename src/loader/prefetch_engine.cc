#include "loader/prefetch_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include <fmt/format.h>

namespace ciuic::loader {

PrefetchEngine::PrefetchEngine(std::shared_ptr<Client> client,
                               std::vector<std::string> sources,
                               std::vector<SampleRef> order,
                               PrefetchOptions options,
                               std::shared_ptr<const ResolvedSources> resolved)
    : client_(std::move(client)),
      sources_(std::move(sources)),
      resolved_(std::move(resolved)),
      order_(std::move(order)),
      options_(options) {
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
  if (resolved_) {
    const ResolvedSource& r = (*resolved_)[index];
    CIUIC_ASSIGN_OR_RETURN(auto f, client_->OpenResolved(r.id, r.layout, r.size, path));
    return std::shared_ptr<File>(std::move(f));
  }
  if (!options_.keep_sources_open) {
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
  CIUIC_ASSIGN_OR_RETURN(auto opened, client_->Open(path, O_RDONLY, 0, oo));
  std::shared_ptr<File> f(std::move(opened));
  {
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

void PrefetchEngine::IssuerLoop() {
  while (true) {
    std::vector<std::shared_ptr<File>> closing;
    uint64_t seq = 0;
    Slot* slot = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      closing.swap(to_close_);
      if (closing.empty()) {
        issue_cv_.wait(lock, [&] {
          if (stop_ || next_issue_ >= order_.size() || !to_close_.empty()) {
            return true;
          }
          uint64_t len = order_[next_issue_].length;
          return inflight_ < options_.max_inflight &&
                 (buffered_ == 0 || buffered_ + len <= options_.budget_bytes);
        });
        if (!to_close_.empty()) {
          continue;  // close them first (at the top of the loop)
        }
        if (stop_ || next_issue_ >= order_.size()) {
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
    slot->data.resize(ref.length);
    std::shared_ptr<File> f = std::move(*file);
    File* raw = f.get();
    // The callback keeps the File alive and hands it back to an issuer thread, so that no File is
    // ever destroyed (a blocking close) on a network thread.
    raw->PreadAsync(slot->data.data(), ref.length, ref.offset,
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
  } else if (*r != ref.length) {
    slot.status = Status::Corruption(
        fmt::format("{}: sample at offset {} should have {} bytes, the file has {}",
                    sources_[ref.source], ref.offset, ref.length, *r));
  }
  slot.ready = true;
  --inflight_;
  if (close_after) {
    to_close_.push_back(std::move(close_after));
  }
  ready_cv_.notify_all();
  issue_cv_.notify_all();
  if (inflight_ == 0) {
    drained_cv_.notify_all();
  }
}

Result<std::optional<std::string>> PrefetchEngine::Next() {
  if (!started_) {
    return Status::InvalidArgument("prefetch engine not started");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (next_take_ >= order_.size()) {
    return std::optional<std::string>();
  }
  uint64_t seq = next_take_;
  auto ready = [&] {
    auto it = slots_.find(seq);
    return stop_ || (it != slots_.end() && it->second.ready);
  };
  if (!ready()) {
    auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, ready);
    ++stats_.consumer_waits;
    stats_.consumer_wait_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  auto it = slots_.find(seq);
  if (it == slots_.end() || !it->second.ready) {
    return Status::Aborted("prefetch engine stopped");
  }
  Slot slot = std::move(it->second);
  slots_.erase(it);
  ++next_take_;
  buffered_ -= order_[seq].length;
  issue_cv_.notify_all();
  if (!slot.status.ok()) {
    stop_ = true;
    issue_cv_.notify_all();
    return slot.status;
  }
  ++stats_.samples;
  stats_.bytes += slot.data.size();
  return std::optional<std::string>(std::move(slot.data));
}

PrefetchStats PrefetchEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace ciuic::loader
