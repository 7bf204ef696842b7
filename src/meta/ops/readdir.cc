// ReadDir: one range scan over the directory's entries from the cookie on (Decision 7).
//
// An entry's cookie is the hash of its name, so a cookie stays valid while other entries come
// and go. Entries sharing a hash are never split across replies: a reply that reaches
// max_entries still takes the rest of the last hash's entries, so resuming "after hash h" loses
// nothing. Only one page of the directory is in memory at a time.
#include <sys/stat.h>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {

Result<pb::ReadDirResp> MetaService::ReadDir(const pb::ReadDirReq& req) {
  KvReader r(kv_.get());
  pb::InodeRecord dir;
  CIUIC_RETURN_IF_ERROR(GetDir(r, req.dir(), &dir));
  CIUIC_RETURN_IF_ERROR(CheckAccess(dir.attr(), req.ctx(), kMayRead, "directory"));
  const uint32_t max = req.max_entries() == 0
                           ? options_.max_readdir_entries
                           : std::min(req.max_entries(), options_.max_readdir_entries);
  const uint64_t cookie = req.cookie();
  pb::ReadDirResp resp;
  pb::InodeRecord parent;
  if (cookie == 0) {
    pb::DirEntry* e = resp.add_entries();
    e->set_name(".");
    *e->mutable_fid() = dir.attr().fid();
    e->set_type(S_IFDIR);
    e->set_cookie(1);
    if (req.plus())
      FillAttr(dir, e->mutable_attr());
  }
  if (cookie <= 1 && static_cast<uint32_t>(resp.entries_size()) < max) {
    const pb::Fid& pf = dir.parent().seq() ? dir.parent() : dir.attr().fid();
    pb::DirEntry* e = resp.add_entries();
    e->set_name("..");
    *e->mutable_fid() = pf;
    e->set_type(S_IFDIR);
    e->set_cookie(2);
    if (req.plus()) {
      CIUIC_RETURN_IF_ERROR(GetInode(r, pf, &parent));
      FillAttr(parent, e->mutable_attr());
    }
  }
  if (static_cast<uint32_t>(resp.entries_size()) >= max && cookie <= 1) {
    resp.set_eof(false);
    return resp;
  }
  if (cookie >= kMaxHashCookie) {
    resp.set_eof(true);
    return resp;
  }
  const Fid dfid = ToFid(req.dir());
  const uint64_t from = std::max<uint64_t>(cookie + 1, kFirstHashCookie);
  bool more = false;
  uint64_t last_hash = 0;
  Status parse;
  CIUIC_RETURN_IF_ERROR(r.Scan(
      Cf::kDentries, DentrySeekKey(dfid, from), DentryEnd(dfid),
      [&](std::string_view k, std::string_view v) {
        Fid p;
        uint64_t h;
        std::string_view name;
        if (!ParseDentryKey(k, &p, &h, &name)) {
          parse = Status::Corruption("bad directory entry key");
          return false;
        }
        if (static_cast<uint32_t>(resp.entries_size()) >= max && h != last_hash) {
          more = true;
          return false;
        }
        pb::DentryRecord d;
        if (!d.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
          parse = Status::Corruption(fmt::format("bad directory entry record for '{}'", name));
          return false;
        }
        pb::DirEntry* e = resp.add_entries();
        e->set_name(std::string(name));
        *e->mutable_fid() = d.fid();
        e->set_type(d.type());
        e->set_cookie(h);
        last_hash = h;
        return true;
      }));
  CIUIC_RETURN_IF_ERROR(parse);
  resp.set_eof(!more);
  if (req.plus()) {
    std::vector<std::string> keys;
    std::vector<int> idx;
    for (int i = 0; i < resp.entries_size(); ++i) {
      if (resp.entries(i).has_attr())
        continue;
      keys.push_back(InodeKey(ToFid(resp.entries(i).fid())));
      idx.push_back(i);
    }
    std::vector<std::string> values;
    std::vector<Status> st;
    kv_->MultiGet(Cf::kInodes, keys, &values, &st);
    for (size_t j = 0; j < keys.size(); ++j) {
      // An entry removed since the scan has no inode any more: leave its attr empty.
      if (st[j].code() == StatusCode::kNotFound)
        continue;
      CIUIC_RETURN_IF_ERROR(st[j]);
      pb::InodeRecord rec;
      if (!rec.ParseFromString(values[j]))
        return Status::Corruption("bad inode record");
      FillAttr(rec, resp.mutable_entries(idx[j])->mutable_attr());
    }
  }
  return resp;
}

}  // namespace ciuic::meta
