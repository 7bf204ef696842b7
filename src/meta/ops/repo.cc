// Export on close of a data repository (docs/design.md "Data repositories"): the queue of files
// closed after writing below a linked directory that exports on close, and the paths of those
// files from the names their inodes record.
#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"

namespace ciuic::meta {
namespace {

constexpr uint32_t kOpOn = 1;
constexpr uint32_t kOpOff = 2;
constexpr uint32_t kOpList = 3;
constexpr uint32_t kOpDone = 4;
constexpr uint32_t kOpLinks = 5;
constexpr uint32_t kOpRecordLink = 6;

struct FidLess {
  bool operator()(const Fid& a, const Fid& b) const {
    return std::tie(a.seq, a.mds, a.ver) < std::tie(b.seq, b.mds, b.ver);
  }
};
constexpr uint32_t kDefaultList = 1000;
constexpr uint32_t kMaxList = 10000;
// Deeper than any path can be (PATH_MAX / 2); a longer chain is a corrupt namespace.
constexpr int kMaxDepth = 4096;

std::string EncodeVersion(uint64_t v) {
  std::string s;
  AppendU64(&s, v);
  return s;
}

}  // namespace

Result<std::string> MetaService::PathBelow(Reader& r, const Fid& fid, const Fid& top) {
  std::vector<std::string> parts;
  Fid cur = fid;
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    if (cur == top) {
      if (parts.empty())
        return std::string();
      std::string path;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (!path.empty())
          path += '/';
        path += *it;
      }
      return path;
    }
    if (cur == kRootFid)
      return std::string();  // not below `top`
    pb::InodeRecord rec;
    Status st = GetInode(r, cur, &rec);
    if (st.code() == StatusCode::kNotFound)
      return std::string();
    CIUIC_RETURN_IF_ERROR(st);
    if (rec.name().empty() || !rec.parent().seq() || rec.attr().nlink() == 0)
      return std::string();
    const Fid parent = ToFid(rec.parent());
    // The recorded name is a hint (hard links): it counts only while its entry leads here.
    pb::DentryRecord d;
    st = GetDentry(r, parent, Hash(rec.name()), rec.name(), &d);
    if (st.code() == StatusCode::kNotFound)
      return std::string();
    CIUIC_RETURN_IF_ERROR(st);
    if (ToFid(d.fid()) != cur)
      return std::string();
    parts.push_back(rec.name());
    cur = parent;
  }
  return Status::Corruption(fmt::format("the parents of {} do not reach the root", fid.ToString()));
}

Status MetaService::QueueExportOnClose(Txn& t, const pb::InodeRecord& rec) {
  {
    std::lock_guard<std::mutex> lock(repo_mu_);
    if (export_dirs_.empty())
      return Status::OK();  // the common case: one branch per close
  }
  if (!rec.parent().seq())
    return Status::OK();
  Fid cur = ToFid(rec.parent());
  for (int depth = 0; depth < kMaxDepth; ++depth) {
    bool exports;
    {
      std::lock_guard<std::mutex> lock(repo_mu_);
      exports = export_dirs_.count(cur) > 0;
    }
    if (exports) {
      t.Put(Cf::kSystem, ExportQueueKey(cur, ToFid(rec.attr().fid())),
            EncodeVersion(rec.attr().data_version()));
      return Status::OK();
    }
    if (cur == kRootFid)
      return Status::OK();
    pb::InodeRecord dir;
    Status st = GetInode(t, cur, &dir);
    if (st.code() == StatusCode::kNotFound)
      return Status::OK();
    CIUIC_RETURN_IF_ERROR(st);
    if (!dir.parent().seq())
      return Status::OK();
    cur = ToFid(dir.parent());
  }
  return Status::OK();
}

Status MetaService::DropExportDir(Txn& t, const Fid& d) {
  t.Delete(Cf::kSystem, RepoExportKey(d));
  // What was queued goes too: `ciuic repo export` finds changed files by walking.
  const std::string prefix = ExportQueuePrefix(d);
  std::vector<std::string> keys;
  CIUIC_RETURN_IF_ERROR(
      t.Scan(Cf::kSystem, prefix, PrefixEnd(prefix), [&](std::string_view k, std::string_view) {
        keys.emplace_back(k);
        return true;
      }));
  for (const std::string& k : keys)
    t.Delete(Cf::kSystem, k);
  t.OnCommit([this, d] {
    std::lock_guard<std::mutex> lock(repo_mu_);
    export_dirs_.erase(d);
  });
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::RepoQueueReq& req, pb::RepoQueueResp* resp) {
  if (req.op() == kOpLinks) {
    // Every linked directory (recorded by op 6) and every one that exports on close, with its
    // path: `ciuic repo list`, and the export agent finds its work here.
    std::set<Fid, FidLess> dirs;
    std::set<Fid, FidLess> exporting;
    {
      std::lock_guard<std::mutex> lock(repo_mu_);
      exporting.insert(export_dirs_.begin(), export_dirs_.end());
    }
    dirs.insert(exporting.begin(), exporting.end());
    Status bad = Status::OK();
    const std::string lp(kRepoLinkPrefix);
    CIUIC_RETURN_IF_ERROR(
        t.Scan(Cf::kSystem, lp, PrefixEnd(lp), [&](std::string_view k, std::string_view) {
          if (k.size() != lp.size() + kFidKeyLen) {
            bad = Status::Corruption("bad repository link key");
            return false;
          }
          dirs.insert(ReadFid(k.data() + lp.size()));
          return true;
        }));
    CIUIC_RETURN_IF_ERROR(bad);
    for (const Fid& d : dirs) {
      CIUIC_ASSIGN_OR_RETURN(std::string path, PathBelow(t, d, kRootFid));
      if (path.empty() && d != kRootFid)
        continue;  // moved out of reach of its recorded name, or made before names were kept
      pb::RepoQueueEntry* e = resp->add_entries();
      net::ToPb(d, e->mutable_fid());
      e->set_path("/" + path);
      e->set_export_on_close(exporting.count(d) > 0);
    }
    return Status::OK();
  }
  pb::InodeRecord dir;
  CIUIC_RETURN_IF_ERROR(GetDir(t, req.dir(), &dir));
  const Fid d = ToFid(req.dir());
  const std::string prefix = ExportQueuePrefix(d);
  switch (req.op()) {
    case kOpOn:
      t.Put(Cf::kSystem, RepoExportKey(d), "");
      t.OnCommit([this, d] {
        std::lock_guard<std::mutex> lock(repo_mu_);
        export_dirs_.insert(d);
      });
      break;
    case kOpOff:
      CIUIC_RETURN_IF_ERROR(DropExportDir(t, d));
      break;
    case kOpRecordLink:
      t.Put(Cf::kSystem, RepoLinkKey(d), "");
      break;
    case kOpList: {
      const uint32_t max = std::min(req.max() == 0 ? kDefaultList : req.max(), kMaxList);
      Status bad = Status::OK();
      std::vector<std::pair<Fid, uint64_t>> found;
      CIUIC_RETURN_IF_ERROR(t.Scan(
          Cf::kSystem, prefix, PrefixEnd(prefix), [&](std::string_view k, std::string_view v) {
            if (k.size() != prefix.size() + kFidKeyLen || v.size() != 8) {
              bad = Status::Corruption("bad export queue entry");
              return false;
            }
            found.emplace_back(ReadFid(k.data() + prefix.size()), ReadU64(v.data()));
            return found.size() < max;
          }));
      CIUIC_RETURN_IF_ERROR(bad);
      for (const auto& [fid, version] : found) {
        pb::RepoQueueEntry* e = resp->add_entries();
        net::ToPb(fid, e->mutable_fid());
        e->set_version(version);
        CIUIC_ASSIGN_OR_RETURN(std::string path, PathBelow(t, fid, d));
        e->set_path(std::move(path));
      }
      break;
    }
    case kOpDone:
      for (const pb::RepoQueueEntry& e : req.done()) {
        const std::string k = ExportQueueKey(d, ToFid(e.fid()));
        std::string v;
        Status st = t.Get(Cf::kSystem, k, &v);
        if (st.code() == StatusCode::kNotFound)
          continue;
        CIUIC_RETURN_IF_ERROR(st);
        // A close after the export's stat queued a newer version: that one stays.
        if (v.size() == 8 && ReadU64(v.data()) > e.version())
          continue;
        t.Delete(Cf::kSystem, k);
      }
      break;
    default:
      return Status::InvalidArgument(
          fmt::format("unknown repository queue operation {}", req.op()));
  }
  std::lock_guard<std::mutex> lock(repo_mu_);
  resp->set_export_on_close(req.op() == kOpOn || (req.op() != kOpOff && export_dirs_.count(d) > 0));
  return Status::OK();
}

}  // namespace ciuic::meta
