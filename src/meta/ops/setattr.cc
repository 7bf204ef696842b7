// SetAttr (chmod, chown, utimes, truncate) and TruncateDone. A truncate is its own operation
// (Decision 4): it bumps the truncate epoch, which turns away older extend-only size updates,
// and logs punches for the objects that may hold data past the new size in the same batch
// (Decision 5); the client applies them and acknowledges with TruncateDone.
#include <sys/stat.h>

#include <fmt/format.h>

#include "meta/layout_policy.h"
#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {

constexpr uint32_t kSetMode = 1;
constexpr uint32_t kSetUid = 2;
constexpr uint32_t kSetGid = 4;
constexpr uint32_t kSetSize = 8;
constexpr uint32_t kSetAtime = 16;
constexpr uint32_t kSetMtime = 32;
constexpr uint32_t kSetAtimeNow = 64;
constexpr uint32_t kSetMtimeNow = 128;
constexpr uint32_t kSetCtime = 256;
constexpr uint32_t kSetNoNodeCache = 512;
constexpr uint32_t kTaskPunch = 2;

}  // namespace

Status MetaService::Truncate(Txn& t,
                             pb::InodeRecord* rec,
                             uint64_t size,
                             google::protobuf::RepeatedPtrField<pb::OstTask>* punches) {
  CIUIC_RETURN_IF_ERROR(HsmOnTruncate(t, rec, size));
  pb::Attr* a = rec->mutable_attr();
  const bool never_written = NeverWritten(*rec);
  a->set_trunc_epoch(a->trunc_epoch() + 1);
  if (never_written) {
    // No object holds data: nothing to punch. The size is the best layout hint there is.
    if (size > 0) {
      ApplySizeHint(t, rec, size, false);
      a->set_data_version(a->data_version() + 1);
    }
  } else {
    a->set_data_version(a->data_version() + 1);
    // Any instantiated object of a component reaching past `size` may hold data there, even
    // beyond the recorded size (writes whose size update has not arrived): punch them all.
    for (const auto& c : rec->layout().components()) {
      if (c.end() <= size || c.osts_size() == 0)
        continue;
      const LayoutComponent comp = net::FromPb(c);
      for (uint32_t s = 0; s < comp.stripe_count; ++s) {
        for (uint32_t ost : TaskOsts(comp.osts[s])) {  // every copy of a replicated object
          pb::OstTask* task = punches->Add();
          LogTask(t, ost, a->fid(), comp.id, s, kTaskPunch, ObjectLengthForFileSize(comp, s, size),
                  task);
          task->set_replica(IsChain(comp.osts[s]));
        }
      }
    }
  }
  a->set_size(size);
  const Timespec now = NowTimespec();
  SetTs(a->mutable_mtime(), now);
  SetTs(a->mutable_ctime(), now);
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::SetAttrReq& req, pb::SetAttrResp* resp) {
  const pb::ReqCtx& ctx = req.ctx();
  const uint32_t valid = req.valid();
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  pb::Attr* a = rec.mutable_attr();
  const bool owner = IsOwnerOrRoot(*a, ctx);

  // Check everything before changing anything.
  if (valid & kSetSize) {
    if (IsDir(rec))
      return Status::IsADirectory("cannot truncate a directory");
    if (!IsReg(rec))
      return Status::InvalidArgument("only regular files can be truncated");
    CIUIC_RETURN_IF_ERROR(CheckAccess(*a, ctx, kMayWrite, "file"));
  }
  if ((valid & kSetMode) && !owner) {
    return Status::NotPermitted(
        fmt::format("only the owner or root may chmod (uid {})", ctx.uid()));
  }
  if ((valid & kSetUid) && req.uid() != a->uid() && !IsRoot(ctx)) {
    return Status::NotPermitted("only root may change a file's owner");
  }
  if ((valid & kSetGid) && req.gid() != a->gid() && !IsRoot(ctx)) {
    if (ctx.uid() != a->uid() || !InGroup(ctx, req.gid())) {
      return Status::NotPermitted(
          fmt::format("uid {} may not give the file to group {} (owner only, to one of its groups)",
                      ctx.uid(), req.gid()));
    }
  }
  const bool explicit_atime = (valid & kSetAtime) && !(valid & kSetAtimeNow);
  const bool explicit_mtime = (valid & kSetMtime) && !(valid & kSetMtimeNow);
  if ((explicit_atime || explicit_mtime) && !owner) {
    // Explicit times (not "now") need ownership; "now" needs only write permission.
    return Status::NotPermitted("only the owner or root may set explicit times");
  }
  if ((valid & (kSetAtimeNow | kSetMtimeNow)) && !owner) {
    CIUIC_RETURN_IF_ERROR(CheckAccess(*a, ctx, kMayWrite, "file"));
  }
  if ((valid & kSetCtime) && !owner) {
    return Status::NotPermitted("only the owner or root may set ctime");
  }
  if ((valid & kSetNoNodeCache) && !owner) {
    return Status::NotPermitted(fmt::format(
        "only the owner or root may change the node cache setting (uid {})", ctx.uid()));
  }
  if (explicit_atime)
    CIUIC_RETURN_IF_ERROR(CheckTimespec(req.atime(), "atime"));
  if (explicit_mtime)
    CIUIC_RETURN_IF_ERROR(CheckTimespec(req.mtime(), "mtime"));
  if (valid & kSetCtime)
    CIUIC_RETURN_IF_ERROR(CheckTimespec(req.ctime(), "ctime"));

  const Timespec now = NowTimespec();
  if (valid & kSetSize)
    CIUIC_RETURN_IF_ERROR(Truncate(t, &rec, req.size(), resp->mutable_punches()));
  if (valid & kSetMode) {
    uint32_t mode = req.mode() & 07777;
    // A non-member may not leave the group-id bit set (it would grant its group's identity).
    if (!IsRoot(ctx) && !IsDir(rec) && !InGroup(ctx, a->gid()))
      mode &= ~static_cast<uint32_t>(S_ISGID);
    a->set_mode((a->mode() & S_IFMT) | mode);
  }
  const bool owner_change =
      ((valid & kSetUid) && req.uid() != a->uid()) || ((valid & kSetGid) && req.gid() != a->gid());
  if (valid & kSetUid)
    a->set_uid(req.uid());
  if (valid & kSetGid)
    a->set_gid(req.gid());
  if (owner_change && !IsDir(rec)) {
    // As Linux: a new owner or group clears set-user-ID, and set-group-ID when group-executable.
    uint32_t mode = a->mode() & ~static_cast<uint32_t>(S_ISUID);
    if (mode & S_IXGRP)
      mode &= ~static_cast<uint32_t>(S_ISGID);
    a->set_mode(mode);
  }
  if (valid & kSetAtimeNow) {
    SetTs(a->mutable_atime(), now);
  } else if (valid & kSetAtime) {
    *a->mutable_atime() = req.atime();
  }
  if (valid & kSetMtimeNow) {
    SetTs(a->mutable_mtime(), now);
  } else if (valid & kSetMtime) {
    *a->mutable_mtime() = req.mtime();
  }
  if (valid & kSetNoNodeCache)
    a->set_no_node_cache(req.no_node_cache());
  if (valid & kSetCtime) {
    *a->mutable_ctime() = req.ctime();
  } else if (valid != 0) {
    SetTs(a->mutable_ctime(), now);
  }
  if (valid != 0)
    PutInode(t, rec);
  FillAttr(rec, resp->mutable_attr());
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::TruncateDoneReq& req, pb::TruncateDoneResp*) {
  for (uint64_t id : req.task_ids()) {
    std::string v;
    Status st = t.Get(Cf::kOstLog, TaskKey(id), &v);
    if (st.code() == StatusCode::kNotFound)
      continue;  // already done (retry or an OSS did it)
    CIUIC_RETURN_IF_ERROR(st);
    pb::OstTask task;
    if (!task.ParseFromString(v))
      return Status::Corruption("bad OST work log record");
    // Only punches are the client's to acknowledge; destroys belong to the OSSes.
    if (task.kind() != kTaskPunch) {
      return Status::InvalidArgument(fmt::format("task {} is not a punch", id));
    }
    t.Delete(Cf::kOstLog, TaskKey(id));
  }
  return Status::OK();
}

}  // namespace ciuic::meta
