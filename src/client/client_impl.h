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
  Result<StatFs> Statfs() override;
  Result<std::vector<OstStatus>> OstMap() override;
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
  Result<FileStat> StatImpl(const std::string& path, bool follow);

  std::shared_ptr<ClientCore> core_;
};

}  // namespace ciuic::client
