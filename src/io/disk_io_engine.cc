#include "io/disk_io_engine.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/fault.h"

namespace ciuic::io {

Result<FileHandle> DiskIoEngine::Open(const std::string& path, int flags, mode_t mode) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.open"));
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    if (err == EMFILE || err == ENFILE) {
      // Out of descriptors is transient (callers close some and retry), not an IO error.
      // Plain concatenation, not fmt: with no descriptor free, UBSan's vptr check on fmt's
      // buffer cannot probe memory (it needs a pipe) and reports a false "invalid vptr".
      return Status::Unavailable("open " + path + ": " + std::strerror(err));
    }
    return Status::FromErrno(err, "open " + path);
  }
  return fd;
}

Result<size_t> DiskIoEngine::RunSync(const IoOp& op) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT(op.kind == IoKind::kRead ? "io.read" : "io.write"));
  return RunIoBlocking(op);
}

Status DiskIoEngine::Close(FileHandle fh) {
  // close(2) must not be retried on EINTR: the descriptor is gone either way.
  if (::close(fh) != 0 && errno != EINTR)
    return Status::FromErrno(errno, "close");
  return Status::OK();
}

Status DiskIoEngine::Fsync(FileHandle fh) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.fsync"));
  if (::fsync(fh) != 0)
    return Status::FromErrno(errno, "fsync");
  return Status::OK();
}

Status DiskIoEngine::Fdatasync(FileHandle fh) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.fsync"));
  if (::fdatasync(fh) != 0)
    return Status::FromErrno(errno, "fdatasync");
  return Status::OK();
}

Status DiskIoEngine::Truncate(FileHandle fh, uint64_t length) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.truncate"));
  int rc;
  do {
    rc = ::ftruncate(fh, static_cast<off_t>(length));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0)
    return Status::FromErrno(errno, "ftruncate");
  return Status::OK();
}

Status DiskIoEngine::PunchHole(FileHandle fh, uint64_t offset, uint64_t len) {
  if (len == 0)
    return Status::OK();
  if (::fallocate(fh, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(len)) != 0) {
    return Status::FromErrno(errno, "fallocate(PUNCH_HOLE)");
  }
  return Status::OK();
}

namespace {
FileStat ToFileStat(const struct stat& st) {
  return FileStat{static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_blocks) * 512};
}
}  // namespace

Result<FileStat> DiskIoEngine::Stat(FileHandle fh) {
  struct stat st;
  if (::fstat(fh, &st) != 0)
    return Status::FromErrno(errno, "fstat");
  return ToFileStat(st);
}

Result<FileStat> DiskIoEngine::StatPath(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::FromErrno(errno, "stat " + path);
  return ToFileStat(st);
}

Status DiskIoEngine::Unlink(const std::string& path) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.unlink"));
  if (::unlink(path.c_str()) != 0)
    return Status::FromErrno(errno, "unlink " + path);
  return Status::OK();
}

Status DiskIoEngine::Rename(const std::string& from, const std::string& to) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.rename"));
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::FromErrno(errno, fmt::format("rename {} -> {}", from, to));
  }
  return Status::OK();
}

Status DiskIoEngine::MkdirAll(const std::string& path) {
  if (path.empty())
    return Status::InvalidArgument("empty path");
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/')
      continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::FromErrno(errno, "mkdir " + prefix);
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::FromErrno(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode))
    return Status::NotADirectory(path + " is not a directory");
  return Status::OK();
}

Status DiskIoEngine::SyncDir(const std::string& path) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.syncdir"));
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return Status::FromErrno(errno, "open dir " + path);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return Status::FromErrno(err, "fsync dir " + path);
  return Status::OK();
}

Result<std::vector<std::string>> DiskIoEngine::ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr)
    return Status::FromErrno(errno, "opendir " + path);
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    if (name != "." && name != "..")
      names.emplace_back(name);
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0)
    return Status::FromErrno(err, "readdir " + path);
  return names;
}

Result<FsStat> DiskIoEngine::StatFs(const std::string& path) {
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0)
    return Status::FromErrno(errno, "statvfs " + path);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::FromErrno(errno, "stat " + path);
  FsStat out;
  out.capacity = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  out.free = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  out.device_id = static_cast<uint64_t>(st.st_dev);
  return out;
}

Status DiskIoEngine::LockFile(FileHandle fh) {
  if (::flock(fh, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return Status::Busy("file is locked by another user");
    return Status::FromErrno(errno, "flock");
  }
  return Status::OK();
}

Result<size_t> RunIoBlocking(const IoOp& op) {
  auto* p = static_cast<uint8_t*>(op.buf);
  size_t done = 0;
  while (done < op.len) {
    ssize_t n;
    if (op.kind == IoKind::kRead) {
      n = ::pread(op.fh, p + done, op.len - done, static_cast<off_t>(op.offset + done));
    } else {
      n = ::pwrite(op.fh, p + done, op.len - done, static_cast<off_t>(op.offset + done));
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return Status::FromErrno(errno, op.kind == IoKind::kRead ? "pread" : "pwrite");
    }
    if (n == 0) {
      if (op.kind == IoKind::kRead)
        break;  // end of file
      return Status::NoSpace("pwrite wrote 0 bytes");
    }
    done += static_cast<size_t>(n);
    // A short read of a regular file means end of file; continuing at an unaligned offset
    // would also fail with EINVAL on O_DIRECT files. Aligned short reads (the 2 GiB cap of
    // one syscall) continue.
    if (op.kind == IoKind::kRead && done < op.len && n % 4096 != 0)
      break;
  }
  return done;
}

}  // namespace ciuic::io
