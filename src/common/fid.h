// Fid: the 128-bit identity of a file (Decision 1). Never reused: seq comes from a counter that
// only grows. FUSE inode numbers are the seq (root is seq 1). Objects on OSTs are named
// ObjectId = (fid, component id, stripe index).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <fmt/format.h>

namespace ciuic {

struct Fid {
  uint64_t seq = 0;  // unique per MDS, never reused
  uint32_t mds = 0;  // index of the MDS that allocated it
  uint32_t ver = 0;  // version, reserved for restores/migrations

  bool valid() const { return seq != 0; }
  bool operator==(const Fid&) const = default;
  auto operator<=>(const Fid&) const = default;
  std::string ToString() const { return fmt::format("[{:#x}:{:#x}:{:#x}]", mds, seq, ver); }
};

inline constexpr Fid kRootFid{1, 0, 0};

struct ObjectId {
  Fid fid;
  uint32_t comp = 0;    // PFL component id
  uint32_t stripe = 0;  // stripe index within the component

  bool operator==(const ObjectId&) const = default;
  auto operator<=>(const ObjectId&) const = default;
  // File name of the object in an OST directory: "<mds>-<seq>-<ver>.<comp>.<stripe>" in hex.
  std::string FileName() const {
    return fmt::format("{:x}-{:016x}-{:x}.{:x}.{:x}", fid.mds, fid.seq, fid.ver, comp, stripe);
  }
};

struct FidHash {
  size_t operator()(const Fid& f) const {
    return std::hash<uint64_t>()(f.seq * 0x9E3779B97F4A7C15ull ^ (uint64_t{f.mds} << 32 | f.ver));
  }
};
struct ObjectIdHash {
  size_t operator()(const ObjectId& o) const {
    return FidHash()(o.fid) ^ std::hash<uint64_t>()(uint64_t{o.comp} << 32 | o.stripe) * 31;
  }
};

}  // namespace ciuic
