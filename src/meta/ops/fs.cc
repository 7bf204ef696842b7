// Whole-file-system operations: Statfs and FsyncDir.
#include <fmt/format.h>

#include "meta/meta_service.h"
#include "meta/ops/op_util.h"
#include "meta/perm.h"

namespace ciuic::meta {
namespace {
// Inode numbers come from a 64-bit sequence; report a large, fixed pool.
constexpr uint64_t kInodePool = uint64_t{1} << 40;
}  // namespace

Result<pb::StatfsResp> MetaService::Statfs(const pb::StatfsReq&) {
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
