// Pieces of LocalDirStore shared by its files and its tests: the errno mapping, a file
// descriptor owner, and the cursor that walks a directory tree in key order.
// Thread-safety: a LocalDirCursor is used by one thread; the rest are values or pure functions.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "objstore/object_store_internal.h"

namespace ciuic::objstore::internal {

// Names of put temp files start with this; keys may not have a component that does.
inline constexpr std::string_view kTempPrefix = ".ciuic-tmp.";

// Owns a file descriptor and closes it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset(o.release());
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) {
      ::close(fd_);
    }
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Maps an errno of a local file operation to the code ObjectStore callers handle: ENOENT ->
// kNotFound, ENOSPC/EDQUOT -> kNoSpace, EACCES/EPERM/EROFS -> kPermissionDenied,
// ENAMETOOLONG -> kInvalidArgument, EMFILE/ENFILE/ENOMEM/EAGAIN/EINTR -> kUnavailable (retry),
// EOPNOTSUPP -> kNotSupported, everything else -> kIoError.
StatusCode LocalErrnoCode(int err);

// Returns the ObjectInfo of a regular file (no metadata): its size, modification time, and an
// ETag made of inode, size and modification time in nanoseconds.
ObjectInfo LocalObjectInfo(std::string key, const struct stat& st);

// Walks, in key order, the regular files below directory `dir_key` of the tree at `root_fd`
// whose first name component below it starts with `name_prefix` (together: the keys that
// start with dir_key + name_prefix). Per directory it holds at most `batch` entries, chosen as
// the smallest past the current position while the directory is read, and reads it again
// when they run out. Skips temp files, symbolic links and special files, and keys longer than
// 1024 bytes (which no ObjectStore method could name). A directory that vanishes while walked
// is skipped. Errors name `describe` (the store) and the directory.
class LocalDirCursor final : public KeyCursor {
 public:
  LocalDirCursor(int root_fd,
                 std::string describe,
                 std::string dir_key,
                 std::string name_prefix,
                 size_t batch);

  Status Seek(const std::string& lower) override;
  bool Valid() const override { return valid_; }
  const ObjectInfo& info() const override { return info_; }
  Status Next() override;

 private:
  struct Entry {
    std::string sort_key;  // the name, with "/" appended for a directory
    bool is_dir = false;
  };
  struct Level {
    std::string base;          // the key prefix of this directory: "" or "a/b/"
    UniqueFd fd;               // the directory, open for reading
    std::string name_prefix;   // entries must start with it (the first level only)
    std::vector<Entry> batch;  // the next entries in key order
    size_t pos = 0;            // batch[pos] is the current entry
    bool more = false;         // entries past the batch's last may exist
  };

  // Refills `lv.batch` with the smallest entries at or past `bound`: with `after`, those whose
  // sort key is greater than `bound`; otherwise those not wholly before key position `bound`
  // (a directory whose keys include `bound` counts).
  Status Scan(Level& lv, const std::string& bound, bool after);
  // Moves from the current entry of the deepest level to the first key at or past it,
  // descending into directories and leaving exhausted ones.
  Status Settle();
  Status DirError(int err, std::string_view dir) const;

  const int root_fd_;
  const std::string describe_;
  const std::string dir_key_;
  const std::string name_prefix_;
  const size_t batch_;
  bool started_ = false;
  bool valid_ = false;
  std::string lower_;  // the bound of the last Seek; "" after Next
  std::vector<Level> levels_;
  ObjectInfo info_;
};

}  // namespace ciuic::objstore::internal
