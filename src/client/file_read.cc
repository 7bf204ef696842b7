#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "client/block_verify.h"
#include "client/file_impl.h"
#include "client/hsm.h"
#include "client/io_plan.h"
#include "client/node_cache.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "net/pb_convert.h"

// The read path of OpenFile: striped fan-out with verification, and readahead.
namespace ciuic::client {

// ---------------------------------------------------------------------------------------------
// Reads

namespace {

struct ReadOp {
  IoCallback cb;
  uint8_t* buf = nullptr;
  uint64_t offset = 0;
  uint64_t len = 0;
  RangeLock::Ticket ticket = 0;
  std::vector<ReadPiece> pieces;
  std::mutex mu;
  size_t left = 0;
  Status first;
  bool restore_tried = false;  // a resolved read already restored a released file once
  bool restoring = false;      // issued while the handle's restore by extents may still run
};

// Checks one read reply and moves its bytes into place.
// `must_exist`: the file was opened from a resolved layout (OpenResolved), so a missing object
// means the file changed since, not a hole.
Status FinishReadPiece(const Fid& fid, const ReadPiece& p, bool must_exist, Result<net::Reply> r) {
  if (!r.ok())
    return r.status();
  net::Reply& rep = *r;
  pb::ReadResp resp;
  CIUIC_RETURN_IF_ERROR(net::Parse(rep.body, &resp, "ReadResp"));
  const ObjectId oid{fid, p.comp_id, p.stripe};
  if (must_exist && !resp.exists()) {
    return Status::Stale(fmt::format(
        "OST {} has no object {}: the file was removed or rewritten after its layout was "
        "resolved (resolve it again)",
        p.ost, oid.FileName()));
  }
  // A shared-memory read placed the blocks in p.dest itself (the reply carries none).
  const bool in_shm = resp.in_shm();
  const uint64_t data_len = in_shm ? resp.shm_len() : rep.data_len;
  if (data_len > p.len || resp.aligned_offset() != p.obj_offset) {
    return Status::Corruption(
        fmt::format("OST {} object {}: read reply for [{}, +{}) carries [{}, +{})", p.ost,
                    oid.FileName(), p.obj_offset, p.len, resp.aligned_offset(), data_len));
  }
  uint8_t* data = rep.data_in_dest || in_shm ? p.dest : rep.data.data();
  if ((rep.data_in_dest || in_shm) && !p.direct) {
    return Status::Internal("read reply landed in a destination that was not offered");
  }
  if (in_shm && rep.data_len != 0) {
    return Status::Corruption(
        fmt::format("OST {} object {}: shared-memory read reply also carries {} bytes", p.ost,
                    oid.FileName(), rep.data_len));
  }
  BlockSource src;
  src.ost = p.ost;
  src.obj = oid;
  CIUIC_RETURN_IF_ERROR(
      VerifyReadBlocks(data, data_len, resp.aligned_offset(), resp.object_length(), resp.exists(),
                       resp.block_crcs().data(), static_cast<size_t>(resp.block_crcs_size()), src));
  if (p.direct) {
    if (data != p.dest && data_len > 0)
      std::memcpy(p.dest, data, data_len);
    if (data_len < p.len)
      std::memset(p.dest + data_len, 0, p.len - data_len);
    return Status::OK();
  }
  uint64_t have = 0;
  if (p.skip < data_len) {
    have = std::min<uint64_t>(p.copy_len, data_len - p.skip);
    std::memcpy(p.dest, data + p.skip, have);
  }
  if (have < p.copy_len)
    std::memset(p.dest + have, 0, p.copy_len - have);
  return Status::OK();
}

}  // namespace

void OpenFile::ReadRange(uint8_t* buf, uint64_t len, uint64_t offset, IoCallback cb) {
  ReadRangeOnce(buf, len, offset, std::move(cb), false);
}

void OpenFile::ReadRangeOnce(
    uint8_t* buf, uint64_t len, uint64_t offset, IoCallback cb, bool restore_tried) {
  auto op = std::make_shared<ReadOp>();
  op->restore_tried = restore_tried;
  op->restoring = restoring_.load();
  op->cb = std::move(cb);
  op->buf = buf;
  op->offset = offset;
  op->len = len;
  OpStart(false);
  auto self = shared_from_this();
  auto finish = [self, op] {
    self->node_->ranges.Release(op->ticket);
    Status st = op->first;
    // Whether this read went out while the restore could still run: another read's restore
    // may have ended it since, but this one's missing object was read before that.
    const bool restoring = op->restoring;
    if (st.code() == StatusCode::kStale && (self->resolved_ || restoring) && !op->restore_tried) {
      // A read that skips the MDS (OpenResolved) found an object missing: the file may have
      // been released to the cold tier. Restore it (blocking: on the pool) and read again:
      // by extents (the read waits for its own chunks) unless this handle's own restore by
      // extents lost an object (an OSS restarted): then the whole file, after which a
      // missing object is a hole.
      op->restore_tried = true;
      if (self->core_->pool().TrySubmit([self, op, restoring] {
            bool restored = false;
            Status rs = RestoreIfReleased(self->core_.get(), self->node_->fid, self->path_,
                                          &restored, !restoring);
            // Read again also when this client restored nothing: another one (a loader's
            // restore ahead) may have restored it meanwhile. A file truly gone fails again.
            (void)restored;
            if (rs.ok() && restoring)
              self->restoring_ = false;
            if (rs.ok()) {
              self->ReadRangeOnce(op->buf, op->len, op->offset, std::move(op->cb), true);
            } else {
              auto cb = std::move(op->cb);
              cb(rs);  // names the file already
            }
            self->OpDone(false);
          })) {
        return;
      }
    }
    auto cb = std::move(op->cb);
    if (st.ok()) {
      cb(static_cast<size_t>(op->len));
    } else {
      cb(st.WithContext(self->path_));
    }
    self->OpDone(false);
  };
  node_->ranges.Acquire(offset, offset + len, false, [self, op, finish](RangeLock::Ticket t) {
    op->ticket = t;
    // Plan once the range is ours: a write that held it may have instantiated components.
    auto layout = self->node_->GetLayout();
    if (!layout || layout->empty()) {
      std::memset(op->buf, 0, op->len);
      finish();
      return;
    }
    op->pieces = PlanRead(*layout, op->offset, op->len, op->buf);
    op->left = op->pieces.size() + 1;  // +1 until every piece is issued
    for (size_t i = 0; i < op->pieces.size(); ++i) {
      const ReadPiece& p = op->pieces[i];
      if (p.hole) {
        std::memset(p.dest, 0, p.copy_len);
        std::lock_guard<std::mutex> lock(op->mu);
        --op->left;
        continue;
      }
      // A copy of a replicated object whose blocks fail their checksums is read from the next
      // copy (`skip`), each copy once: a bad copy is never served while a good one exists.
      struct Piece {
        std::shared_ptr<OpenFile> self;
        std::shared_ptr<ReadOp> op;
        size_t i;
        std::function<void()> finish;
        void operator()(uint32_t skip) const {
          const ReadPiece& p = op->pieces[i];
          auto call = std::make_shared<OstCall>();
          call->type = net::MsgType::kRead;
          call->ost = p.ost;
          call->replica_skip = skip;
          auto req = std::make_unique<pb::ReadReq>();
          req->set_ost(p.ost);
          net::ToPb(ObjectId{self->node_->fid, p.comp_id, p.stripe}, req->mutable_obj());
          req->set_offset(p.obj_offset);
          req->set_length(p.len);
          call->req = std::move(req);
          if (p.direct)
            call->in_dest = std::span<uint8_t>(p.dest, p.len);
          Piece again = *this;
          call->done = [again, skip](Result<net::Reply> r) {
            const auto& self = again.self;
            const auto& op = again.op;
            const ReadPiece& p = op->pieces[again.i];
            const bool must_exist = self->resolved_ || (op->restoring && !op->restore_tried);
            Status st = FinishReadPiece(self->node_->fid, p, must_exist, std::move(r));
            self->ThrottleDone();
            if (st.code() == StatusCode::kCorruption && IsChain(p.ost)) {
              auto layout = self->node_->GetLayout();
              const uint32_t copies = layout && p.comp_index < layout->components.size()
                                          ? layout->components[p.comp_index].replicas
                                          : 1;
              if (skip + 1 < copies) {
                LOG_WARN("client: {} (object {}, stripe {}): {}; reading another copy", self->path_,
                         p.comp_id, p.stripe, st.ToString());
                return again(skip + 1);
              }
            }
            if (PartDone(op.get(), st))
              again.finish();
          };
          self->Throttled([self = self, call] { self->core_->OstCallAsync(call); });
        }
      };
      Piece{self, op, i, finish}(0);
    }
    bool last;
    {
      std::lock_guard<std::mutex> lock(op->mu);
      last = --op->left == 0;
    }
    if (last)
      finish();
  });
}

Result<size_t> OpenFile::ReadDirect(uint8_t* buf, uint64_t len, uint64_t offset) {
  return WaitIo([&](IoCallback cb) { ReadRange(buf, len, offset, std::move(cb)); });
}

void OpenFile::DropReadahead() {
  std::lock_guard<std::mutex> lock(ra_mu_);
  chunks_.clear();
}

Result<size_t> OpenFile::ReadThroughCache(uint8_t* buf,
                                          uint64_t len,
                                          uint64_t offset,
                                          uint64_t size) {
  ReadaheadPolicy::Decision d;
  std::vector<std::pair<uint64_t, std::shared_ptr<Chunk>>> issue;
  {
    std::lock_guard<std::mutex> lock(ra_mu_);
    d = ra_.OnRead(offset, len, size);
    if (!d.use_readahead) {
      if (!ra_.sequential())
        chunks_.clear();
    } else {
      const uint64_t gen = node_->write_gen.load();
      for (auto it = chunks_.begin(); it != chunks_.end();) {
        const bool behind = it->first < d.first_chunk;
        const bool stale = it->second->done && (it->second->gen != gen || !it->second->st.ok());
        it = behind || stale ? chunks_.erase(it) : std::next(it);
      }
      for (uint64_t idx = d.first_chunk; idx < d.end_chunk; ++idx) {
        if (chunks_.count(idx))
          continue;
        auto c = std::make_shared<Chunk>();
        c->gen = gen;
        chunks_[idx] = c;
        issue.emplace_back(idx, c);
      }
    }
  }
  if (!d.use_readahead)
    return ReadDirect(buf, len, offset);

  auto self = shared_from_this();
  for (auto& [idx, c] : issue) {
    const uint64_t start = idx * kRaChunk;
    const uint64_t n = start < size ? std::min(kRaChunk, size - start) : 0;
    if (n == 0) {
      std::lock_guard<std::mutex> lock(ra_mu_);
      c->done = true;
      continue;
    }
    c->buf.Resize(AlignUp(n, kCrcBlockSize));
    ReadRange(c->buf.data(), c->buf.size(), start, [self, c, n](Result<size_t> r) {
      std::lock_guard<std::mutex> lock(self->ra_mu_);
      c->done = true;
      if (r.ok()) {
        c->valid = n;
      } else {
        c->st = r.status();
      }
      self->ra_cv_.notify_all();
    });
  }

  uint64_t done = 0;
  while (done < len) {
    const uint64_t pos = offset + done;
    const uint64_t idx = pos / kRaChunk;
    std::shared_ptr<Chunk> c;
    {
      std::unique_lock<std::mutex> lock(ra_mu_);
      auto it = chunks_.find(idx);
      if (it != chunks_.end()) {
        c = it->second;
        ra_cv_.wait(lock, [&] { return c->done; });
        if (!c->st.ok() || c->gen != node_->write_gen.load()) {
          // Failed or overtaken by a write: read the rest directly (which reports any error).
          auto again = chunks_.find(idx);
          if (again != chunks_.end() && again->second == c)
            chunks_.erase(again);
          c.reset();
        }
      }
    }
    if (!c) {
      CIUIC_ASSIGN_OR_RETURN(size_t got, ReadDirect(buf + done, len - done, pos));
      return static_cast<size_t>(done + got);
    }
    const uint64_t in = pos - idx * kRaChunk;
    if (in >= c->valid)
      break;  // the file ended before this chunk did
    const uint64_t take = std::min(len - done, c->valid - in);
    std::memcpy(buf + done, c->buf.data() + in, take);
    done += take;
  }
  return static_cast<size_t>(done);
}

Result<size_t> OpenFile::ReadViaNodeCache(
    uint8_t* buf, uint64_t len, uint64_t offset, uint64_t size, uint64_t dv) {
  NodeCache* nc = core_->node_cache();
  const Fid fid = node_->fid;
  thread_local std::unique_ptr<uint8_t[]> block;
  uint64_t done = 0;
  while (done < len) {
    const uint64_t pos = offset + done;
    const uint64_t idx = pos / kNodeCacheBlock;
    const uint64_t start = idx * kNodeCacheBlock;
    const uint64_t blen = std::min(kNodeCacheBlock, size - start);
    const uint64_t in = pos - start;
    const uint64_t take = std::min(len - done, blen - in);
    // A hit reads only the slices of the range, into the caller's buffer.
    auto hit = [&] {
      size_t cached_len = 0;
      Result<size_t> got = nc->GetRange(fid, dv, idx, in, take, buf + done, &cached_len);
      return got.ok() && *got == take && cached_len == blen;
    };
    // One fill per block across this machine's processes. A reader that finds a fill under way
    // waits for it with a shared lock, so the waiters of one fill read it side by side rather
    // than one after the other under the fill lock; twice out of luck (the fill failed, or the
    // block went again), it queues for the fill lock itself.
    bool done_block = hit();
    NodeCache::FillLock lock;
    for (int attempt = 0; !done_block && attempt < 2; ++attempt) {
      lock = nc->LockOrWaitFill(fid, dv, idx);
      if (lock.held())
        break;
      done_block = hit();
    }
    if (!done_block) {
      if (!lock.held())
        lock = nc->LockFill(fid, dv, idx);
      if (!hit()) {
        // The whole block from the OSTs: into the caller's buffer when it asked for all of it.
        uint8_t* dest = buf + done;
        if (in != 0 || take != blen) {
          if (!block)
            block.reset(new uint8_t[kNodeCacheBlock]);
          dest = block.get();
        }
        CIUIC_ASSIGN_OR_RETURN(size_t got, ReadDirect(dest, blen, start));
        nc->CountFill(fid, dv, idx, got);
        if (got == blen)
          nc->Put(fid, dv, idx, dest, blen).IgnoreError();  // logged; the read goes on
        if (dest != buf + done)
          std::memcpy(buf + done, dest + in, take);
      }
    }
    done += take;
  }
  return static_cast<size_t>(done);
}

Result<size_t> OpenFile::Pread(void* buf, size_t len, uint64_t offset) {
  std::optional<uint64_t> cache_dv;
  CIUIC_RETURN_IF_ERROR(CheckOpen(false, &cache_dv));
  if (len == 0)
    return size_t{0};
  const uint64_t size = node_->size.load(std::memory_order_acquire);
  if (offset >= size)
    return size_t{0};
  const uint64_t n = std::min<uint64_t>(len, size - offset);
  node_->FlushOverlapping(offset, n, true);
  if (cache_dv)
    return ReadViaNodeCache(static_cast<uint8_t*>(buf), n, offset, size, *cache_dv);
  return ReadThroughCache(static_cast<uint8_t*>(buf), n, offset, size);
}

void OpenFile::PreadAsync(void* buf, size_t len, uint64_t offset, IoCallback cb) {
  std::optional<uint64_t> cache_dv;
  Status st = CheckOpen(false, &cache_dv);
  if (!st.ok()) {
    PostCompletion(std::move(cb), st);
    return;
  }
  uint64_t size;
  {
    std::lock_guard<std::mutex> lock(node_->mu);
    size = node_->size;
  }
  if (len == 0 || offset >= size) {
    PostCompletion(std::move(cb), size_t{0});
    return;
  }
  const uint64_t n = std::min<uint64_t>(len, size - offset);
  if (cache_dv) {
    const uint64_t dv = *cache_dv;
    // Local IO and fill locks block: on the cache's own pool.
    auto self = shared_from_this();
    auto shared_cb = std::make_shared<IoCallback>(std::move(cb));
    OpStart(false);
    if (core_->cache_pool().TrySubmit([self, buf, n, offset, size, dv, shared_cb] {
          self->node_->FlushOverlapping(offset, n, true);
          Result<size_t> r =
              self->ReadViaNodeCache(static_cast<uint8_t*>(buf), n, offset, size, dv);
          (*shared_cb)(std::move(r));
          self->OpDone(false);
        })) {
      return;
    }
    OpDone(false);
    PostCompletion(std::move(*shared_cb),
                   Status::Aborted(fmt::format("{}: client shut down", path_)));
    return;
  }
  if (!node_->FlushOverlapping(offset, n, false)) {
    // A buffer is busy (its owner waits on the network): flush and read from the pool.
    auto self = shared_from_this();
    auto shared_cb = std::make_shared<IoCallback>(std::move(cb));
    if (core_->pool().TrySubmit([self, buf, n, offset, shared_cb] {
          self->node_->FlushOverlapping(offset, n, true);
          self->ReadRange(static_cast<uint8_t*>(buf), n, offset, std::move(*shared_cb));
        })) {
      return;
    }
    PostCompletion(std::move(*shared_cb),
                   Status::Aborted(fmt::format("{}: client shut down", path_)));
    return;
  }
  // A read that ends at the end of the file inside a 4 KiB block asks for that whole block when
  // the caller's buffer has room for it: the OSS zero-fills past the object's end, so the read
  // stays one direct request (into shared memory from an OSS on this host) instead of a direct
  // one plus a copied tail (one file per sample: half the requests, and no TCP copy). Bytes past
  // the end of the file are zeroed in the buffer, whatever the object holds there.
  const uint64_t whole = AlignUp(offset + n, kCrcBlockSize) - offset;
  if (n < len && whole > n && whole <= len) {
    auto* p = static_cast<uint8_t*>(buf);
    ReadRange(p, whole, offset, [p, n, whole, cb = std::move(cb)](Result<size_t> r) mutable {
      if (r.ok()) {
        std::memset(p + n, 0, whole - n);
        r = static_cast<size_t>(n);
      }
      cb(std::move(r));
    });
    return;
  }
  ReadRange(static_cast<uint8_t*>(buf), n, offset, std::move(cb));
}

}  // namespace ciuic::client
