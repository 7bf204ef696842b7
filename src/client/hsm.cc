// HSM from the client's side (docs/design.md "HSM"): the client drives an operation, the OSSes
// move the bytes. HsmBegin on the MDS (checks, marks the file busy, returns the layout), one
// kHsmObj per stripe object on the OSSes (all at once), then HsmEnd on the MDS, which records
// the outcome. A client that dies in between leaves the file as it was.
#include "client/hsm.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include <fmt/format.h>

#include "client/client_core.h"
#include "client/client_impl.h"
#include "client/path.h"
#include "common/logging.h"
#include "net/pb_convert.h"

namespace ciuic {

const char* HsmStateName(HsmState s) {
  switch (s) {
    case HsmState::kNone:
      return "none";
    case HsmState::kArchived:
      return "archived";
    case HsmState::kReleased:
      return "released";
    case HsmState::kDirty:
      return "dirty";
    case HsmState::kLost:
      return "lost";
  }
  return "?";
}

namespace client {
namespace {

constexpr uint32_t kOpArchive = kHsmOpArchive;
constexpr uint32_t kOpRelease = kHsmOpRelease;
constexpr uint32_t kOpRestore = kHsmOpRestore;
constexpr uint32_t kOpRemove = kHsmOpRemove;
// RepoQueueReq.op (src/proto/ciuic.proto).
constexpr uint32_t kRepoOpOn = 1;
constexpr uint32_t kRepoOpOff = 2;
constexpr uint32_t kRepoOpList = 3;
constexpr uint32_t kRepoOpDone = 4;
constexpr uint32_t kRepoOpLinks = 5;
constexpr uint32_t kRepoOpRecordLink = 6;
// HsmObjReq.op (src/proto/ciuic.proto).
constexpr uint32_t kObjArchive = 1;
constexpr uint32_t kObjVerify = 2;
constexpr uint32_t kObjRestore = 3;
constexpr uint32_t kObjRemove = 4;
constexpr uint32_t kObjRepoRestore = 5;
constexpr uint32_t kObjRepoVerify = 6;
constexpr uint32_t kObjRestoreStart = 7;
constexpr uint32_t kObjRepoRestoreStart = 8;
constexpr uint32_t kObjRestoreWait = 9;

Result<std::string> CleanPath(const std::string& path) {
  CIUIC_RETURN_IF_ERROR(ValidatePath(path));
  return NormalizePath(path);
}

struct ObjRef {
  uint32_t ost = 0;
  pb::ObjectId obj;
  const pb::Component* comp = nullptr;  // in the layout ObjectsOf was given
};

// The instantiated objects of `layout`.
std::vector<ObjRef> ObjectsOf(const Fid& fid, const pb::Layout& layout) {
  std::vector<ObjRef> out;
  for (const auto& c : layout.components()) {
    for (int s = 0; s < c.osts_size(); ++s) {
      ObjRef r;
      r.ost = c.osts(s);
      net::ToPb(fid, r.obj.mutable_fid());
      r.obj.set_comp(c.id());
      r.obj.set_stripe(static_cast<uint32_t>(s));
      r.comp = &c;
      out.push_back(std::move(r));
    }
  }
  return out;
}

// A slow store's throughput: an HSM request about an object may take as long as moving the
// most bytes the object can hold at this rate.
constexpr uint64_t kSlowStoreBytesPerSec = uint64_t{8} << 20;

// How long one HSM request about an object of a `file_size`-byte file may wait: the client's
// io_timeout plus the time to move the file at kSlowStoreBytesPerSec. A 1 GiB restore is not cut
// off at a minute, and a dead OSS still fails in bounded time. Starts and removals move nothing
// while answered.
int HsmTimeoutMs(ClientCore* core, uint32_t op, uint64_t file_size) {
  const int64_t base = core->options().io_timeout_ms;
  if (op == kObjRemove || op == kObjRestoreStart || op == kObjRepoRestoreStart)
    return static_cast<int>(base);
  const int64_t extra = static_cast<int64_t>(file_size / (kSlowStoreBytesPerSec / 1000));
  return static_cast<int>(std::min<int64_t>(base + extra, INT32_MAX));
}

// One HsmObj request about object `o` (done is the caller's). `source` (a file from a data
// repository: ops 5, 6 and 8) names the object; `file_size` is the file's size.
std::shared_ptr<OstCall> NewObjCall(ClientCore* core,
                                    const ObjRef& o,
                                    uint32_t op,
                                    uint64_t version,
                                    const pb::HsmRecord* source,
                                    uint64_t file_size) {
  auto call = std::make_shared<OstCall>();
  call->type = net::MsgType::kHsmObj;
  call->ost = o.ost;
  call->timeout_ms = HsmTimeoutMs(core, op, file_size);
  auto req = std::make_unique<pb::HsmObjReq>();
  req->set_ost(o.ost);
  *req->mutable_obj() = o.obj;
  req->set_op(op);
  req->set_version(version);
  if (source != nullptr) {
    req->set_source_url(source->source_url());
    req->set_source_key(source->source_key());
    req->set_source_etag(source->source_etag());
    req->set_file_size(file_size);
    *req->mutable_comp() = *o.comp;
  }
  call->req = std::move(req);
  return call;
}

// Runs `op` on every object at once; *backend gets an OSS's cold tier description. `source`
// (a file from a data repository: ops 5, 6 and 8) names the object; `file_size` is the file's
// size (it bounds how long each request may take).
Status RunObjects(ClientCore* core,
                  const std::vector<ObjRef>& objs,
                  uint32_t op,
                  uint64_t version,
                  std::string* backend,
                  const pb::HsmRecord* source,
                  uint64_t file_size) {
  std::vector<std::shared_ptr<OstCall>> calls;
  auto seen = std::make_shared<std::string>();
  auto mu = std::make_shared<std::mutex>();
  for (const ObjRef& o : objs) {
    auto call = NewObjCall(core, o, op, version, source, file_size);
    call->done = [seen, mu](Result<net::Reply> r) {
      if (!r.ok())
        return;
      pb::HsmObjResp resp;
      if (resp.ParseFromString(r->body)) {
        std::lock_guard<std::mutex> lock(*mu);
        if (seen->empty())
          *seen = resp.backend();
      }
    };
    calls.push_back(std::move(call));
  }
  Status st = core->OstCallAll(std::move(calls));
  if (backend != nullptr)
    *backend = *seen;
  return st;
}

// The end of a restore by extents: waits (asynchronously) for every object's restore to end on
// its OSS, then records the outcome with HsmEnd (token `token`; 0 for a reader that joined:
// success only, naming the archived `version` the objects came back from; 0 for a data
// repository's file). Nothing blocks a thread while the OSSes work; the HsmEnd runs on the pool.
void EndRestoreWhenDone(ClientCore* core,
                        const Fid& fid,
                        const std::string& name,
                        const std::vector<ObjRef>& objs,
                        uint64_t token,
                        uint64_t version,
                        uint64_t file_size) {
  struct State {
    std::mutex mu;
    size_t left = 0;
    Status first;
  };
  auto state = std::make_shared<State>();
  state->left = objs.size();
  auto end = [core, fid, name, token, version, state] {
    Status st;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      st = state->first;
    }
    pb::HsmEndReq req;
    net::ToPb(fid, req.mutable_fid());
    req.set_op(kOpRestore);
    req.set_token(token);
    if (token == 0)
      req.set_version(version);
    req.set_failed(!st.ok());
    // A bad or missing copy makes the file lost; an OSS that lost track of the restore (it
    // restarted) leaves it released, for the next reader to restore.
    req.set_copy_bad(st.code() == StatusCode::kCorruption || st.code() == StatusCode::kNotFound);
    pb::HsmEndResp resp;
    Status e = (token == 0 && !st.ok()) ? Status::OK()  // failures are the beginner's to record
                                        : core->Mds(net::MsgType::kHsmEnd, &req, &resp, true);
    // The reader had the restore's error; a failure to record the end is news. Stale:
    // another reader of the file recorded the end first.
    if (!e.ok() && e.code() != StatusCode::kStale) {
      LOG_WARN("{}: the end of its restore ({}) was not recorded: {}", name,
               st.ok() ? "whole" : st.ToString(), e.ToString());
    } else if (!st.ok()) {
      LOG_DEBUG("{}: restore ended: {}", name, st.ToString());
    }
    core->EndBackground();
  };
  // Shutdown waits a little for this (HsmEnd needs the session): a `ciuic get` that read the
  // whole file records its restore before the process exits.
  core->BeginBackground();
  if (objs.empty()) {
    if (!core->pool().TrySubmit(end)) {
      LOG_WARN("{}: restore not recorded (client stopping)", name);
      core->EndBackground();
    }
    return;
  }
  for (const ObjRef& o : objs) {
    auto call = NewObjCall(core, o, kObjRestoreWait, 0, nullptr, file_size);
    call->done = [core, state, end, name](Result<net::Reply> r) {
      bool last;
      {
        std::lock_guard<std::mutex> lock(state->mu);
        if (!r.ok() && state->first.ok())
          state->first = r.status();
        last = --state->left == 0;
      }
      // The MDS call blocks: on the pool. A client going away leaves the file busy until the
      // mark expires; readers join the restore meanwhile.
      if (last && !core->pool().TrySubmit(end)) {
        LOG_WARN("{}: restore not recorded (client stopping)", name);
        core->EndBackground();
      }
    };
    core->OstCallAsync(std::move(call));
  }
}

}  // namespace

Status ClientImpl::HsmRun(const Fid& fid, const std::string& name, uint32_t op) {
  return HsmRunFid(core_.get(), fid, name, op);
}

Status RestoreIfReleased(
    ClientCore* core, const Fid& fid, const std::string& name, bool* restored, bool background) {
  *restored = false;
  pb::GetAttrReq req;
  net::ToPb(fid, req.mutable_fid());
  pb::GetAttrResp resp;
  // A file that is gone (or an MDS that cannot say) is not a released one: the caller keeps
  // its own error.
  // Another client's restore of the same file in progress (kUnavailable): wait for it.
  for (int attempt = 0;; ++attempt) {
    if (!core->Mds(net::MsgType::kGetAttr, &req, &resp, false).ok() || !resp.attr().hsm_released())
      return Status::OK();
    Status st = HsmRunFid(core, fid, name, kHsmOpRestore, background);
    if (st.ok()) {
      *restored = true;
      return st;
    }
    if (st.code() != StatusCode::kUnavailable || attempt >= 600)
      return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

Status HsmRunFid(
    ClientCore* core, const Fid& fid, const std::string& name, uint32_t op, bool background) {
  pb::HsmBeginReq breq;
  net::ToPb(fid, breq.mutable_fid());
  breq.set_op(op);
  pb::HsmBeginResp begin;
  CIUIC_RETURN_IF_ERROR(core->Mds(net::MsgType::kHsmBegin, &breq, &begin, true).WithContext(name));
  if (begin.nothing_to_do())
    return Status::OK();
  const std::vector<ObjRef> objs = ObjectsOf(fid, begin.layout());
  auto end = [&](bool failed, bool copy_bad, const std::string& backend, pb::HsmEndResp* resp) {
    pb::HsmEndReq req;
    net::ToPb(fid, req.mutable_fid());
    req.set_op(op);
    req.set_token(begin.token());
    if (op == kOpRestore && begin.token() == 0 && begin.record().source_key().empty())
      req.set_version(begin.record().archived_version());
    req.set_failed(failed);
    req.set_copy_bad(copy_bad);
    req.set_backend(backend);
    return core->Mds(net::MsgType::kHsmEnd, &req, resp, true);
  };
  std::string backend;
  Status copied;
  // A file from a data repository: its copy is the repository's plain object.
  const pb::HsmRecord* source = begin.record().source_key().empty() ? nullptr : &begin.record();
  const uint64_t size = begin.attr().size();
  if (source != nullptr && op == kOpRestore) {
    // Every byte must have an object to land in (the import placed them all).
    for (const auto& c : begin.layout().components()) {
      if (c.start() < size && c.osts_size() == 0) {
        pb::HsmEndResp resp;
        end(true, false, "", &resp).IgnoreError();
        return Status::IoError(fmt::format(
            "{}: restore from the data repository failed: its layout has no OSTs at offset {}",
            name, c.start()));
      }
    }
  }
  const bool join = op == kOpRestore && begin.token() == 0;
  if (op == kOpRestore && (background || join)) {
    // Restore by extents: every OSS starts (or joins) its objects' restores first.
    auto start_all = [&] {
      return source != nullptr
                 ? RunObjects(core, objs, kObjRepoRestoreStart, 0, nullptr, source, size)
                 : RunObjects(core, objs, kObjRestoreStart, begin.record().archived_version(),
                              nullptr, nullptr, size);
    };
    copied = start_all();
    if (copied.ok() && !background) {
      // A joiner that needs the whole file; it may record the end itself. An OSS that lost
      // track of a restore between the start and the wait (it restarted: kAborted) starts it
      // again; a copy that is bad stays an error.
      for (int attempt = 0;; ++attempt) {
        copied = RunObjects(core, objs, kObjRestoreWait, 0, nullptr, nullptr, size);
        if (copied.code() != StatusCode::kAborted || attempt == 3)
          break;
        LOG_INFO("{}: an OSS lost the restore ({}); starting it again", name, copied.ToString());
        copied = start_all();
        if (!copied.ok())
          break;
      }
      if (copied.ok()) {
        pb::HsmEndResp resp;
        Status e = end(false, false, "", &resp);
        if (!e.ok() && e.code() != StatusCode::kStale)
          return e.WithContext(name);
        return Status::OK();
      }
    }
    if (copied.ok()) {
      EndRestoreWhenDone(core, fid, name, objs, begin.token(),
                         source != nullptr ? 0 : begin.record().archived_version(), size);
      return Status::OK();
    }
    if (join) {
      return Status::IoError(fmt::format(
          "{}: restore from {} failed: {}", name,
          source != nullptr ? "the data repository" : "the cold tier", copied.message()));
    }
    // The owner of a failed start ends it below, as a failed restore.
  }
  switch (join || (op == kOpRestore && background) ? 0 : op) {
    case kOpArchive:
      copied = RunObjects(core, objs, kObjArchive, begin.data_version(), &backend, nullptr, size);
      break;
    case kOpRelease:
      // The OSSes re-read the archived CRCs and compare them with the objects' blocks: nothing
      // is released without a complete copy of exactly these bytes. A repository's object is
      // checked to be the one imported (same ETag and size).
      copied = source != nullptr
                   ? RunObjects(core, objs, kObjRepoVerify, 0, nullptr, source, size)
                   : RunObjects(core, objs, kObjVerify, begin.record().archived_version(), nullptr,
                                nullptr, size);
      break;
    case kOpRestore:
      copied = source != nullptr
                   ? RunObjects(core, objs, kObjRepoRestore, 0, nullptr, source, size)
                   : RunObjects(core, objs, kObjRestore, begin.record().archived_version(), nullptr,
                                nullptr, size);
      break;
    default:
      break;  // remove: the copy goes after the MDS forgot it
  }
  if (!copied.ok()) {
    const StatusCode code = copied.code();
    const bool bad =
        op == kOpRestore && (code == StatusCode::kCorruption || code == StatusCode::kNotFound);
    pb::HsmEndResp resp;
    end(true, bad, "", &resp).IgnoreError();  // the copy's error is the one to report
    if (op == kOpRestore) {
      // Never wrong bytes: the reader gets EIO, with the reason.
      return Status::IoError(fmt::format(
          "{}: restore from {} failed: {}", name,
          source != nullptr ? "the data repository" : "the cold tier", copied.message()));
    }
    if (op == kOpRelease && (code == StatusCode::kCorruption || code == StatusCode::kNotFound)) {
      return Status::Corruption(fmt::format("{}: not released: {}", name, copied.message()));
    }
    return copied.WithContext(fmt::format("{}: {}", name, op == kOpArchive ? "archive" : "hsm"));
  }
  if (op == kOpArchive && backend.empty())
    backend = "(no objects)";
  pb::HsmEndResp resp;
  Status st = end(false, false, backend, &resp);
  if (!st.ok()) {
    if (op == kOpArchive && st.code() == StatusCode::kBusy) {
      // Changed while copied: the copy is of no version anyone will name.
      RunObjects(core, objs, kObjRemove, begin.data_version(), nullptr, nullptr, 0).IgnoreError();
    }
    return st.WithContext(name);
  }
  if (resp.stale_version() != 0) {
    // An older copy (archive) or the removed one: the MDS no longer names it.
    std::vector<ObjRef> stale = ObjectsOf(fid, resp.layout());
    Status rm = RunObjects(core, stale, kObjRemove, resp.stale_version(), nullptr, nullptr, 0);
    if (!rm.ok() && op == kOpRemove)
      return rm.WithContext(fmt::format("{}: removing the archived copy", name));
  }
  return Status::OK();
}

Status ClientImpl::HsmPath(const std::string& path, uint32_t op) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(path));
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(norm, true));
  return HsmRun(fid, norm, op);
}

Status ClientImpl::HsmArchive(const std::string& path) {
  return HsmPath(path, kOpArchive);
}
Status ClientImpl::HsmRelease(const std::string& path) {
  return HsmPath(path, kOpRelease);
}
Status ClientImpl::HsmRestore(const std::string& path) {
  return HsmPath(path, kOpRestore);
}
Status ClientImpl::HsmRemove(const std::string& path) {
  return HsmPath(path, kOpRemove);
}

Status ClientImpl::HsmImport(const std::string& path, const RepoImport& spec) {
  std::string norm;
  return WithParent(path, &norm, [&](const Fid& parent, const std::string& name) {
    pb::HsmImportReq req;
    net::ToPb(parent, req.mutable_parent());
    req.set_name(name);
    req.set_mode(spec.mode & 0777);
    req.set_size(spec.size);
    req.mutable_mtime()->set_sec(spec.mtime_ms / 1000);
    req.mutable_mtime()->set_nsec(static_cast<uint32_t>((spec.mtime_ms % 1000) * 1000000));
    req.set_url(spec.url);
    req.set_key(spec.key);
    req.set_etag(spec.etag);
    req.set_xattr_name(spec.xattr_name);
    req.set_xattr_value(spec.xattr_value);
    pb::HsmImportResp resp;
    return core_->Mds(net::MsgType::kHsmImport, &req, &resp, true);
  });
}

Status ClientImpl::RepoQueueCall(const std::string& dir,
                                 pb::RepoQueueReq* req,
                                 pb::RepoQueueResp* resp) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(dir));
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(norm, true));
  net::ToPb(fid, req->mutable_dir());
  return core_->Mds(net::MsgType::kRepoQueue, req, resp, req->op() != kRepoOpList)
      .WithContext(norm);
}

Status ClientImpl::RepoSetExportOnClose(const std::string& dir, bool on) {
  pb::RepoQueueReq req;
  req.set_op(on ? kRepoOpOn : kRepoOpOff);
  pb::RepoQueueResp resp;
  return RepoQueueCall(dir, &req, &resp);
}

Result<RepoQueue> ClientImpl::RepoListQueue(const std::string& dir, uint32_t max) {
  pb::RepoQueueReq req;
  req.set_op(kRepoOpList);
  req.set_max(max);
  pb::RepoQueueResp resp;
  CIUIC_RETURN_IF_ERROR(RepoQueueCall(dir, &req, &resp));
  RepoQueue out;
  out.export_on_close = resp.export_on_close();
  out.entries.reserve(resp.entries_size());
  for (const pb::RepoQueueEntry& e : resp.entries()) {
    RepoQueued q;
    q.id = FileId{e.fid().seq(), e.fid().mds(), e.fid().ver()};
    q.version = e.version();
    q.path = e.path();
    out.entries.push_back(std::move(q));
  }
  return out;
}

Status ClientImpl::RepoQueueDone(const std::string& dir, const std::vector<RepoQueued>& done) {
  pb::RepoQueueReq req;
  req.set_op(kRepoOpDone);
  for (const RepoQueued& q : done) {
    pb::RepoQueueEntry* e = req.add_done();
    e->mutable_fid()->set_seq(q.id.seq);
    e->mutable_fid()->set_mds(q.id.mds);
    e->mutable_fid()->set_ver(q.id.ver);
    e->set_version(q.version);
  }
  pb::RepoQueueResp resp;
  return RepoQueueCall(dir, &req, &resp);
}

Status ClientImpl::RepoRecordLink(const std::string& dir) {
  pb::RepoQueueReq req;
  req.set_op(kRepoOpRecordLink);
  pb::RepoQueueResp resp;
  return RepoQueueCall(dir, &req, &resp);
}

Result<std::vector<RepoLink>> ClientImpl::RepoLinks() {
  pb::RepoQueueReq req;
  req.set_op(kRepoOpLinks);
  pb::RepoQueueResp resp;
  CIUIC_RETURN_IF_ERROR(core_->Mds(net::MsgType::kRepoQueue, &req, &resp, false));
  std::vector<RepoLink> out;
  out.reserve(resp.entries_size());
  for (const pb::RepoQueueEntry& e : resp.entries())
    out.push_back(RepoLink{e.path(), e.export_on_close()});
  return out;
}

Result<HsmStatus> ClientImpl::HsmGetState(const std::string& path) {
  CIUIC_ASSIGN_OR_RETURN(std::string norm, CleanPath(path));
  CIUIC_ASSIGN_OR_RETURN(Fid fid, FidOf(norm, true));
  pb::HsmStateReq req;
  net::ToPb(fid, req.mutable_fid());
  pb::HsmStateResp resp;
  CIUIC_RETURN_IF_ERROR(core_->Mds(net::MsgType::kHsmState, &req, &resp, false).WithContext(norm));
  HsmStatus out;
  out.data_version = resp.attr().data_version();
  out.archived_version = resp.record().archived_version();
  out.backend = resp.record().backend();
  out.has_heat = resp.has_heat();
  out.heat = resp.heat();
  switch (resp.record().state()) {
    case 0:
      out.state = HsmState::kNone;
      break;
    case 2:
      out.state = HsmState::kReleased;
      break;
    case 3:
      out.state = HsmState::kLost;
      break;
    default:
      out.state = out.archived_version == out.data_version ? HsmState::kArchived : HsmState::kDirty;
  }
  return out;
}

}  // namespace client
}  // namespace ciuic
