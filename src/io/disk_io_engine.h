// DiskIoEngine: the parts the real-disk engines share, plain syscalls for everything except the
// data path (open, fsync, truncate, namespace operations, statfs, flock). Subclasses provide
// SubmitAsync and name(). Thread-safe; the syscalls here block the calling thread.
#pragma once

#include <string>
#include <vector>

#include "io/io_engine.h"

namespace ciuic::io {

class DiskIoEngine : public IoEngine {
 public:
  Result<FileHandle> Open(const std::string& path, int flags, mode_t mode) override;
  Result<size_t> RunSync(const IoOp& op) override;
  Status Close(FileHandle fh) override;
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
};

// Runs `op` with pread/pwrite on the calling thread, retrying EINTR and short writes; a read
// stops at end of file. Returns the bytes transferred.
Result<size_t> RunIoBlocking(const IoOp& op);

}  // namespace ciuic::io
