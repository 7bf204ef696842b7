// IoEngine: the seam between the OSS and its disk. Implementations:
//   UringIoEngine  - io_uring (liburing), async, one ring, a completion thread
//   PosixIoEngine  - pread/pwrite on a small thread pool; chosen when io_uring is unavailable
//   MemIoEngine    - in-memory files with a durable/volatile split; SimulatePowerLoss() drops
//                    every byte (and every file) not made durable by Fsync/Fdatasync/SyncDir
// Thread-safety: every method may be called concurrently from any thread. Callbacks of
// *Async methods run on an engine thread and must not block for long; they may submit more ops.
// Errors: kNotFound, kAlreadyExists, kNoSpace (ENOSPC/EDQUOT), kInvalidArgument (e.g. misaligned
// O_DIRECT), kIoError, and the other errno mappings of Status::FromErrno.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ciuic::io {

// A file handle of an engine (a real fd for the disk engines).
using FileHandle = int;

struct FileStat {
  uint64_t size = 0;
  uint64_t allocated = 0;  // bytes of allocated blocks
};

struct FsStat {
  uint64_t capacity = 0;
  uint64_t free = 0;
  uint64_t device_id = 0;
};

enum class IoKind { kRead, kWrite };

struct IoOp {
  IoKind kind = IoKind::kRead;
  FileHandle fh = -1;
  uint64_t offset = 0;
  void* buf = nullptr;  // for O_DIRECT files: 4 KiB-aligned address, length and offset
  size_t len = 0;
};

// Result of one op: bytes transferred (a short read means end of file).
using IoCallback = std::function<void(Result<size_t>)>;

class IoEngine {
 public:
  virtual ~IoEngine() = default;

  // Name for logs and tests: "io_uring", "posix", "mem".
  virtual const char* name() const = 0;

  // Opens `path` with open(2) `flags` (O_DIRECT is honored where supported). kNotFound if absent
  // and O_CREAT not given; kUnavailable when the process or the system is out of file
  // descriptors (EMFILE/ENFILE: retryable once handles are closed).
  virtual Result<FileHandle> Open(const std::string& path, int flags, mode_t mode = 0600) = 0;
  virtual Status Close(FileHandle fh) = 0;

  // Submits one op; `cb` runs once when it completes. Never waits for the IO or for room: when
  // the engine's bounded queue is full, `cb` gets kUnavailable (retry later; the OSS hands it
  // to its client, which retries with backoff).
  virtual void SubmitAsync(const IoOp& op, IoCallback cb) = 0;
  // Runs one op on the calling thread and returns its result like SubmitAsync would. For small
  // buffered IO on metadata files where a hop to an engine thread costs more than the syscall,
  // and for callers that are themselves running on an engine thread (waiting there for an
  // async op could deadlock). Blocks.
  virtual Result<size_t> RunSync(const IoOp& op) = 0;

  // Runs ops to completion and returns each one's result, in order. Ops run concurrently; ops
  // refused with kUnavailable (queue full) are submitted again. Blocks.
  std::vector<Result<size_t>> SubmitAndWait(const std::vector<IoOp>& ops);
  // Convenience: one blocking read/write. Loops over short writes; a short read is returned.
  Result<size_t> Pread(FileHandle fh, void* buf, size_t len, uint64_t offset);
  Status PwriteAll(FileHandle fh, const void* buf, size_t len, uint64_t offset);

  virtual Status Fsync(FileHandle fh) = 0;
  virtual Status Fdatasync(FileHandle fh) = 0;
  virtual Status Truncate(FileHandle fh, uint64_t length) = 0;
  // Deallocates [offset, offset+len) so it reads as zeros (FALLOC_FL_PUNCH_HOLE|KEEP_SIZE).
  virtual Status PunchHole(FileHandle fh, uint64_t offset, uint64_t len) = 0;
  virtual Result<FileStat> Stat(FileHandle fh) = 0;

  // Namespace operations on paths.
  virtual Result<FileStat> StatPath(const std::string& path) = 0;  // kNotFound if absent
  virtual Status Unlink(const std::string& path) = 0;              // kNotFound if absent
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status MkdirAll(const std::string& path) = 0;
  // Makes the directory's entries (creates, unlinks, renames) durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // Lists the names in a directory (not "." or "..").
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual Result<FsStat> StatFs(const std::string& path) = 0;

  // Takes an exclusive advisory lock on the open file (flock(LOCK_EX|LOCK_NB) on disk), released
  // by Close. kBusy if another handle holds it, even in another process.
  virtual Status LockFile(FileHandle fh) = 0;

  // True when growing a file with Truncate costs no space (holes), so callers may extend files
  // ahead of their writes (ext4 runs O_DIRECT writes inside the file size in parallel, extending
  // ones one at a time).
  virtual bool sparse_files() const { return true; }
};

enum class IoEngineKind { kAuto, kUring, kPosix };

// Creates a disk engine. kAuto tries io_uring and falls back to posix when the kernel or the
// sandbox refuses it (logged once). kUring fails with kNotSupported when unavailable.
Result<std::unique_ptr<IoEngine>> NewDiskIoEngine(IoEngineKind kind, unsigned queue_depth = 128);
// Parses "auto", "io_uring"/"uring", "posix". kInvalidArgument otherwise.
Result<IoEngineKind> ParseIoEngineKind(const std::string& s);

}  // namespace ciuic::io
