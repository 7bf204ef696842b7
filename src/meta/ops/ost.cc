// The OST map and the OST work log's delivery: RegisterOss, Heartbeat and GetOstMap.
//
// Heartbeat deletes the tasks the OSS reports done and hands it its OSTs' pending tasks,
// oldest first. Punches wait `punch_grace_ms` so the truncating client applies them first;
// destroys go at once. The log is in the store, so work survives MDS restarts.
#include <algorithm>

#include <fmt/format.h>

#include "common/logging.h"
#include "meta/meta_service.h"
#include "meta/ops/op_util.h"

namespace ciuic::meta {
namespace {
constexpr uint32_t kTaskPunch = 2;
}  // namespace

Status MetaService::Apply(Txn& t, const pb::RegisterOssReq& req, pb::RegisterOssResp* resp) {
  if (req.cluster_uuid() != options_.cluster_uuid) {
    return Status::PermissionDenied(
        fmt::format("OSS {} belongs to cluster '{}', this MDS serves '{}'", req.oss_addr(),
                    req.cluster_uuid(), options_.cluster_uuid));
  }
  if (req.oss_addr().empty())
    return Status::InvalidArgument("OSS address is empty");
  for (const auto& o : req.osts()) {
    if (o.index() > kMaxOstIndex) {
      return Status::InvalidArgument(
          fmt::format("OST index {} is above the maximum {}", o.index(), kMaxOstIndex));
    }
  }
  if (req.host_label().size() > 256)
    return Status::InvalidArgument("host label longer than 256 bytes");
  for (const auto& info :
       osts_.Register(req.oss_addr(), req.osts(), NowMs(), req.host_label(), req.epoch())) {
    t.Put(Cf::kSystem, OstKey(info.index()), info.SerializeAsString());
  }
  LOG_INFO("mds: OSS {} registered {} OSTs", req.oss_addr(), req.osts_size());
  resp->set_heartbeat_ms(options_.heartbeat_ms);
  return Status::OK();
}

Status MetaService::Apply(Txn& t, const pb::HeartbeatReq& req, pb::HeartbeatResp* resp) {
  CIUIC_RETURN_IF_ERROR(osts_.Heartbeat(req.oss_addr(), req.osts(), NowMs()));
  // Resyncs this OSS runs as a chain's head: a finished one makes its member serve again,
  // synced before the answer, as every chain change is.
  const std::vector<pb::Chain> synced = osts_.NoteResync(req.resync());
  for (const pb::Chain& c : synced)
    t.Put(Cf::kSystem, ChainKey(c.id()), c.SerializeAsString());
  if (!synced.empty())
    t.RequireSync();
  for (uint32_t id : RevokedKeyIds())
    resp->add_revoked_key_ids(id);
  resp->set_chains_version(osts_.chains_version());
  resp->set_map_version(osts_.version());
  // Reads the OSS served since its last heartbeat: resolved reads never reach the MDS.
  const int64_t now = NowMs();
  for (const pb::FileReads& fr : req.file_reads()) {
    if (fr.reads() > 0)
      heat_.Add(ToFid(fr.fid()), static_cast<double>(fr.reads()), now);
  }
  const std::vector<uint32_t> mine = osts_.OstsOf(req.oss_addr());
  auto serves = [&mine](uint32_t ost) {
    return std::find(mine.begin(), mine.end(), ost) != mine.end();
  };
  for (uint64_t id : req.done_task_ids()) {
    if (serves(TaskOst(id)))
      t.Delete(Cf::kOstLog, TaskKey(id));
  }
  const int64_t wall = WallMs();
  const uint32_t budget = options_.max_tasks_per_heartbeat;
  Status parse;
  for (uint32_t ost : mine) {
    if (static_cast<uint32_t>(resp->tasks_size()) >= budget)
      break;
    size_t scanned = 0;
    uint64_t first = 0;
    const uint64_t floor = std::max(TaskId(ost, 0), ostlog_floor_[ost]);
    const std::string end = ost == kMaxOstIndex ? std::string() : TaskKey(TaskId(ost + 1, 0));
    CIUIC_RETURN_IF_ERROR(
        t.Scan(Cf::kOstLog, TaskKey(floor), end, [&](std::string_view k, std::string_view v) {
          pb::OstTask task;
          if (k.size() != 8 || !task.ParseFromArray(v.data(), static_cast<int>(v.size()))) {
            parse = Status::Corruption("bad OST work log record");
            return false;
          }
          if (first == 0)
            first = ReadU64(k.data());
          const bool young = task.kind() == kTaskPunch &&
                             wall - task.created_ms() < options_.punch_grace_ms &&
                             task.created_ms() <= wall;
          if (!young)
            *resp->add_tasks() = std::move(task);
          return static_cast<uint32_t>(resp->tasks_size()) < budget &&
                 ++scanned < size_t{budget} * 4;
        }));
    CIUIC_RETURN_IF_ERROR(parse);
    // Nothing pending: later tasks of this OST take counters from task_seq_.next on.
    ostlog_floor_[ost] = first != 0 ? first : TaskId(ost, task_seq_.next);
  }
  return Status::OK();
}

Result<pb::GetOstMapResp> MetaService::GetOstMap(const pb::GetOstMapReq&) {
  pb::GetOstMapResp resp = osts_.Snapshot();
  resp.set_mds_epoch(options_.durability_epoch);
  return resp;
}

}  // namespace ciuic::meta
