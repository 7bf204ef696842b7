// Layout operations (Decision 8): Instantiate, SetLayout, Fallocate, and the placement of
// components on OSTs. Only the MDS instantiates a component, and an instantiated component
// never changes.
#include <algorithm>

#include <fmt/format.h>

#include "meta/layout_policy.h"
#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {

Status MetaService::InstantiateUpTo(Txn& t, pb::InodeRecord* rec, uint64_t end) {
  FileLayout l = net::FromPb(rec->layout());
  bool changed = false;
  for (auto& c : l.components) {
    if (c.start >= end)
      break;
    if (c.instantiated())
      continue;
    const uint32_t usable = osts_.usable();
    if (usable == 0) {
      if (changed)
        net::ToPb(l, rec->mutable_layout());
      return Status::Unavailable("no OST is up to hold the file's data");
    }
    // The count may still shrink to what is up now; once placed it is fixed.
    c.stripe_count = std::min(c.stripe_count, usable);
    if (c.replicas == 0 || single_copy_)
      c.replicas = single_copy_ ? 1 : options_.default_replicas;
    if (c.replicas > 1) {
      std::vector<pb::Chain> used;
      Result<std::vector<uint32_t>> chains = osts_.ChooseChains(c.stripe_count, c.replicas, &used);
      if (!chains.ok()) {
        if (changed)
          net::ToPb(l, rec->mutable_layout());
        return chains.status();
      }
      c.osts = std::move(*chains);
      // A layout never names a chain the store does not hold.
      for (const pb::Chain& ch : used)
        t.Put(Cf::kSystem, ChainKey(ch.id()), ch.SerializeAsString());
    } else {
      c.osts = osts_.Choose(c.stripe_count);
    }
    c.stripe_count = static_cast<uint32_t>(c.osts.size());
    changed = true;
  }
  if (changed)
    net::ToPb(l, rec->mutable_layout());
  return Status::OK();
}

void MetaService::ApplySizeHint(Txn& t,
                                pb::InodeRecord* rec,
                                uint64_t size_hint,
                                bool random_access) {
  if (!IsReg(*rec) || rec->layout().pattern() != 0 || !NeverWritten(*rec) || size_hint == 0) {
    return;
  }
  FileLayout l = AdaptiveLayout(size_hint, random_access, osts_.usable());
  net::ToPb(l, rec->mutable_layout());
  // Best effort: with no OST up the writer's InstantiateReq places it later.
  InstantiateUpTo(t, rec, 1).IgnoreError();
}

Status MetaService::Apply(Txn& t, const pb::InstantiateReq& req, pb::InstantiateResp* resp) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  if (!IsReg(rec))
    return Status::InvalidArgument("only regular files have data layouts");
  const std::string before = rec.layout().SerializeAsString();
  CIUIC_RETURN_IF_ERROR(InstantiateUpTo(t, &rec, std::max<uint64_t>(req.end(), 1)));
  if (rec.layout().SerializeAsString() != before)
    PutInode(t, rec);
  *resp->mutable_layout() = rec.layout();
  return Status::OK();
}

Status MetaService::CheckReplicas(const FileLayout& l) const {
  const uint32_t domains = osts_.Domains(false);
  for (const auto& c : l.components) {
    if (c.replicas > 1 && c.replicas > domains) {
      return Status::InvalidArgument(fmt::format(
          "{} replicas need {} failure domains; the cluster has {} (an OSS, or a host label "
          "shared by OSSes, is one domain)",
          c.replicas, c.replicas, domains));
    }
    if (c.replicas > 1 && !c.osts.empty()) {
      return Status::InvalidArgument(
          "a replicated layout cannot name OSTs: the MDS places its chains");
    }
  }
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::SetLayoutReq& req, pb::SetLayoutResp* resp) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  if (!IsOwnerOrRoot(rec.attr(), req.ctx())) {
    return Status::NotPermitted("only the owner or root may set a layout");
  }
  FileLayout l = net::FromPb(req.layout());
  CIUIC_RETURN_IF_ERROR(CheckReplicas(l));
  if (IsDir(rec)) {
    if (l.empty()) {
      rec.clear_layout();  // back to the adaptive policy
    } else {
      CIUIC_RETURN_IF_ERROR(ValidateExplicitLayout(l));
      net::ToPb(AsTemplate(l), rec.mutable_layout());
    }
  } else if (IsReg(rec)) {
    if (!NeverWritten(rec)) {
      return Status::Busy("the file already holds data; its layout can no longer change");
    }
    if (l.empty())
      return Status::InvalidArgument("empty layout");
    CIUIC_RETURN_IF_ERROR(ValidateExplicitLayout(l));
    for (const auto& c : l.components) {
      for (uint32_t o : c.osts) {
        if (!osts_.Known(o))
          return Status::InvalidArgument(fmt::format("unknown OST {}", o));
      }
    }
    l.pattern = 1;
    net::ToPb(l, rec.mutable_layout());
    Status is = InstantiateUpTo(t, &rec, 1);
    if (!is.ok() && is.code() != StatusCode::kUnavailable)
      return is;
  } else {
    return Status::InvalidArgument("layouts apply to regular files and directories");
  }
  SetTs(rec.mutable_attr()->mutable_ctime(), NowTimespec());
  PutInode(t, rec);
  *resp->mutable_layout() = rec.layout();
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::FallocateReq& req, pb::FallocateResp* resp) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  if (IsDir(rec))
    return Status::IsADirectory("cannot fallocate a directory");
  if (!IsReg(rec))
    return Status::InvalidArgument("fallocate applies to regular files only");
  if (req.length() == 0)
    return Status::InvalidArgument("fallocate length is 0");
  if (req.offset() > kLayoutEof - req.length()) {
    return Status::InvalidArgument("fallocate range overflows");
  }
  CIUIC_RETURN_IF_ERROR(CheckAccess(rec.attr(), req.ctx(), kMayWrite, "file"));
  const uint64_t end = req.offset() + req.length();
  // The range is a size hint: a never-written adaptive file is laid out for it.
  ApplySizeHint(t, &rec, end, false);
  Status is = InstantiateUpTo(t, &rec, end);
  if (!is.ok() && is.code() != StatusCode::kUnavailable)
    return is;
  pb::Attr* a = rec.mutable_attr();
  const Timespec now = NowTimespec();
  if (!req.keep_size() && end > a->size()) {
    a->set_size(end);
    SetTs(a->mutable_mtime(), now);
  }
  SetTs(a->mutable_ctime(), now);
  PutInode(t, rec);
  FillAttr(rec, resp->mutable_attr());
  *resp->mutable_layout() = rec.layout();
  return Status::OK();
}

}  // namespace ciuic::meta
