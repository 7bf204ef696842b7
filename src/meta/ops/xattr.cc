// Extended attributes: one key per attribute (Fid || name) in the xattrs column family.
// Namespaces as Linux: user.* needs the file's read/write permission and a regular file or
// directory; trusted.* and security.* are root's; system.* (ACLs) is not supported.
#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {

constexpr size_t kXattrNameMax = 255;
constexpr size_t kXattrValueMax = 64 * 1024;
constexpr uint32_t kXattrCreate = 1;
constexpr uint32_t kXattrReplace = 2;

bool StartsWith(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// Checks the name and that `ctx` may read (mask kMayRead) or change (kMayWrite) it on `rec`.
Status CheckXattr(const pb::InodeRecord& rec,
                  const pb::ReqCtx& ctx,
                  std::string_view name,
                  int mask) {
  if (name.empty())
    return Status::InvalidArgument("empty xattr name");
  if (name.size() > kXattrNameMax) {
    return Status::NameTooLong(
        fmt::format("xattr name of {} bytes is longer than {}", name.size(), kXattrNameMax));
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("xattr name contains a NUL byte");
  }
  if (StartsWith(name, "user.")) {
    if (!IsReg(rec) && !IsDir(rec)) {
      return Status::NotPermitted("user xattrs apply to regular files and directories only");
    }
    return CheckAccess(rec.attr(), ctx, mask, "file");
  }
  if (StartsWith(name, "trusted.") || StartsWith(name, "security.")) {
    if (!IsRoot(ctx) && (mask & kMayWrite || StartsWith(name, "trusted."))) {
      return Status::NotPermitted(fmt::format("only root may access xattr '{}'", name));
    }
    return Status::OK();
  }
  return Status::NotSupported(fmt::format("xattr namespace of '{}' is not supported", name));
}

}  // namespace

Status MetaService::Apply(Txn& t, const pb::SetXattrReq& req, pb::SetXattrResp*) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  CIUIC_RETURN_IF_ERROR(CheckXattr(rec, req.ctx(), req.name(), kMayWrite));
  if (req.value().size() > kXattrValueMax) {
    return Status::InvalidArgument(fmt::format("xattr value of {} bytes is larger than {}",
                                               req.value().size(), kXattrValueMax));
  }
  if ((req.flags() & ~(kXattrCreate | kXattrReplace)) != 0 ||
      req.flags() == (kXattrCreate | kXattrReplace)) {
    return Status::InvalidArgument("bad xattr flags");
  }
  const std::string key = XattrKey(ToFid(req.fid()), req.name());
  std::string old;
  Status st = t.Get(Cf::kXattrs, key, &old);
  if (!st.ok() && st.code() != StatusCode::kNotFound)
    return st;
  if (st.ok() && (req.flags() & kXattrCreate)) {
    return Status::AlreadyExists(fmt::format("xattr '{}' exists", req.name()));
  }
  if (!st.ok() && (req.flags() & kXattrReplace)) {
    return Status::NotFound(fmt::format("no xattr '{}'", req.name()));
  }
  t.Put(Cf::kXattrs, key, req.value());
  SetTs(rec.mutable_attr()->mutable_ctime(), NowTimespec());
  PutInode(t, rec);
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::RemoveXattrReq& req, pb::RemoveXattrResp*) {
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  CIUIC_RETURN_IF_ERROR(CheckXattr(rec, req.ctx(), req.name(), kMayWrite));
  const std::string key = XattrKey(ToFid(req.fid()), req.name());
  std::string old;
  Status st = t.Get(Cf::kXattrs, key, &old);
  if (st.code() == StatusCode::kNotFound) {
    return Status::NotFound(fmt::format("no xattr '{}'", req.name()));
  }
  CIUIC_RETURN_IF_ERROR(st);
  t.Delete(Cf::kXattrs, key);
  SetTs(rec.mutable_attr()->mutable_ctime(), NowTimespec());
  PutInode(t, rec);
  return Status::OK();
}

Result<pb::GetXattrResp> MetaService::GetXattr(const pb::GetXattrReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(r, req.fid(), &rec));
  CIUIC_RETURN_IF_ERROR(CheckXattr(rec, req.ctx(), req.name(), kMayRead));
  pb::GetXattrResp resp;
  Status st = r.Get(Cf::kXattrs, XattrKey(ToFid(req.fid()), req.name()), resp.mutable_value());
  if (st.code() == StatusCode::kNotFound) {
    return Status::NotFound(fmt::format("no xattr '{}'", req.name()));
  }
  CIUIC_RETURN_IF_ERROR(st);
  return resp;
}

Result<pb::ListXattrResp> MetaService::ListXattr(const pb::ListXattrReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(r, req.fid(), &rec));
  pb::ListXattrResp resp;
  const std::string prefix = XattrPrefix(ToFid(req.fid()));
  CIUIC_RETURN_IF_ERROR(
      r.Scan(Cf::kXattrs, prefix, PrefixEnd(prefix), [&](std::string_view k, std::string_view) {
        std::string_view name = k.substr(prefix.size());
        // trusted.* names are visible to root only, as on Linux.
        if (!StartsWith(name, "trusted.") || IsRoot(req.ctx()))
          resp.add_names(std::string(name));
        return true;
      }));
  return resp;
}

}  // namespace ciuic::meta
