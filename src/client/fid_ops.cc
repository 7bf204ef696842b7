// ClientImpl's operations by file identity (FileId) instead of path: what an inode-based server
// such as the FUSE daemon needs. The MDS protocol names files by FID already, so each is the
// MDS request of its path-based twin without the path resolution.
#include <sys/stat.h>

#include <fmt/format.h>

#include "client/client_impl.h"
#include "client/file_impl.h"
#include "client/path.h"
#include "net/pb_convert.h"

namespace ciuic::client {
namespace {

Fid ToFid(const FileId& id) {
  return Fid{id.seq, id.mds, id.ver};
}

void SetFid(const FileId& id, pb::Fid* out) {
  net::ToPb(ToFid(id), out);
}

std::string Name(const FileId& id) {
  return ToFid(id).ToString();
}

std::string Name(const FileId& parent, const std::string& name) {
  return fmt::format("{}/{}", ToFid(parent).ToString(), name);
}

Status CheckName(const FileId& parent, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return Status::InvalidArgument(fmt::format("{}: bad file name", Name(parent, name)));
  }
  if (name.size() > kMaxNameLen) {
    return Status::NameTooLong(
        fmt::format("{}: name longer than {} bytes", Name(parent, name), kMaxNameLen));
  }
  return Status::OK();
}

template <typename T>
Result<T> WithCtx(Status st, const std::string& what, T value) {
  if (!st.ok())
    return st.WithContext(what);
  return value;
}

// Caches the parent directory's attributes a namespace mutation returned (dir_attr_cache_ms).
template <typename Resp>
void KeepParentAttr(ClientCore& core, const Resp& resp, uint64_t gen) {
  if (resp.has_parent_attr())
    core.PutDirAttr(FileStatFromAttr(resp.parent_attr()), gen);
}

}  // namespace

FileStat ClientImpl::WithLocalSize(FileStat s) {
  if (auto node = core_->FindNode(Fid{s.ino, s.fid_mds, s.fid_ver})) {
    std::lock_guard<std::mutex> lock(node->mu);
    if (node->size_dirty)
      s.size = std::max<uint64_t>(s.size, node->size);
  }
  return s;
}

FileId ClientImpl::RootId() const {
  const Fid r = core_->root();
  return FileId{r.seq, r.mds, r.ver};
}

Result<FileStat> ClientImpl::LookupAt(const FileId& parent, const std::string& name) {
  if (name == ".")
    return GetAttrAt(parent);
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  pb::LookupReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  pb::LookupResp resp;
  Status st = core_->Mds(net::MsgType::kLookup, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(Name(parent, name));
  return WithLocalSize(FileStatFromAttr(resp.attr()));
}

std::optional<FileStat> ClientImpl::CachedAttrAt(const FileId& id) {
  FileStat dir;
  if (core_->LookupDirAttr(id.seq, &dir))
    return dir;
  return std::nullopt;
}

Result<FileStat> ClientImpl::GetAttrAt(const FileId& id) {
  FileStat dir;
  if (core_->LookupDirAttr(id.seq, &dir))
    return dir;  // as this client's own create/unlink in it left it (dir_attr_cache_ms)
  pb::GetAttrReq req;
  SetFid(id, req.mutable_fid());
  pb::GetAttrResp resp;
  Status st = core_->Mds(net::MsgType::kGetAttr, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(Name(id));
  return WithLocalSize(FileStatFromAttr(resp.attr()));
}

Result<FileStat> ClientImpl::SetAttrAt(const FileId& id, const SetAttrRequest& r) {
  const Fid fid = ToFid(id);
  if (r.set_size) {
    CIUIC_ASSIGN_OR_RETURN(FileStat cur, GetAttrAt(id));
    if (cur.is_dir())
      return Status::IsADirectory(fmt::format("{}: is a directory", Name(id)));
    if (!cur.is_reg())
      return Status::InvalidArgument(fmt::format("{}: not a regular file", Name(id)));
    std::shared_ptr<Node> node = core_->GetNode(fid);
    {
      pb::GetAttrReq req;
      net::ToPb(fid, req.mutable_fid());
      pb::GetAttrResp resp;
      CIUIC_RETURN_IF_ERROR(core_->Mds(net::MsgType::kGetAttr, &req, &resp, false));
      RefreshNode(node.get(), resp.attr(), &resp.layout());
    }
    node->FlushOverlapping(0, UINT64_MAX, true);  // handles open here send their buffered bytes
    RangeLock::Ticket t = node->ranges.AcquireBlocking(0, UINT64_MAX, true);
    Status st = TruncateNode(core_.get(), node.get(), r.size);
    node->ranges.Release(t);
    if (!st.ok())
      return st.WithContext(Name(id));
  }
  pb::SetAttrReq req;
  SetFid(id, req.mutable_fid());
  uint32_t valid = 0;
  if (r.set_mode) {
    valid |= 1;
    req.set_mode(r.mode & 07777);
  }
  if (r.set_uid) {
    valid |= 2;
    req.set_uid(r.uid);
  }
  if (r.set_gid) {
    valid |= 4;
    req.set_gid(r.gid);
  }
  if (r.atime.tv_nsec == UTIME_NOW) {
    valid |= 64;
  } else if (r.atime.tv_nsec != UTIME_OMIT) {
    valid |= 16;
    req.mutable_atime()->set_sec(r.atime.tv_sec);
    req.mutable_atime()->set_nsec(static_cast<uint32_t>(r.atime.tv_nsec));
  }
  if (r.mtime.tv_nsec == UTIME_NOW) {
    valid |= 128;
  } else if (r.mtime.tv_nsec != UTIME_OMIT) {
    valid |= 32;
    req.mutable_mtime()->set_sec(r.mtime.tv_sec);
    req.mutable_mtime()->set_nsec(static_cast<uint32_t>(r.mtime.tv_nsec));
  }
  if (valid == 0)
    return GetAttrAt(id);
  if (valid & (16 | 32 | 64 | 128)) {
    // Files open here publish their writes first, so the size update of a later close cannot
    // overwrite the times set now (cp -a and tar set them before closing).
    if (auto node = core_->FindNode(fid)) {
      node->FlushOverlapping(0, UINT64_MAX, true);
      Status st = PublishSize(core_.get(), node.get(), false);
      if (!st.ok())
        return st.WithContext(Name(id));
    }
  }
  req.set_valid(valid);
  pb::SetAttrResp resp;
  Status st = core_->Mds(net::MsgType::kSetAttr, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(Name(id));
  return WithLocalSize(FileStatFromAttr(resp.attr()));
}

Result<std::unique_ptr<File>> ClientImpl::OpenAt(const FileId& id, int flags, FileStat* attr) {
  const int acc = flags & O_ACCMODE;
  if (acc != O_RDONLY && acc != O_WRONLY && acc != O_RDWR) {
    return Status::InvalidArgument(
        fmt::format("{}: bad access mode in flags {:#x}", Name(id), flags));
  }
  pb::OpenReq req;
  SetFid(id, req.mutable_fid());
  req.set_flags(static_cast<uint32_t>(flags & ~O_CREAT));
  pb::OpenResp resp;
  Status st = core_->Mds(net::MsgType::kOpen, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(Name(id));
  if (attr != nullptr)
    *attr = FileStatFromAttr(resp.attr());
  return FinishOpen(Name(id), flags & ~O_CREAT, resp.attr(), resp.layout(), resp.open_id(),
                    resp.punches(), OpenOptions{});
}

Result<std::unique_ptr<File>> ClientImpl::OpenResolved(const FileId& id,
                                                       const FileLayout& layout,
                                                       uint64_t size,
                                                       const std::string& name,
                                                       std::optional<uint64_t> data_version) {
  // A Node of its own, not the client's shared one: the caller's size and layout must not
  // overwrite what this client's other handles of the file know (or the other way round).
  if (Status st = layout.Validate(); !st.ok())
    return st.WithContext(name.empty() ? Name(id) : name);
  auto node = std::make_shared<Node>(ToFid(id));
  node->layout = std::make_shared<const FileLayout>(layout);
  node->size = size;
  // The node cache keys blocks by data version: without the caller's, none is known here.
  node->data_version = data_version.value_or(0);
  OpenOptions options;
  options.random_access = true;  // callers that resolve layouts know what they read next
  options.no_node_cache = !data_version.has_value();
  auto file = std::make_shared<OpenFile>(core_, std::move(node), name.empty() ? Name(id) : name,
                                         O_RDONLY, /*open_id=*/0, options);
  file->MarkResolved();
  return std::unique_ptr<File>(std::make_unique<FileImpl>(std::move(file)));
}

Result<std::unique_ptr<File>> ClientImpl::CreateAt(
    const FileId& parent, const std::string& name, int flags, uint32_t mode, FileStat* attr) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  const int acc = flags & O_ACCMODE;
  if (acc != O_RDONLY && acc != O_WRONLY && acc != O_RDWR) {
    return Status::InvalidArgument(
        fmt::format("{}: bad access mode in flags {:#x}", Name(parent, name), flags));
  }
  pb::CreateReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  req.set_mode(S_IFREG | (mode & 07777));
  req.set_exclusive(flags & O_EXCL);
  req.set_open(true);
  req.set_truncate((flags & O_TRUNC) && acc != O_RDONLY);
  req.set_open_flags(static_cast<uint32_t>(flags));
  pb::CreateResp resp;
  const uint64_t gen = core_->DirAttrGen();
  Status st = core_->Mds(net::MsgType::kCreate, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(Name(parent, name));
  KeepParentAttr(*core_, resp, gen);
  if (attr != nullptr)
    *attr = FileStatFromAttr(resp.attr());
  return FinishOpen(Name(parent, name), flags, resp.attr(), resp.layout(), resp.open_id(),
                    resp.punches(), OpenOptions{});
}

Result<FileStat> ClientImpl::MkdirAt(const FileId& parent, const std::string& name, uint32_t mode) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  pb::MkdirReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  req.set_mode(S_IFDIR | (mode & 07777));
  pb::MkdirResp resp;
  const uint64_t gen = core_->DirAttrGen();
  Status st = core_->Mds(net::MsgType::kMkdir, &req, &resp, true);
  if (st.ok())
    KeepParentAttr(*core_, resp, gen);
  return WithCtx(st, Name(parent, name), FileStatFromAttr(resp.attr()));
}

Result<FileStat> ClientImpl::MknodAt(const FileId& parent,
                                     const std::string& name,
                                     uint32_t mode,
                                     uint64_t rdev) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  if ((mode & S_IFMT) == 0)
    mode |= S_IFREG;
  if ((mode & S_IFMT) == S_IFDIR || (mode & S_IFMT) == S_IFLNK) {
    return Status::InvalidArgument(
        fmt::format("{}: mknod cannot make directories or links", Name(parent, name)));
  }
  pb::CreateReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  req.set_mode(mode);
  req.set_rdev(rdev);
  req.set_exclusive(true);
  pb::CreateResp resp;
  const uint64_t gen = core_->DirAttrGen();
  Status st = core_->Mds(net::MsgType::kCreate, &req, &resp, true);
  if (st.ok())
    KeepParentAttr(*core_, resp, gen);
  return WithCtx(st, Name(parent, name), FileStatFromAttr(resp.attr()));
}

Result<FileStat> ClientImpl::SymlinkAt(const std::string& target,
                                       const FileId& parent,
                                       const std::string& name) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  if (target.empty() || target.size() > kMaxPathLen || target.find('\0') != std::string::npos) {
    return Status::InvalidArgument(fmt::format("{}: bad symlink target", Name(parent, name)));
  }
  pb::SymlinkReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  req.set_target(target);
  pb::SymlinkResp resp;
  const uint64_t gen = core_->DirAttrGen();
  Status st = core_->Mds(net::MsgType::kSymlink, &req, &resp, true);
  if (st.ok())
    KeepParentAttr(*core_, resp, gen);
  return WithCtx(st, Name(parent, name), FileStatFromAttr(resp.attr()));
}

Result<FileStat> ClientImpl::LinkAt(const FileId& id,
                                    const FileId& new_parent,
                                    const std::string& new_name) {
  CIUIC_RETURN_IF_ERROR(CheckName(new_parent, new_name));
  pb::LinkReq req;
  SetFid(id, req.mutable_fid());
  SetFid(new_parent, req.mutable_new_parent());
  req.set_new_name(new_name);
  pb::LinkResp resp;
  Status st = core_->Mds(net::MsgType::kLink, &req, &resp, true);
  return WithCtx(st, Name(new_parent, new_name), FileStatFromAttr(resp.attr()));
}

Result<std::string> ClientImpl::ReadlinkAt(const FileId& id) {
  pb::ReadlinkReq req;
  SetFid(id, req.mutable_fid());
  pb::ReadlinkResp resp;
  Status st = core_->Mds(net::MsgType::kReadlink, &req, &resp, false);
  return WithCtx(st, Name(id), resp.target());
}

Status ClientImpl::UnlinkAt(const FileId& parent, const std::string& name) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  pb::UnlinkReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  req.set_dir(false);
  pb::UnlinkResp resp;
  const uint64_t gen = core_->DirAttrGen();
  Status st = core_->Mds(net::MsgType::kUnlink, &req, &resp, true);
  if (st.ok())
    KeepParentAttr(*core_, resp, gen);
  return st.ok() ? st : st.WithContext(Name(parent, name));
}

Status ClientImpl::RmdirAt(const FileId& parent, const std::string& name) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  pb::UnlinkReq req;
  SetFid(parent, req.mutable_parent());
  req.set_name(name);
  req.set_dir(true);
  pb::UnlinkResp resp;
  const uint64_t gen = core_->DirAttrGen();
  Status st = core_->Mds(net::MsgType::kUnlink, &req, &resp, true);
  if (st.ok())
    KeepParentAttr(*core_, resp, gen);
  core_->ClearDirCache();  // path-based callers may have cached it
  return st.ok() ? st : st.WithContext(Name(parent, name));
}

Status ClientImpl::RenameAt(const FileId& parent,
                            const std::string& name,
                            const FileId& new_parent,
                            const std::string& new_name,
                            unsigned flags) {
  CIUIC_RETURN_IF_ERROR(CheckName(parent, name));
  CIUIC_RETURN_IF_ERROR(CheckName(new_parent, new_name));
  pb::RenameReq req;
  SetFid(parent, req.mutable_src_parent());
  req.set_src_name(name);
  SetFid(new_parent, req.mutable_dst_parent());
  req.set_dst_name(new_name);
  req.set_flags(flags);
  pb::RenameResp resp;
  Status st = core_->Mds(net::MsgType::kRename, &req, &resp, true);
  core_->ClearDirCache();
  if (!st.ok()) {
    return st.WithContext(fmt::format("{} -> {}", Name(parent, name), Name(new_parent, new_name)));
  }
  return st;
}

Result<DirPage> ClientImpl::ReadDirAt(const FileId& dir,
                                      uint64_t cookie,
                                      uint32_t max_entries,
                                      bool plus) {
  pb::ReadDirReq req;
  SetFid(dir, req.mutable_dir());
  req.set_cookie(cookie);
  req.set_max_entries(max_entries == 0 ? 4096 : max_entries);
  req.set_plus(plus);
  pb::ReadDirResp resp;
  Status st = core_->Mds(net::MsgType::kReadDir, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(Name(dir));
  DirPage page;
  page.entries.reserve(static_cast<size_t>(resp.entries_size()));
  for (const pb::DirEntry& e : resp.entries()) {
    DirEntry d;
    d.name = e.name();
    d.ino = e.fid().seq();
    d.type = e.type();
    d.cookie = e.cookie();
    if (e.has_attr()) {
      d.has_attr = true;
      d.attr = WithLocalSize(FileStatFromAttr(e.attr()));
    }
    page.entries.push_back(std::move(d));
  }
  page.next_cookie = resp.entries().empty() ? cookie : resp.entries().rbegin()->cookie();
  page.eof = resp.eof();
  return page;
}

Status ClientImpl::SetXattrAt(const FileId& id,
                              const std::string& name,
                              const std::string& value,
                              int flags) {
  if (name.empty() || name.size() > kMaxNameLen) {
    return Status::InvalidArgument(fmt::format("{}: bad xattr name", Name(id)));
  }
  pb::SetXattrReq req;
  SetFid(id, req.mutable_fid());
  req.set_name(name);
  req.set_value(value);
  req.set_flags(static_cast<uint32_t>(flags));
  pb::SetXattrResp resp;
  Status st = core_->Mds(net::MsgType::kSetXattr, &req, &resp, true);
  return st.ok() ? st : st.WithContext(fmt::format("{} xattr {}", Name(id), name));
}

Result<std::string> ClientImpl::GetXattrAt(const FileId& id, const std::string& name) {
  pb::GetXattrReq req;
  SetFid(id, req.mutable_fid());
  req.set_name(name);
  pb::GetXattrResp resp;
  Status st = core_->Mds(net::MsgType::kGetXattr, &req, &resp, false);
  return WithCtx(st, fmt::format("{} xattr {}", Name(id), name), resp.value());
}

Result<std::vector<std::string>> ClientImpl::ListXattrAt(const FileId& id) {
  pb::ListXattrReq req;
  SetFid(id, req.mutable_fid());
  pb::ListXattrResp resp;
  Status st = core_->Mds(net::MsgType::kListXattr, &req, &resp, false);
  return WithCtx(st, Name(id), std::vector<std::string>(resp.names().begin(), resp.names().end()));
}

Status ClientImpl::RemoveXattrAt(const FileId& id, const std::string& name) {
  pb::RemoveXattrReq req;
  SetFid(id, req.mutable_fid());
  req.set_name(name);
  pb::RemoveXattrResp resp;
  Status st = core_->Mds(net::MsgType::kRemoveXattr, &req, &resp, true);
  return st.ok() ? st : st.WithContext(fmt::format("{} xattr {}", Name(id), name));
}

Result<FileLayout> ClientImpl::GetLayoutAt(const FileId& id) {
  pb::GetAttrReq req;
  SetFid(id, req.mutable_fid());
  pb::GetAttrResp resp;
  Status st = core_->Mds(net::MsgType::kGetAttr, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(Name(id));
  return net::FromPb(resp.layout());
}

Status ClientImpl::FsyncDirAt(const FileId& id) {
  pb::FsyncDirReq req;
  SetFid(id, req.mutable_fid());
  pb::FsyncDirResp resp;
  Status st = core_->Mds(net::MsgType::kFsyncDir, &req, &resp, true);
  return st.ok() ? st : st.WithContext(Name(id));
}

Status ClientImpl::SetLayoutAt(const FileId& id, const FileLayout& layout) {
  Status valid = layout.Validate();
  if (!valid.ok())
    return valid.WithContext(Name(id));
  pb::SetLayoutReq req;
  SetFid(id, req.mutable_fid());
  net::ToPb(layout, req.mutable_layout());
  pb::SetLayoutResp resp;
  Status st = core_->Mds(net::MsgType::kSetLayout, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(Name(id));
  if (auto node = core_->FindNode(ToFid(id))) {
    std::lock_guard<std::mutex> lock(node->mu);
    node->layout = std::make_shared<const FileLayout>(net::FromPb(resp.layout()));
  }
  return Status::OK();
}

namespace {

Result<bool> SendLock(ClientCore* core,
                      const FileId& id,
                      LockKind kind,
                      uint64_t owner,
                      const LockRange& want,
                      bool test,
                      LockRange* conflict) {
  if (want.start > want.end)
    return Status::InvalidArgument(fmt::format("{}: lock range ends before it starts", Name(id)));
  pb::LockReq req;
  SetFid(id, req.mutable_fid());
  req.set_owner(owner);
  req.set_kind(static_cast<uint32_t>(kind));
  req.set_type(static_cast<uint32_t>(want.type));
  req.set_start(want.start);
  req.set_end(want.end);
  req.set_pid(want.pid);
  req.set_test(test);
  pb::LockResp resp;
  // Not a mutation for the reply cache: setting the same lock twice is harmless.
  Status st = core->Mds(net::MsgType::kLock, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(Name(id));
  if (!resp.granted() && conflict != nullptr) {
    conflict->type = static_cast<LockType>(resp.conflict_type());
    conflict->start = resp.conflict_start();
    conflict->end = resp.conflict_end();
    conflict->pid = resp.conflict_pid();
  }
  return resp.granted();
}

}  // namespace

Result<bool> ClientImpl::LockAt(
    const FileId& id, LockKind kind, uint64_t owner, const LockRange& want, LockRange* conflict) {
  const Fid fid = ToFid(id);
  // Locks order data between clients: before unlocking, what this client wrote is sent and its
  // size published; after locking, what this client knew of the file is refreshed (size from
  // the MDS, readahead chunks dropped), so the next locker reads what the last one wrote.
  if (want.type == LockType::kUnlock) {
    if (auto node = core_->FindNode(fid)) {
      node->FlushOverlapping(0, UINT64_MAX, true);
      Status st = PublishSize(core_.get(), node.get(), false);
      if (!st.ok())
        return st.WithContext(Name(id));
    }
  }
  CIUIC_ASSIGN_OR_RETURN(bool granted,
                         SendLock(core_.get(), id, kind, owner, want, false, conflict));
  if (granted && want.type != LockType::kUnlock) {
    if (auto node = core_->FindNode(fid)) {
      pb::GetAttrReq req;
      net::ToPb(fid, req.mutable_fid());
      pb::GetAttrResp resp;
      Status st = core_->Mds(net::MsgType::kGetAttr, &req, &resp, false);
      if (!st.ok())
        return st.WithContext(Name(id));
      RefreshNode(node.get(), resp.attr(), &resp.layout());
      node->write_gen.fetch_add(1);
    }
  }
  return granted;
}

Result<bool> ClientImpl::TestLockAt(
    const FileId& id, LockKind kind, uint64_t owner, const LockRange& want, LockRange* conflict) {
  if (want.type == LockType::kUnlock)
    return Status::InvalidArgument(fmt::format("{}: testing an unlock", Name(id)));
  return SendLock(core_.get(), id, kind, owner, want, true, conflict);
}

}  // namespace ciuic::client
