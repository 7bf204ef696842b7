// Rename (Decision 7's crossing-rename race is impossible: the writer thread validates and
// commits each rename alone, in one batch).
#include <sys/stat.h>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {

constexpr uint32_t kRenameNoReplace = 1;
constexpr uint32_t kRenameExchange = 2;

// kInvalidArgument when directory `moved` is `dst_parent` or one of its ancestors (moving a
// directory into its own subtree would cut it off from the root).
Status CheckNotAncestor(Reader& r, const Fid& moved, const Fid& dst_parent) {
  Fid cur = dst_parent;
  for (int depth = 0; depth < 100000; ++depth) {
    if (cur == moved) {
      return Status::InvalidArgument("cannot move a directory into itself or its own subdirectory");
    }
    if (cur == kRootFid)
      return Status::OK();
    pb::InodeRecord rec;
    CIUIC_RETURN_IF_ERROR(GetInode(r, cur, &rec));
    if (!rec.parent().seq())
      return Status::Corruption("directory without a parent");
    cur = ToFid(rec.parent());
  }
  return Status::Corruption("directory parent chain does not reach the root");
}

}  // namespace

Status MetaService::Apply(Txn& t, const pb::RenameReq& req, pb::RenameResp*) {
  const uint32_t flags = req.flags();
  if (flags & ~(kRenameNoReplace | kRenameExchange)) {
    return Status::InvalidArgument(fmt::format("unknown rename flags {:#x}", flags));
  }
  if (flags == (kRenameNoReplace | kRenameExchange)) {
    return Status::InvalidArgument("RENAME_NOREPLACE and RENAME_EXCHANGE exclude each other");
  }
  const pb::ReqCtx& ctx = req.ctx();
  const Fid sp = ToFid(req.src_parent());
  const Fid dp = ToFid(req.dst_parent());
  const bool same_dir = sp == dp;
  pb::InodeRecord sdir, ddir_own;
  CIUIC_RETURN_IF_ERROR(GetDir(t, req.src_parent(), &sdir));
  pb::InodeRecord* ddir = &sdir;
  if (!same_dir) {
    CIUIC_RETURN_IF_ERROR(GetDir(t, req.dst_parent(), &ddir_own));
    ddir = &ddir_own;
  }
  CIUIC_RETURN_IF_ERROR(CheckAccess(sdir.attr(), ctx, kMayExec, "source directory"));
  CIUIC_RETURN_IF_ERROR(CheckAccess(ddir->attr(), ctx, kMayExec, "target directory"));
  CIUIC_RETURN_IF_ERROR(ValidateName(req.src_name()));
  CIUIC_RETURN_IF_ERROR(ValidateName(req.dst_name()));
  const uint64_t sh = Hash(req.src_name());
  const uint64_t dh = Hash(req.dst_name());

  pb::DentryRecord sd;
  CIUIC_RETURN_IF_ERROR(GetDentry(t, sp, sh, req.src_name(), &sd));
  pb::InodeRecord src;
  CIUIC_RETURN_IF_ERROR(GetInode(t, sd.fid(), &src));
  CIUIC_RETURN_IF_ERROR(CheckAccess(sdir.attr(), ctx, kMayWrite | kMayExec, "source directory"));
  CIUIC_RETURN_IF_ERROR(CheckAccess(ddir->attr(), ctx, kMayWrite | kMayExec, "target directory"));
  CIUIC_RETURN_IF_ERROR(CheckSticky(sdir.attr(), src.attr(), ctx));

  pb::DentryRecord dd;
  Status ds = GetDentry(t, dp, dh, req.dst_name(), &dd);
  if (!ds.ok() && ds.code() != StatusCode::kNotFound)
    return ds;
  const bool dst_exists = ds.ok();
  if ((flags & kRenameExchange) && !dst_exists) {
    return Status::NotFound(fmt::format("exchange target '{}' does not exist", req.dst_name()));
  }
  if ((flags & kRenameNoReplace) && dst_exists) {
    return Status::AlreadyExists(fmt::format("'{}' already exists", req.dst_name()));
  }
  // Both names already lead to the same inode (same entry or hard links): nothing to do.
  if (dst_exists && ToFid(dd.fid()) == ToFid(sd.fid())) {
    return Status::OK();
  }
  pb::InodeRecord dst;
  if (dst_exists) {
    CIUIC_RETURN_IF_ERROR(GetInode(t, dd.fid(), &dst));
    CIUIC_RETURN_IF_ERROR(CheckSticky(ddir->attr(), dst.attr(), ctx));
  }
  const Fid src_fid = ToFid(src.attr().fid());
  if (IsDir(src) && !same_dir) {
    // Its '..' changes: that needs write permission on the moved directory itself.
    CIUIC_RETURN_IF_ERROR(CheckAccess(src.attr(), ctx, kMayWrite, "moved directory"));
    CIUIC_RETURN_IF_ERROR(CheckNotAncestor(t, src_fid, dp));
  }
  const Timespec now = NowTimespec();

  if (flags & kRenameExchange) {
    if (IsDir(dst) && !same_dir) {
      CIUIC_RETURN_IF_ERROR(CheckAccess(dst.attr(), ctx, kMayWrite, "moved directory"));
      CIUIC_RETURN_IF_ERROR(CheckNotAncestor(t, ToFid(dst.attr().fid()), sp));
    }
    PutDentry(t, sp, sh, req.src_name(), dst.attr().fid(), TypeOf(dst));
    PutDentry(t, dp, dh, req.dst_name(), src.attr().fid(), TypeOf(src));
    if (!same_dir) {
      // Every inode's parent follows its move (directories for "..", files for the subtree
      // check of FID-named requests).
      *src.mutable_parent() = req.dst_parent();
      *dst.mutable_parent() = req.src_parent();
      if (IsDir(src)) {
        sdir.mutable_attr()->set_nlink(sdir.attr().nlink() - 1);
        ddir->mutable_attr()->set_nlink(ddir->attr().nlink() + 1);
      }
      if (IsDir(dst)) {
        *dst.mutable_parent() = req.src_parent();
        ddir->mutable_attr()->set_nlink(ddir->attr().nlink() - 1);
        sdir.mutable_attr()->set_nlink(sdir.attr().nlink() + 1);
      }
    }
    src.set_name(req.dst_name());
    dst.set_name(req.src_name());
    SetTs(src.mutable_attr()->mutable_ctime(), now);
    SetTs(dst.mutable_attr()->mutable_ctime(), now);
    PutInode(t, src);
    PutInode(t, dst);
  } else {
    if (dst_exists) {
      if (IsDir(src)) {
        if (!IsDir(dst)) {
          return Status::NotADirectory(
              fmt::format("cannot replace non-directory '{}' with a directory", req.dst_name()));
        }
        CIUIC_ASSIGN_OR_RETURN(bool empty, DirIsEmpty(t, ToFid(dst.attr().fid())));
        if (!empty) {
          return Status::NotEmpty(fmt::format("directory '{}' is not empty", req.dst_name()));
        }
      } else if (IsDir(dst)) {
        return Status::IsADirectory(
            fmt::format("cannot replace directory '{}' with a non-directory", req.dst_name()));
      }
    }
    DeleteDentry(t, sp, sh, req.src_name());
    PutDentry(t, dp, dh, req.dst_name(), src.attr().fid(), TypeOf(src));
    if (dst_exists) {
      if (IsDir(dst)) {
        ddir->mutable_attr()->set_nlink(ddir->attr().nlink() - 1);
        CIUIC_RETURN_IF_ERROR(DestroyInode(t, dst));
      } else {
        CIUIC_RETURN_IF_ERROR(DropLink(t, &dst));
      }
    }
    if (!same_dir)
      *src.mutable_parent() = req.dst_parent();
    if (IsDir(src) && !same_dir) {
      sdir.mutable_attr()->set_nlink(sdir.attr().nlink() - 1);
      ddir->mutable_attr()->set_nlink(ddir->attr().nlink() + 1);
    }
    src.set_name(req.dst_name());
    SetTs(src.mutable_attr()->mutable_ctime(), now);
    PutInode(t, src);
  }
  TouchDir(&sdir, now);
  PutInode(t, sdir);
  if (!same_dir) {
    TouchDir(ddir, now);
    PutInode(t, *ddir);
  }
  return Status::OK();
}

}  // namespace ciuic::meta
