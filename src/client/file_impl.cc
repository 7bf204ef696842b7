#include "client/file_impl.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "client/block_verify.h"
#include "client/io_plan.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "net/pb_convert.h"

namespace ciuic::client {
namespace {

struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Result<size_t> r;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// OpenFile

OpenFile::OpenFile(std::shared_ptr<ClientCore> core,
                   std::shared_ptr<Node> node,
                   std::string path,
                   int flags,
                   uint64_t open_id,
                   const OpenOptions& options)
    : core_(std::move(core)),
      node_(std::move(node)),
      path_(std::move(path)),
      flags_(flags),
      open_id_(open_id),
      options_(options),
      wb_cap_(core_->options().write_buffer_bytes),
      ra_(options.random_access ? 0 : core_->options().readahead_bytes, kRaChunk, kRaDirectMin) {
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    seen_data_version_ = node_->data_version;
  }
  opened_version_ = seen_data_version_;
  if (writable() && core_->node_cache() != nullptr && !options_.no_node_cache &&
      !node_->no_node_cache.load())
    stage_ = core_->node_cache()->StageWrites(node_->fid);
}

void OpenFile::StageWrite(const uint8_t* src, size_t len, uint64_t offset) {
  std::shared_ptr<NodeCache::WriteStage> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stage = stage_;
  }
  if (stage)
    stage->Write(src, len, offset);
}

void OpenFile::DropStage() {
  std::shared_ptr<NodeCache::WriteStage> stage;
  std::lock_guard<std::mutex> lock(mu_);
  stage = std::move(stage_);
}

OpenFile::~OpenFile() = default;

FileImpl::~FileImpl() {
  Status st = f_->Close();
  if (!st.ok())
    LOG_WARN("client: closing {} on destruction: {}", f_->path(), st.ToString());
}

Status OpenFile::CheckOpen(bool write, std::optional<uint64_t>* cache_dv) const {
  const bool cacheable = cache_dv != nullptr && core_->node_cache() != nullptr &&
                         !options_.no_node_cache && !writable() &&
                         !node_->no_node_cache.load(std::memory_order_relaxed);
  if (closed_.load(std::memory_order_acquire))
    return Status::InvalidArgument(fmt::format("{}: file is closed", path_));
  if (cacheable && !wrote_.load(std::memory_order_acquire))
    *cache_dv = seen_data_version_.load(std::memory_order_acquire);
  if (write && !writable()) {
    return Status::PermissionDenied(fmt::format("{}: not open for writing", path_));
  }
  if (!write && !readable()) {
    return Status::PermissionDenied(fmt::format("{}: not open for reading", path_));
  }
  return Status::OK();
}

Status OpenFile::LatchedError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void OpenFile::Latch(const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.ok())
    error_ = st;
}

void OpenFile::OpStart(bool write) {
  std::lock_guard<std::mutex> lock(mu_);
  ++ops_;
  if (write)
    ++write_ops_;
}

void OpenFile::OpDone(bool write) {
  std::lock_guard<std::mutex> lock(mu_);
  --ops_;
  if (write)
    --write_ops_;
  ops_cv_.notify_all();
}

void OpenFile::WaitOps(bool writes_only) {
  std::unique_lock<std::mutex> lock(mu_);
  ops_cv_.wait(lock, [&] { return (writes_only ? write_ops_ : ops_) == 0; });
}

void OpenFile::Throttled(std::function<void()> send) {
  const int max = core_->options().max_inflight_per_file;
  {
    std::lock_guard<std::mutex> lock(thr_mu_);
    if (max > 0 && thr_inflight_ >= max) {
      thr_queue_.push_back(std::move(send));
      return;
    }
    ++thr_inflight_;
  }
  send();
}

void OpenFile::ThrottleDone() {
  std::function<void()> next;
  {
    std::lock_guard<std::mutex> lock(thr_mu_);
    if (thr_head_ < thr_queue_.size()) {
      next = std::move(thr_queue_[thr_head_++]);
      if (thr_head_ == thr_queue_.size()) {
        thr_queue_.clear();
        thr_head_ = 0;
      }
    } else {
      --thr_inflight_;
    }
  }
  if (next)
    next();
}

void OpenFile::PostCompletion(IoCallback cb, Result<size_t> r) {
  auto shared = std::make_shared<std::pair<IoCallback, Result<size_t>>>(std::move(cb), r);
  if (!core_->pool().TrySubmit([shared] { shared->first(std::move(shared->second)); })) {
    shared->first(std::move(shared->second));
  }
}

Result<size_t> OpenFile::WaitIo(const std::function<void(IoCallback)>& start) {
  auto w = std::make_shared<Waiter>();
  start([w](Result<size_t> r) {
    std::lock_guard<std::mutex> lock(w->mu);
    w->r = std::move(r);
    w->done = true;
    w->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait(lock, [&] { return w->done; });
  return std::move(w->r);
}

// ---------------------------------------------------------------------------------------------
// Writes

Status OpenFile::EnsureInstantiated(uint64_t end) {
  auto layout = node_->GetLayout();
  if (LayoutCovers(layout.get(), end))
    return Status::OK();
  pb::InstantiateReq req;
  net::ToPb(node_->fid, req.mutable_fid());
  req.set_end(end);
  pb::InstantiateResp resp;
  Status st = core_->Mds(net::MsgType::kInstantiate, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(path_);
  auto fresh = std::make_shared<const FileLayout>(net::FromPb(resp.layout()));
  if (!LayoutCovers(fresh.get(), end)) {
    return Status::Internal(fmt::format("{}: the MDS did not instantiate the layout up to {}: {}",
                                        path_, end, fresh->ToString()));
  }
  std::lock_guard<std::mutex> lock(node_->mu);
  if (!node_->layout || CountInstantiated(*fresh) >= CountInstantiated(*node_->layout)) {
    node_->layout = std::move(fresh);
  }
  return Status::OK();
}

namespace {

struct WriteOp {
  IoCallback cb;
  std::shared_ptr<void> keepalive;
  const uint8_t* src = nullptr;
  uint64_t offset = 0;
  uint64_t len = 0;
  RangeLock::Ticket ticket = 0;
  std::mutex mu;
  size_t left = 0;
  Status first;
};

}  // namespace

void OpenFile::WriteRange(const uint8_t* src,
                          uint64_t len,
                          uint64_t offset,
                          std::shared_ptr<void> keepalive,
                          IoCallback cb) {
  OpStart(true);
  node_->write_gen++;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    node_->size = std::max<uint64_t>(node_->size, offset + len);
    node_->size_dirty = true;
    node_->unsynced_data = true;
    node_->mtime = NowTimespec();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    wrote_ = true;
  }
  auto self = shared_from_this();
  auto op = std::make_shared<WriteOp>();
  op->cb = std::move(cb);
  op->keepalive = std::move(keepalive);
  op->src = src;
  op->offset = offset;
  op->len = len;
  node_->ranges.Acquire(offset, offset + len, true, [self, op](RangeLock::Ticket t) {
    op->ticket = t;
    auto layout = self->node_->GetLayout();
    if (LayoutCovers(layout.get(), op->offset + op->len)) {
      self->IssueWrite(op->src, op->len, op->offset, op->ticket, op->keepalive, std::move(op->cb));
      return;
    }
    // Instantiating asks the MDS (blocking): not on a network thread.
    bool queued = self->core_->pool().TrySubmit([self, op] {
      Status st = self->EnsureInstantiated(op->offset + op->len);
      if (st.ok()) {
        self->IssueWrite(op->src, op->len, op->offset, op->ticket, op->keepalive,
                         std::move(op->cb));
        return;
      }
      self->node_->ranges.Release(op->ticket);
      self->node_->write_gen++;
      op->cb(st);
      self->OpDone(true);
    });
    if (!queued) {
      self->node_->ranges.Release(op->ticket);
      self->node_->write_gen++;
      op->cb(Status::Aborted(fmt::format("{}: client shut down", self->path_)));
      self->OpDone(true);
    }
  });
}

void OpenFile::NoteWriteEpoch(const std::pair<uint32_t, ObjectId>& key, const std::string& body) {
  pb::WriteResp resp;
  if (!resp.ParseFromString(body) || resp.epoch() == 0)
    return;  // an OSS that sends no epoch is not checked
  std::lock_guard<std::mutex> lock(node_->mu);
  auto it = node_->touched.find(key);
  if (it == node_->touched.end())
    return;
  if (resp.replica_epochs_size() > 0) {
    // A replicated object: each member's epoch, checked by that member at the sync.
    auto& members = node_->replica_epochs[key];
    for (const pb::ReplicaEpoch& e : resp.replica_epochs()) {
      auto [m, fresh] = members.emplace(e.ost(), e.epoch());
      if (!fresh && m->second != e.epoch())
        m->second = Node::kMixedEpochs;
    }
    return;
  }
  if (it->second == 0) {
    it->second = resp.epoch();
  } else if (it->second != resp.epoch()) {
    it->second = Node::kMixedEpochs;  // the OSS lost power between two acknowledged writes
  }
}

void OpenFile::IssueWrite(const uint8_t* src,
                          uint64_t len,
                          uint64_t offset,
                          RangeLock::Ticket ticket,
                          std::shared_ptr<void> keepalive,
                          IoCallback cb) {
  auto self = shared_from_this();
  auto op = std::make_shared<WriteOp>();
  op->cb = std::move(cb);
  op->keepalive = std::move(keepalive);
  op->len = len;
  op->ticket = ticket;
  auto finish = [self, op] {
    self->node_->ranges.Release(op->ticket);
    self->node_->write_gen++;
    auto cb = std::move(op->cb);
    op->keepalive.reset();
    if (op->first.ok()) {
      cb(static_cast<size_t>(op->len));
    } else {
      cb(op->first.WithContext(self->path_));
    }
    self->OpDone(true);
  };
  auto layout = node_->GetLayout();
  std::vector<WritePiece> pieces = PlanWrite(*layout, offset, len, src);
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    for (const WritePiece& p : pieces) {
      node_->touched.emplace(std::pair{p.ost, ObjectId{node_->fid, p.comp_id, p.stripe}}, 0);
    }
  }
  op->left = pieces.size() + 1;
  for (const WritePiece& p : pieces) {
    if (p.ost == UINT32_MAX) {
      std::lock_guard<std::mutex> lock(op->mu);
      if (op->first.ok())
        op->first = Status::Internal("write to an uninstantiated component");
      --op->left;
      continue;
    }
    auto call = std::make_shared<OstCall>();
    call->type = net::MsgType::kWrite;
    call->ost = p.ost;
    auto req = std::make_unique<pb::WriteReq>();
    req->set_ost(p.ost);
    net::ToPb(ObjectId{node_->fid, p.comp_id, p.stripe}, req->mutable_obj());
    req->set_offset(p.obj_offset);
    call->req = std::move(req);
    call->out_data.push_back(net::ConstSpan{p.src, p.len});
    call->done =
        [self, op, finish,
         key = std::pair{p.ost, ObjectId{node_->fid, p.comp_id, p.stripe}}](Result<net::Reply> r) {
          Status st = r.ok() ? Status::OK() : std::move(r).status();
          if (st.ok())
            self->NoteWriteEpoch(key, r->body);
          self->ThrottleDone();
          if (PartDone(op.get(), st))
            finish();
        };
    Throttled([self, call] { self->core_->OstCallAsync(call); });
  }
  bool last;
  {
    std::lock_guard<std::mutex> lock(op->mu);
    last = --op->left == 0;
  }
  if (last)
    finish();
}

void OpenFile::FlushBufferLocked(bool partial, bool may_wait) {
  if (wb_len_ == 0)
    return;
  uint64_t n = wb_len_;
  if (partial) {
    // Send whole stripe units and keep the tail: RPCs stay stripe-sized and aligned.
    uint64_t unit = kDefaultStripeSize;
    if (auto layout = node_->GetLayout()) {
      int ci = layout->ComponentFor(wb_start_ + wb_len_ - 1);
      if (ci >= 0)
        unit = layout->components[static_cast<size_t>(ci)].stripe_size;
    }
    const uint64_t boundary = AlignDown(wb_start_ + wb_len_, unit);
    if (boundary <= wb_start_)
      return;
    n = boundary - wb_start_;
  }
  if (may_wait) {
    EnsureInstantiated(wb_start_ + n).IgnoreError();  // WriteRange retries and reports it
  }
  AlignedBuffer out = std::move(wb_buf_);
  {
    std::unique_lock<std::mutex> lock(flight_mu_);
    if (may_wait)
      flight_cv_.wait(lock, [&] { return flights_ < kMaxFlights; });
    ++flights_;
    if (!wb_free_.empty()) {
      wb_buf_ = std::move(wb_free_.back());
      wb_free_.pop_back();
    }
  }
  if (wb_buf_.size() < wb_cap_)
    wb_buf_.Resize(wb_cap_);
  const uint64_t rest = wb_len_ - n;
  if (rest > 0)
    std::memcpy(wb_buf_.data(), out.data() + n, rest);
  const uint64_t start = wb_start_;
  wb_start_ += n;
  wb_len_ = rest;
  auto holder = std::make_shared<AlignedBuffer>(std::move(out));
  auto self = shared_from_this();
  WriteRange(holder->data(), n, start, holder, [self, holder](Result<size_t> r) {
    if (!r.ok())
      self->Latch(r.status());
    std::lock_guard<std::mutex> lock(self->flight_mu_);
    --self->flights_;
    if (self->wb_free_.size() < kMaxFlights)
      self->wb_free_.push_back(std::move(*holder));
    self->flight_cv_.notify_all();
  });
}

void OpenFile::RegisterFlusher() {
  if (!writable() || wb_cap_ == 0)
    return;
  std::weak_ptr<OpenFile> weak = weak_from_this();
  flusher_id_ = node_->AddFlusher([weak](uint64_t offset, uint64_t len, bool may_wait) {
    auto self = weak.lock();
    return self ? self->FlushBufferIfOverlaps(offset, len, may_wait) : true;
  });
}

void OpenFile::FlushOthers(uint64_t offset, uint64_t len) {
  node_->FlushOverlapping(offset, len, true, flusher_id_);
}

void OpenFile::FlushBuffer(bool may_wait) {
  std::lock_guard<std::mutex> lock(wb_mu_);
  FlushBufferLocked(false, may_wait);
}

bool OpenFile::FlushBufferIfOverlaps(uint64_t offset, uint64_t len, bool may_wait) {
  // A user thread may hold wb_mu_ while it waits for the network (flush slots, the MDS): a
  // network thread must not wait for it.
  std::unique_lock<std::mutex> lock(wb_mu_, std::defer_lock);
  if (may_wait) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return false;
  }
  const uint64_t end = len > UINT64_MAX - offset ? UINT64_MAX : offset + len;
  if (wb_len_ > 0 && offset < wb_start_ + wb_len_ && wb_start_ < end) {
    FlushBufferLocked(false, may_wait);
  }
  return true;
}

Result<size_t> OpenFile::Pwrite(const void* buf, size_t len, uint64_t offset) {
  CIUIC_RETURN_IF_ERROR(CheckOpen(true));
  CIUIC_RETURN_IF_ERROR(LatchedError());
  if (len == 0)
    return size_t{0};
  if (offset > kMaxFileSize || len > kMaxFileSize - offset) {
    return Status::InvalidArgument(fmt::format("{}: write past the largest file size", path_));
  }
  const auto* src = static_cast<const uint8_t*>(buf);
  StageWrite(src, len, offset);
  if (wb_cap_ > 0 && len <= kSmallWriteMax && len <= wb_cap_ / 2) {
    FlushOthers(offset, len);
    std::lock_guard<std::mutex> lock(wb_mu_);
    const uint64_t wb_end = wb_start_ + wb_len_;
    if (wb_len_ > 0 && offset >= wb_start_ && offset + len <= wb_end) {
      std::memcpy(wb_buf_.data() + (offset - wb_start_), src, len);  // rewrite of buffered bytes
    } else {
      if (wb_len_ > 0 && offset == wb_end) {
        if (wb_len_ + len > wb_cap_)
          FlushBufferLocked(true, true);
        if (wb_len_ + len > wb_cap_)
          FlushBufferLocked(false, true);
      } else {
        FlushBufferLocked(false, true);
      }
      if (wb_len_ == 0)
        wb_start_ = offset;
      if (wb_buf_.size() < wb_cap_)
        wb_buf_.Resize(wb_cap_);
      std::memcpy(wb_buf_.data() + wb_len_, src, len);
      wb_len_ += len;
    }
    node_->write_gen++;
    {
      std::lock_guard<std::mutex> nlock(node_->mu);
      node_->size = std::max<uint64_t>(node_->size, offset + len);
      node_->size_dirty = true;
      node_->unsynced_data = true;
      node_->mtime = NowTimespec();
    }
    {
      std::lock_guard<std::mutex> mlock(mu_);
      wrote_ = true;
    }
    if (wb_len_ > wb_cap_ / 2)
      FlushBufferLocked(true, true);
    return len;
  }
  node_->FlushOverlapping(offset, len, true);
  CIUIC_RETURN_IF_ERROR(EnsureInstantiated(offset + len));
  return WaitIo([&](IoCallback cb) { WriteRange(src, len, offset, nullptr, std::move(cb)); });
}

void OpenFile::PwriteAsync(const void* buf, size_t len, uint64_t offset, IoCallback cb) {
  Status st = CheckOpen(true);
  if (st.ok())
    st = LatchedError();
  if (st.ok() && (offset > kMaxFileSize || len > kMaxFileSize - offset)) {
    st = Status::InvalidArgument(fmt::format("{}: write past the largest file size", path_));
  }
  if (!st.ok() || len == 0) {
    PostCompletion(std::move(cb), st.ok() ? Result<size_t>(size_t{0}) : Result<size_t>(st));
    return;
  }
  StageWrite(static_cast<const uint8_t*>(buf), len, offset);
  if (!node_->FlushOverlapping(offset, len, false)) {
    auto self = shared_from_this();
    auto shared_cb = std::make_shared<IoCallback>(std::move(cb));
    if (core_->pool().TrySubmit([self, buf, len, offset, shared_cb] {
          self->node_->FlushOverlapping(offset, len, true);
          self->WriteRange(static_cast<const uint8_t*>(buf), len, offset, nullptr,
                           std::move(*shared_cb));
        })) {
      return;
    }
    PostCompletion(std::move(*shared_cb),
                   Status::Aborted(fmt::format("{}: client shut down", path_)));
    return;
  }
  WriteRange(static_cast<const uint8_t*>(buf), len, offset, nullptr, std::move(cb));
}

// ---------------------------------------------------------------------------------------------
// Position-based IO

Result<size_t> OpenFile::Read(void* buf, size_t len) {
  std::lock_guard<std::mutex> lock(pos_mu_);
  uint64_t pos;
  {
    std::lock_guard<std::mutex> l(mu_);
    pos = pos_;
  }
  CIUIC_ASSIGN_OR_RETURN(size_t n, Pread(buf, len, pos));
  std::lock_guard<std::mutex> l(mu_);
  pos_ = pos + n;
  return n;
}

Result<size_t> OpenFile::Write(const void* buf, size_t len) {
  if (flags_ & O_APPEND) {
    // Atomic within this client: appends of every File of this file take turns.
    std::lock_guard<std::mutex> alock(node_->append_mu);
    uint64_t end;
    {
      std::lock_guard<std::mutex> l(node_->mu);
      end = node_->size;
    }
    CIUIC_ASSIGN_OR_RETURN(size_t n, Pwrite(buf, len, end));
    std::lock_guard<std::mutex> l(mu_);
    pos_ = end + n;
    return n;
  }
  std::lock_guard<std::mutex> lock(pos_mu_);
  uint64_t pos;
  {
    std::lock_guard<std::mutex> l(mu_);
    pos = pos_;
  }
  CIUIC_ASSIGN_OR_RETURN(size_t n, Pwrite(buf, len, pos));
  std::lock_guard<std::mutex> l(mu_);
  pos_ = pos + n;
  return n;
}

Result<uint64_t> OpenFile::Seek(int64_t offset, int whence) {
  std::lock_guard<std::mutex> lock(pos_mu_);
  int64_t base;
  if (whence == SEEK_SET) {
    base = 0;
  } else if (whence == SEEK_CUR) {
    std::lock_guard<std::mutex> l(mu_);
    base = static_cast<int64_t>(pos_);
  } else if (whence == SEEK_END) {
    std::lock_guard<std::mutex> l(node_->mu);
    base = static_cast<int64_t>(node_->size);
  } else {
    return Status::InvalidArgument(fmt::format("{}: unsupported seek whence {}", path_, whence));
  }
  if ((offset < 0 && base + offset < 0) ||
      (offset > 0 && base > static_cast<int64_t>(kMaxFileSize) - offset)) {
    return Status::InvalidArgument(fmt::format("{}: seek out of range", path_));
  }
  std::lock_guard<std::mutex> l(mu_);
  pos_ = static_cast<uint64_t>(base + offset);
  return pos_;
}

// ---------------------------------------------------------------------------------------------
// Flush, fsync, truncate, stat, close

Status OpenFile::Flush() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_)
      return Status::InvalidArgument(fmt::format("{}: file is closed", path_));
  }
  FlushBuffer(true);
  WaitOps(true);
  CIUIC_RETURN_IF_ERROR(LatchedError());
  return PublishSize(core_.get(), node_.get(), false).WithContext(path_);
}

std::optional<Status> OpenFile::FlushIfIdle() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || write_ops_ != 0)
      return std::nullopt;
  }
  {
    std::lock_guard<std::mutex> lock(wb_mu_);
    if (wb_len_ != 0)
      return std::nullopt;
  }
  {
    std::lock_guard<std::mutex> lock(flight_mu_);
    if (flights_ != 0)
      return std::nullopt;
  }
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    if (node_->size_dirty)
      return std::nullopt;
  }
  return LatchedError();
}

Status OpenFile::Fsync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_)
      return Status::InvalidArgument(fmt::format("{}: file is closed", path_));
  }
  FlushBuffer(true);
  WaitOps(true);
  CIUIC_RETURN_IF_ERROR(LatchedError());
  const uint64_t gen = node_->write_gen.load();
  // (ost, epoch of the acknowledgements) -> objects: each sync names the epoch its writes were
  // acknowledged under.
  // Replicated objects group by their members' epochs instead (a digest of them in the key).
  std::map<std::pair<uint32_t, uint64_t>, std::vector<ObjectId>> by_ost;
  std::map<std::pair<uint32_t, uint64_t>, std::map<uint32_t, uint64_t>> group_epochs;
  bool need_size;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    for (const auto& [key, epoch] : node_->touched) {
      auto r = node_->replica_epochs.find(key);
      if (r == node_->replica_epochs.end()) {
        by_ost[{key.first, epoch}].push_back(key.second);
        continue;
      }
      uint64_t digest = 0x9E3779B97F4A7C15ull;
      for (const auto& [ost, e] : r->second)
        digest = (digest ^ (e + ost)) * 0x100000001B3ull;
      by_ost[{key.first, digest}].push_back(key.second);
      group_epochs[{key.first, digest}] = r->second;
    }
    need_size = node_->unsynced_data || node_->size_dirty;
  }
  // A file created (or changed on the MDS) and not yet synced there: fsync makes it durable
  // too, written to or not (an empty new file fsynced must exist after a power cut).
  need_size = need_size || core_->HasUnsyncedMdsChange(node_->fid.seq);
  std::vector<std::shared_ptr<OstCall>> calls;
  for (const auto& [ost_epoch, objs] : by_ost) {
    const uint32_t ost = ost_epoch.first;
    auto call = std::make_shared<OstCall>();
    call->type = net::MsgType::kSync;
    call->ost = ost;
    auto req = std::make_unique<pb::SyncReq>();
    req->set_ost(ost);
    auto g = group_epochs.find(ost_epoch);
    if (g == group_epochs.end()) {
      req->set_epoch(ost_epoch.second);
    } else {
      for (const auto& [member, e] : g->second) {
        pb::ReplicaEpoch* re = req->add_replica_epochs();
        re->set_ost(member);
        re->set_epoch(e);
      }
    }
    for (const ObjectId& o : objs)
      net::ToPb(o, req->add_objs());
    call->req = std::move(req);
    calls.push_back(std::move(call));
  }
  Status st = core_->OstCallAll(std::move(calls));
  if (!st.ok())
    return st.WithContext(path_);
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    for (const auto& [ost_epoch, objs] : by_ost) {
      for (const ObjectId& o : objs) {
        node_->touched.erase({ost_epoch.first, o});
        node_->replica_epochs.erase({ost_epoch.first, o});
      }
    }
  }
  if (need_size) {
    CIUIC_RETURN_IF_ERROR(PublishSize(core_.get(), node_.get(), true).WithContext(path_));
    std::lock_guard<std::mutex> lock(node_->mu);
    if (node_->write_gen.load() == gen)
      node_->unsynced_data = false;
  }
  return Status::OK();
}

Status OpenFile::Truncate(uint64_t size) {
  CIUIC_RETURN_IF_ERROR(CheckOpen(true));
  if (size > kMaxFileSize)
    return Status::InvalidArgument(fmt::format("{}: size too large", path_));
  node_->FlushOverlapping(0, UINT64_MAX, true);
  WaitOps(true);
  CIUIC_RETURN_IF_ERROR(LatchedError());
  DropReadahead();
  DropStage();  // the staged blocks no longer say what the file holds
  RangeLock::Ticket t = node_->ranges.AcquireBlocking(0, UINT64_MAX, true);
  Status st = TruncateNode(core_.get(), node_.get(), size);
  node_->ranges.Release(t);
  return st.ok() ? st : st.WithContext(path_);
}

Status OpenFile::Allocate(uint64_t offset, uint64_t len, bool keep_size) {
  CIUIC_RETURN_IF_ERROR(CheckOpen(true));
  if (len == 0 || offset > kMaxFileSize || len > kMaxFileSize - offset) {
    return Status::InvalidArgument(fmt::format("{}: bad allocation range", path_));
  }
  DropStage();
  FlushBuffer(true);
  WaitOps(true);
  CIUIC_RETURN_IF_ERROR(PublishSize(core_.get(), node_.get(), false).WithContext(path_));
  pb::FallocateReq req;
  net::ToPb(node_->fid, req.mutable_fid());
  req.set_offset(offset);
  req.set_length(len);
  req.set_keep_size(keep_size);
  pb::FallocateResp resp;
  Status st = core_->Mds(net::MsgType::kFallocate, &req, &resp, true);
  if (!st.ok())
    return st.WithContext(path_);
  RefreshNode(node_.get(), resp.attr(), resp.has_layout() ? &resp.layout() : nullptr);
  return Status::OK();
}

Result<FileStat> OpenFile::Stat() {
  pb::GetAttrReq req;
  net::ToPb(node_->fid, req.mutable_fid());
  pb::GetAttrResp resp;
  Status st = core_->Mds(net::MsgType::kGetAttr, &req, &resp, false);
  if (!st.ok())
    return st.WithContext(path_);
  RefreshNode(node_.get(), resp.attr(), resp.has_layout() ? &resp.layout() : nullptr);
  FileStat s = FileStatFromAttr(resp.attr());
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    s.size = node_->size;
  }
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.data_version != seen_data_version_) {
      changed = !wrote_;
      seen_data_version_ = s.data_version;
    }
  }
  if (changed)
    DropReadahead();  // another client changed the data
  return s;
}

Status OpenFile::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_)
      return Status::OK();
    closed_ = true;
  }
  if (flusher_id_ != 0)
    node_->RemoveFlusher(flusher_id_);
  FlushBuffer(true);
  WaitOps(false);
  DropReadahead();
  Status st = LatchedError();
  bool wrote;
  std::shared_ptr<NodeCache::WriteStage> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wrote = wrote_;
    stage = std::move(stage_);
  }
  if (wrote) {
    Status s = PublishSize(core_.get(), node_.get(), false);
    if (st.ok())
      st = s;
  }
  if (open_id_ != 0) {
    pb::CloseReq req;
    net::ToPb(node_->fid, req.mutable_fid());
    req.set_open_id(open_id_);
    req.set_wrote(wrote);
    // Write-through: the MDS says whether this handle's writes are all the file's changes
    // since its open, and the data version they make (docs/design.md "Node cache").
    const bool ask = stage != nullptr && wrote && st.ok() && stage->staged() > 0;
    if (ask) {
      req.set_check_sole(true);
      req.set_opened_version(opened_version_);
    }
    pb::CloseResp resp;
    Status s = core_->Mds(net::MsgType::kClose, &req, &resp, true);
    if (!s.ok() && s.IsRetryable() && s.code() != StatusCode::kAborted) {
      req.set_check_sole(false);
      core_->DeferClose(req);  // the MDS was out of reach: it gets the close later
    }
    if (ask && s.ok() && resp.sole_version() != 0) {
      uint64_t size;
      {
        std::lock_guard<std::mutex> lock(node_->mu);
        size = node_->size;
      }
      stage->Commit(resp.sole_version(), size);
    }
    if (st.ok())
      st = s;
  }
  return st.ok() ? st : st.WithContext(path_);
}

FileLayout OpenFile::layout() const {
  auto l = node_->GetLayout();
  return l ? *l : FileLayout{};
}

}  // namespace ciuic::client
