// ClientImpl: the public Client over a ClientCore: path validation, namespace operations on the
// MDS (one request each where the protocol allows; parents of paths come from a short-lived
// directory cache), and Open, which builds an OpenFile. Thread-safe; every method blocks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "client/client_core.h"

namespace ciuic::client {

class ClientImpl : public Client {
 public:
  explicit ClientImpl(std::shared_ptr<ClientCore> core) : core_(std::move(core)) {}
  ~ClientImpl() override;

  Result<std::unique_ptr<File>> Open(const std::string& path,
                                     int flags,
                                     uint32_t mode,
                                     const OpenOptions& options) override;
  Status WriteFile(const std::string& path, const std::string& data, uint32_t mode) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Result<FileStat> Stat(const std::string& path) override;
  Result<FileStat> Lstat(const std::string& path) override;
  Status Mkdir(const std::string& path, uint32_t mode) override;
  Status MkdirAll(const std::string& path, uint32_t mode) override;
  Status Mknod(const std::string& path, uint32_t mode, uint64_t rdev) override;
  Result<std::vector<DirEntry>> ReadDir(const std::string& path) override;
  Result<DirPage> ReadDirPage(const std::string& path,
                              uint64_t cookie,
                              uint32_t max_entries,
                              bool plus) override;
  Status Unlink(const std::string& path) override;
  Status Rmdir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to, unsigned flags) override;
  Status Truncate(const std::string& path, uint64_t size) override;
  Status Symlink(const std::string& target, const std::string& linkpath) override;
  Result<std::string> Readlink(const std::string& path) override;
  Status Link(const std::string& existing, const std::string& newpath) override;
  Status Chmod(const std::string& path, uint32_t mode) override;
  Status Chown(const std::string& path, uint32_t uid, uint32_t gid) override;
  Status Utimens(const std::string& path,
                 const struct timespec& atime,
                 const struct timespec& mtime) override;
  Status SetXattr(const std::string& path,
                  const std::string& name,
                  const std::string& value,
                  int flags) override;
  Result<std::string> GetXattr(const std::string& path, const std::string& name) override;
  Result<std::vector<std::string>> ListXattr(const std::string& path) override;
  Status RemoveXattr(const std::string& path, const std::string& name) override;
  Result<FileLayout> GetLayout(const std::string& path) override;
  Status SetLayout(const std::string& path, const FileLayout& layout) override;
  Status FsyncDir(const std::string& path) override;
  Result<StatFs> Statfs() override;
  Result<StatFs> StatfsTiers() override;
  Result<std::vector<OstStatus>> OstMap() override;
  Result<std::vector<ChainStatus>> Chains() override;
  Status SetNodeCachePlan(const std::vector<PlannedRead>& order) override;
  bool HasNodeCache() const override { return core_->node_cache() != nullptr; }
  Status SetNodeCacheExcluded(const std::string& path, bool excluded) override;

  // By-FID operations (fid_ops.cc).
  FileId RootId() const override;
  Status HsmArchive(const std::string& path) override;
  Status HsmRelease(const std::string& path) override;
  Status HsmRestore(const std::string& path) override;
  Status HsmRemove(const std::string& path) override;
  Status HsmImport(const std::string& path, const RepoImport& spec) override;
  Status RepoSetExportOnClose(const std::string& dir, bool on) override;
  Result<RepoQueue> RepoListQueue(const std::string& dir, uint32_t max) override;
  Status RepoQueueDone(const std::string& dir, const std::vector<RepoQueued>& done) override;
  Status RepoRecordLink(const std::string& dir) override;
  Result<std::vector<RepoLink>> RepoLinks() override;
  Result<HsmStatus> HsmGetState(const std::string& path) override;
  Result<FileStat> LookupAt(const FileId& parent, const std::string& name) override;
  Result<FileStat> GetAttrAt(const FileId& id) override;
  std::optional<FileStat> CachedAttrAt(const FileId& id) override;
  Result<FileStat> SetAttrAt(const FileId& id, const SetAttrRequest& req) override;
  Result<std::unique_ptr<File>> OpenAt(const FileId& id, int flags, FileStat* attr) override;
  Result<std::shared_ptr<SharedMemory>> ImportSharedMemory(int fd) override {
    return core_->ImportSharedMemory(fd);
  }
  Result<std::shared_ptr<SharedMemory>> NewSharedMemory(size_t bytes) override {
    return core_->NewSharedMemory(bytes);
  }
  Result<std::unique_ptr<File>> OpenResolved(
      const FileId& id,
      const FileLayout& layout,
      uint64_t size,
      const std::string& name,
      std::optional<uint64_t> data_version = std::nullopt) override;
  Result<std::unique_ptr<File>> CreateAt(const FileId& parent,
                                         const std::string& name,
                                         int flags,
                                         uint32_t mode,
                                         FileStat* attr) override;
  Result<FileStat> MkdirAt(const FileId& parent, const std::string& name, uint32_t mode) override;
  Result<FileStat> MknodAt(const FileId& parent,
                           const std::string& name,
                           uint32_t mode,
                           uint64_t rdev) override;
  Result<FileStat> SymlinkAt(const std::string& target,
                             const FileId& parent,
                             const std::string& name) override;
  Result<FileStat> LinkAt(const FileId& id,
                          const FileId& new_parent,
                          const std::string& new_name) override;
  Result<std::string> ReadlinkAt(const FileId& id) override;
  Status UnlinkAt(const FileId& parent, const std::string& name) override;
  Status RmdirAt(const FileId& parent, const std::string& name) override;
  Status RenameAt(const FileId& parent,
                  const std::string& name,
                  const FileId& new_parent,
                  const std::string& new_name,
                  unsigned flags) override;
  Result<DirPage> ReadDirAt(const FileId& dir,
                            uint64_t cookie,
                            uint32_t max_entries,
                            bool plus) override;
  Status SetXattrAt(const FileId& id,
                    const std::string& name,
                    const std::string& value,
                    int flags) override;
  Result<std::string> GetXattrAt(const FileId& id, const std::string& name) override;
  Result<std::vector<std::string>> ListXattrAt(const FileId& id) override;
  Status RemoveXattrAt(const FileId& id, const std::string& name) override;
  Result<FileLayout> GetLayoutAt(const FileId& id) override;
  Status FsyncDirAt(const FileId& id) override;
  Status SetLayoutAt(const FileId& id, const FileLayout& layout) override;
  Result<bool> LockAt(const FileId& id,
                      LockKind kind,
                      uint64_t owner,
                      const LockRange& want,
                      LockRange* conflict) override;
  Result<bool> TestLockAt(const FileId& id,
                          LockKind kind,
                          uint64_t owner,
                          const LockRange& want,
                          LockRange* conflict) override;
  const std::string& cluster_uuid() const override { return core_->cluster_uuid(); }
  const ClientOptions& options() const override { return core_->options(); }

 private:
  // Resolves a validated, normalized path in one MDS round trip.
  Status Resolve(const std::string& path, bool follow, pb::ResolvePathResp* resp);
  // FID of the directory `path` (validated, normalized); from the cache when fresh.
  Result<Fid> ResolveDir(const std::string& path, bool* from_cache);
  // Runs `op(parent_fid, name)` for the parent of `path`, retrying once with a fresh lookup
  // when a cached parent turned out stale (kNotFound). `norm` gets the normalized path.
  Status WithParent(const std::string& path,
                    std::string* norm,
                    const std::function<Status(const Fid&, const std::string&)>& op);
  // FID of `path` (following a final symlink when `follow`).
  Result<Fid> FidOf(const std::string& path, bool follow, pb::ResolvePathResp* resp = nullptr);
  Status SetAttr(const std::string& path, pb::SetAttrReq* req);
  // Checks the type of what the MDS resolved, opens it by FID if the resolve did not, applies
  // O_TRUNC punches and builds the File. `norm` names the file in messages.
  Result<std::unique_ptr<File>> FinishOpen(const std::string& norm,
                                           int flags,
                                           pb::Attr attr,
                                           pb::Layout layout,
                                           uint64_t open_id,
                                           google::protobuf::RepeatedPtrField<pb::OstTask> punches,
                                           const OpenOptions& options);
  // Attributes with the size of this client's unflushed writes.
  FileStat WithLocalSize(FileStat s);
  Result<FileStat> StatImpl(const std::string& path, bool follow);
  // Runs HSM operation `op` (HsmBeginReq.op) on file `fid` named `name` (hsm.cc).
  Status HsmRun(const Fid& fid, const std::string& name, uint32_t op);
  Status HsmPath(const std::string& path, uint32_t op);
  // One RepoQueue request about directory `dir`.
  Status RepoQueueCall(const std::string& dir, pb::RepoQueueReq* req, pb::RepoQueueResp* resp);

  std::shared_ptr<ClientCore> core_;
};

}  // namespace ciuic::client
