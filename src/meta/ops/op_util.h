// Helpers shared by the MetaService operations in ops/*.cc: record loading and storing, mode
// tests, timestamps. Internal to ciuic_meta.
#pragma once

#include <sys/stat.h>

#include <string>
#include <string_view>

#include "ciuic.pb.h"
#include "common/fid.h"
#include "common/layout.h"
#include "common/status.h"
#include "common/time_util.h"
#include "meta/keys.h"
#include "meta/txn.h"
#include "net/pb_convert.h"

namespace ciuic::meta {

inline bool IsDir(const pb::InodeRecord& r) {
  return S_ISDIR(r.attr().mode());
}
inline bool IsReg(const pb::InodeRecord& r) {
  return S_ISREG(r.attr().mode());
}
inline bool IsLnk(const pb::InodeRecord& r) {
  return S_ISLNK(r.attr().mode());
}
inline uint32_t TypeOf(const pb::InodeRecord& r) {
  return r.attr().mode() & S_IFMT;
}

inline Fid ToFid(const pb::Fid& f) {
  return net::FromPb(f);
}

// The "/" of the request's key: its subtree, else the real root.
inline Fid CtxRoot(const pb::ReqCtx& ctx) {
  return ctx.has_root() && ctx.root().seq() != 0 ? ToFid(ctx.root()) : kRootFid;
}
inline bool IsCtxRoot(const pb::ReqCtx& ctx, const Fid& fid) {
  return CtxRoot(ctx) == fid;
}

inline void SetTs(pb::Timespec* out, const Timespec& t) {
  out->set_sec(t.sec);
  out->set_nsec(t.nsec);
}

// Sets mtime and ctime of a directory whose entries changed.
inline void TouchDir(pb::InodeRecord* dir, const Timespec& now) {
  SetTs(dir->mutable_attr()->mutable_mtime(), now);
  SetTs(dir->mutable_attr()->mutable_ctime(), now);
}

// Reads inode `fid`. kNotFound ("no such file or directory"), kCorruption on a bad record.
Status GetInode(Reader& r, const Fid& fid, pb::InodeRecord* rec);
inline Status GetInode(Reader& r, const pb::Fid& fid, pb::InodeRecord* rec) {
  return GetInode(r, ToFid(fid), rec);
}
// As GetInode, and kNotADirectory unless it is a directory.
Status GetDir(Reader& r, const pb::Fid& fid, pb::InodeRecord* rec);
void PutInode(Txn& t, const pb::InodeRecord& rec);

// Reads the entry `name` (with hash `hash`) of directory `parent`. kNotFound when absent.
Status GetDentry(
    Reader& r, const Fid& parent, uint64_t hash, std::string_view name, pb::DentryRecord* d);
void PutDentry(Txn& t,
               const Fid& parent,
               uint64_t hash,
               std::string_view name,
               const pb::Fid& child,
               uint32_t type);
void DeleteDentry(Txn& t, const Fid& parent, uint64_t hash, std::string_view name);

// True when `dir` has no entries.
Result<bool> DirIsEmpty(Reader& r, const Fid& dir);

// Adds `delta` to the used-inode counter (system cf).
Status AdjustInodeCount(Txn& t, int64_t delta);
Result<uint64_t> ReadInodeCount(Reader& r);

// Fills `out` with the attributes of `rec` (blocks estimated from size).
void FillAttr(const pb::InodeRecord& rec, pb::Attr* out);

// kInvalidArgument unless nsec < 1e9.
Status CheckTimespec(const pb::Timespec& t, std::string_view what);

// True when `rec` is a regular file that never held data: its layout may still change.
inline bool NeverWritten(const pb::InodeRecord& rec) {
  return rec.attr().size() == 0 && rec.attr().data_version() == 0;
}

}  // namespace ciuic::meta
