#include "meta/ops/op_util.h"

#include <fmt/format.h>

namespace ciuic::meta {

Status GetInode(Reader& r, const Fid& fid, pb::InodeRecord* rec) {
  std::string v;
  Status st = r.Get(Cf::kInodes, InodeKey(fid), &v);
  if (st.code() == StatusCode::kNotFound) {
    return Status::NotFound(fmt::format("no such file or directory (fid {})", fid.ToString()));
  }
  CIUIC_RETURN_IF_ERROR(st);
  if (!rec->ParseFromString(v)) {
    return Status::Corruption(fmt::format("bad inode record for {}", fid.ToString()));
  }
  return Status::OK();
}

Status GetDir(Reader& r, const pb::Fid& fid, pb::InodeRecord* rec) {
  CIUIC_RETURN_IF_ERROR(GetInode(r, fid, rec));
  if (!IsDir(*rec)) {
    return Status::NotADirectory(fmt::format("{} is not a directory", ToFid(fid).ToString()));
  }
  return Status::OK();
}

void PutInode(Txn& t, const pb::InodeRecord& rec) {
  t.Put(Cf::kInodes, InodeKey(ToFid(rec.attr().fid())), rec.SerializeAsString());
}

Status GetDentry(
    Reader& r, const Fid& parent, uint64_t hash, std::string_view name, pb::DentryRecord* d) {
  std::string v;
  Status st = r.Get(Cf::kDentries, DentryKey(parent, hash, name), &v);
  if (st.code() == StatusCode::kNotFound) {
    return Status::NotFound(fmt::format("no entry '{}'", name));
  }
  CIUIC_RETURN_IF_ERROR(st);
  if (!d->ParseFromString(v)) {
    return Status::Corruption(fmt::format("bad directory entry record for '{}'", name));
  }
  return Status::OK();
}

void PutDentry(Txn& t,
               const Fid& parent,
               uint64_t hash,
               std::string_view name,
               const pb::Fid& child,
               uint32_t type) {
  pb::DentryRecord d;
  d.set_name(std::string(name));
  *d.mutable_fid() = child;
  d.set_type(type);
  t.Put(Cf::kDentries, DentryKey(parent, hash, name), d.SerializeAsString());
}

void DeleteDentry(Txn& t, const Fid& parent, uint64_t hash, std::string_view name) {
  t.Delete(Cf::kDentries, DentryKey(parent, hash, name));
}

Result<bool> DirIsEmpty(Reader& r, const Fid& dir) {
  bool empty = true;
  CIUIC_RETURN_IF_ERROR(
      r.Scan(Cf::kDentries, InodeKey(dir), DentryEnd(dir), [&](std::string_view, std::string_view) {
        empty = false;
        return false;
      }));
  return empty;
}

Result<uint64_t> ReadInodeCount(Reader& r) {
  std::string v;
  Status st = r.Get(Cf::kSystem, kInodeCountKey, &v);
  if (st.code() == StatusCode::kNotFound)
    return uint64_t{0};
  CIUIC_RETURN_IF_ERROR(st);
  if (v.size() != 8)
    return Status::Corruption("bad inode counter");
  return ReadU64(v.data());
}

Status AdjustInodeCount(Txn& t, int64_t delta) {
  CIUIC_ASSIGN_OR_RETURN(uint64_t n, ReadInodeCount(t));
  n = delta < 0 && static_cast<uint64_t>(-delta) > n ? 0 : n + static_cast<uint64_t>(delta);
  std::string v;
  AppendU64(&v, n);
  t.Put(Cf::kSystem, std::string(kInodeCountKey), std::move(v));
  return Status::OK();
}

void FillAttr(const pb::InodeRecord& rec, pb::Attr* out) {
  *out = rec.attr();
  out->set_blocks((rec.attr().size() + 511) / 512);
}

Status CheckTimespec(const pb::Timespec& t, std::string_view what) {
  if (t.nsec() >= 1000000000u) {
    return Status::InvalidArgument(fmt::format("{}: nanoseconds {} out of range", what, t.nsec()));
  }
  return Status::OK();
}

}  // namespace ciuic::meta
