// FuseServer::Impl: the state the request handlers share (fuse_server.cc, fuse_ops.cc). Internal.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "ciuic/client.h"
#include "common/thread_pool.h"
#include "fuse/fuse_server.h"

namespace ciuic::fuse {

// Parses a value written to the user.ciuic.layout xattr: "count=N[,size=S]" (S like 64K or 1M,
// default 1 MiB): one component over the whole file. kInvalidArgument for anything else.
Result<FileLayout> ParseLayoutXattr(std::string value);

class FuseServer::Impl {
 public:
  explicit Impl(FuseOptions options);
  ~Impl();

  // Gives the server its client and starts its threads (see FuseServer::Attach).
  void Attach(std::unique_ptr<Client> client);
  Status Mount();
  Status Run();
  void RaiseReadahead();

  // One open file of the kernel (fuse_file_info::fh points to it).
  struct Handle {
    std::unique_ptr<File> file;
    fuse_ino_t ino = 0;
  };

  // Kernel's view of an inode: its FID, how many lookups it holds, and the data version its
  // page cache was filled under (keep_cache).
  struct InodeEntry {
    FileId id;
    uint64_t nlookup = 0;
    bool version_known = false;
    uint64_t data_version = 0;
  };

  Client& client() { return *client_; }
  const FuseOptions& opts() const { return opts_; }

  FileId IdOf(fuse_ino_t ino);
  fuse_ino_t InoOf(const FileStat& s) const;
  static FileId IdOf(const FileStat& s) { return FileId{s.ino, s.fid_mds, s.fid_ver}; }
  // Counts one kernel lookup of `s` (each entry reply).
  void Ref(const FileStat& s);
  void Forget(fuse_ino_t ino, uint64_t n);
  // True when the page cache of `ino` may be kept for an open seeing `data_version`; records it.
  bool KeepCache(fuse_ino_t ino, uint64_t data_version);
  void ForgetVersion(fuse_ino_t ino);

  uint64_t AddHandle(std::unique_ptr<File> file, fuse_ino_t ino);
  static Handle* HandleOf(const fuse_file_info* fi) { return reinterpret_cast<Handle*>(fi->fh); }
  std::unique_ptr<Handle> TakeHandle(uint64_t fh);

  // Runs `fn` on the metadata pool, as the request's caller (uid, gid, groups) when
  // `as_caller`, else as the daemon (operations on an open handle, which the kernel checked
  // when it was opened); replies EIO if the pool is stopped. `fn` must reply exactly once.
  void Meta(fuse_req_t req, std::function<void()> fn, bool as_caller = true);

  // The handler table (fuse_ops.cc).
  static fuse_lowlevel_ops Ops();

  // --- Advisory locks (fuse_locks.cc). ---
  // A blocking lock request (F_SETLKW, flock without LOCK_NB) the MDS refused for now: tried
  // again on the metadata pool after `delay_ms` (doubling up to a cap), so no thread waits on
  // it; answered EINTR once the kernel interrupts it (a signal) or the daemon stops.
  struct LockWait {
    fuse_req_t req = nullptr;
    fuse_ino_t ino = 0;
    FileId id;
    LockKind kind = LockKind::kPosix;
    uint64_t owner = 0;
    LockRange want;
    int delay_ms = 0;
  };
  // Sends one lock request and replies: 0 when granted, EAGAIN / EWOULDBLOCK when refused and
  // not `wait`, else queues a retry. Runs on the pool.
  void TrySetLock(LockWait w, bool wait);
  // Remembers that `owner` took a lock of `kind` on `ino` here (so close and release only ask
  // the MDS to drop locks when there may be some). Take... forgets it and says whether it was.
  void NoteLockOwner(LockKind kind, fuse_ino_t ino, uint64_t owner);
  bool TakeLockOwner(LockKind kind, fuse_ino_t ino, uint64_t owner);
  // Starts / stops the retry timer thread (stop answers the waiting requests EINTR).
  void StartLockWaiter();
  void StopLockWaiter();

 private:
  std::unique_ptr<Client> client_;
  FuseOptions opts_;
  FileId root_;
  std::unique_ptr<ThreadPool> pool_;  // created by Attach: no threads before the mount
  fuse_session* se_ = nullptr;
  bool mounted_ = false;

  void LockWaiterLoop();

  std::mutex lk_mu_;
  std::condition_variable lk_cv_;
  std::multimap<std::chrono::steady_clock::time_point, LockWait> lk_waits_;  // by lk_mu_
  std::set<std::tuple<uint32_t, fuse_ino_t, uint64_t>> lk_owners_;           // by lk_mu_
  bool lk_stop_ = false;                                                     // by lk_mu_
  std::thread lk_thread_;

  std::mutex mu_;
  std::unordered_map<fuse_ino_t, InodeEntry> inodes_;  // CIUIC_GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Handle*> handles_;      // CIUIC_GUARDED_BY(mu_)
};

// Lock handlers (fuse_locks.cc).
void OpGetlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi, struct flock* lock);
void OpSetlk(
    fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi, struct flock* lock, int sleep);
void OpFlock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi, int op);

}  // namespace ciuic::fuse
