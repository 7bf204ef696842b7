// Open, Close and UpdateSize: the per-open life of a file's data (Decisions 4, 6, 9).
#include <fcntl.h>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {

Status MetaService::OpenInode(Txn& t,
                              const pb::ReqCtx& ctx,
                              pb::InodeRecord* rec,
                              uint32_t flags,
                              uint64_t* open_id,
                              google::protobuf::RepeatedPtrField<pb::OstTask>* punches) {
  *open_id = 0;
  int mask;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      mask = kMayRead;
      break;
    case O_WRONLY:
      mask = kMayWrite;
      break;
    case O_RDWR:
      mask = kMayRead | kMayWrite;
      break;
    default:
      return Status::InvalidArgument("bad open access mode");
  }
  const bool trunc = (flags & O_TRUNC) != 0 && (mask & kMayWrite) != 0;
  if (IsLnk(*rec))
    return Status::Loop("cannot open a symbolic link");
  if (IsDir(*rec)) {
    if (mask & kMayWrite)
      return Status::IsADirectory("cannot open a directory for writing");
    return CheckAccess(rec->attr(), ctx, kMayRead, "directory");
  }
  CIUIC_RETURN_IF_ERROR(CheckAccess(rec->attr(), ctx, mask, "file"));
  // FIFOs, devices and sockets have no data on the OSTs: nothing to track.
  if (!IsReg(*rec))
    return Status::OK();
  if (trunc)
    CIUIC_RETURN_IF_ERROR(Truncate(t, rec, 0, punches));
  CIUIC_ASSIGN_OR_RETURN(*open_id, AddOpen(t, ctx.session_id(), rec, flags));
  if (trunc || *open_id != 0)
    PutInode(t, *rec);
  // In memory, not in the batch: a group that fails to commit leaves a little extra heat.
  heat_.Add(ToFid(rec->attr().fid()), 1, NowMs());
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::OpenReq& req, pb::OpenResp* resp) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  uint64_t open_id = 0;
  CIUIC_RETURN_IF_ERROR(
      OpenInode(t, req.ctx(), &rec, req.flags(), &open_id, resp->mutable_punches()));
  FillAttr(rec, resp->mutable_attr());
  *resp->mutable_layout() = rec.layout();
  resp->set_open_id(open_id);
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::CloseReq& req, pb::CloseResp* resp) {
  return EndOpen(t, req.ctx().session_id(), req.open_id(), ToFid(req.fid()), req.wrote(), &req,
                 resp);
}

Status MetaService::Apply(Txn& t, const pb::UpdateSizeReq& req, pb::UpdateSizeResp* resp) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  if (IsDir(rec))
    return Status::IsADirectory("cannot set the size of a directory");
  if (!IsReg(rec))
    return Status::InvalidArgument("size updates apply to regular files only");
  pb::Attr* a = rec.mutable_attr();
  if (req.trunc_epoch() < a->trunc_epoch()) {
    return Status::Stale(
        fmt::format("size update from truncate epoch {}, but the file was truncated (epoch {})",
                    req.trunc_epoch(), a->trunc_epoch()));
  }
  if (req.trunc_epoch() > a->trunc_epoch()) {
    return Status::InvalidArgument(fmt::format("truncate epoch {} is from the future (file at {})",
                                               req.trunc_epoch(), a->trunc_epoch()));
  }
  bool changed = false;
  if (req.size() > a->size()) {  // extend-only (Decision 4)
    a->set_size(req.size());
    changed = true;
  }
  if (req.has_mtime()) {
    CIUIC_RETURN_IF_ERROR(CheckTimespec(req.mtime(), "mtime"));
    const auto& m = req.mtime();
    if (m.sec() > a->mtime().sec() ||
        (m.sec() == a->mtime().sec() && m.nsec() > a->mtime().nsec())) {
      *a->mutable_mtime() = m;
    }
    changed = true;
  }
  if (changed)
    SetTs(a->mutable_ctime(), NowTimespec());
  if (req.bump_version()) {
    a->set_data_version(a->data_version() + 1);
    changed = true;
  }
  if (changed)
    PutInode(t, rec);
  if (req.sync())
    t.RequireSync();
  FillAttr(rec, resp->mutable_attr());
  return Status::OK();
}

}  // namespace ciuic::meta
