// Name resolution: Lookup, ResolvePath (whole path, one round trip), GetAttr and Readlink.
#include <fcntl.h>

#include <deque>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {

constexpr int kMaxSymlinks = 40;  // as Linux's MAXSYMLINKS

// Splits `path` on '/' into `out` (front first), dropping empty and "." components.
void SplitPath(std::string_view path, std::deque<std::string>* out, bool front) {
  std::deque<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos)
      j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (!c.empty() && c != ".")
      parts.emplace_back(c);
    i = j + 1;
  }
  if (front) {
    out->insert(out->begin(), parts.begin(), parts.end());
  } else {
    out->insert(out->end(), parts.begin(), parts.end());
  }
}

void FillLookup(const pb::InodeRecord& rec, pb::Attr* attr, pb::Layout* layout) {
  FillAttr(rec, attr);
  *layout = rec.layout();
}

}  // namespace

Result<pb::LookupResp> MetaService::Lookup(const pb::LookupReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord dir;
  CIUIC_RETURN_IF_ERROR(GetDir(r, req.parent(), &dir));
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir.attr(), req.ctx(), kMayExec, "directory"));
  pb::InodeRecord rec;
  const std::string& name = req.name();
  if (name == ".") {
    rec = std::move(dir);
  } else if (name == ".." && IsCtxRoot(req.ctx(), ToFid(dir.attr().fid()))) {
    rec = std::move(dir);  // a subtree key's "/" is its own parent, as the real root is
  } else if (name == "..") {
    CIUIC_RETURN_IF_ERROR(GetInode(r, dir.parent().seq() ? dir.parent() : dir.attr().fid(), &rec));
  } else {
    CIUIC_RETURN_IF_ERROR(ValidateName(name));
    pb::DentryRecord d;
    CIUIC_RETURN_IF_ERROR(GetDentry(r, ToFid(req.parent()), Hash(name), name, &d));
    CIUIC_RETURN_IF_ERROR(GetInode(r, d.fid(), &rec));
  }
  pb::LookupResp resp;
  FillLookup(rec, resp.mutable_attr(), resp.mutable_layout());
  return resp;
}

Result<pb::GetAttrResp> MetaService::GetAttr(const pb::GetAttrReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(r, req.fid(), &rec));
  pb::GetAttrResp resp;
  FillLookup(rec, resp.mutable_attr(), resp.mutable_layout());
  return resp;
}

Result<pb::ReadlinkResp> MetaService::Readlink(const pb::ReadlinkReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord rec;
  CIUIC_RETURN_IF_ERROR(GetInode(r, req.fid(), &rec));
  if (!IsLnk(rec))
    return Status::InvalidArgument("not a symbolic link");
  pb::ReadlinkResp resp;
  resp.set_target(rec.symlink_target());
  return resp;
}

Status MetaService::Resolve(Reader& r,
                            const pb::ReqCtx& ctx,
                            std::string_view path,
                            bool follow_last,
                            pb::InodeRecord* out,
                            Fid* parent) {
  if (path.size() > kPathMax) {
    return Status::NameTooLong(
        fmt::format("path of {} bytes is longer than {}", path.size(), kPathMax));
  }
  const bool want_dir = !path.empty() && path.back() == '/';
  if (want_dir)
    follow_last = true;
  std::deque<std::string> comps;
  SplitPath(path, &comps, false);

  // A subtree key resolves from its subtree, which it cannot leave: ".." there and absolute
  // symlink targets stay inside, as in a chroot.
  const Fid root = CtxRoot(ctx);
  Fid cur = root;
  pb::InodeRecord cur_rec;
  CIUIC_RETURN_IF_ERROR(GetInode(r, root, &cur_rec));
  Fid par = root;
  int links = 0;
  while (!comps.empty()) {
    std::string name = std::move(comps.front());
    comps.pop_front();
    if (!IsDir(cur_rec)) {
      return Status::NotADirectory(fmt::format("'{}' is reached through a non-directory", name));
    }
    CIUIC_RETURN_IF_ERROR(CheckAccess(cur_rec.attr(), ctx, kMayExec, "directory"));
    if (name == "..") {
      if (cur == root) {
        par = root;
        continue;
      }
      Fid up = cur_rec.parent().seq() ? ToFid(cur_rec.parent()) : kRootFid;
      CIUIC_RETURN_IF_ERROR(GetInode(r, up, &cur_rec));
      cur = up;
      par = (cur == root || !cur_rec.parent().seq()) ? root : ToFid(cur_rec.parent());
      continue;
    }
    if (name.size() > kNameMax) {
      return Status::NameTooLong(
          fmt::format("path component of {} bytes is longer than {}", name.size(), kNameMax));
    }
    pb::DentryRecord d;
    Status ds = GetDentry(r, cur, Hash(name), name, &d);
    if (ds.code() == StatusCode::kNotFound) {
      return Status::NotFound(
          fmt::format("no such file or directory: '{}' in {}", name, std::string(path)));
    }
    CIUIC_RETURN_IF_ERROR(ds);
    pb::InodeRecord child;
    CIUIC_RETURN_IF_ERROR(GetInode(r, d.fid(), &child));
    if (IsLnk(child) && (!comps.empty() || follow_last)) {
      if (++links > kMaxSymlinks) {
        return Status::Loop(
            fmt::format("too many levels of symbolic links in {}", std::string(path)));
      }
      const std::string& target = child.symlink_target();
      SplitPath(target, &comps, true);
      if (!target.empty() && target[0] == '/') {
        cur = root;
        CIUIC_RETURN_IF_ERROR(GetInode(r, root, &cur_rec));
      }
      continue;  // relative targets continue from the directory holding the link
    }
    par = cur;
    cur = ToFid(d.fid());
    cur_rec = std::move(child);
  }
  if (want_dir && !IsDir(cur_rec)) {
    return Status::NotADirectory(fmt::format("{} is not a directory", std::string(path)));
  }
  if (cur == root)
    par = root;
  *out = std::move(cur_rec);
  *parent = par;
  return Status::OK();
}

Result<pb::ResolvePathResp> MetaService::ResolvePath(const pb::ResolvePathReq& req) {
  if (req.open())
    return RunSync<pb::ResolvePathReq, pb::ResolvePathResp>(req);
  KvReader r(kv_.get());
  pb::InodeRecord rec;
  Fid parent;
  CIUIC_RETURN_IF_ERROR(Resolve(r, req.ctx(), req.path(), req.follow_last(), &rec, &parent));
  pb::ResolvePathResp resp;
  FillLookup(rec, resp.mutable_attr(), resp.mutable_layout());
  net::ToPb(parent, resp.mutable_parent());
  return resp;
}

Status MetaService::Apply(Txn& t, const pb::ResolvePathReq& req, pb::ResolvePathResp* resp) {
  pb::InodeRecord rec;
  Fid parent;
  CIUIC_RETURN_IF_ERROR(Resolve(t, req.ctx(), req.path(), req.follow_last(), &rec, &parent));
  uint64_t open_id = 0;
  // O_TRUNC produces punches, which this reply cannot carry: leave open_id 0 and the client
  // falls back to OpenReq. Directories and special files are not tracked (open_id 0) either.
  if (req.open() && (req.open_flags() & O_TRUNC) == 0) {
    google::protobuf::RepeatedPtrField<pb::OstTask> none;
    CIUIC_RETURN_IF_ERROR(OpenInode(t, req.ctx(), &rec, req.open_flags(), &open_id, &none));
  }
  FillLookup(rec, resp->mutable_attr(), resp->mutable_layout());
  net::ToPb(parent, resp->mutable_parent());
  resp->set_open_id(open_id);
  return Status::OK();
}

}  // namespace ciuic::meta
