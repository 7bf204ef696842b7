// Making names: Create (regular files and mknod's FIFOs, devices, sockets), Mkdir, Symlink and
// Link. Each is one atomic batch: the inode, the entry, the parent's times and link count.
#include <fcntl.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "meta/layout_policy.h"
#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {

constexpr uint32_t kMaxLinks = 65000;

// Loads the parent directory for adding `name`: it must be a searchable and writable directory,
// `name` valid and not present. Returns the name's hash.
Result<uint64_t> PrepareNewEntry(Reader& r,
                                 const NameHasher& hasher,
                                 const pb::ReqCtx& ctx,
                                 const pb::Fid& parent,
                                 const std::string& name,
                                 pb::InodeRecord* dir) {
  CIUIC_RETURN_IF_ERROR(GetDir(r, parent, dir));
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir->attr(), ctx, kMayExec, "directory"));
  CIUIC_RETURN_IF_ERROR(ValidateName(name));
  const uint64_t h = hasher(name);
  pb::DentryRecord d;
  Status ds = GetDentry(r, ToFid(parent), h, name, &d);
  if (ds.ok())
    return Status::AlreadyExists(fmt::format("'{}' already exists", name));
  if (ds.code() != StatusCode::kNotFound)
    return ds;
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir->attr(), ctx, kMayWrite | kMayExec, "directory"));
  return h;
}

// Fills the identity, ownership and times of a new inode created in `dir` by `ctx`.
void InitInode(const Fid& fid,
               uint32_t mode,
               const pb::ReqCtx& ctx,
               const pb::InodeRecord& dir,
               const Timespec& now,
               pb::InodeRecord* rec) {
  pb::Attr* a = rec->mutable_attr();
  net::ToPb(fid, a->mutable_fid());
  // Directories with S_ISGID give new entries their group (and new directories the bit).
  const bool sgid_dir = (dir.attr().mode() & S_ISGID) != 0;
  a->set_uid(ctx.uid());
  a->set_gid(sgid_dir ? dir.attr().gid() : ctx.gid());
  if (S_ISDIR(mode) && sgid_dir)
    mode |= S_ISGID;
  if (!S_ISDIR(mode) && (mode & S_ISGID) && !IsRoot(ctx) && !InGroup(ctx, a->gid())) {
    mode &= ~static_cast<uint32_t>(S_ISGID);
  }
  a->set_mode(mode);
  a->set_nlink(1);
  a->set_no_node_cache(dir.attr().no_node_cache());  // a directory's opt-out covers new entries
  for (auto* ts :
       {a->mutable_atime(), a->mutable_mtime(), a->mutable_ctime(), a->mutable_btime()}) {
    SetTs(ts, now);
  }
}

}  // namespace

Status MetaService::Apply(Txn& t, const pb::CreateReq& req, pb::CreateResp* resp) {
  const pb::ReqCtx& ctx = req.ctx();
  pb::InodeRecord dir;
  CIUIC_RETURN_IF_ERROR(GetDir(t, req.parent(), &dir));
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir.attr(), ctx, kMayExec, "directory"));
  CIUIC_RETURN_IF_ERROR(ValidateName(req.name()));
  const Fid pfid = ToFid(req.parent());
  const uint64_t h = Hash(req.name());
  const uint32_t open_flags = req.open_flags() | (req.truncate() ? O_TRUNC : 0);

  pb::DentryRecord d;
  Status ds = GetDentry(t, pfid, h, req.name(), &d);
  if (ds.ok()) {
    // O_CREAT on an existing name opens it (unless O_EXCL).
    if (req.exclusive())
      return Status::AlreadyExists(fmt::format("'{}' already exists", req.name()));
    pb::InodeRecord rec;
    CIUIC_RETURN_IF_ERROR(GetInode(t, d.fid(), &rec));
    if (IsDir(rec))
      return Status::IsADirectory(fmt::format("'{}' is a directory", req.name()));
    uint64_t open_id = 0;
    if (req.open()) {
      CIUIC_RETURN_IF_ERROR(OpenInode(t, ctx, &rec, open_flags, &open_id, resp->mutable_punches()));
    } else if (req.truncate() && IsReg(rec)) {
      CIUIC_RETURN_IF_ERROR(CheckAccess(rec.attr(), ctx, kMayWrite, "file"));
      CIUIC_RETURN_IF_ERROR(Truncate(t, &rec, 0, resp->mutable_punches()));
      PutInode(t, rec);
    }
    FillAttr(rec, resp->mutable_attr());
    FillAttr(dir, resp->mutable_parent_attr());
    *resp->mutable_layout() = rec.layout();
    resp->set_open_id(open_id);
    resp->set_created(false);
    return Status::OK();
  }
  if (ds.code() != StatusCode::kNotFound)
    return ds;
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir.attr(), ctx, kMayWrite | kMayExec, "directory"));

  uint32_t type = req.mode() & S_IFMT;
  if (type == 0)
    type = S_IFREG;
  switch (type) {
    case S_IFREG:
    case S_IFIFO:
    case S_IFSOCK:
      break;
    case S_IFCHR:
    case S_IFBLK:
      if (!IsRoot(ctx))
        return Status::NotPermitted("only root may create device nodes");
      break;
    case S_IFDIR:
      return Status::InvalidArgument("create cannot make a directory (use mkdir)");
    case S_IFLNK:
      return Status::InvalidArgument("create cannot make a symlink (use symlink)");
    default:
      return Status::InvalidArgument(fmt::format("bad file type {:#o}", type));
  }

  const Timespec now = NowTimespec();
  const Fid fid = NewFid(t);
  pb::InodeRecord rec;
  InitInode(fid, type | (req.mode() & 07777), ctx, dir, now, &rec);
  // Files record the directory of their first name too: a subtree key's FID checks walk it,
  // and export on close finds the file's path from it (ops/repo.cc).
  *rec.mutable_parent() = req.parent();
  rec.set_name(req.name());
  if (type == S_IFCHR || type == S_IFBLK)
    rec.mutable_attr()->set_rdev(req.rdev());
  if (type == S_IFREG) {
    FileLayout l;
    const bool explicit_layout = req.layout().components_size() > 0;
    if (explicit_layout) {
      l = net::FromPb(req.layout());
      CIUIC_RETURN_IF_ERROR(ValidateExplicitLayout(l));
      CIUIC_RETURN_IF_ERROR(CheckReplicas(l));
      for (const auto& c : l.components) {
        for (uint32_t o : c.osts) {
          if (!osts_.Known(o))
            return Status::InvalidArgument(fmt::format("unknown OST {}", o));
        }
      }
      l.pattern = 1;
    } else if (dir.layout().components_size() > 0) {
      l = FromTemplate(net::FromPb(dir.layout()), osts_.usable());
      l.pattern = 1;
    } else {
      l = AdaptiveLayout(req.size_hint(), (req.open_flags() & kOpenFlagRandomAccess) != 0,
                         osts_.usable());
    }
    net::ToPb(l, rec.mutable_layout());
    // Place the first component now so writing needs no second MDS call. With no OST up the
    // layout stays uninstantiated and the writer's InstantiateReq places it later.
    Status is = InstantiateUpTo(t, &rec, 1);
    if (!is.ok() && is.code() != StatusCode::kUnavailable)
      return is;
  }

  PutDentry(t, pfid, h, req.name(), rec.attr().fid(), type);
  TouchDir(&dir, now);
  PutInode(t, dir);
  CIUIC_RETURN_IF_ERROR(AdjustInodeCount(t, 1));
  uint64_t open_id = 0;
  if (req.open() && type == S_IFREG) {
    // The creator may open what it just made whatever the new mode says (open(2) semantics).
    CIUIC_ASSIGN_OR_RETURN(open_id, AddOpen(t, ctx.session_id(), &rec, open_flags));
    heat_.Add(ToFid(rec.attr().fid()), 1, NowMs());  // an access like any open (OpenInode)
  }
  PutInode(t, rec);
  FillAttr(rec, resp->mutable_attr());
  FillAttr(dir, resp->mutable_parent_attr());
  *resp->mutable_layout() = rec.layout();
  resp->set_open_id(open_id);
  resp->set_created(true);
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::MkdirReq& req, pb::MkdirResp* resp) {
  pb::InodeRecord dir;
  CIUIC_ASSIGN_OR_RETURN(uint64_t h,
                         PrepareNewEntry(t, hasher_, req.ctx(), req.parent(), req.name(), &dir));
  if (dir.attr().nlink() >= kMaxLinks) {
    return Status::TooManyLinks("parent directory has too many subdirectories");
  }
  const Timespec now = NowTimespec();
  const Fid fid = NewFid(t);
  pb::InodeRecord rec;
  InitInode(fid, S_IFDIR | (req.mode() & 07777), req.ctx(), dir, now, &rec);
  rec.mutable_attr()->set_nlink(2);
  *rec.mutable_parent() = req.parent();
  rec.set_name(req.name());
  *rec.mutable_layout() = dir.layout();  // the default layout is inherited by subdirectories
  PutDentry(t, ToFid(req.parent()), h, req.name(), rec.attr().fid(), S_IFDIR);
  dir.mutable_attr()->set_nlink(dir.attr().nlink() + 1);
  TouchDir(&dir, now);
  PutInode(t, dir);
  PutInode(t, rec);
  CIUIC_RETURN_IF_ERROR(AdjustInodeCount(t, 1));
  FillAttr(rec, resp->mutable_attr());
  FillAttr(dir, resp->mutable_parent_attr());
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::SymlinkReq& req, pb::SymlinkResp* resp) {
  const std::string& target = req.target();
  if (target.empty())
    return Status::InvalidArgument("empty symlink target");
  if (target.size() > kPathMax) {
    return Status::NameTooLong(
        fmt::format("symlink target of {} bytes is longer than {}", target.size(), kPathMax));
  }
  if (target.find('\0') != std::string::npos) {
    return Status::InvalidArgument("symlink target contains a NUL byte");
  }
  pb::InodeRecord dir;
  CIUIC_ASSIGN_OR_RETURN(uint64_t h,
                         PrepareNewEntry(t, hasher_, req.ctx(), req.parent(), req.name(), &dir));
  const Timespec now = NowTimespec();
  const Fid fid = NewFid(t);
  pb::InodeRecord rec;
  InitInode(fid, S_IFLNK | 0777, req.ctx(), dir, now, &rec);
  *rec.mutable_parent() = req.parent();
  rec.set_name(req.name());
  rec.mutable_attr()->set_size(target.size());
  rec.set_symlink_target(target);
  PutDentry(t, ToFid(req.parent()), h, req.name(), rec.attr().fid(), S_IFLNK);
  TouchDir(&dir, now);
  PutInode(t, dir);
  PutInode(t, rec);
  CIUIC_RETURN_IF_ERROR(AdjustInodeCount(t, 1));
  FillAttr(rec, resp->mutable_attr());
  FillAttr(dir, resp->mutable_parent_attr());
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::LinkReq& req, pb::LinkResp* resp) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  if (IsDir(rec))
    return Status::NotPermitted("hard links to directories are not allowed");
  if (rec.attr().nlink() == 0)
    return Status::NotFound("the file was removed");
  if (rec.attr().nlink() >= kMaxLinks)
    return Status::TooManyLinks("file has too many links");
  pb::InodeRecord dir;
  CIUIC_ASSIGN_OR_RETURN(
      uint64_t h, PrepareNewEntry(t, hasher_, req.ctx(), req.new_parent(), req.new_name(), &dir));
  const Timespec now = NowTimespec();
  PutDentry(t, ToFid(req.new_parent()), h, req.new_name(), rec.attr().fid(), TypeOf(rec));
  {
    // The name the inode records (a hint for export on close) moves to the new link when the
    // one it names is gone (unlinked while another link stayed).
    pb::DentryRecord old;
    if (rec.name().empty() ||
        !GetDentry(t, ToFid(rec.parent()), Hash(rec.name()), rec.name(), &old).ok() ||
        ToFid(old.fid()) != ToFid(rec.attr().fid())) {
      *rec.mutable_parent() = req.new_parent();
      rec.set_name(req.new_name());
    }
  }
  rec.mutable_attr()->set_nlink(rec.attr().nlink() + 1);
  SetTs(rec.mutable_attr()->mutable_ctime(), now);
  TouchDir(&dir, now);
  PutInode(t, dir);
  PutInode(t, rec);
  FillAttr(rec, resp->mutable_attr());
  return Status::OK();
}

}  // namespace ciuic::meta
