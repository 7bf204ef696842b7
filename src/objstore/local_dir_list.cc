// The key-order walk of a LocalDirStore tree (LocalDirCursor) and the helpers it shares with
// local_dir_store.cc.
//
// Why a directory walk needs care: readdir order is no order at all, and even a sorted walk
// that visits "a/" before "a-c" is wrong, since '-' (0x2d) sorts before '/' (0x2f): key "a-c"
// comes before key "a/b". Within one directory the keys of an entry all start with its name
// for a file, or its name plus "/" for a directory, and no such "sort key" is a prefix of
// another's unless it is a file's (whose one key then sorts first). So sorting a directory's
// entries by sort key and descending into directories in that order yields keys in order.
#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <queue>

#include <fmt/format.h>

#include "objstore/local_dir_internal.h"

namespace ciuic::objstore::internal {

StatusCode LocalErrnoCode(int err) {
  switch (err) {
    case ENOENT:
      return StatusCode::kNotFound;
    case ENOSPC:
    case EDQUOT:
      return StatusCode::kNoSpace;
    case EACCES:
    case EPERM:
    case EROFS:
      return StatusCode::kPermissionDenied;
    case ENAMETOOLONG:
      return StatusCode::kInvalidArgument;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case EINTR:
      return StatusCode::kUnavailable;
    case EOPNOTSUPP:
      return StatusCode::kNotSupported;
    default:
      return StatusCode::kIoError;
  }
}

ObjectInfo LocalObjectInfo(std::string key, const struct stat& st) {
  const int64_t mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                           static_cast<int64_t>(st.st_mtim.tv_nsec);
  ObjectInfo info;
  info.key = std::move(key);
  info.size = static_cast<uint64_t>(st.st_size);
  info.etag = fmt::format("{:x}-{:x}-{:x}", static_cast<uint64_t>(st.st_ino), info.size,
                          static_cast<uint64_t>(mtime_ns));
  info.mtime_ms = mtime_ns / 1'000'000;
  return info;
}

namespace {

// True if every key of `e` (within its directory) sorts before position `bound`.
bool WhollyBefore(std::string_view sort_key, bool is_dir, std::string_view bound) {
  if (sort_key >= bound) {
    return false;
  }
  return !(is_dir && bound.starts_with(sort_key));
}

std::string NameOf(const std::string& sort_key, bool is_dir) {
  return is_dir ? sort_key.substr(0, sort_key.size() - 1) : sort_key;
}

}  // namespace

LocalDirCursor::LocalDirCursor(
    int root_fd, std::string describe, std::string dir_key, std::string name_prefix, size_t batch)
    : root_fd_(root_fd),
      describe_(std::move(describe)),
      dir_key_(std::move(dir_key)),
      name_prefix_(std::move(name_prefix)),
      batch_(std::max<size_t>(batch, 1)) {}

Status LocalDirCursor::DirError(int err, std::string_view dir) const {
  return Status(LocalErrnoCode(err),
                fmt::format("{}: list directory {}: {}", describe_,
                            QuoteKey(dir.empty() ? "." : dir), std::strerror(err)));
}

Status LocalDirCursor::Scan(Level& lv, const std::string& bound, bool after) {
  lv.batch.clear();
  lv.pos = 0;
  lv.more = false;
  // A fresh open file description per pass, so each pass reads the directory from its start.
  int fd = ::openat(lv.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return DirError(errno, lv.base);
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    ::close(fd);
    return DirError(err, lv.base);
  }
  auto less = [](const Entry& a, const Entry& b) { return a.sort_key < b.sort_key; };
  // The `batch_` smallest entries seen so far; top() is the largest of them.
  std::priority_queue<Entry, std::vector<Entry>, decltype(less)> best(less);
  size_t matched = 0;
  int err = 0;
  for (;;) {
    errno = 0;
    struct dirent* de = ::readdir(dir);
    if (de == nullptr) {
      err = errno;
      break;
    }
    std::string_view name = de->d_name;
    if (name == "." || name == ".." || name.starts_with(kTempPrefix) ||
        !name.starts_with(lv.name_prefix)) {
      continue;
    }
    bool is_dir;
    if (de->d_type == DT_REG) {
      is_dir = false;
    } else if (de->d_type == DT_DIR) {
      is_dir = true;
    } else if (de->d_type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(lv.fd.get(), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        continue;  // gone already
      }
      if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        continue;
      }
      is_dir = S_ISDIR(st.st_mode);
    } else {
      continue;  // a symbolic link or a special file: not an object
    }
    Entry e{.sort_key = std::string(name), .is_dir = is_dir};
    if (is_dir) {
      e.sort_key += '/';
    }
    if (after ? e.sort_key <= bound : WhollyBefore(e.sort_key, is_dir, bound)) {
      continue;
    }
    ++matched;
    if (best.size() < batch_) {
      best.push(std::move(e));
    } else if (e.sort_key < best.top().sort_key) {
      best.pop();
      best.push(std::move(e));
    }
  }
  ::closedir(dir);
  if (err != 0) {
    return DirError(err, lv.base);
  }
  lv.more = matched > best.size();
  lv.batch.resize(best.size());
  for (size_t i = best.size(); i > 0; --i) {
    lv.batch[i - 1] = best.top();
    best.pop();
  }
  return Status::OK();
}

Status LocalDirCursor::Settle() {
  valid_ = false;
  while (!levels_.empty()) {
    Level& lv = levels_.back();
    if (lv.pos == lv.batch.size()) {
      if (lv.more) {
        std::string last = lv.batch.back().sort_key;
        CIUIC_RETURN_IF_ERROR(Scan(lv, last, /*after=*/true));
        continue;
      }
      levels_.pop_back();
      if (!levels_.empty()) {
        ++levels_.back().pos;  // past the directory just finished
      }
      continue;
    }
    const Entry& e = lv.batch[lv.pos];
    const std::string name = NameOf(e.sort_key, e.is_dir);
    if (!e.is_dir) {
      std::string key = lv.base + e.sort_key;
      struct stat st;
      if (key.size() > kMaxKeyBytes ||
          ::fstatat(lv.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(st.st_mode)) {
        ++lv.pos;  // too long to be a key, removed since the scan, or replaced
        continue;
      }
      info_ = LocalObjectInfo(std::move(key), st);
      valid_ = true;
      return Status::OK();
    }
    std::string base = lv.base + e.sort_key;
    if (base.size() >= kMaxKeyBytes) {
      ++lv.pos;  // every key below would be too long
      continue;
    }
    int fd = ::openat(lv.fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR || err == ELOOP) {
        ++lv.pos;  // removed or replaced since the scan
        continue;
      }
      return DirError(err, base);
    }
    std::string bound = lower_.starts_with(base) ? lower_.substr(base.size()) : std::string();
    Level child;
    child.base = std::move(base);
    child.fd = UniqueFd(fd);
    levels_.push_back(std::move(child));  // invalidates `lv` and `e`
    CIUIC_RETURN_IF_ERROR(Scan(levels_.back(), bound, /*after=*/false));
  }
  return Status::OK();
}

Status LocalDirCursor::Seek(const std::string& lower) {
  lower_ = lower;
  valid_ = false;
  if (!started_) {
    started_ = true;
    if (!lower.starts_with(dir_key_) && lower > dir_key_) {
      return Status::OK();  // past every key of the directory
    }
    int fd = dir_key_.empty() ? ::openat(root_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                              : ::openat(root_fd_, dir_key_.c_str(),
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR || err == ELOOP) {
        return Status::OK();  // no such directory: no keys
      }
      return DirError(err, dir_key_);
    }
    Level first;
    first.base = dir_key_;
    first.fd = UniqueFd(fd);
    first.name_prefix = name_prefix_;
    levels_.push_back(std::move(first));
    std::string bound = lower.starts_with(dir_key_) ? lower.substr(dir_key_.size()) : "";
    CIUIC_RETURN_IF_ERROR(Scan(levels_.back(), bound, /*after=*/false));
    return Settle();
  }
  // Leave the directories whose keys all sort before `lower` (it never moves backwards).
  while (levels_.size() > 1 && !lower.starts_with(levels_.back().base)) {
    levels_.pop_back();
    ++levels_.back().pos;
  }
  if (levels_.empty()) {
    return Status::OK();
  }
  if (!lower.starts_with(levels_.back().base)) {
    levels_.clear();  // past the first directory's keys: done
    return Status::OK();
  }
  Level& lv = levels_.back();
  std::string bound = lower.substr(lv.base.size());
  while (lv.pos < lv.batch.size() &&
         WhollyBefore(lv.batch[lv.pos].sort_key, lv.batch[lv.pos].is_dir, bound)) {
    ++lv.pos;
  }
  if (lv.pos == lv.batch.size() && lv.more) {
    CIUIC_RETURN_IF_ERROR(Scan(lv, bound, /*after=*/false));
  }
  return Settle();
}

Status LocalDirCursor::Next() {
  lower_.clear();
  if (levels_.empty()) {
    valid_ = false;
    return Status::OK();
  }
  ++levels_.back().pos;
  return Settle();
}

}  // namespace ciuic::objstore::internal
