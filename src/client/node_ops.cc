#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "client/file_impl.h"
#include "common/time_util.h"
#include "net/pb_convert.h"

// Operations on a file's Node shared by OpenFile and ClientImpl: attribute refresh, size
// publication, truncate and its punches.
namespace ciuic::client {

bool LayoutCovers(const FileLayout* layout, uint64_t end) {
  if (layout == nullptr || layout->empty())
    return false;
  return layout->InstantiatedUpTo(end) && layout->components.back().end >= end;
}

size_t CountInstantiated(const FileLayout& l) {
  size_t n = 0;
  for (const auto& c : l.components)
    n += c.instantiated() ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Helpers shared with ClientImpl

FileStat FileStatFromAttr(const pb::Attr& a) {
  FileStat s;
  s.ino = a.fid().seq();
  s.fid_mds = a.fid().mds();
  s.fid_ver = a.fid().ver();
  s.mode = a.mode();
  s.uid = a.uid();
  s.gid = a.gid();
  s.nlink = a.nlink();
  s.size = a.size();
  s.blocks = a.blocks();
  s.rdev = a.rdev();
  s.data_version = a.data_version();
  s.no_node_cache = a.no_node_cache();
  s.atime_sec = a.atime().sec();
  s.atime_nsec = a.atime().nsec();
  s.mtime_sec = a.mtime().sec();
  s.mtime_nsec = a.mtime().nsec();
  s.ctime_sec = a.ctime().sec();
  s.ctime_nsec = a.ctime().nsec();
  s.btime_sec = a.btime().sec();
  s.btime_nsec = a.btime().nsec();
  return s;
}

void RefreshNode(Node* node, const pb::Attr& attr, const pb::Layout* layout) {
  std::shared_ptr<const FileLayout> fresh;
  if (layout != nullptr && layout->components_size() > 0) {
    fresh = std::make_shared<const FileLayout>(net::FromPb(*layout));
  }
  std::lock_guard<std::mutex> lock(node->mu);
  // Components only gain OSTs over time: never replace a layout by a less instantiated one
  // (a late reply may carry an older view).
  if (fresh && (!node->layout || CountInstantiated(*fresh) >= CountInstantiated(*node->layout))) {
    node->layout = std::move(fresh);
  }
  node->size = node->size_dirty ? std::max<uint64_t>(node->size, attr.size()) : attr.size();
  node->trunc_epoch = attr.trunc_epoch();
  node->data_version = attr.data_version();
  node->no_node_cache.store(attr.no_node_cache());
}

Status ApplyPunches(ClientCore* core,
                    const google::protobuf::RepeatedPtrField<pb::OstTask>& tasks) {
  if (tasks.empty())
    return Status::OK();
  std::vector<std::shared_ptr<OstCall>> calls;
  auto results = std::make_shared<std::vector<Status>>(static_cast<size_t>(tasks.size()));
  for (int i = 0; i < tasks.size(); ++i) {
    const pb::OstTask& t = tasks[i];
    auto call = std::make_shared<OstCall>();
    call->ost = t.ost();
    // A copy of a replicated object whose OSS does not answer soon is left to the MDS's
    // replay: that copy is out of its chain until it catches up.
    if (t.replica())
      call->retry_ms = 2000;
    call->done = [results, i](Result<net::Reply> r) {
      (*results)[static_cast<size_t>(i)] = r.ok() ? Status::OK() : r.status();
    };
    if (t.kind() == 1) {
      auto req = std::make_unique<pb::DestroyReq>();
      req->set_ost(t.ost());
      *req->mutable_obj() = t.obj();
      call->type = net::MsgType::kDestroy;
      call->req = std::move(req);
    } else {
      auto req = std::make_unique<pb::PunchReq>();
      req->set_ost(t.ost());
      *req->mutable_obj() = t.obj();
      req->set_length(t.length());
      call->type = net::MsgType::kPunch;
      call->req = std::move(req);
    }
    calls.push_back(std::move(call));
  }
  // On failure the MDS keeps the tasks in its OST work log and replays them itself.
  core->OstCallAll(std::move(calls)).IgnoreError();  // each result is looked at below
  pb::TruncateDoneReq done;
  for (int i = 0; i < tasks.size(); ++i) {
    const Status& st = (*results)[static_cast<size_t>(i)];
    if (st.ok()) {
      done.add_task_ids(tasks[i].id());
      continue;
    }
    const bool unreachable =
        st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kTimedOut;
    if (!tasks[i].replica() || !unreachable)
      return st;
  }
  if (done.task_ids_size() == 0)
    return Status::OK();
  pb::TruncateDoneResp resp;
  return core->Mds(net::MsgType::kTruncateDone, &done, &resp, true);
}

Status PublishSize(ClientCore* core, Node* node, bool sync) {
  pb::UpdateSizeReq req;
  uint64_t size;
  {
    std::lock_guard<std::mutex> lock(node->mu);
    if (!node->size_dirty && !sync)
      return Status::OK();
    size = node->size;
    net::ToPb(node->fid, req.mutable_fid());
    req.set_size(size);
    net::ToPb(node->mtime.sec != 0 ? node->mtime : NowTimespec(), req.mutable_mtime());
    req.set_trunc_epoch(node->trunc_epoch);
    req.set_sync(sync);
  }
  pb::UpdateSizeResp resp;
  Status st = core->Mds(net::MsgType::kUpdateSize, &req, &resp, true);
  if (st.code() == StatusCode::kStale) {
    // Another client truncated the file since we last looked: our writes came after that
    // truncate as far as this client knows, so extend under the new epoch.
    pb::GetAttrReq greq;
    net::ToPb(node->fid, greq.mutable_fid());
    pb::GetAttrResp gresp;
    CIUIC_RETURN_IF_ERROR(core->Mds(net::MsgType::kGetAttr, &greq, &gresp, false));
    req.set_trunc_epoch(gresp.attr().trunc_epoch());
    st = core->Mds(net::MsgType::kUpdateSize, &req, &resp, true);
  }
  CIUIC_RETURN_IF_ERROR(st);
  std::lock_guard<std::mutex> lock(node->mu);
  if (node->size == size)
    node->size_dirty = false;
  node->trunc_epoch = resp.attr().trunc_epoch();
  node->data_version = resp.attr().data_version();
  return Status::OK();
}

Status TruncateNode(ClientCore* core, Node* node, uint64_t size) {
  // The MDS computes the punches from the size it knows: tell it about our writes first.
  CIUIC_RETURN_IF_ERROR(PublishSize(core, node, false));
  pb::SetAttrReq req;
  net::ToPb(node->fid, req.mutable_fid());
  req.set_valid(8);
  req.set_size(size);
  pb::SetAttrResp resp;
  CIUIC_RETURN_IF_ERROR(core->Mds(net::MsgType::kSetAttr, &req, &resp, true));
  node->write_gen++;
  {
    std::lock_guard<std::mutex> lock(node->mu);
    node->size = resp.attr().size();
    node->size_dirty = false;
    node->trunc_epoch = resp.attr().trunc_epoch();
    node->data_version = resp.attr().data_version();
  }
  return ApplyPunches(core, resp.punches());
}

}  // namespace ciuic::client
