// FuseServer::Impl: the state the request handlers share (fuse_server.cc, fuse_ops.cc). Internal.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
  Impl(std::unique_ptr<Client> client, FuseOptions options);
  ~Impl();

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

 private:
  std::unique_ptr<Client> client_;
  FuseOptions opts_;
  FileId root_;
  ThreadPool pool_;
  fuse_session* se_ = nullptr;
  bool mounted_ = false;

  std::mutex mu_;
  std::unordered_map<fuse_ino_t, InodeEntry> inodes_;  // CIUIC_GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Handle*> handles_;      // CIUIC_GUARDED_BY(mu_)
};

}  // namespace ciuic::fuse
