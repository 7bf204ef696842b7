// Whole-file-system operations: Statfs and FsyncDir.
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {
// Inode numbers come from a 64-bit sequence; report a large, fixed pool.
constexpr uint64_t kInodePool = uint64_t{1} << 40;
}  // namespace

// Sums the HSM records (docs/design.md "HSM policy"): one scan of "hsm/" and one inode read
// per record (dirty needs the current data version). On demand only (`ciuic df`), never for the
// statfs(2) of a mount.
Status MetaService::SumTiers(Reader& r, pb::StatfsResp* resp) {
  Status bad;
  std::vector<std::pair<Fid, pb::HsmRecord>> recs;
  CIUIC_RETURN_IF_ERROR(r.Scan(Cf::kSystem, kHsmPrefix, PrefixEnd(std::string(kHsmPrefix)),
                               [&](std::string_view k, std::string_view v) {
                                 pb::HsmRecord rec;
                                 if (k.size() != kHsmPrefix.size() + kFidKeyLen ||
                                     !rec.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
                                   bad = Status::Corruption("bad HSM record");
                                   return false;
                                 }
                                 if (rec.state() != 0)
                                   recs.emplace_back(ReadFid(k.data() + kHsmPrefix.size()), rec);
                                 return true;
                               }));
  CIUIC_RETURN_IF_ERROR(bad);
  for (const auto& [fid, rec] : recs) {
    pb::InodeRecord ino;
    Status st = GetInode(r, fid, &ino);
    if (st.code() == StatusCode::kNotFound)
      continue;
    CIUIC_RETURN_IF_ERROR(st);
    // Records written before they carried their size: the file's size is the copy's unless it
    // is dirty.
    const uint64_t bytes = rec.archived_bytes() != 0 ? rec.archived_bytes() : ino.attr().size();
    resp->set_cold_files(resp->cold_files() + 1);
    resp->set_cold_bytes(resp->cold_bytes() + bytes);
    if (ino.attr().hsm_released()) {
      resp->set_released_files(resp->released_files() + 1);
      resp->set_released_bytes(resp->released_bytes() + bytes);
    } else if (rec.archived_version() != ino.attr().data_version()) {
      resp->set_dirty_files(resp->dirty_files() + 1);
    }
  }
  return Status::OK();
}

Result<pb::StatfsResp> MetaService::Statfs(const pb::StatfsReq& req) {
  KvReader r(kv_.get());
  CIUIC_ASSIGN_OR_RETURN(uint64_t used, ReadInodeCount(r));
  const OstMap::Space space = osts_.TotalSpace();
  pb::StatfsResp resp;
  resp.set_total_bytes(space.total);
  resp.set_free_bytes(space.free);
  resp.set_avail_bytes(space.free);
  resp.set_total_inodes(kInodePool);
  resp.set_free_inodes(used >= kInodePool ? 0 : kInodePool - used);
  resp.set_block_size(4096);
  resp.set_name_max(kNameMax);
  if (req.with_tiers())
    CIUIC_RETURN_IF_ERROR(SumTiers(r, &resp));
  return resp;
}

Status MetaService::Apply(Txn& t, const pb::FsyncDirReq& req, pb::FsyncDirResp*) {
  // Mutations are already atomic and ordered in the WAL; a synced WAL write makes this one and
  // every earlier one durable, which is what fsync on a directory asks.
  if (req.fid().seq() != 0) {
    pb::InodeRecord rec;
    CIUIC_RETURN_IF_ERROR(GetInode(t, req.fid(), &rec));
  }
  t.RequireSync();
  return Status::OK();
}

}  // namespace ciuic::meta
