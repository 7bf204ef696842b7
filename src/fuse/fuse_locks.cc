// Advisory locks through the mount: fcntl byte-range locks (getlk/setlk) and flock, held by the
// MDS (Client::LockAt) so that they are coherent across every mount of the cluster. The lock
// owner is (this client's session, the kernel's lock_owner). Blocking requests never hold a
// thread: a refused F_SETLKW is retried from a timer with backoff (LockWaiterLoop).
#include <fcntl.h>
#include <sys/file.h>

#include <algorithm>
#include <cerrno>

#include "common/logging.h"
#include "fuse/fuse_impl.h"

namespace ciuic::fuse {
namespace {

using Impl = FuseServer::Impl;
using Clock = std::chrono::steady_clock;

constexpr int kFirstRetryMs = 5;
constexpr int kMaxRetryMs = 100;

Impl* Self(fuse_req_t req) {
  return static_cast<Impl*>(fuse_req_userdata(req));
}

int Errno(const Status& st) {
  const int e = st.ToErrno();
  return e == 0 ? EIO : e;
}

// struct flock (l_whence is SEEK_SET from libfuse; l_len 0 means to EOF) to a LockRange.
LockRange RangeOf(const struct flock& l) {
  LockRange r;
  r.type = l.l_type == F_WRLCK   ? LockType::kExclusive
           : l.l_type == F_RDLCK ? LockType::kShared
                                 : LockType::kUnlock;
  r.start = static_cast<uint64_t>(std::max<off_t>(l.l_start, 0));
  r.end = l.l_len <= 0 ? UINT64_MAX : r.start + static_cast<uint64_t>(l.l_len) - 1;
  r.pid = static_cast<uint32_t>(l.l_pid);
  return r;
}

}  // namespace

void FuseServer::Impl::NoteLockOwner(LockKind kind, fuse_ino_t ino, uint64_t owner) {
  std::lock_guard<std::mutex> lock(lk_mu_);
  lk_owners_.emplace(static_cast<uint32_t>(kind), ino, owner);
}

bool FuseServer::Impl::TakeLockOwner(LockKind kind, fuse_ino_t ino, uint64_t owner) {
  std::lock_guard<std::mutex> lock(lk_mu_);
  return lk_owners_.erase({static_cast<uint32_t>(kind), ino, owner}) > 0;
}

void FuseServer::Impl::TrySetLock(LockWait w, bool wait) {
  if (wait && fuse_req_interrupted(w.req)) {
    fuse_reply_err(w.req, EINTR);
    return;
  }
  // Note the owner before asking: a close racing with the grant then still unlocks.
  if (w.want.type != LockType::kUnlock)
    NoteLockOwner(w.kind, w.ino, w.owner);
  auto r = client_->LockAt(w.id, w.kind, w.owner, w.want, nullptr);
  if (!r.ok()) {
    fuse_reply_err(w.req, Errno(r.status()));
    return;
  }
  if (*r) {
    // The kernel's cached pages and attributes of the file may predate the last holder's
    // writes: drop them (ENOENT when the kernel has none).
    if (w.want.type != LockType::kUnlock && se_ != nullptr)
      (void)fuse_lowlevel_notify_inval_inode(se_, w.ino, 0, 0);
    fuse_reply_err(w.req, 0);
    return;
  }
  if (!wait) {
    fuse_reply_err(w.req, w.kind == LockKind::kFlock ? EWOULDBLOCK : EAGAIN);
    return;
  }
  w.delay_ms = w.delay_ms == 0 ? kFirstRetryMs : std::min(w.delay_ms * 2, kMaxRetryMs);
  std::unique_lock<std::mutex> lock(lk_mu_);
  if (lk_stop_) {
    lock.unlock();
    fuse_reply_err(w.req, EINTR);
    return;
  }
  const auto due = Clock::now() + std::chrono::milliseconds(w.delay_ms);
  const bool first = lk_waits_.empty() || due < lk_waits_.begin()->first;
  lk_waits_.emplace(due, w);
  if (first)
    lk_cv_.notify_one();
}

void FuseServer::Impl::StartLockWaiter() {
  std::lock_guard<std::mutex> lock(lk_mu_);
  if (lk_thread_.joinable())
    return;
  lk_stop_ = false;
  lk_thread_ = std::thread([this] { LockWaiterLoop(); });
}

void FuseServer::Impl::StopLockWaiter() {
  {
    std::lock_guard<std::mutex> lock(lk_mu_);
    lk_stop_ = true;
  }
  lk_cv_.notify_all();
  if (lk_thread_.joinable())
    lk_thread_.join();
  std::multimap<Clock::time_point, LockWait> left;
  {
    std::lock_guard<std::mutex> lock(lk_mu_);
    left.swap(lk_waits_);
  }
  for (auto& [due, w] : left)
    fuse_reply_err(w.req, EINTR);
}

void FuseServer::Impl::LockWaiterLoop() {
  std::unique_lock<std::mutex> lock(lk_mu_);
  while (!lk_stop_) {
    if (lk_waits_.empty()) {
      lk_cv_.wait(lock);
      continue;
    }
    const auto due = lk_waits_.begin()->first;
    if (Clock::now() < due) {
      lk_cv_.wait_until(lock, due);
      continue;
    }
    LockWait w = lk_waits_.begin()->second;
    lk_waits_.erase(lk_waits_.begin());
    lock.unlock();
    if (!pool_->Submit([this, w] { TrySetLock(w, true); }))
      fuse_reply_err(w.req, EINTR);
    lock.lock();
  }
}

void OpGetlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi, struct flock* lock) {
  Impl* self = Self(req);
  const uint64_t owner = fi->lock_owner;
  const struct flock l = *lock;
  const FileId id = self->IdOf(ino);
  self->Meta(
      req,
      [self, req, id, owner, l] {
        LockRange want = RangeOf(l);
        if (want.type == LockType::kUnlock) {
          fuse_reply_err(req, EINVAL);
          return;
        }
        LockRange c;
        auto r = self->client().TestLockAt(id, LockKind::kPosix, owner, want, &c);
        if (!r.ok()) {
          fuse_reply_err(req, Errno(r.status()));
          return;
        }
        struct flock out = l;
        if (*r) {
          out.l_type = F_UNLCK;
        } else {
          out.l_type = c.type == LockType::kExclusive ? F_WRLCK : F_RDLCK;
          out.l_whence = SEEK_SET;
          out.l_start = static_cast<off_t>(c.start);
          out.l_len = c.end == UINT64_MAX || c.end >= static_cast<uint64_t>(INT64_MAX)
                          ? 0
                          : static_cast<off_t>(c.end - c.start + 1);
          out.l_pid = static_cast<pid_t>(c.pid);
        }
        fuse_reply_lock(req, &out);
      },
      false);
}

void OpSetlk(
    fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi, struct flock* lock, int sleep) {
  Impl* self = Self(req);
  Impl::LockWait w;
  w.req = req;
  w.ino = ino;
  w.id = self->IdOf(ino);
  w.kind = LockKind::kPosix;
  w.owner = fi->lock_owner;
  w.want = RangeOf(*lock);
  const bool wait = sleep != 0 && w.want.type != LockType::kUnlock;
  self->Meta(
      req, [self, w, wait] { self->TrySetLock(w, wait); }, false);
}

void OpFlock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi, int op) {
  Impl* self = Self(req);
  Impl::LockWait w;
  w.req = req;
  w.ino = ino;
  w.id = self->IdOf(ino);
  w.kind = LockKind::kFlock;
  w.owner = fi->lock_owner;
  switch (op & ~LOCK_NB) {
    case LOCK_SH:
      w.want.type = LockType::kShared;
      break;
    case LOCK_EX:
      w.want.type = LockType::kExclusive;
      break;
    case LOCK_UN:
      w.want.type = LockType::kUnlock;
      break;
    default:
      fuse_reply_err(req, EINVAL);
      return;
  }
  w.want.pid = static_cast<uint32_t>(fuse_req_ctx(req)->pid);
  const bool wait = (op & LOCK_NB) == 0 && w.want.type != LockType::kUnlock;
  self->Meta(
      req, [self, w, wait] { self->TrySetLock(w, wait); }, false);
}

}  // namespace ciuic::fuse
