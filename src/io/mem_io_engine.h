// MemIoEngine: the in-memory twin of the disk engines, for tests of crash safety.
//
// Files and directories live in memory with a durable/volatile split, as on a disk with a
// volatile cache:
//   - file data becomes durable on Fsync/Fdatasync of a handle of the file; so does the file's
//     creation (its current name) if it had no durable name yet;
//   - directory entries (create, unlink, rename, mkdir) become durable on SyncDir of the
//     directory that holds them;
//   - SimulatePowerLoss() reverts everything to the durable state and closes every handle.
// Handles opened with O_DIRECT enforce the O_DIRECT rules (4 KiB-aligned buffer, offset and
// length, else kInvalidArgument) so tests catch misuse that a real disk would reject.
// Fault points: "io.open", "io.read", "io.write", "io.fsync", "io.truncate", "io.unlink",
// "io.rename", "io.syncdir". SetCapacity() makes writes fail with kNoSpace past a byte budget.
//
// Thread-safety: all methods may be called concurrently; one mutex guards all state. Async ops
// run on a two-thread pool, like the posix engine.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/thread_pool.h"
#include "io/io_engine.h"

namespace ciuic::io {

class MemIoEngine : public IoEngine {
 public:
  MemIoEngine();
  ~MemIoEngine() override;

  const char* name() const override { return "mem"; }
  Result<FileHandle> Open(const std::string& path, int flags, mode_t mode = 0600) override;
  Status Close(FileHandle fh) override;
  void SubmitAsync(const IoOp& op, IoCallback cb) override;
  Result<size_t> RunSync(const IoOp& op) override { return RunOp(op); }
  Status Fsync(FileHandle fh) override;
  Status Fdatasync(FileHandle fh) override;
  Status Truncate(FileHandle fh, uint64_t length) override;
  Status PunchHole(FileHandle fh, uint64_t offset, uint64_t len) override;
  Result<FileStat> Stat(FileHandle fh) override;
  Result<FileStat> StatPath(const std::string& path) override;
  Status Unlink(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status MkdirAll(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<FsStat> StatFs(const std::string& path) override;
  Status LockFile(FileHandle fh) override;
  bool sparse_files() const override { return false; }  // growing allocates

  // Drops every byte, file and directory entry not made durable, and closes all handles (later
  // use of an old handle fails with kInvalidArgument, like EBADF).
  void SimulatePowerLoss();
  // false: the machine is off. Every later call (open, read, write, sync, rename, stat...) fails
  // with kIoError, as on a machine whose power was cut, so a server that keeps running leaves
  // nothing more on this "disk" (closing handles still works). A whole-cluster power cut
  // (MiniCluster::CutPower) turns this off on every OSS's engine, stops the servers, and then
  // calls SimulatePowerLoss(). true again: back to normal.
  void SetPowered(bool powered);
  // Limits the total bytes of file data; 0 means no limit (StatFs then reports 1 TiB).
  void SetCapacity(uint64_t bytes);
  // Bytes of file data currently stored (volatile view).
  uint64_t UsedBytes() const;
  // Handles open now (like counting /proc/self/fd).
  size_t OpenHandles() const;
  // Limits the handles open at once; beyond it Open fails like EMFILE (kUnavailable). 0 (the
  // default) means no limit.
  void SetMaxOpenHandles(size_t n);

 private:
  struct Inode;
  struct Node {
    bool dir = false;
    std::shared_ptr<Inode> inode;  // files only
  };
  struct Handle {
    std::shared_ptr<Inode> inode;
    int flags = 0;
  };

  Result<size_t> RunOp(const IoOp& op);
  Result<Handle*> FindLocked(FileHandle fh);
  // kIoError while the power is off (SetPowered).
  Status PoweredLocked() const;
  Status CheckDirectLocked(const Handle& h, const void* buf, uint64_t offset, size_t len) const;
  Status ResizeLocked(Inode* inode, uint64_t size);
  bool IsDirLocked(const std::string& path) const;
  // Frees the data of an inode with no name and no handle (it counts against capacity no more).
  void ReleaseIfOrphanLocked(Inode* inode);

  mutable std::mutex mu_;
  std::map<std::string, Node> live_;     // guarded by mu_: path -> entry, what a reader sees
  std::map<std::string, Node> durable_;  // guarded by mu_: what survives a power loss
  std::unordered_map<FileHandle, Handle> handles_;      // guarded by mu_
  std::unordered_map<const Inode*, FileHandle> locks_;  // guarded by mu_
  FileHandle next_fh_ = 3;                              // guarded by mu_
  uint64_t capacity_ = 0;                               // guarded by mu_
  uint64_t used_ = 0;                                   // guarded by mu_
  size_t max_handles_ = 0;                              // guarded by mu_
  bool powered_ = true;                                 // guarded by mu_
  ThreadPool pool_;
};

}  // namespace ciuic::io
