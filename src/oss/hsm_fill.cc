#include "oss/hsm_fill.h"

#include <algorithm>
#include <future>

#include <fmt/format.h>

#include "common/logging.h"

namespace ciuic::oss {
namespace {

// Outcomes of ended fills remembered for a late "wait for it" or a repeated start.
constexpr size_t kRecentFills = 4096;

}  // namespace

ObjectFill::ObjectFill(FillSpec spec, std::string key, uint64_t chunk)
    : spec_(std::move(spec)),
      key_(std::move(key)),
      chunk_(chunk),
      chunks_((spec_.length + chunk - 1) / chunk),
      state_(chunks_, kPending) {}

bool ObjectFill::RangeDoneLocked(uint64_t first, uint64_t last) const {
  for (uint64_t c = first; c <= last && c < chunks_; ++c) {
    if (state_[c] != kDone)
      return false;
  }
  return true;
}

void ObjectFill::WhenReadable(uint64_t offset, uint64_t len, ReadyFn ready) {
  // Bytes past the object's end need no chunk: they read as zeros from the staging object.
  const uint64_t first = offset / chunk_;
  const uint64_t end = len == 0 ? offset : offset + len - 1;
  const uint64_t last = std::min(end / chunk_, chunks_ == 0 ? 0 : chunks_ - 1);
  std::unique_lock<std::mutex> lock(mu_);
  if (phase_ == Phase::kEnded) {
    Status st = outcome_->ok() ? Status::OK() : outcome_->status();
    lock.unlock();
    ready(st, false);
    return;
  }
  if (!failed_.ok()) {
    Status st = failed_;
    lock.unlock();
    ready(st, false);
    return;
  }
  if (phase_ == Phase::kFilling && (first >= chunks_ || RangeDoneLocked(first, last))) {
    ++pins_;
    lock.unlock();
    ready(Status::OK(), true);
    return;
  }
  if (phase_ == Phase::kFilling) {
    for (uint64_t c = first; c <= last && c < chunks_; ++c) {
      if (state_[c] == kPending)
        urgent_.push_back(c);
    }
  }
  waiters_.push_back(Waiter{first, last, std::move(ready)});
}

void ObjectFill::Unpin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pins_ > 0 && --pins_ == 0)
    pins_cv_.notify_all();
}

void ObjectFill::WhenDone(DoneFn done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (phase_ == Phase::kEnded) {
    Result<uint64_t> r = *outcome_;
    lock.unlock();
    done(std::move(r));
    return;
  }
  done_fns_.push_back(std::move(done));
}

Result<uint64_t> ObjectFill::Wait() {
  auto p = std::make_shared<std::promise<Result<uint64_t>>>();
  std::future<Result<uint64_t>> f = p->get_future();
  WhenDone([p](Result<uint64_t> r) { p->set_value(std::move(r)); });
  return f.get();
}

uint64_t ObjectFill::chunks_done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

// ---------------------------------------------------------------------------------------------

FillEngine::FillEngine(int threads, uint64_t chunk) : chunk_(chunk) {
  for (int i = 0; i < std::max(1, threads); ++i)
    threads_.emplace_back([this] { Work(); });
}

FillEngine::~FillEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  start_cv_.notify_all();
  for (auto& t : threads_)
    t.join();
  // Whatever still runs will not end: tell its waiters.
  std::vector<std::shared_ptr<ObjectFill>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [k, f] : fills_)
      left.push_back(f);
    fills_.clear();
    order_.clear();
  }
  const Status stopping = Status::Unavailable("the OSS is stopping; the restore was cut short");
  for (auto& f : left) {
    std::vector<ObjectFill::Waiter> waiters;
    std::vector<ObjectFill::DoneFn> dones;
    {
      std::lock_guard<std::mutex> lock(f->mu_);
      f->phase_ = ObjectFill::Phase::kEnded;
      f->outcome_ = Result<uint64_t>(stopping);
      waiters.swap(f->waiters_);
      dones.swap(f->done_fns_);
    }
    for (auto& w : waiters)
      w.ready(stopping, false);
    for (auto& d : dones)
      d(Result<uint64_t>(stopping));
  }
}

std::string FillEngine::KeyOf(uint32_t ost, const ObjectId& id) {
  return fmt::format("{}/{}", ost, id.FileName());
}

size_t FillEngine::active() const {
  return active_.load(std::memory_order_relaxed);
}

std::shared_ptr<ObjectFill> FillEngine::Find(uint32_t ost, const ObjectId& id) {
  if (active_.load(std::memory_order_acquire) == 0)
    return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fills_.find(KeyOf(ost, id));
  return it == fills_.end() ? nullptr : it->second;
}

std::shared_ptr<ObjectFill> FillEngine::EndedIfWhole(OstStore* ost,
                                                     const ObjectId& id,
                                                     std::optional<uint64_t> length) {
  std::optional<Result<uint64_t>> r = Recent(ost->index(), id);
  if (!r.has_value() || !r->ok() || (length.has_value() && **r != *length))
    return nullptr;
  // An object is never there half restored: present with the restored length, it is whole.
  Result<ObjStat> st = ost->Stat(id);
  if (!st.ok() || (st->exists ? st->length != **r : **r != 0))
    return nullptr;
  FillSpec spec;
  spec.ost = ost;
  spec.id = id;
  spec.length = **r;
  auto f = std::make_shared<ObjectFill>(std::move(spec), KeyOf(ost->index(), id), chunk_);
  f->phase_ = ObjectFill::Phase::kEnded;
  f->outcome_ = *r;
  return f;
}

std::optional<Result<uint64_t>> FillEngine::Recent(uint32_t ost, const ObjectId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = recent_.find(KeyOf(ost, id));
  if (it == recent_.end())
    return std::nullopt;
  return it->second;
}

void FillEngine::Remember(const std::string& key, const Result<uint64_t>& r) {
  auto [it, added] = recent_.insert_or_assign(key, r);
  (void)it;
  if (added) {
    recent_order_.push_back(key);
    if (recent_order_.size() > kRecentFills) {
      recent_.erase(recent_order_.front());
      recent_order_.pop_front();
    }
  }
}

Result<std::shared_ptr<ObjectFill>> FillEngine::Start(FillSpec spec, bool* joined) {
  if (joined != nullptr)
    *joined = false;
  const std::string key = KeyOf(spec.ost->index(), spec.id);
  {
    // One start of an object at a time: a second start's Release of the staging name must
    // never delete what the first one's fill has written there meanwhile.
    std::unique_lock<std::mutex> lock(mu_);
    start_cv_.wait(lock, [&] { return stop_ || starting_.count(key) == 0; });
    if (stop_)
      return Status::Unavailable("the OSS is stopping");
    auto it = fills_.find(key);
    if (it != fills_.end()) {
      if (joined != nullptr)
        *joined = true;
      return it->second;
    }
    starting_.insert(key);
  }
  struct Starting {
    FillEngine* e;
    const std::string& key;
    ~Starting() {
      std::lock_guard<std::mutex> lock(e->mu_);
      e->starting_.erase(key);
      e->start_cv_.notify_all();
    }
  } starting{this, key};
  if (auto f = EndedIfWhole(spec.ost, spec.id, spec.length))
    return f;
  // What a fill cut short (a crash, a failure) left under the staging name.
  CIUIC_RETURN_IF_ERROR(spec.ost->Release(spec.staging));
  auto f = std::make_shared<ObjectFill>(std::move(spec), key, chunk_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_)
      return Status::Unavailable("the OSS is stopping");
    fills_.emplace(key, f);
    order_.push_back(f);
    active_.fetch_add(1, std::memory_order_release);
  }
  if (f->chunks_ == 0) {
    Finish(f);
  } else {
    cv_.notify_all();
  }
  return f;
}

bool FillEngine::PickLocked(std::shared_ptr<ObjectFill>* fill, uint64_t* chunk) {
  // Chunks a reader waits for, of any fill, first.
  for (const auto& f : order_) {
    std::lock_guard<std::mutex> lock(f->mu_);
    if (f->phase_ != ObjectFill::Phase::kFilling || !f->failed_.ok())
      continue;
    while (!f->urgent_.empty()) {
      const uint64_t c = f->urgent_.front();
      f->urgent_.pop_front();
      if (f->state_[c] == ObjectFill::kPending) {
        f->state_[c] = ObjectFill::kInFlight;
        ++f->in_flight_;
        *fill = f;
        *chunk = c;
        return true;
      }
    }
  }
  // Then the oldest fill's next chunk: files complete in the order they were asked for.
  for (const auto& f : order_) {
    std::lock_guard<std::mutex> lock(f->mu_);
    if (f->phase_ != ObjectFill::Phase::kFilling || !f->failed_.ok())
      continue;
    while (f->next_ < f->chunks_ && f->state_[f->next_] != ObjectFill::kPending)
      ++f->next_;
    if (f->next_ < f->chunks_) {
      const uint64_t c = f->next_++;
      f->state_[c] = ObjectFill::kInFlight;
      ++f->in_flight_;
      *fill = f;
      *chunk = c;
      return true;
    }
  }
  return false;
}

void FillEngine::Work() {
  AlignedBuffer buf;  // reused: a fresh 4 MiB buffer per chunk cost a page fault per page
  for (;;) {
    std::shared_ptr<ObjectFill> f;
    uint64_t c = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || PickLocked(&f, &c); });
      if (f == nullptr)
        return;  // stopping
    }
    const uint64_t off = c * f->chunk_;
    const uint64_t len = std::min(f->chunk_, f->spec_.length - off);
    Status st;
    try {
      buf.Resize(len);
      st = f->spec_.fetch(off, len, &buf);
      if (st.ok()) {
        std::promise<Result<uint64_t>> wrote;
        f->spec_.ost->WriteAsync(f->spec_.staging, off, &buf,
                                 [&](Result<uint64_t> r) { wrote.set_value(std::move(r)); });
        st = wrote.get_future().get().status();
      }
    } catch (const std::exception& e) {
      st = Status::Internal(fmt::format("restore of {}: {}", f->spec_.id.FileName(), e.what()));
    }
    std::vector<ObjectFill::ReadyFn> ready;
    Status fail;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(f->mu_);
      --f->in_flight_;
      if (st.ok()) {
        f->state_[c] = ObjectFill::kDone;
        ++f->done_;
        // Readers whose chunks are all in now read the staging object.
        auto& ws = f->waiters_;
        for (auto it = ws.begin(); it != ws.end();) {
          if (f->failed_.ok() && f->RangeDoneLocked(it->first, it->last)) {
            ++f->pins_;
            ready.push_back(std::move(it->ready));
            it = ws.erase(it);
          } else {
            ++it;
          }
        }
      } else {
        f->state_[c] = ObjectFill::kPending;
        if (f->failed_.ok()) {
          LOG_WARN("hsm: restore of OST {} object {} from {} failed at offset {}: {}",
                   f->spec_.ost->index(), f->spec_.id.FileName(), f->spec_.what, off,
                   st.ToString());
          f->failed_ = st;
          fail = st;
          // Every reader gets the error now, not when the chunks in flight settle.
          for (auto& w : f->waiters_)
            ready.push_back(std::move(w.ready));
          f->waiters_.clear();
        }
      }
      finish = f->in_flight_ == 0 && f->phase_ == ObjectFill::Phase::kFilling &&
               (!f->failed_.ok() || f->done_ == f->chunks_);
      if (finish)
        f->phase_ = ObjectFill::Phase::kAdopting;  // no worker picks it again
    }
    for (auto& r : ready)
      r(fail, fail.ok());
    if (finish)
      Finish(f);
  }
}

void FillEngine::Finish(const std::shared_ptr<ObjectFill>& f) {
  const FillSpec& s = f->spec_;
  Status st;
  {
    std::unique_lock<std::mutex> lock(f->mu_);
    f->phase_ = ObjectFill::Phase::kAdopting;
    st = f->failed_;
  }
  if (st.ok() && s.finish_check)
    st = s.finish_check();
  {
    // Reads of the staging object must be over before it changes its name or goes: a read
    // that found it gone would answer zeros for bytes it was promised.
    std::unique_lock<std::mutex> lock(f->mu_);
    f->pins_cv_.wait(lock, [&] { return f->pins_ == 0; });
  }
  if (st.ok()) {
    if (s.length == 0) {
      st = s.ost->Release(s.id);  // an empty object is no object
    } else {
      st = s.ost->Sync({s.staging});
      if (st.ok())
        st = s.ost->Adopt(s.staging, s.id);
    }
  }
  if (!st.ok())
    s.ost->Release(s.staging).IgnoreError();
  Result<uint64_t> result = st.ok() ? Result<uint64_t>(s.length) : Result<uint64_t>(st);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = fills_.find(f->key_);
    if (it != fills_.end() && it->second == f) {
      fills_.erase(it);
      active_.fetch_sub(1, std::memory_order_release);
    }
    order_.erase(std::remove(order_.begin(), order_.end(), f), order_.end());
    Remember(f->key_, result);
  }
  std::vector<ObjectFill::Waiter> waiters;
  std::vector<ObjectFill::DoneFn> dones;
  {
    std::lock_guard<std::mutex> lock(f->mu_);
    f->phase_ = ObjectFill::Phase::kEnded;
    f->outcome_ = result;
    waiters.swap(f->waiters_);
    dones.swap(f->done_fns_);
  }
  const Status ws = result.ok() ? Status::OK() : result.status();
  for (auto& w : waiters)
    w.ready(ws, false);
  for (auto& d : dones)
    d(result);
}

}  // namespace ciuic::oss
