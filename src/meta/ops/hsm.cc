// HSM state (docs/design.md "HSM", ARCHITECTURE Decision 11): HsmState, HsmBegin, HsmEnd and the
// HSM side of truncate.
//
// The OSSes copy the objects; the MDS only decides and records. An operation is HsmBegin (checks,
// marks the file busy in memory, hands out the layout and a token), one HsmObj per object on
// the OSSes, then HsmEnd, which records the outcome in one batch with the namespace:
//   archive  records {archived, data_version} only after every object and its CRCs are in the
//            store, and only if data_version did not change meanwhile;
//   release  re-checks archived-and-current and not open, then in ONE batch sets the inode's
//            hsm_released, the record's state and the release tasks (OST work log kind 3) that
//            delete the objects: a crash before it leaves the file as it was, after it the
//            tasks are replayed;
//   restore  (after the OSSes wrote back and synced every object) clears hsm_released;
//   remove   deletes the record; the client then deletes the copy's objects.
// A crash of the client or any server between Begin and End leaves the record as it was
// (archive: objects nobody names, replaced by the next archive); the busy mark expires.
#include <sys/stat.h>

#include <fmt/format.h>

#include "common/logging.h"
#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {

constexpr uint32_t kTaskRelease = 3;

constexpr uint32_t kStateArchived = 1;
constexpr uint32_t kStateReleased = 2;
constexpr uint32_t kStateLost = 3;

constexpr uint32_t kOpArchive = 1;
constexpr uint32_t kOpRelease = 2;
constexpr uint32_t kOpRestore = 3;
constexpr uint32_t kOpRemove = 4;

// An operation whose client went away stops blocking the file after this long.
constexpr int64_t kBusyMs = 10 * 60 * 1000;

const char* OpName(uint32_t op) {
  switch (op) {
    case kOpArchive:
      return "archive";
    case kOpRelease:
      return "release";
    case kOpRestore:
      return "restore";
    case kOpRemove:
      return "remove";
    default:
      return "?";
  }
}

// The file's record; state 0 when it has none.
Status LoadHsm(Reader& r, const Fid& fid, pb::HsmRecord* rec) {
  std::string v;
  Status st = r.Get(Cf::kSystem, HsmKey(fid), &v);
  if (st.code() == StatusCode::kNotFound) {
    rec->Clear();
    return Status::OK();
  }
  CIUIC_RETURN_IF_ERROR(st);
  if (!rec->ParseFromString(v))
    return Status::Corruption(fmt::format("bad HSM record of {}", fid.ToString()));
  return Status::OK();
}

// Whether a release task logged with `rec` is still in the OST work log.
Result<bool> ReleasePending(Reader& r, const pb::HsmRecord& rec) {
  for (uint64_t id : rec.release_tasks()) {
    std::string v;
    Status st = r.Get(Cf::kOstLog, TaskKey(id), &v);
    if (st.ok())
      return true;
    if (st.code() != StatusCode::kNotFound)
      return st;
  }
  return false;
}

}  // namespace

Result<pb::HsmStateResp> MetaService::HsmState(const pb::HsmStateReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(r, req.fid(), &rec));
  pb::HsmStateResp resp;
  FillAttr(rec, resp.mutable_attr());
  CIUIC_RETURN_IF_ERROR(LoadHsm(r, ToFid(req.fid()), resp.mutable_record()));
  resp.mutable_record()->clear_release_tasks();
  if (std::optional<double> h = heat_.Get(ToFid(req.fid()), NowMs())) {
    resp.set_heat(*h);
    resp.set_has_heat(true);
  }
  return resp;
}

Status MetaService::Apply(Txn& t, const pb::HsmBeginReq& req, pb::HsmBeginResp* resp) {
  const Fid fid = ToFid(req.fid());
  const uint32_t op = req.op();
  if (op < kOpArchive || op > kOpRemove)
    return Status::InvalidArgument(fmt::format("unknown HSM operation {}", op));
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, fid, &rec));
  if (!IsReg(rec))
    return Status::InvalidArgument("not a regular file: HSM moves regular files only");
  for (const auto& c : rec.layout().components()) {
    if (c.replicas() > 1 && op != kOpRemove) {
      // A restore fills the objects of one OST; chains need it on every member.
      return Status::NotSupported(
          "the file is replicated: HSM moves files with one copy of each object only");
    }
  }
  const pb::Attr& a = rec.attr();
  if (op == kOpRestore) {
    CIUIC_RETURN_IF_ERROR(CheckAccess(a, req.ctx(), kMayRead, "file"));
  } else if (!IsOwnerOrRoot(a, req.ctx()) || req.ctx().read_only()) {
    return Status::PermissionDenied(
        fmt::format("only the owner may {} a file with HSM", OpName(op)));
  }
  pb::HsmRecord hsm;
  CIUIC_RETURN_IF_ERROR(LoadHsm(t, fid, &hsm));
  const uint64_t dv = a.data_version();
  const bool released = a.hsm_released();
  bool nothing = false;
  switch (op) {
    case kOpArchive:
      // Released: the archived copy is all there is and it is current.
      nothing = released || (hsm.state() == kStateArchived && hsm.archived_version() == dv);
      break;
    case kOpRelease:
      if (released) {
        nothing = true;
        break;
      }
      if (hsm.state() == 0)
        return Status::InvalidArgument("not archived: archive it before releasing it");
      if (hsm.state() == kStateLost)
        return Status::InvalidArgument("its archived copy was found bad: archive it again");
      if (hsm.archived_version() != dv) {
        return Status::InvalidArgument(
            fmt::format("changed since it was archived (dirty: data version {}, archived {}): "
                        "archive it again before releasing it",
                        dv, hsm.archived_version()));
      }
      if (rec.open_count() > 0)
        return Status::Busy("it is open: close it before releasing it");
      break;
    case kOpRestore: {
      if (!released) {
        nothing = true;
        break;
      }
      CIUIC_ASSIGN_OR_RETURN(bool pending, ReleasePending(t, hsm));
      if (pending)
        return Status::Unavailable("its release is still being applied on the OSTs; retry");
      break;
    }
    case kOpRemove:
      if (hsm.state() == 0) {
        nothing = true;
        break;
      }
      if (released) {
        return Status::Busy(
            "it is released: its archived copy holds its only data (restore it first)");
      }
      break;
  }
  FillAttr(rec, resp->mutable_attr());
  *resp->mutable_layout() = rec.layout();
  *resp->mutable_record() = hsm;
  resp->mutable_record()->clear_release_tasks();
  resp->set_data_version(dv);
  if (nothing) {
    resp->set_nothing_to_do(true);
    return Status::OK();
  }
  const int64_t now = NowMs();
  std::lock_guard<std::mutex> lock(hsm_mu_);
  auto it = hsm_busy_.find(fid);
  if (it != hsm_busy_.end() && it->second.expires_ms > now) {
    if (op == kOpRestore && it->second.op == kOpRestore) {
      // Restore by extents: another reader joins the restore in progress (token 0). It asks
      // the OSSes to start (or join) each object's restore and reads; the first one ends it.
      resp->set_token(0);
      return Status::OK();
    }
    return Status::Unavailable(
        fmt::format("an HSM {} of this file is in progress; retry", OpName(it->second.op)));
  }
  HsmBusy busy;
  busy.token = hsm_next_token_++;
  busy.op = op;
  busy.data_version = dv;
  busy.expires_ms = now + kBusyMs;
  hsm_busy_[fid] = busy;
  resp->set_token(busy.token);
  // A group that fails to commit never answered this Begin: the file is not busy after all.
  t.OnAbort([this, fid, token = busy.token] {
    std::lock_guard<std::mutex> l(hsm_mu_);
    auto it = hsm_busy_.find(fid);
    if (it != hsm_busy_.end() && it->second.token == token)
      hsm_busy_.erase(it);
  });
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::HsmEndReq& req, pb::HsmEndResp* resp) {
  const Fid fid = ToFid(req.fid());
  const uint32_t op = req.op();
  HsmBusy busy;
  if (req.token() == 0 && op == kOpRestore) {
    // A reader that joined a restore by extents and saw every object's restore end: the file
    // is whole, whoever says so first (the one that began it may be gone). Failures are the
    // beginner's to record.
    if (req.failed())
      return Status::OK();
    pb::InodeRecord rec;
    CIUIC_RETURN_IF_ERROR(GetInode(t, fid, &rec));
    CIUIC_RETURN_IF_ERROR(CheckAccess(rec.attr(), req.ctx(), kMayRead, "file"));
    std::lock_guard<std::mutex> lock(hsm_mu_);
    auto it = hsm_busy_.find(fid);
    if (it != hsm_busy_.end() && it->second.op == kOpRestore) {
      hsm_busy_.erase(it);
    } else if (it != hsm_busy_.end() || req.version() == 0) {
      return Status::Stale("no HSM restore of this file is in progress (ended already?)");
    } else {
      // Ended by its beginner as failed (its wait lost an OSS that restarted) while this
      // reader's restore went on and saw every object whole: still whole if nothing changed.
      pb::HsmRecord hsm;
      CIUIC_RETURN_IF_ERROR(LoadHsm(t, fid, &hsm));
      if (!rec.attr().hsm_released() || hsm.state() != kStateReleased ||
          hsm.archived_version() != req.version()) {
        return Status::Stale("no HSM restore of this file is in progress (ended already?)");
      }
    }
  } else {
    std::lock_guard<std::mutex> lock(hsm_mu_);
    auto it = hsm_busy_.find(fid);
    if (it == hsm_busy_.end() || it->second.token != req.token() || it->second.op != op) {
      return Status::Stale(
          fmt::format("no HSM {} of this file is in progress (expired?)", OpName(op)));
    }
    busy = it->second;
    // Whatever the outcome, the operation is over.
    hsm_busy_.erase(it);
  }
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, fid, &rec));
  pb::HsmRecord hsm;
  CIUIC_RETURN_IF_ERROR(LoadHsm(t, fid, &hsm));
  pb::Attr* a = rec.mutable_attr();
  *resp->mutable_layout() = rec.layout();
  if (req.failed()) {
    if (op == kOpRestore && req.copy_bad() && hsm.state() != 0) {
      hsm.set_state(kStateLost);
      t.Put(Cf::kSystem, HsmKey(fid), hsm.SerializeAsString());
      LOG_WARN("mds: HSM copy of {} is bad: marked lost", fid.ToString());
    }
    *resp->mutable_record() = hsm;
    return Status::OK();
  }
  switch (op) {
    case kOpArchive: {
      if (a->data_version() != busy.data_version) {
        return Status::Busy(
            fmt::format("changed while it was being archived (data version {} -> {}): archive "
                        "it again",
                        busy.data_version, a->data_version()));
      }
      // A data repository's object is not the cold tier's to delete.
      if (hsm.state() != 0 && hsm.archived_version() != busy.data_version &&
          hsm.source_key().empty()) {
        resp->set_stale_version(hsm.archived_version());
      }
      hsm.Clear();
      hsm.set_state(kStateArchived);
      hsm.set_archived_version(busy.data_version);
      hsm.set_backend(req.backend());
      hsm.set_archived_ms(WallMs());
      hsm.set_archived_bytes(a->size());
      t.Put(Cf::kSystem, HsmKey(fid), hsm.SerializeAsString());
      break;
    }
    case kOpRelease: {
      // Checked again in this batch: a write, open or archive since HsmBegin wins.
      if (hsm.state() != kStateArchived || hsm.archived_version() != a->data_version())
        return Status::Busy("changed while it was being released: archive it again");
      if (rec.open_count() > 0)
        return Status::Busy("it was opened while being released: close it first");
      if (a->hsm_released())
        break;
      hsm.clear_release_tasks();
      for (const auto& c : rec.layout().components()) {
        for (int s = 0; s < c.osts_size(); ++s) {
          for (uint32_t ost : TaskOsts(c.osts(s))) {
            pb::OstTask task;
            LogTask(t, ost, a->fid(), c.id(), static_cast<uint32_t>(s), kTaskRelease, 0, &task);
            hsm.add_release_tasks(task.id());
          }
        }
      }
      hsm.set_state(kStateReleased);
      a->set_hsm_released(true);
      // Synced before the OSSes hear of the tasks: an MDS that lost power must never come
      // back believing the file is whole on the OSTs after they deleted its objects.
      t.RequireSync();
      PutInode(t, rec);
      t.Put(Cf::kSystem, HsmKey(fid), hsm.SerializeAsString());
      break;
    }
    case kOpRestore: {
      if (!a->hsm_released())
        break;
      // Every object is back and synced (the OSSes answered): the file is whole again, at the
      // same data version (a restore changes no byte).
      hsm.clear_release_tasks();
      hsm.set_state(kStateArchived);
      a->set_hsm_released(false);
      PutInode(t, rec);
      t.Put(Cf::kSystem, HsmKey(fid), hsm.SerializeAsString());
      break;
    }
    case kOpRemove: {
      if (a->hsm_released())
        return Status::Busy("it is released: restore it before removing its archived copy");
      if (hsm.state() != 0) {
        if (hsm.source_key().empty())
          resp->set_stale_version(hsm.archived_version());
        t.Delete(Cf::kSystem, HsmKey(fid));
      }
      hsm.Clear();
      break;
    }
    default:
      return Status::InvalidArgument(fmt::format("unknown HSM operation {}", op));
  }
  *resp->mutable_record() = hsm;
  resp->mutable_record()->clear_release_tasks();
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::HsmImportReq& req, pb::HsmImportResp* resp) {
  if (req.url().empty() || req.key().empty())
    return Status::InvalidArgument("an import names a repository URL and an object key");
  if (!req.xattr_name().empty() &&
      (req.xattr_name().rfind("user.", 0) != 0 || req.xattr_name().size() > 255 ||
       req.xattr_value().size() > 64 * 1024)) {
    return Status::InvalidArgument(
        "an import sets one user.* extended attribute of at most 64 KiB");
  }
  // The file is made as Create makes it (permissions, layout, parent), exclusively.
  pb::CreateReq c;
  *c.mutable_ctx() = req.ctx();
  *c.mutable_parent() = req.parent();
  c.set_name(req.name());
  c.set_mode(S_IFREG | (req.mode() & 0777));
  c.set_exclusive(true);
  c.set_size_hint(req.size());
  // A restore fills one OST per object (HsmBegin refuses chains): imported files keep one copy
  // whatever the directory's or the cluster's replica count.
  struct SingleCopy {
    bool* flag;
    explicit SingleCopy(bool* f) : flag(f) { *flag = true; }
    ~SingleCopy() { *flag = false; }
  } single(&single_copy_);
  pb::CreateResp cr;
  CIUIC_RETURN_IF_ERROR(Apply(t, c, &cr));
  const Fid fid = ToFid(cr.attr().fid());
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, cr.attr().fid(), &rec));
  // Every component the data reaches gets its OSTs now: a restore fills the objects it names.
  CIUIC_RETURN_IF_ERROR(InstantiateUpTo(t, &rec, std::max<uint64_t>(req.size(), 1)));
  pb::Attr* a = rec.mutable_attr();
  a->set_size(req.size());
  // Version 1, which the client can name in the xattr before the file exists (0 reads as
  // "never archived"); a new inode starts at 0.
  a->set_data_version(1);
  if (req.has_mtime())
    *a->mutable_mtime() = req.mtime();
  // Released from the start: no object exists yet, and every read or write restores first.
  a->set_hsm_released(true);
  PutInode(t, rec);
  pb::HsmRecord hsm;
  hsm.set_state(kStateReleased);
  hsm.set_archived_version(a->data_version());
  hsm.set_backend(req.url());
  hsm.set_archived_ms(WallMs());
  hsm.set_archived_bytes(req.size());
  hsm.set_source_url(req.url());
  hsm.set_source_key(req.key());
  hsm.set_source_etag(req.etag());
  t.Put(Cf::kSystem, HsmKey(fid), hsm.SerializeAsString());
  if (!req.xattr_name().empty())
    t.Put(Cf::kXattrs, XattrKey(fid, req.xattr_name()), req.xattr_value());
  FillAttr(rec, resp->mutable_attr());
  return Status::OK();
}

Status MetaService::HsmOnTruncate(Txn& t, pb::InodeRecord* rec, uint64_t size) {
  if (!rec->attr().hsm_released())
    return Status::OK();
  if (size > 0) {
    return Status::Busy(
        "it is released to the cold tier: open it (which restores it) before truncating it");
  }
  const Fid fid = ToFid(rec->attr().fid());
  pb::HsmRecord hsm;
  CIUIC_RETURN_IF_ERROR(LoadHsm(t, fid, &hsm));
  CIUIC_ASSIGN_OR_RETURN(bool pending, ReleasePending(t, hsm));
  if (pending)
    return Status::Unavailable("its release is still being applied on the OSTs; retry");
  {
    // A restore by extents in progress would adopt the old bytes after the truncate.
    std::lock_guard<std::mutex> lock(hsm_mu_);
    auto it = hsm_busy_.find(fid);
    if (it != hsm_busy_.end() && it->second.expires_ms > NowMs())
      return Status::Unavailable("its restore from the cold tier is in progress; retry");
  }
  // Emptied: no byte of the archived copy is needed. The copy stays, now dirty.
  rec->mutable_attr()->set_hsm_released(false);
  if (hsm.state() != 0) {
    hsm.clear_release_tasks();
    hsm.set_state(kStateArchived);
    t.Put(Cf::kSystem, HsmKey(fid), hsm.SerializeAsString());
  }
  return Status::OK();
}

}  // namespace ciuic::meta
