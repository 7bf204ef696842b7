#include "client/client_impl.h"

#include <sys/stat.h>

#include <unordered_map>

#include <fmt/format.h>

#include "client/file_impl.h"
#include "client/hsm.h"
#include "client/node_cache.h"
#include "client/path.h"
#include "common/logging.h"
#include "net/pb_convert.h"

namespace ciuic {

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  CIUIC_ASSIGN_OR_RETURN(std::shared_ptr<client::ClientCore> core,
                         client::ClientCore::Create(options));
  return std::unique_ptr<Client>(new client::ClientImpl(std::move(core)));
}

namespace client {
namespace {

constexpr uint32_t kReadDirPage = 4096;

// Validates and normalizes `path`.
Result<std::string> CleanPath(const std::string& path) {
  CIUIC_RETURN_IF_ERROR(ValidatePath(path));
  return NormalizePath(path);
}

std::string StateName(uint32_t state) {
  switch (state) {
    case 0:
      return "up";
    case 1:
      return "down";
    case 2:
      return "full";
    case 3:
      return "readonly";
    default:
      return fmt::format("state-{}", state);
  }
}

}  // namespace

ClientImpl::~ClientImpl() {
  core_->Shutdown();
}

Status ClientImpl::Resolve(const std::string& path, bool follow, pb::ResolvePathResp* resp) {
  pb::ResolvePathReq req;
  req.set_path(path);
  req.set_follow_last(follow);
  Status st = core_->Mds(net::MsgType::kResolvePath, &req, resp, false);
  return st.ok() ? st : st.WithContext(path);
}

Result<Fid> ClientImpl::ResolveDir(const std::string& path, bool* from_cache) {
  *from_cache = false;
  if (path == "/")
    return core_->root();
  Fid fid;
  if (core_->LookupDirCache(path, &fid)) {
    *from_cache = true;
    return fid;
  }
  pb::ResolvePathResp resp;
  CIUIC_RETURN_IF_ERROR(Resolve(path, true, &resp));
  if ((resp.attr().mode() & S_IFMT) != S_IFDIR) {
    return Status::NotADirectory(fmt::format("{}: not a directory", path));
  }
  fid = net::FromPb(resp.attr().fid());
  core_->PutDirCache(path, fid);
  return fid;
}

Status ClientImpl::WithParent(const std::string& path,
                              std::string* norm,
                              const std::function<Status(const Fid&, const std::string&)>& op) {
  CIUIC_ASSIGN_OR_RETURN(*norm, CleanPath(path));
  std::string parent, name;
  CIUIC_RETURN_IF_ERROR(SplitPath(*norm, &parent, &name));
  for (int attempt = 0;; ++attempt) {
    bool cached = false;
    auto dir = ResolveDir(parent, &cached);
    if (!dir.ok())
      return dir.status();
    Status st = op(*dir, name);
    if (st.ok())
      return st;
    if (cached && attempt == 0 &&
        (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kStale)) {
      core_->ClearDirCache();  // the cached parent may have moved or gone: look it up again
      continue;
    }
    return st.WithContext(*norm);
  }
}

Result<Fid> ClientImpl::FidOf(const std::string& path, bool follow, pb::ResolvePathResp* resp) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(path));
  pb::ResolvePathResp local;
  if (resp == nullptr)
    resp = &local;
  CIUIC_RETURN_IF_ERROR(Resolve(norm, follow, resp));
  return net::FromPb(resp->attr().fid());
}

// ---------------------------------------------------------------------------------------------
// Open

Result<std::unique_ptr<File>> ClientImpl::Open(const std::string& path,
                                               int flags,
                                               uint32_t mode,
                                               const OpenOptions& options) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(path));
  const int acc = flags & O_ACCMODE;
  if (acc != O_RDONLY && acc != O_WRONLY && acc != O_RDWR) {
    return Status::InvalidArgument(fmt::format("{}: bad access mode in flags {:#x}", norm, flags));
  }
  const bool write = acc != O_RDONLY;
  pb::Attr attr;
  pb::Layout layout;
  uint64_t open_id = 0;
  google::protobuf::RepeatedPtrField<pb::OstTask> punches;
  if (flags & O_CREAT) {
    if (norm == "/")
      return Status::IsADirectory("/: is a directory");
    pb::CreateResp resp;
    std::string ignored;
    CIUIC_RETURN_IF_ERROR(
        WithParent(norm, &ignored, [&](const Fid& parent, const std::string& name) {
          pb::CreateReq req;
          net::ToPb(parent, req.mutable_parent());
          req.set_name(name);
          req.set_mode(S_IFREG | (mode & 07777));
          req.set_exclusive(flags & O_EXCL);
          req.set_open(true);
          req.set_truncate((flags & O_TRUNC) && write);
          if (options.layout != nullptr)
            net::ToPb(*options.layout, req.mutable_layout());
          req.set_size_hint(options.size_hint);
          req.set_open_flags(static_cast<uint32_t>(flags));
          resp.Clear();
          return core_->Mds(net::MsgType::kCreate, &req, &resp, true);
        }));
    attr = resp.attr();
    layout = resp.layout();
    open_id = resp.open_id();
    punches = resp.punches();
  } else {
    pb::ResolvePathReq req;
    req.set_path(norm);
    req.set_follow_last(!(flags & O_NOFOLLOW));
    req.set_open(true);
    req.set_open_flags(static_cast<uint32_t>(flags));
    pb::ResolvePathResp resp;
    Status st = core_->Mds(net::MsgType::kResolvePath, &req, &resp, false);
    if (!st.ok())
      return st.WithContext(norm);
    attr = resp.attr();
    layout = resp.layout();
    open_id = resp.open_id();
  }
  return FinishOpen(norm, flags, attr, layout, open_id, punches, options);
}

Result<std::unique_ptr<File>> ClientImpl::FinishOpen(
    const std::string& norm,
    int flags,
    pb::Attr attr,
    pb::Layout layout,
    uint64_t open_id,
    google::protobuf::RepeatedPtrField<pb::OstTask> punches,
    const OpenOptions& options) {
  const uint32_t type = attr.mode() & S_IFMT;
  Status bad;
  if (type == S_IFDIR) {
    bad = Status::IsADirectory(fmt::format("{}: is a directory (use ReadDir)", norm));
  } else if (flags & O_DIRECTORY) {
    bad = Status::NotADirectory(fmt::format("{}: not a directory", norm));
  } else if (type == S_IFLNK) {
    bad = Status::Loop(fmt::format("{}: is a symbolic link (O_NOFOLLOW)", norm));
  } else if (type != S_IFREG) {
    bad = Status::NotSupported(fmt::format("{}: not a regular file", norm));
  }
  const Fid fid = net::FromPb(attr.fid());
  if (!bad.ok()) {
    if (open_id != 0) {
      pb::CloseReq req;
      net::ToPb(fid, req.mutable_fid());
      req.set_open_id(open_id);
      pb::CloseResp resp;
      core_->Mds(net::MsgType::kClose, &req, &resp, true).IgnoreError();  // lease covers it
    }
    return bad;
  }
  if (open_id == 0) {
    // The MDS did not open the file while resolving (O_TRUNC, whose punches only OpenResp
    // carries, or an older MDS): open it by FID.
    pb::OpenReq req;
    net::ToPb(fid, req.mutable_fid());
    req.set_flags(static_cast<uint32_t>(flags));
    pb::OpenResp resp;
    Status st = core_->Mds(net::MsgType::kOpen, &req, &resp, true);
    if (!st.ok())
      return st.WithContext(norm);
    attr = resp.attr();
    if (resp.layout().components_size() > 0)
      layout = resp.layout();
    open_id = resp.open_id();
    punches = resp.punches();  // O_TRUNC is done by the MDS; the OSTs are ours to punch
  }
  const bool restoring = attr.hsm_released() && (flags & O_ACCMODE) == O_RDONLY;
  if (attr.hsm_released()) {
    // Released to the cold tier (docs/design.md "HSM"). A reader gets the file at once and
    // waits only for the chunks it reads (restore by extents); a writer, for the whole file.
    Status st = HsmRunFid(core_.get(), fid, norm, kHsmOpRestore, restoring);
    if (!st.ok()) {
      pb::CloseReq req;
      net::ToPb(fid, req.mutable_fid());
      req.set_open_id(open_id);
      pb::CloseResp resp;
      core_->Mds(net::MsgType::kClose, &req, &resp, true).IgnoreError();  // the lease covers it
      return st;
    }
    attr.set_hsm_released(false);
  }
  std::shared_ptr<Node> node = core_->GetNode(fid);
  RefreshNode(node.get(), attr, &layout);
  auto file = std::make_shared<OpenFile>(core_, node, norm, flags, open_id, options);
  if (restoring)
    file->MarkRestoring();
  file->RegisterFlusher();
  auto handle = std::make_unique<FileImpl>(file);
  if (!punches.empty()) {
    Status st = ApplyPunches(core_.get(), punches);
    if (!st.ok())
      return st.WithContext(norm);
  }
  return std::unique_ptr<File>(std::move(handle));
}

Status ClientImpl::WriteFile(const std::string& path, const std::string& data, uint32_t mode) {
  OpenOptions opts;
  opts.size_hint = data.size();
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                         Open(path, O_CREAT | O_WRONLY | O_TRUNC, mode, opts));
  if (!data.empty()) {
    auto n = f->Pwrite(data.data(), data.size(), 0);
    if (!n.ok()) {
      f->Close().IgnoreError();  // the write error is the one to report
      return n.status();
    }
  }
  return f->Close();
}

Result<std::string> ClientImpl::ReadFile(const std::string& path) {
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, Open(path, O_RDONLY, 0, {}));
  CIUIC_ASSIGN_OR_RETURN(uint64_t size, f->Seek(0, SEEK_END));
  std::string out(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pread(out.data() + done, size - done, done));
    if (n == 0)
      break;
    done += n;
  }
  out.resize(done);
  CIUIC_RETURN_IF_ERROR(f->Close());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Attributes

Result<FileStat> ClientImpl::StatImpl(const std::string& path, bool follow) {
  const std::string key = (follow ? "F" : "L") + path;
  FileStat s;
  if (!core_->LookupAttrCache(key, &s)) {
    const uint64_t gen = core_->AttrCacheGen();
    pb::ResolvePathResp resp;
    CIUIC_RETURN_IF_ERROR(FidOf(path, follow, &resp).status());
    s = FileStatFromAttr(resp.attr());
    core_->PutAttrCache(key, s, gen);
  }
  // A File open here may hold writes the MDS has not heard of yet.
  if (auto node = core_->FindNode(Fid{s.ino, s.fid_mds, s.fid_ver})) {
    std::lock_guard<std::mutex> lock(node->mu);
    if (node->size_dirty)
      s.size = std::max<uint64_t>(s.size, node->size);
  }
  return s;
}

Result<FileStat> ClientImpl::Stat(const std::string& path) {
  return StatImpl(path, true);
}
Result<FileStat> ClientImpl::Lstat(const std::string& path) {
  return StatImpl(path, false);
}

Status ClientImpl::SetAttr(const std::string& path, pb::SetAttrReq* req) {
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  net::ToPb(fid, req->mutable_fid());
  pb::SetAttrResp resp;
  Status st = core_->Mds(net::MsgType::kSetAttr, req, &resp, true);
  return st.ok() ? st : st.WithContext(path);
}

Status ClientImpl::SetNodeCacheExcluded(const std::string& path, bool excluded) {
  pb::SetAttrReq req;
  req.set_valid(512);
  req.set_no_node_cache(excluded);
  return SetAttr(path, &req);
}

Status ClientImpl::Chmod(const std::string& path, uint32_t mode) {
  pb::SetAttrReq req;
  req.set_valid(1);
  req.set_mode(mode & 07777);
  return SetAttr(path, &req);
}

Status ClientImpl::Chown(const std::string& path, uint32_t uid, uint32_t gid) {
  pb::SetAttrReq req;
  uint32_t valid = 0;
  if (uid != UINT32_MAX) {
    valid |= 2;
    req.set_uid(uid);
  }
  if (gid != UINT32_MAX) {
    valid |= 4;
    req.set_gid(gid);
  }
  if (valid == 0)
    return CleanPath(path).status();
  req.set_valid(valid);
  return SetAttr(path, &req);
}

Status ClientImpl::Utimens(const std::string& path,
                           const struct timespec& atime,
                           const struct timespec& mtime) {
  pb::SetAttrReq req;
  uint32_t valid = 0;
  if (atime.tv_nsec == UTIME_NOW) {
    valid |= 64;
  } else if (atime.tv_nsec != UTIME_OMIT) {
    valid |= 16;
    req.mutable_atime()->set_sec(atime.tv_sec);
    req.mutable_atime()->set_nsec(static_cast<uint32_t>(atime.tv_nsec));
  }
  if (mtime.tv_nsec == UTIME_NOW) {
    valid |= 128;
  } else if (mtime.tv_nsec != UTIME_OMIT) {
    valid |= 32;
    req.mutable_mtime()->set_sec(mtime.tv_sec);
    req.mutable_mtime()->set_nsec(static_cast<uint32_t>(mtime.tv_nsec));
  }
  if (valid == 0)
    return CleanPath(path).status();
  req.set_valid(valid);
  return SetAttr(path, &req);
}

Status ClientImpl::Truncate(const std::string& path, uint64_t size) {
  pb::ResolvePathResp resp;
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true, &resp));
  const uint32_t type = resp.attr().mode() & S_IFMT;
  if (type == S_IFDIR)
    return Status::IsADirectory(fmt::format("{}: is a directory", path));
  if (type != S_IFREG)
    return Status::InvalidArgument(fmt::format("{}: not a regular file", path));
  std::shared_ptr<Node> node = core_->GetNode(fid);
  RefreshNode(node.get(), resp.attr(), &resp.layout());
  node->FlushOverlapping(0, UINT64_MAX, true);  // handles open here send their buffered bytes
  RangeLock::Ticket t = node->ranges.AcquireBlocking(0, UINT64_MAX, true);
  Status st = TruncateNode(core_.get(), node.get(), size);
  node->ranges.Release(t);
  return st.ok() ? st : st.WithContext(path);
}

// ---------------------------------------------------------------------------------------------
// Namespace

Status ClientImpl::Mkdir(const std::string& path, uint32_t mode) {
  std::string norm;
  return WithParent(path, &norm, [&](const Fid& parent, const std::string& name) {
    pb::MkdirReq req;
    net::ToPb(parent, req.mutable_parent());
    req.set_name(name);
    req.set_mode(S_IFDIR | (mode & 07777));
    pb::MkdirResp resp;
    return core_->Mds(net::MsgType::kMkdir, &req, &resp, true);
  });
}

Status ClientImpl::MkdirAll(const std::string& path, uint32_t mode) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(path));
  if (norm == "/")
    return Status::OK();
  Status st = Mkdir(norm, mode);
  if (st.code() == StatusCode::kNotFound) {
    std::string parent, name;
    CIUIC_RETURN_IF_ERROR(SplitPath(norm, &parent, &name));
    CIUIC_RETURN_IF_ERROR(MkdirAll(parent, mode));
    st = Mkdir(norm, mode);
  }
  if (st.code() == StatusCode::kAlreadyExists) {
    CIUIC_ASSIGN_OR_RETURN(FileStat s, Stat(norm));
    if (!s.is_dir())
      return Status::NotADirectory(fmt::format("{}: exists, not a directory", norm));
    return Status::OK();
  }
  return st;
}

Status ClientImpl::Mknod(const std::string& path, uint32_t mode, uint64_t rdev) {
  std::string norm;
  if ((mode & S_IFMT) == 0)
    mode |= S_IFREG;
  if ((mode & S_IFMT) == S_IFDIR || (mode & S_IFMT) == S_IFLNK) {
    return Status::InvalidArgument(fmt::format("{}: mknod cannot make directories or links", path));
  }
  return WithParent(path, &norm, [&](const Fid& parent, const std::string& name) {
    pb::CreateReq req;
    net::ToPb(parent, req.mutable_parent());
    req.set_name(name);
    req.set_mode(mode);
    req.set_rdev(rdev);
    req.set_exclusive(true);
    pb::CreateResp resp;
    return core_->Mds(net::MsgType::kCreate, &req, &resp, true);
  });
}

Result<DirPage> ClientImpl::ReadDirPage(const std::string& path,
                                        uint64_t cookie,
                                        uint32_t max_entries,
                                        bool plus) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(path));
  bool cached = false;
  CIUIC_ASSIGN_OR_RETURN(Fid dir, ResolveDir(norm, &cached));
  pb::ReadDirReq req;
  net::ToPb(dir, req.mutable_dir());
  req.set_cookie(cookie);
  req.set_max_entries(max_entries == 0 ? kReadDirPage : max_entries);
  req.set_plus(plus);
  pb::ReadDirResp resp;
  Status st = core_->Mds(net::MsgType::kReadDir, &req, &resp, false);
  if (!st.ok() && cached && st.code() == StatusCode::kNotFound) {
    core_->ClearDirCache();
    CIUIC_ASSIGN_OR_RETURN(dir, ResolveDir(norm, &cached));
    net::ToPb(dir, req.mutable_dir());
    st = core_->Mds(net::MsgType::kReadDir, &req, &resp, false);
  }
  if (!st.ok())
    return st.WithContext(norm);
  DirPage page;
  page.entries.reserve(static_cast<size_t>(resp.entries_size()));
  for (const pb::DirEntry& e : resp.entries()) {
    if (e.name() == "." || e.name() == "..")
      continue;  // callers (and FUSE) add these themselves
    DirEntry d;
    d.name = e.name();
    d.ino = e.fid().seq();
    d.type = e.type();
    d.cookie = e.cookie();
    if (e.has_attr()) {
      d.has_attr = true;
      d.attr = FileStatFromAttr(e.attr());
    }
    page.entries.push_back(std::move(d));
  }
  page.next_cookie = resp.entries().empty() ? cookie : resp.entries().rbegin()->cookie();
  page.eof = resp.eof();
  return page;
}

Result<std::vector<DirEntry>> ClientImpl::ReadDir(const std::string& path) {
  std::vector<DirEntry> out;
  uint64_t cookie = 0;
  for (;;) {
    CIUIC_ASSIGN_OR_RETURN(DirPage page, ReadDirPage(path, cookie, kReadDirPage, false));
    const bool progressed = page.next_cookie != cookie;
    for (auto& e : page.entries)
      out.push_back(std::move(e));
    if (page.eof)
      break;
    if (!progressed) {
      return Status::Internal(fmt::format("{}: directory listing made no progress", path));
    }
    cookie = page.next_cookie;
  }
  return out;
}

Status ClientImpl::Unlink(const std::string& path) {
  std::string norm;
  return WithParent(path, &norm, [&](const Fid& parent, const std::string& name) {
    pb::UnlinkReq req;
    net::ToPb(parent, req.mutable_parent());
    req.set_name(name);
    req.set_dir(false);
    pb::UnlinkResp resp;
    return core_->Mds(net::MsgType::kUnlink, &req, &resp, true);
  });
}

Status ClientImpl::Rmdir(const std::string& path) {
  std::string norm;
  Status st = WithParent(path, &norm, [&](const Fid& parent, const std::string& name) {
    pb::UnlinkReq req;
    net::ToPb(parent, req.mutable_parent());
    req.set_name(name);
    req.set_dir(true);
    pb::UnlinkResp resp;
    return core_->Mds(net::MsgType::kUnlink, &req, &resp, true);
  });
  core_->ClearDirCache();
  return st;
}

Status ClientImpl::Rename(const std::string& from, const std::string& to, unsigned flags) {
  CIUIC_ASSIGN_OR_RETURN(std::string dst, CleanPath(to));
  std::string dst_parent, dst_name;
  CIUIC_RETURN_IF_ERROR(SplitPath(dst, &dst_parent, &dst_name));
  std::string src;
  Status st = WithParent(from, &src, [&](const Fid& parent, const std::string& name) {
    bool cached = false;
    CIUIC_ASSIGN_OR_RETURN(Fid dparent, ResolveDir(dst_parent, &cached));
    pb::RenameReq req;
    net::ToPb(parent, req.mutable_src_parent());
    req.set_src_name(name);
    net::ToPb(dparent, req.mutable_dst_parent());
    req.set_dst_name(dst_name);
    req.set_flags(flags);
    pb::RenameResp resp;
    return core_->Mds(net::MsgType::kRename, &req, &resp, true);
  });
  // Any directory below `from` now has another path.
  core_->ClearDirCache();
  if (!st.ok() && st.message().find(dst) == std::string::npos) {
    return Status(st.code(), fmt::format("{} -> {}", st.message(), dst));
  }
  return st;
}

Status ClientImpl::Symlink(const std::string& target, const std::string& linkpath) {
  if (target.empty() || target.size() > kMaxPathLen || target.find('\0') != std::string::npos) {
    return Status::InvalidArgument(fmt::format("{}: bad symlink target", linkpath));
  }
  std::string norm;
  return WithParent(linkpath, &norm, [&](const Fid& parent, const std::string& name) {
    pb::SymlinkReq req;
    net::ToPb(parent, req.mutable_parent());
    req.set_name(name);
    req.set_target(target);
    pb::SymlinkResp resp;
    return core_->Mds(net::MsgType::kSymlink, &req, &resp, true);
  });
}

Result<std::string> ClientImpl::Readlink(const std::string& path) {
  pb::ResolvePathResp resolved;
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, false, &resolved));
  if ((resolved.attr().mode() & S_IFMT) != S_IFLNK) {
    return Status::InvalidArgument(fmt::format("{}: not a symbolic link", path));
  }
  pb::ReadlinkReq req;
  net::ToPb(fid, req.mutable_fid());
  pb::ReadlinkResp resp;
  Status st = core_->Mds(net::MsgType::kReadlink, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(path);
  return resp.target();
}

Status ClientImpl::Link(const std::string& existing, const std::string& newpath) {
  pb::ResolvePathResp resolved;
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(existing, false, &resolved));
  if ((resolved.attr().mode() & S_IFMT) == S_IFDIR) {
    return Status::NotPermitted(fmt::format("{}: cannot hard-link a directory", existing));
  }
  std::string norm;
  return WithParent(newpath, &norm, [&](const Fid& parent, const std::string& name) {
    pb::LinkReq req;
    net::ToPb(fid, req.mutable_fid());
    net::ToPb(parent, req.mutable_new_parent());
    req.set_new_name(name);
    pb::LinkResp resp;
    return core_->Mds(net::MsgType::kLink, &req, &resp, true);
  });
}

// ---------------------------------------------------------------------------------------------
// Extended attributes

Status ClientImpl::SetXattr(const std::string& path,
                            const std::string& name,
                            const std::string& value,
                            int flags) {
  if (name.empty() || name.size() > kMaxNameLen) {
    return Status::InvalidArgument(fmt::format("{}: bad xattr name", path));
  }
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  pb::SetXattrReq req;
  net::ToPb(fid, req.mutable_fid());
  req.set_name(name);
  req.set_value(value);
  req.set_flags(static_cast<uint32_t>(flags));
  pb::SetXattrResp resp;
  Status st = core_->Mds(net::MsgType::kSetXattr, &req, &resp, true);
  return st.ok() ? st : st.WithContext(fmt::format("{} xattr {}", path, name));
}

Result<std::string> ClientImpl::GetXattr(const std::string& path, const std::string& name) {
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  pb::GetXattrReq req;
  net::ToPb(fid, req.mutable_fid());
  req.set_name(name);
  pb::GetXattrResp resp;
  Status st = core_->Mds(net::MsgType::kGetXattr, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(fmt::format("{} xattr {}", path, name));
  return resp.value();
}

Result<std::vector<std::string>> ClientImpl::ListXattr(const std::string& path) {
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  pb::ListXattrReq req;
  net::ToPb(fid, req.mutable_fid());
  pb::ListXattrResp resp;
  Status st = core_->Mds(net::MsgType::kListXattr, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(path);
  return std::vector<std::string>(resp.names().begin(), resp.names().end());
}

Status ClientImpl::RemoveXattr(const std::string& path, const std::string& name) {
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  pb::RemoveXattrReq req;
  net::ToPb(fid, req.mutable_fid());
  req.set_name(name);
  pb::RemoveXattrResp resp;
  Status st = core_->Mds(net::MsgType::kRemoveXattr, &req, &resp, true);
  return st.ok() ? st : st.WithContext(fmt::format("{} xattr {}", path, name));
}

// ---------------------------------------------------------------------------------------------
// Layouts and cluster state

Result<FileLayout> ClientImpl::GetLayout(const std::string& path) {
  pb::ResolvePathResp resp;
  CIUIC_RETURN_IF_ERROR(FidOf(path, true, &resp).status());
  return net::FromPb(resp.layout());
}

Status ClientImpl::SetLayout(const std::string& path, const FileLayout& layout) {
  Status valid = layout.Validate();
  if (!valid.ok())
    return valid.WithContext(path);
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  pb::SetLayoutReq req;
  net::ToPb(fid, req.mutable_fid());
  net::ToPb(layout, req.mutable_layout());
  pb::SetLayoutResp resp;
  Status st = core_->Mds(net::MsgType::kSetLayout, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(path);
  if (auto node = core_->FindNode(fid)) {
    std::lock_guard<std::mutex> lock(node->mu);
    node->layout = std::make_shared<const FileLayout>(net::FromPb(resp.layout()));
  }
  return Status::OK();
}

Status ClientImpl::FsyncDir(const std::string& path) {
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(path, true));
  pb::FsyncDirReq req;
  net::ToPb(fid, req.mutable_fid());
  pb::FsyncDirResp resp;
  Status st = core_->Mds(net::MsgType::kFsyncDir, &req, &resp, true);
  return st.ok() ? st : st.WithContext(path);
}

namespace {
Result<StatFs> DoStatfs(ClientCore* core, bool tiers) {
  pb::StatfsReq req;
  req.set_with_tiers(tiers);
  pb::StatfsResp resp;
  CIUIC_RETURN_IF_ERROR(core->Mds(net::MsgType::kStatfs, &req, &resp, false));
  StatFs s;
  s.total_bytes = resp.total_bytes();
  s.free_bytes = resp.free_bytes();
  s.avail_bytes = resp.avail_bytes();
  s.total_inodes = resp.total_inodes();
  s.free_inodes = resp.free_inodes();
  if (resp.block_size() != 0)
    s.block_size = resp.block_size();
  if (resp.name_max() != 0)
    s.name_max = resp.name_max();
  s.cold_files = resp.cold_files();
  s.cold_bytes = resp.cold_bytes();
  s.released_files = resp.released_files();
  s.released_bytes = resp.released_bytes();
  s.dirty_files = resp.dirty_files();
  return s;
}
}  // namespace

Result<StatFs> ClientImpl::Statfs() {
  return DoStatfs(core_.get(), false);
}

Result<StatFs> ClientImpl::StatfsTiers() {
  return DoStatfs(core_.get(), true);
}

Result<std::vector<OstStatus>> ClientImpl::OstMap() {
  CIUIC_ASSIGN_OR_RETURN(std::vector<pb::OstInfo> osts, core_->RefreshOstMap());
  std::vector<OstStatus> out;
  out.reserve(osts.size());
  for (const auto& o : osts) {
    OstStatus s;
    s.index = o.index();
    s.addr = o.oss_addr();
    s.capacity = o.capacity();
    s.free = o.free();
    s.state = StateName(o.state());
    const pb::ScrubStats& sc = o.scrub();
    s.scrub =
        OstStatus::Scrub{sc.passes(), sc.objects(),  sc.objects_total(), sc.bytes(),
                         sc.bad(),    sc.repaired(), sc.lost(),          sc.last_pass_end_ms()};
    out.push_back(std::move(s));
  }
  return out;
}

Status ClientImpl::SetNodeCachePlan(const std::vector<PlannedRead>& order) {
  NodeCache* nc = core_->node_cache();
  if (nc == nullptr)
    return Status::OK();
  struct Version {
    Fid fid;
    uint64_t data_version;
  };
  std::unordered_map<std::string, Version> files;
  std::vector<NodeCache::BlockRef> blocks;
  for (const PlannedRead& r : order) {
    if (r.path.empty()) {
      for (uint64_t b = r.offset / kNodeCacheBlock;
           r.length > 0 && b <= (r.offset + r.length - 1) / kNodeCacheBlock; ++b) {
        blocks.push_back(NodeCache::BlockRef{Fid{r.id.seq, r.id.mds, r.id.ver}, r.data_version, b});
      }
      continue;
    }
    auto it = files.find(r.path);
    if (it == files.end()) {
      CIUIC_ASSIGN_OR_RETURN(FileStat st, Stat(r.path));
      it = files.emplace(r.path, Version{Fid{st.ino, st.fid_mds, st.fid_ver}, st.data_version})
               .first;
    }
    if (r.length == 0)
      continue;
    for (uint64_t b = r.offset / kNodeCacheBlock; b <= (r.offset + r.length - 1) / kNodeCacheBlock;
         ++b) {
      blocks.push_back(NodeCache::BlockRef{it->second.fid, it->second.data_version, b});
    }
  }
  nc->SetPlan(blocks);
  return Status::OK();
}

Result<std::vector<ChainStatus>> ClientImpl::Chains() {
  CIUIC_RETURN_IF_ERROR(core_->RefreshOstMap().status());
  std::vector<ChainStatus> out;
  for (const auto& [id, c] : core_->Chains()) {
    ChainStatus s;
    s.id = id;
    s.version = c.version();
    for (const auto& m : c.members()) {
      s.members.push_back(ChainMemberStatus{m.ost(),
                                            m.state() == 0   ? "serving"
                                            : m.state() == 2 ? "syncing"
                                                             : "offline",
                                            m.sync_objects_done(), m.sync_objects_total(),
                                            m.sync_bytes_copied()});
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace client
}  // namespace ciuic
