// Removing names: Unlink and Rmdir, and what happens to an inode whose last link goes: it
// becomes an orphan while open, else it is destroyed and its objects are queued for destroy
// in the OST work log, in the same batch (Decisions 5, 6).
#include <sys/stat.h>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {

inline constexpr uint32_t kTaskDestroy = 1;
inline constexpr uint32_t kTaskDropCopy = 4;  // HSM: delete the archived copy

Status MetaService::Apply(Txn& t, const pb::UnlinkReq& req, pb::UnlinkResp* resp) {
  const pb::ReqCtx& ctx = req.ctx();
  pb::InodeRecord dir;
  CIUIC_RETURN_IF_ERROR(GetDir(t, req.parent(), &dir));
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir.attr(), ctx, kMayExec, "directory"));
  CIUIC_RETURN_IF_ERROR(ValidateName(req.name()));
  const Fid pfid = ToFid(req.parent());
  const uint64_t h = Hash(req.name());
  pb::DentryRecord d;
  CIUIC_RETURN_IF_ERROR(GetDentry(t, pfid, h, req.name(), &d));
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, d.fid(), &rec));
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir.attr(), ctx, kMayWrite | kMayExec, "directory"));
  CIUIC_RETURN_IF_ERROR(CheckSticky(dir.attr(), rec.attr(), ctx));
  if (req.dir()) {
    if (!IsDir(rec))
      return Status::NotADirectory(fmt::format("'{}' is not a directory", req.name()));
    CIUIC_ASSIGN_OR_RETURN(bool empty, DirIsEmpty(t, ToFid(d.fid())));
    if (!empty)
      return Status::NotEmpty(fmt::format("directory '{}' is not empty", req.name()));
  } else if (IsDir(rec)) {
    return Status::IsADirectory(fmt::format("'{}' is a directory (use rmdir)", req.name()));
  }
  const Timespec now = NowTimespec();
  DeleteDentry(t, pfid, h, req.name());
  if (IsDir(rec)) {
    dir.mutable_attr()->set_nlink(std::max<uint32_t>(dir.attr().nlink(), 3) - 1);
    CIUIC_RETURN_IF_ERROR(DestroyInode(t, rec));
  } else {
    CIUIC_RETURN_IF_ERROR(DropLink(t, &rec));
  }
  TouchDir(&dir, now);
  PutInode(t, dir);
  FillAttr(dir, resp->mutable_parent_attr());
  return Status::OK();
}

Status MetaService::DropLink(Txn& t, pb::InodeRecord* rec) {
  pb::Attr* a = rec->mutable_attr();
  a->set_nlink(a->nlink() > 0 ? a->nlink() - 1 : 0);
  SetTs(a->mutable_ctime(), NowTimespec());
  if (a->nlink() > 0) {
    PutInode(t, *rec);
    return Status::OK();
  }
  if (rec->open_count() > 0) {
    // Unlinked while open: keep it (and its data) until the last close or lease expiry.
    rec->set_orphan(true);
    PutInode(t, *rec);
    t.Put(Cf::kSystem, OrphanKey(ToFid(a->fid())), std::string());
    return Status::OK();
  }
  return DestroyInode(t, *rec);
}

Status MetaService::DestroyInode(Txn& t, const pb::InodeRecord& rec) {
  const Fid fid = ToFid(rec.attr().fid());
  heat_.Erase(fid);
  t.Delete(Cf::kInodes, InodeKey(fid));
  t.Delete(Cf::kSystem, OrphanKey(fid));
  // The archived copy goes too: the OSS of each object deletes its part (OST work log kind 4,
  // the archived data version in `length`).
  std::string hsm_value;
  Status hs = t.Get(Cf::kSystem, HsmKey(fid), &hsm_value);
  if (!hs.ok() && hs.code() != StatusCode::kNotFound)
    return hs;
  pb::HsmRecord hsm;
  // A data repository's object is not ours to delete: only the cold tier's own copies go.
  if (hs.ok() && hsm.ParseFromString(hsm_value) && hsm.archived_version() != 0 &&
      hsm.source_key().empty()) {
    for (const auto& c : rec.layout().components()) {
      for (int s = 0; s < c.osts_size(); ++s) {
        const std::vector<uint32_t> osts = TaskOsts(c.osts(s));  // one copy: one member drops it
        if (!osts.empty()) {
          LogTask(t, osts[0], rec.attr().fid(), c.id(), static_cast<uint32_t>(s), kTaskDropCopy,
                  hsm.archived_version(), nullptr);
        }
      }
    }
  }
  t.Delete(Cf::kSystem, HsmKey(fid));
  if (IsDir(rec)) {
    bool exports;
    {
      std::lock_guard<std::mutex> lock(repo_mu_);
      exports = export_dirs_.count(fid) > 0;
    }
    if (exports)
      CIUIC_RETURN_IF_ERROR(DropExportDir(t, fid));
    std::string v;
    Status ls = t.Get(Cf::kSystem, RepoLinkKey(fid), &v);
    if (ls.ok())
      t.Delete(Cf::kSystem, RepoLinkKey(fid));  // a removed link is no link
    else if (ls.code() != StatusCode::kNotFound)
      return ls;
  }
  std::vector<std::string> xattrs;
  const std::string prefix = XattrPrefix(fid);
  CIUIC_RETURN_IF_ERROR(
      t.Scan(Cf::kXattrs, prefix, PrefixEnd(prefix), [&](std::string_view k, std::string_view) {
        xattrs.emplace_back(k);
        return true;
      }));
  for (auto& k : xattrs)
    t.Delete(Cf::kXattrs, std::move(k));
  if (IsReg(rec)) {
    for (const auto& c : rec.layout().components()) {
      for (int s = 0; s < c.osts_size(); ++s) {
        for (uint32_t ost : TaskOsts(c.osts(s))) {
          LogTask(t, ost, rec.attr().fid(), c.id(), static_cast<uint32_t>(s), kTaskDestroy, 0,
                  nullptr);
        }
      }
    }
  }
  return AdjustInodeCount(t, -1);
}

std::vector<uint32_t> MetaService::TaskOsts(uint32_t target) const {
  if (!IsChain(target))
    return {target};
  return osts_.ChainMembers(target);
}

void MetaService::LogTask(Txn& t,
                          uint32_t ost,
                          const pb::Fid& fid,
                          uint32_t comp,
                          uint32_t stripe,
                          uint32_t kind,
                          uint64_t length,
                          pb::OstTask* out) {
  const uint64_t id = TaskId(ost, Allocate(t, &task_seq_));
  pb::OstTask task;
  task.set_id(id);
  task.set_ost(ost);
  *task.mutable_obj()->mutable_fid() = fid;
  task.mutable_obj()->set_comp(comp);
  task.mutable_obj()->set_stripe(stripe);
  task.set_kind(kind);
  task.set_length(length);
  task.set_created_ms(WallMs());
  t.Put(Cf::kOstLog, TaskKey(id), task.SerializeAsString());
  if (out != nullptr)
    *out = std::move(task);
}

}  // namespace ciuic::meta
