// Key encodings of the MDS's column families (docs/formats/kv-keys.md is the reference).
//
// All integers in keys are big-endian so that keys sort numerically. Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/fid.h"

namespace ciuic::meta {

inline constexpr size_t kFidKeyLen = 16;
// Readdir cookies 0, 1 and 2 mean "start", "after '.'" and "after '..'"; name hashes start at 3.
inline constexpr uint64_t kFirstHashCookie = 3;
inline constexpr uint64_t kMaxHashCookie = (uint64_t{1} << 63) - 1;

void AppendU32(std::string* out, uint32_t v);
void AppendU64(std::string* out, uint64_t v);
uint32_t ReadU32(const char* p);
uint64_t ReadU64(const char* p);

// inodes: Fid (seq, mds, ver; 16 bytes).
std::string InodeKey(const Fid& fid);
void AppendFid(std::string* out, const Fid& fid);
Fid ReadFid(const char* p);

// dentries: parent Fid || hash(name) (8) || name.
std::string DentryKey(const Fid& parent, uint64_t hash, std::string_view name);
// parent Fid || hash: where entries with that hash start.
std::string DentrySeekKey(const Fid& parent, uint64_t hash);
// The first key after every entry of `parent`.
std::string DentryEnd(const Fid& parent);
// Splits a dentry key; false when it is malformed.
bool ParseDentryKey(std::string_view key, Fid* parent, uint64_t* hash, std::string_view* name);

// xattrs: Fid || name.
std::string XattrKey(const Fid& fid, std::string_view name);
std::string XattrPrefix(const Fid& fid);

// sessions: 'S' || session id (8) -> SessionRecord; 'O' || session id || open id -> OpenRecord.
std::string SessionKey(uint64_t session_id);
std::string OpenKey(uint64_t session_id, uint64_t open_id);
std::string OpenPrefix(uint64_t session_id);

// ostlog: task id (8), whose top 16 bits are the OST index (see TaskId).
std::string TaskKey(uint64_t task_id);
inline constexpr uint32_t kMaxOstIndex = 0xffff;
inline uint64_t TaskId(uint32_t ost, uint64_t counter) {
  return (uint64_t{ost} << 48) | (counter & ((uint64_t{1} << 48) - 1));
}
inline uint32_t TaskOst(uint64_t task_id) {
  return static_cast<uint32_t>(task_id >> 48);
}

// system column family keys.
inline constexpr std::string_view kFidHwmKey = "hwm/fid";
inline constexpr std::string_view kTaskHwmKey = "hwm/task";
inline constexpr std::string_view kSessionHwmKey = "hwm/session";
inline constexpr std::string_view kOpenHwmKey = "hwm/open";
inline constexpr std::string_view kInodeCountKey = "inode_count";
inline constexpr std::string_view kOrphanPrefix = "orphan/";
inline constexpr std::string_view kOstPrefix = "ost/";
inline constexpr std::string_view kClientKeyPrefix = "client/";
inline constexpr std::string_view kClientKeyHwmKey = "hwm/client_key";
// "client/" · key id (u32 BE): a ClientKeyRecord.
std::string ClientKeyKey(uint32_t key_id);
std::string OrphanKey(const Fid& fid);
// "hsm/" · Fid: the file's HsmRecord (docs/formats/kv-keys.md).
inline constexpr std::string_view kHsmPrefix = "hsm/";
std::string HsmKey(const Fid& fid);
std::string OstKey(uint32_t index);
// "chain/" · chain id (u32 BE): a replication chain (pb::Chain).
inline constexpr std::string_view kChainPrefix = "chain/";
std::string ChainKey(uint32_t id);
// "repoexp/" · Fid: a linked directory that exports on close (value empty).
inline constexpr std::string_view kRepoExportPrefix = "repoexp/";
std::string RepoExportKey(const Fid& dir);
// "repolink/" · Fid: a directory linked to a data repository (value empty).
inline constexpr std::string_view kRepoLinkPrefix = "repolink/";
std::string RepoLinkKey(const Fid& dir);
// "expq/" · dir Fid · file Fid: a file closed after writing below `dir`, waiting for its
// export; the value is the data version (u64 BE) the close made.
inline constexpr std::string_view kExportQueuePrefix = "expq/";
std::string ExportQueuePrefix(const Fid& dir);
std::string ExportQueueKey(const Fid& dir, const Fid& file);

// Returns the smallest key greater than every key starting with `prefix` ("" if none).
std::string PrefixEnd(std::string prefix);

// Hash of a directory entry's name: the readdir cookie. In [3, 2^63) so that it fits off_t and
// leaves 0..2 to the start, '.' and '..'. FNV-1a 64 finished by the splitmix64 mixer, shifted
// right by one. `test_mask` != 0 (tests only) squeezes hashes into [3, 3 + test_mask] to force
// collisions; never use it on a store that will be opened without it.
class NameHasher {
 public:
  explicit NameHasher(uint64_t test_mask = 0) : test_mask_(test_mask) {}
  uint64_t operator()(std::string_view name) const;

 private:
  uint64_t test_mask_;
};

}  // namespace ciuic::meta
