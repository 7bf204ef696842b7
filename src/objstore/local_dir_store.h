// LocalDirStore: an object store in a local directory, where object `key` is the plain file
// `<root>/<key>` (so "a/b/c" is the file c in the directories a/b). It is the cold tier's
// embedded default and what a `file:///dir` data repository opens: any directory of ordinary
// files is a valid store, and what the store writes is readable by any tool.
//
// On disk (docs/design.md, "Cold tier: object stores"):
//   - A put writes `.ciuic-tmp.<name>.<random>` beside the target, fsyncs it, renames it over
//     the target and fsyncs the directory (and each directory the put created). A reader sees
//     the old object or the new one, never part of one; a crash leaves at most a temp file,
//     which List never shows and RemoveTempFiles() collects. Names starting ".ciuic-tmp." are
//     reserved: keys with such a component are refused.
//   - User metadata is one extended attribute `user.ciuic.<name>` per name on the file, set
//     before the rename (so it is atomic with the data). On a file system without user
//     extended attributes a put with metadata fails with kNotSupported; one without works.
//   - The ETag is made of the file's inode, size and modification time in nanoseconds.
//   - Delete unlinks the file and then removes directories it left empty (never the root).
//   - Only regular files are objects: symbolic links, FIFOs, sockets and devices are skipped by
//     List and are kNotFound to Get and Head. No method follows a symbolic link, not even one
//     to a directory, so nothing outside the root is ever read, listed, written or removed.
//
// The one difference from S3: a key and the keys below it ("a" and "a/b") cannot both exist,
// as "a" cannot be a file and a directory at once. Such a put fails with kAlreadyExists naming
// both keys. A key component is also limited to the file system's name length (255 bytes).
//
// List walks the tree in key order without loading it: per directory it keeps only the next
// page's worth of entries (selected while reading the directory), so memory is bounded by the
// page size times the depth, also over a directory of millions of files. The time for a page
// is one pass over each directory the page touches.
//
// Thread-safety: every method may be called from many threads at once. Methods block.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "objstore/object_store.h"

namespace ciuic::objstore {

namespace internal {
class UniqueFd;
}  // namespace internal

class LocalDirStore final : public ObjectStore {
 public:
  struct Options {
    // Creates the root directory (and missing parents) if it does not exist.
    bool create = true;
    // Modes of the directories and files the store creates (the cold tier's are private).
    // Existing files are read whatever their mode.
    mode_t dir_mode = 0700;
    mode_t file_mode = 0600;
    // PutStream asks its source for pieces of at most this size, so a large object never sits
    // in memory whole.
    uint64_t stream_chunk_bytes = 4 << 20;
  };

  // Opens the store rooted at directory `root` (made absolute). Returns kNotFound if it does
  // not exist and !opts.create, kNotADirectory if it is not a directory, kPermissionDenied.
  static Result<std::unique_ptr<LocalDirStore>> Open(const std::string& root, Options opts);
  static Result<std::unique_ptr<LocalDirStore>> Open(const std::string& root) {
    return Open(root, Options{});
  }
  ~LocalDirStore() override;
  LocalDirStore(const LocalDirStore&) = delete;
  LocalDirStore& operator=(const LocalDirStore&) = delete;

  // Beside the interface's errors: kAlreadyExists when the key conflicts with a file or a
  // directory of keys on the way ("a" vs "a/b"); kNoSpace when the file system is full;
  // kNotSupported for metadata on a file system without user extended attributes.
  Status Put(std::string_view key, std::string_view data, const PutOptions& opts = {}) override;
  Status PutStream(std::string_view key,
                   uint64_t size,
                   const PutSource& source,
                   const PutOptions& opts = {}) override;
  Result<size_t> Get(std::string_view key, uint64_t offset, std::span<char> dst) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<ListPage> List(const ListOptions& opts) override;
  Status Delete(std::string_view key) override;
  // "file://" and the absolute root: "file:///var/lib/ciuic/cold".
  std::string Describe() const override;

  // Removes the temp files of puts that crashed, last modified more than `min_age` ago (a
  // younger one may belong to a put in progress), and returns how many it removed. Walks the
  // whole tree: run it at startup or from a background task, not per request.
  Result<uint64_t> RemoveTempFiles(std::chrono::seconds min_age);

  const std::string& root() const { return root_; }

 private:
  struct Parents;

  LocalDirStore(std::string root, int root_fd, Options opts);

  // Checks `key` for this store: ValidateKey, reserved names, component length.
  Status CheckKey(std::string_view key) const;
  // Writes an object of `size` bytes produced by `fill` (writes to an fd) atomically.
  Status PutImpl(std::string_view key,
                 uint64_t size,
                 const std::function<Status(int fd)>& fill,
                 const PutOptions& opts);
  // Opens (creating as needed) the directories of `key`'s parent, never following a symbolic
  // link.
  Result<Parents> MakeParents(std::string_view key);
  // Opens the directories of `key`'s parent, never following a symbolic link: (*chain)[0] is
  // the root, chain->back() the parent. kNotFound if one is missing or not a directory.
  Status OpenChain(std::string_view key, std::vector<internal::UniqueFd>* chain) const;
  // Opens object `key` for reading and stats it; kNotFound unless it is a regular file.
  Result<internal::UniqueFd> OpenObject(std::string_view key,
                                        std::string_view op,
                                        struct stat* st) const;
  // Returns the error for a put of `key` whose name `name` in directory `dir_fd` is a
  // directory: kAlreadyExists naming a key below it, or OK if it was empty and is now removed.
  Status ConflictBelow(std::string_view key, int dir_fd, const std::string& name);
  // Builds the error for a failed syscall `op` on `key` from `err`.
  Status Errno(int err, std::string_view op, std::string_view key) const;

  const std::string root_;
  const int root_fd_;
  const Options opts_;
};

}  // namespace ciuic::objstore
