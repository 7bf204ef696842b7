// OstStore: the read pipeline, read verification and the blocking forms of read and write.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <future>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/logging.h"
#include "oss/ost_format.h"
#include "oss/ost_store.h"
#include "oss/ost_store_internal.h"

namespace ciuic::oss {

Status VerifyReadResult(const ReadResult& r, uint32_t ost, const ObjectId& id) {
  if (r.data == nullptr)
    return Status::OK();
  size_t blocks = r.data->size() / kBlockSize;
  if (r.block_crcs.size() != blocks * 2) {
    return Status::Corruption(fmt::format("OST {} object {}: {} checksums for {} blocks", ost,
                                          id.FileName(), r.block_crcs.size(), blocks));
  }
  for (size_t i = 0; i < blocks; ++i) {
    uint32_t c = Crc32c(r.data->data() + i * kBlockSize, kBlockSize);
    if (c != r.block_crcs[2 * i] && c != r.block_crcs[2 * i + 1]) {
      return Status::Corruption(fmt::format(
          "OST {} object {} offset {}: checksum mismatch (data {:08x}, stored {:08x}/{:08x})", ost,
          id.FileName(), r.aligned_offset + i * kBlockSize, c, r.block_crcs[2 * i],
          r.block_crcs[2 * i + 1]));
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// Read pipeline.

// One read on its way: object lookup -> slot pages -> data IO -> checksum snapshot -> reply.
// Heap-allocated once and passed by pointer so no step copies the callback.
struct OstStore::ReadOp {
  ObjectRef obj;
  uint64_t a0 = 0;  // aligned range
  uint64_t a1 = 0;
  std::shared_ptr<AlignedBuffer> buf;  // the blocks land here, or
  uint8_t* dest = nullptr;             // here (ReadIntoAsync)
  ReadCallback cb;

  uint8_t* data() const { return dest != nullptr ? dest : buf->data(); }
};

void OstStore::ReadAsync(const ObjectId& id, uint64_t offset, uint64_t length, ReadCallback cb) {
  ReadIntoAsync(id, offset, length, nullptr, std::move(cb));
}

void OstStore::ReadIntoAsync(
    const ObjectId& id, uint64_t offset, uint64_t length, uint8_t* dest, ReadCallback cb) {
  if (!BeginOp()) {
    cb(Status::Unavailable(fmt::format("OST {} is shutting down", options_.index)));
    return;
  }
  if (offset > kMaxObjectSize || length > kMaxObjectSize - offset) {
    EndOp();
    cb(Status::InvalidArgument(fmt::format("OST {}: read [{}, +{}) beyond the 16 TiB object limit",
                                           options_.index, offset, length)));
    return;
  }
  auto* op = new ReadOp;
  op->a0 = AlignDown(offset, kBlockSize);
  op->a1 = AlignUp(offset + length, kBlockSize);
  op->dest = dest;
  op->cb = std::move(cb);
  if (ObjectRef obj = CachedObject(id)) {
    op->obj = std::move(obj);
    ReadStart(op);
    return;
  }
  GetObjectAsync(id, false, [this, op](Result<ObjectRef> r) {
    if (!r.ok()) {
      ReadFinish(op, std::move(r).status());
      return;
    }
    if (*r == nullptr) {
      // Never written (or destroyed): zeros, with the zero-block checksum in both slots.
      if (op->dest == nullptr)
        op->buf = read_pool_->Get(op->a1 - op->a0);
      ReadFinish(op, size_t{0});
      return;
    }
    op->obj = std::move(*r);
    ReadStart(op);
  });
}

void OstStore::ReadStart(ReadOp* op) {
  const uint64_t first = op->a0 / kBlockSize;
  const uint64_t end = op->a1 / kBlockSize;
  bool loaded = true;
  uint64_t obj_len;
  {
    std::lock_guard<std::mutex> lock(op->obj->mu);
    obj_len = op->obj->length;
    for (uint64_t p = first / kBlocksPerCrcPage; end > first && p <= (end - 1) / kBlocksPerCrcPage;
         ++p) {
      if (op->obj->pages.count(p) == 0) {
        loaded = false;
        break;
      }
    }
  }
  if (loaded) {
    ReadIo(op, obj_len);
    return;
  }
  EnsurePagesAsync(op->obj, first, end, [this, op](Status st) {
    if (!st.ok()) {
      ReadFinish(op, std::move(st));
      return;
    }
    uint64_t obj_len;
    {
      std::lock_guard<std::mutex> lock(op->obj->mu);
      obj_len = op->obj->length;
    }
    ReadIo(op, obj_len);
  });
}

void OstStore::ReadIo(ReadOp* op, uint64_t obj_len) {
  if (op->dest == nullptr)
    op->buf = read_pool_->Get(op->a1 - op->a0);
  const uint64_t read_end = std::min<uint64_t>(op->a1, AlignUp(obj_len, kBlockSize));
  if (read_end <= op->a0) {
    ReadFinish(op, size_t{0});
    return;
  }
  io::IoOp rd{io::IoKind::kRead, op->obj->data_fh, op->a0, op->data(), read_end - op->a0};
  engine_->SubmitAsync(rd, [this, op](Result<size_t> r) {
    ReadFinish(op, r.ok() ? std::move(r) : OstError(r.status(), &op->obj->id, "read"));
  });
}

void OstStore::ReadFinish(ReadOp* op, Result<size_t> got) {
  std::unique_ptr<ReadOp> owned(op);
  if (!got.ok()) {
    op->cb(std::move(got).status());
    EndOp();
    return;
  }
  const size_t size = op->a1 - op->a0;
  if (*got < size)
    std::memset(op->data() + *got, 0, size - *got);
  ReadResult out;
  out.aligned_offset = op->a0;
  out.data = std::move(op->buf);
  out.dest_len = op->dest != nullptr ? size : 0;
  const size_t nblocks = size / kBlockSize;
  out.block_crcs.resize(nblocks * 2);
  const uint32_t zero = ZeroBlockCrc();
  if (op->obj != nullptr) {
    // Checksums are taken after the data arrived: a write racing with this read updates its
    // slots before its data, so whatever the read saw is covered by a slot taken after it.
    std::lock_guard<std::mutex> lock(op->obj->mu);
    out.exists = !op->obj->destroyed;
    out.object_length = op->obj->length;
    const uint64_t first = op->a0 / kBlockSize;
    for (size_t i = 0; i < nblocks; ++i) {
      out.block_crcs[2 * i] = op->obj->Slot(first + i, 0) ^ zero;
      out.block_crcs[2 * i + 1] = op->obj->Slot(first + i, 1) ^ zero;
    }
  } else {
    std::fill(out.block_crcs.begin(), out.block_crcs.end(), zero);
  }
  op->cb(std::move(out));
  EndOp();
}

// ---------------------------------------------------------------------------------------------
// Blocking forms.

Result<uint64_t> OstStore::Write(const ObjectId& id,
                                 uint64_t offset,
                                 std::span<const uint8_t> data,
                                 uint32_t chain) {
  AlignedBuffer buf(data.size());
  if (!data.empty())
    std::memcpy(buf.data(), data.data(), data.size());
  std::promise<Result<uint64_t>> done;
  WriteAsync(
      id, offset, &buf, [&](Result<uint64_t> r) { done.set_value(std::move(r)); }, chain);
  return done.get_future().get();
}

Result<ReadResult> OstStore::Read(const ObjectId& id, uint64_t offset, uint64_t length) {
  std::promise<Result<ReadResult>> done;
  ReadAsync(id, offset, length, [&](Result<ReadResult> r) { done.set_value(std::move(r)); });
  return done.get_future().get();
}

Status OstStore::VerifyRange(const ObjectId& id, uint64_t offset, uint64_t length) {
  CIUIC_ASSIGN_OR_RETURN(ReadResult r, Read(id, offset, length));
  Status st = VerifyReadResult(r, options_.index, id);
  if (!st.ok())
    LOG_ERROR("{}", st.ToString());
  return st;
}

Result<std::vector<ObjectId>> OstStore::ListChainObjects(uint32_t chain) {
  CIUIC_ASSIGN_OR_RETURN(auto all, ListObjects());
  std::vector<ObjectId> out;
  for (const auto& [id, c] : all) {
    if (c == chain)
      out.push_back(id);
  }
  return out;
}

Result<std::vector<std::pair<ObjectId, uint32_t>>> OstStore::ListObjects() {
  if (!BeginOp())
    return Status::Unavailable(fmt::format("OST {} is shutting down", options_.index));
  OpScope scope{this};
  Result<std::vector<std::string>> names = engine_->ListDir(objects_dir_);
  if (!names.ok())
    return OstError(names.status(), nullptr, "list objects");
  std::vector<std::pair<ObjectId, uint32_t>> out;
  AlignedBuffer header(kCrcHeaderSize);
  for (const std::string& name : *names) {
    if (name.size() <= kCrcSuffix.size() ||
        std::string_view(name).substr(name.size() - kCrcSuffix.size()) != kCrcSuffix) {
      continue;
    }
    ObjectId id;
    if (!ParseObjectFileName(std::string_view(name).substr(0, name.size() - kCrcSuffix.size()),
                             &id)) {
      continue;
    }
    Result<io::FileHandle> fh = engine_->Open(objects_dir_ + "/" + name, O_RDONLY);
    if (!fh.ok())
      continue;  // destroyed meanwhile
    Result<size_t> n =
        engine_->RunSync(io::IoOp{io::IoKind::kRead, *fh, 0, header.data(), kCrcHeaderSize});
    engine_->Close(*fh).IgnoreError();  // read only
    if (!n.ok())
      return OstError(n.status(), &id, "read checksum header");
    Result<CrcHeader> h = CrcHeader::Decode(header.data(), *n);
    out.emplace_back(id, h.ok() ? h->chain : 0);  // a torn header: recovery's business
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<OstStore::Digest> OstStore::ObjectDigest(const ObjectId& id) {
  if (!BeginOp())
    return Status::Unavailable(fmt::format("OST {} is shutting down", options_.index));
  OpScope scope{this};
  CIUIC_ASSIGN_OR_RETURN(ObjectRef obj, LoadObject(id, false));
  Digest d;
  if (obj == nullptr)
    return d;
  uint64_t length;
  {
    std::lock_guard<std::mutex> lock(obj->mu);
    length = obj->length;
  }
  const uint64_t nblocks = (length + kBlockSize - 1) / kBlockSize;
  CIUIC_RETURN_IF_ERROR(EnsurePagesSync(obj.get(), 0, nblocks));
  std::lock_guard<std::mutex> lock(obj->mu);
  d.exists = !obj->destroyed;
  d.length = obj->length;
  uint32_t crc = Crc32c(reinterpret_cast<const uint8_t*>(&d.length), sizeof(d.length));
  const uint64_t n = (d.length + kBlockSize - 1) / kBlockSize;
  std::vector<uint32_t> slots;
  slots.reserve(static_cast<size_t>(std::min<uint64_t>(n, kBlocksPerCrcPage)));
  for (uint64_t b = 0; b < n; ++b) {
    slots.push_back(obj->Slot(b, 0));
    if (slots.size() == kBlocksPerCrcPage || b + 1 == n) {
      crc = Crc32cExtend(crc, reinterpret_cast<const uint8_t*>(slots.data()), slots.size() * 4);
      slots.clear();
    }
  }
  d.crc = crc;
  return d;
}

}  // namespace ciuic::oss
