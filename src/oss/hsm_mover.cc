#include "oss/hsm_mover.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/buffer.h"
#include "common/crc32c.h"
#include "objstore/object_store_factory.h"
#include "oss/ost_format.h"

namespace ciuic::oss {
namespace {

// Bytes moved per OST read / store get. A multiple of the block size.
constexpr uint64_t kChunk = uint64_t{4} << 20;
constexpr std::string_view kCrcMagic = "CIUICHSM";
constexpr uint32_t kCrcFormat = 1;
// magic, format, block size, length, data version, block count.
constexpr size_t kCrcHeader = 8 + 4 + 4 + 8 + 8 + 4;

void PutLe32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutLe64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetLe32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t BlocksOf(uint64_t length) {
  return (length + kBlockSize - 1) / kBlockSize;
}

// CRC32C of the block at `p` holding `n` <= 4 KiB bytes, zero-padded to 4 KiB.
uint32_t PaddedBlockCrc(const char* p, size_t n) {
  if (n == kBlockSize)
    return Crc32c(p, n);
  static const std::string kZeros(kBlockSize, '\0');
  uint32_t c = Crc32cExtend(0, p, n);
  return Crc32cExtend(c, kZeros.data(), kBlockSize - n);
}

}  // namespace

std::string HsmObjectKey(std::string_view cluster_uuid, const ObjectId& id, uint64_t version) {
  return fmt::format("{}/{:#x}:{:#x}:{:#x}/{}/{}.{}", cluster_uuid, id.fid.mds, id.fid.seq,
                     id.fid.ver, version, id.comp, id.stripe);
}

std::string HsmCrcKey(std::string_view cluster_uuid, const ObjectId& id, uint64_t version) {
  return HsmObjectKey(cluster_uuid, id, version) + ".crc";
}

std::string EncodeArchivedCrcs(const ArchivedCrcs& c) {
  std::string out(kCrcMagic);
  PutLe32(&out, kCrcFormat);
  PutLe32(&out, static_cast<uint32_t>(kBlockSize));
  PutLe64(&out, c.length);
  PutLe64(&out, c.data_version);
  PutLe32(&out, static_cast<uint32_t>(c.crcs.size()));
  for (uint32_t v : c.crcs)
    PutLe32(&out, v);
  PutLe32(&out, Crc32c(out.data(), out.size()));
  return out;
}

Result<ArchivedCrcs> DecodeArchivedCrcs(std::string_view b, std::string_view key) {
  auto bad = [&](std::string_view why) {
    return Status::Corruption(fmt::format("archived checksums {} are damaged: {}", key, why));
  };
  if (b.size() < kCrcHeader + 4 || b.substr(0, 8) != kCrcMagic)
    return bad("not a ciuic HSM checksum object");
  const char* p = b.data();
  if (GetLe32(p + b.size() - 4) != Crc32c(p, b.size() - 4))
    return bad("its own checksum does not match");
  if (GetLe32(p + 8) != kCrcFormat)
    return bad(fmt::format("unknown format {}", GetLe32(p + 8)));
  if (GetLe32(p + 12) != kBlockSize)
    return bad(fmt::format("block size {}", GetLe32(p + 12)));
  ArchivedCrcs c;
  c.length = GetLe64(p + 16);
  c.data_version = GetLe64(p + 24);
  const uint32_t n = GetLe32(p + 32);
  if (n != BlocksOf(c.length) || b.size() != kCrcHeader + 4 * uint64_t{n} + 4)
    return bad(fmt::format("{} checksums for {} bytes", n, c.length));
  c.crcs.resize(n);
  for (uint32_t i = 0; i < n; ++i)
    c.crcs[i] = GetLe32(p + kCrcHeader + 4 * i);
  return c;
}

Status HsmMover::ReadBlocks(OstStore* ost,
                            const ObjectId& id,
                            uint64_t offset,
                            uint64_t len,
                            std::vector<uint32_t>* crcs,
                            std::string* dst) {
  CIUIC_ASSIGN_OR_RETURN(ReadResult r, ost->Read(id, offset, len));
  const uint64_t blocks = BlocksOf(len);
  if (r.data == nullptr || r.aligned_offset != offset || r.data->size() < blocks * kBlockSize ||
      r.block_crcs.size() < blocks * 2) {
    return Status::Internal(
        fmt::format("OST {} object {}: short read at {}", ost->index(), id.FileName(), offset));
  }
  crcs->resize(blocks);
  const char* data = reinterpret_cast<const char*>(r.data->data());
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint32_t c = Crc32c(data + i * kBlockSize, kBlockSize);
    if (c != r.block_crcs[2 * i] && c != r.block_crcs[2 * i + 1]) {
      return Status::Corruption(
          fmt::format("OST {} object {} offset {}: checksum mismatch, not archived", ost->index(),
                      id.FileName(), offset + i * kBlockSize));
    }
    (*crcs)[i] = c;
  }
  if (dst != nullptr)
    dst->assign(data, std::min<uint64_t>(len, blocks * kBlockSize));
  return Status::OK();
}

Result<ArchivedCrcs> HsmMover::LoadCrcs(const ObjectId& id, uint64_t version) {
  const std::string key = HsmCrcKey(uuid_, id, version);
  Result<std::string> bytes = store_->GetAll(key);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(fmt::format("archived copy {} is missing from {}",
                                          HsmObjectKey(uuid_, id, version), store_->Describe()));
    }
    return bytes.status();
  }
  CIUIC_ASSIGN_OR_RETURN(ArchivedCrcs c, DecodeArchivedCrcs(*bytes, key));
  if (c.data_version != version) {
    return Status::Corruption(fmt::format("archived checksums {} name data version {}, not {}", key,
                                          c.data_version, version));
  }
  Result<objstore::ObjectInfo> info = store_->Head(HsmObjectKey(uuid_, id, version));
  if (!info.ok()) {
    if (info.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(fmt::format("archived copy {} is missing from {}",
                                          HsmObjectKey(uuid_, id, version), store_->Describe()));
    }
    return info.status();
  }
  if (info->size != c.length) {
    return Status::Corruption(fmt::format("archived copy {} in {} has {} bytes, its checksums {}",
                                          HsmObjectKey(uuid_, id, version), store_->Describe(),
                                          info->size, c.length));
  }
  return c;
}

Result<uint64_t> HsmMover::Archive(OstStore* ost, const ObjectId& id, uint64_t version) {
  CIUIC_ASSIGN_OR_RETURN(ObjStat st, ost->Stat(id));
  const uint64_t length = st.exists ? st.length : 0;
  // A complete copy left by an earlier try of this archive is kept when it matches.
  Result<uint64_t> same = Verify(ost, id, version);
  if (same.ok())
    return same;
  const std::string key = HsmObjectKey(uuid_, id, version);
  ArchivedCrcs crcs;
  crcs.length = length;
  crcs.data_version = version;
  crcs.crcs.resize(BlocksOf(length));
  std::mutex mu;
  Status put = store_->PutStream(key, length, [&](uint64_t offset, std::span<char> dst) -> Status {
    // The store asks for disjoint ranges (parts), maybe at once from several threads and
    // maybe again after a retry: each fills its own blocks' CRCs.
    if (dst.empty())
      return Status::OK();
    const uint64_t first = offset / kBlockSize;
    const uint64_t aligned = first * kBlockSize;
    const uint64_t len = offset + dst.size() - aligned;
    std::vector<uint32_t> part;
    std::string bytes;
    CIUIC_RETURN_IF_ERROR(ReadBlocks(ost, id, aligned, len, &part, &bytes));
    std::memcpy(dst.data(), bytes.data() + (offset - aligned), dst.size());
    // Parts start on block boundaries except with odd part sizes; a block that straddles
    // two parts is computed whole by both (the same value). An OST reads zeros past the
    // object's end, so the last block's CRC is that of its bytes zero-padded.
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < part.size() && first + i < crcs.crcs.size(); ++i)
      crcs.crcs[first + i] = part[i];
    return Status::OK();
  });
  CIUIC_RETURN_IF_ERROR(put);
  CIUIC_RETURN_IF_ERROR(store_->Put(HsmCrcKey(uuid_, id, version), EncodeArchivedCrcs(crcs)));
  return length;
}

Result<uint64_t> HsmMover::Verify(OstStore* ost, const ObjectId& id, uint64_t version) {
  CIUIC_ASSIGN_OR_RETURN(ArchivedCrcs c, LoadCrcs(id, version));
  CIUIC_ASSIGN_OR_RETURN(ObjStat st, ost->Stat(id));
  const uint64_t length = st.exists ? st.length : 0;
  const std::string key = HsmObjectKey(uuid_, id, version);
  if (length != c.length) {
    return Status::Corruption(fmt::format("OST {} object {} has {} bytes, its archived copy {} {}",
                                          ost->index(), id.FileName(), length, key, c.length));
  }
  std::vector<uint32_t> crcs;
  for (uint64_t off = 0; off < length; off += kChunk) {
    const uint64_t len = std::min(kChunk, length - off);
    CIUIC_RETURN_IF_ERROR(ReadBlocks(ost, id, off, len, &crcs, nullptr));
    for (size_t i = 0; i < crcs.size(); ++i) {
      if (crcs[i] != c.crcs[off / kBlockSize + i]) {
        return Status::Corruption(
            fmt::format("OST {} object {} differs from its archived copy {} at offset {}",
                        ost->index(), id.FileName(), key, off + i * kBlockSize));
      }
    }
  }
  return length;
}

ObjectId HsmStagingId(const ObjectId& id) {
  return ObjectId{Fid{id.fid.seq, id.fid.mds, id.fid.ver | kHsmStagingVer}, id.comp, id.stripe};
}

Result<std::shared_ptr<ObjectFill>> HsmMover::StartRestore(OstStore* ost,
                                                           const ObjectId& id,
                                                           uint64_t version) {
  if (auto f = fills_.Find(ost->index(), id))
    return f;
  if (auto f = fills_.EndedIfWhole(ost, id, std::nullopt))
    return f;
  auto c = std::make_shared<const ArchivedCrcs>();
  {
    CIUIC_ASSIGN_OR_RETURN(ArchivedCrcs loaded, LoadCrcs(id, version));
    c = std::make_shared<const ArchivedCrcs>(std::move(loaded));
  }
  const std::string key = HsmObjectKey(uuid_, id, version);
  FillSpec spec;
  spec.ost = ost;
  spec.id = id;
  // The copy is written under a staging name and adopted whole once synced: the object itself
  // is absent or complete, never half restored; readers meanwhile read the staging object.
  spec.staging = HsmStagingId(id);
  spec.length = c->length;
  spec.what = key;
  spec.fetch = [this, c, key](uint64_t off, uint64_t len, AlignedBuffer* buf) -> Status {
    CIUIC_ASSIGN_OR_RETURN(
        size_t got,
        store_->Get(key, off, std::span<char>(reinterpret_cast<char*>(buf->data()), len)));
    if (got != len) {
      return Status::Corruption(fmt::format("archived copy {} in {} ends at {}, expected {} bytes",
                                            key, store_->Describe(), off + got, c->length));
    }
    const char* p = reinterpret_cast<const char*>(buf->data());
    for (uint64_t b = 0; b * kBlockSize < len; ++b) {
      const size_t n = std::min<uint64_t>(kBlockSize, len - b * kBlockSize);
      const uint32_t crc = PaddedBlockCrc(p + b * kBlockSize, n);
      const uint64_t at = off + b * kBlockSize;
      if (crc != c->crcs[at / kBlockSize]) {
        return Status::Corruption(
            fmt::format("archived copy {} in {} is corrupt at offset {} (checksum {:08x}, "
                        "archived {:08x})",
                        key, store_->Describe(), at, crc, c->crcs[at / kBlockSize]));
      }
    }
    return Status::OK();
  };
  return fills_.Start(std::move(spec));
}

Result<uint64_t> HsmMover::Restore(OstStore* ost, const ObjectId& id, uint64_t version) {
  CIUIC_ASSIGN_OR_RETURN(std::shared_ptr<ObjectFill> f, StartRestore(ost, id, version));
  return f->Wait();
}

Result<objstore::ObjectStore*> HsmMover::RepoStore(const std::string& url) {
  std::lock_guard<std::mutex> lock(repo_mu_);
  auto it = repos_.find(url);
  if (it != repos_.end())
    return it->second.get();
  objstore::ObjectStoreConfig cfg;
  cfg.create_local_root = false;  // a repository exists already
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<objstore::ObjectStore> s,
                         objstore::OpenObjectStore(url, cfg));
  objstore::ObjectStore* raw = s.get();
  repos_.emplace(url, std::move(s));
  return raw;
}

Status HsmMover::CheckSource(objstore::ObjectStore* store,
                             const RepoSource& src,
                             const char* when) {
  Result<objstore::ObjectInfo> h = store->Head(src.key);
  if (!h.ok()) {
    if (h.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(
          fmt::format("object '{}' of {} was deleted {}; its data is gone "
                      "(ciuic repo sync removes the file)",
                      src.key, store->Describe(), when));
    }
    return h.status();
  }
  if (h->etag != src.etag || h->size != src.file_size) {
    return Status::Corruption(
        fmt::format("object '{}' of {} changed {} (ETag {}, {} bytes; imported ETag {}, {} "
                    "bytes): ciuic repo sync imports the new version",
                    src.key, store->Describe(), when, h->etag, h->size, src.etag, src.file_size));
  }
  return Status::OK();
}

Result<uint64_t> HsmMover::VerifyRepo(const RepoSource& src) {
  CIUIC_ASSIGN_OR_RETURN(objstore::ObjectStore * store, RepoStore(src.url));
  CIUIC_RETURN_IF_ERROR(CheckSource(store, src, "since it was imported"));
  return src.file_size;
}

Result<std::shared_ptr<ObjectFill>> HsmMover::StartRepoRestore(OstStore* ost,
                                                               const ObjectId& id,
                                                               const RepoSource& src) {
  if (auto f = fills_.Find(ost->index(), id))
    return f;
  // Loaded lately and whole: its bytes are here, whatever the object became since.
  if (auto f =
          fills_.EndedIfWhole(ost, id, ObjectLengthForFileSize(src.comp, id.stripe, src.file_size)))
    return f;
  CIUIC_ASSIGN_OR_RETURN(objstore::ObjectStore * store, RepoStore(src.url));
  FillSpec spec;
  spec.ost = ost;
  spec.id = id;
  spec.staging = HsmStagingId(id);
  spec.length = ObjectLengthForFileSize(src.comp, id.stripe, src.file_size);
  spec.what = fmt::format("'{}' of {}", src.key, store->Describe());
  // Object bytes [off, off + len) are whole stripe units of the file (but the last), each a
  // ranged GET: object offset o of stripe s is file offset
  // start + ((o / unit) * count + s) * unit + o % unit.
  spec.fetch = [store, src, stripe = id.stripe](uint64_t off, uint64_t len,
                                                AlignedBuffer* buf) -> Status {
    const uint64_t unit = src.comp.stripe_size;
    char* dst = reinterpret_cast<char*>(buf->data());
    for (uint64_t pos = off; pos < off + len;) {
      const uint64_t in_unit = pos % unit;
      const uint64_t n = std::min(unit - in_unit, off + len - pos);
      const uint64_t file_off =
          src.comp.start + ((pos / unit) * src.comp.stripe_count + stripe) * unit + in_unit;
      // Only bytes of the version imported: one request per range, no Head around it.
      Result<size_t> got =
          store->GetVersion(src.key, src.etag, file_off, std::span<char>(dst + (pos - off), n));
      if (!got.ok()) {
        if (got.status().code() == StatusCode::kNotFound) {
          return Status::NotFound(
              fmt::format("object '{}' of {} was deleted since it was imported; its data is "
                          "gone (ciuic repo sync removes the file)",
                          src.key, store->Describe()));
        }
        if (got.status().code() == StatusCode::kAborted) {
          return Status::Corruption(
              fmt::format("object '{}' of {} changed since it was imported (imported ETag {}, "
                          "{} bytes): ciuic repo sync imports the new version",
                          src.key, store->Describe(), src.etag, src.file_size));
        }
        return got.status();
      }
      if (*got != n) {
        return Status::Corruption(fmt::format(
            "object '{}' of {} ends at {}, imported with {} bytes: it changed while it was "
            "restored",
            src.key, store->Describe(), file_off + *got, src.file_size));
      }
      pos += n;
    }
    return Status::OK();
  };
  return fills_.Start(std::move(spec));
}

Result<uint64_t> HsmMover::RestoreFromRepo(OstStore* ost,
                                           const ObjectId& id,
                                           const RepoSource& src) {
  CIUIC_ASSIGN_OR_RETURN(std::shared_ptr<ObjectFill> f, StartRepoRestore(ost, id, src));
  return f->Wait();
}

Status HsmMover::Remove(const ObjectId& id, uint64_t version) {
  CIUIC_RETURN_IF_ERROR(store_->Delete(HsmCrcKey(uuid_, id, version)));
  return store_->Delete(HsmObjectKey(uuid_, id, version));
}

}  // namespace ciuic::oss
