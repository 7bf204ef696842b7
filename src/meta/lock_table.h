// LockTable: the MDS's advisory locks (flock and fcntl byte ranges), in memory only.
//
// A lock belongs to an owner (session, owner id); locks of one owner never conflict with each
// other, and a new lock of an owner replaces whatever that owner held in its range (POSIX
// semantics: a write lock over part of a read lock splits it; an unlock in the middle of a
// range splits it in two). Adjacent or overlapping ranges of one owner and type merge. flock
// locks (whole file) and POSIX locks are separate spaces and never conflict with each other,
// as on Linux. The ranges held on one file and by one session are capped (kNoSpace when a lock
// would add one beyond a cap; unlocks and locks that merge always succeed).
// Not thread-safe: the caller serializes (MetaService holds sess_mu_).
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/fid.h"
#include "common/status.h"

namespace ciuic::meta {

class LockTable {
 public:
  enum Kind : uint32_t { kPosix = 1, kFlock = 2 };
  enum Type : uint32_t { kShared = 1, kExclusive = 2, kUnlock = 3 };

  struct Lock {
    uint64_t session = 0;
    uint64_t owner = 0;
    uint32_t kind = kPosix;
    uint32_t type = kShared;
    uint64_t start = 0;
    uint64_t end = 0;  // inclusive
    uint32_t pid = 0;
  };

  struct Limits {
    size_t max_per_file = 4096;      // ranges on one file, all owners
    size_t max_per_session = 65536;  // ranges of one session, all files
  };
  LockTable() = default;
  explicit LockTable(Limits limits) : limits_(limits) {}

  // The first lock of another owner that conflicts with `want` (same kind, overlapping range,
  // one of the two exclusive), or null.
  const Lock* FindConflict(const Fid& fid, const Lock& want) const;
  // Applies `l` (type kUnlock removes) for its owner without checking conflicts. kNoSpace
  // ("too many lock ranges on this file (cap N)" / "... held by this session (cap N)") when it
  // would leave more ranges than a cap allows; then nothing changes.
  Status Apply(const Fid& fid, const Lock& l);
  // Drops every lock of `session`.
  void ReleaseSession(uint64_t session);

  size_t CountFor(const Fid& fid) const;  // locks (ranges) held on fid, for tests
  size_t size() const;

 private:
  struct FidHash {
    size_t operator()(const Fid& f) const {
      return std::hash<uint64_t>()(f.seq) ^ (static_cast<size_t>(f.mds) << 1) ^
             (static_cast<size_t>(f.ver) << 33);
    }
  };
  Limits limits_;
  std::unordered_map<Fid, std::vector<Lock>, FidHash> locks_;
  std::unordered_map<uint64_t, size_t> per_session_;  // ranges held, by session
};

}  // namespace ciuic::meta
