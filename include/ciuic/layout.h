// Layout math: where each byte of a file lives. A layout is a list of PFL components (Decision 8);
// component k covers file offsets [start, end) and RAID-0 stripes them over `stripe_count`
// objects on distinct OSTs in units of `stripe_size`. Object offsets are relative to the
// component's start. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic {

inline constexpr uint64_t kLayoutEof = std::numeric_limits<uint64_t>::max();
inline constexpr uint32_t kDefaultStripeSize = 1u << 20;
inline constexpr uint32_t kMaxStripeCount = 256;
// Most copies a replicated component may keep of each stripe object (docs/design.md,
// "Replication").
inline constexpr uint32_t kMaxReplicas = 8;
// A target at or above kChainBase names a replication chain (an ordered list of OSTs in the OST
// map), below it one OST (OST indexes stop at 0xffff).
inline constexpr uint32_t kChainBase = 0x10000;
inline constexpr bool IsChain(uint32_t target) {
  return target >= kChainBase && target != UINT32_MAX;
}

struct LayoutComponent {
  uint32_t id = 0;
  uint64_t start = 0;
  uint64_t end = kLayoutEof;
  uint32_t stripe_size = kDefaultStripeSize;
  uint32_t stripe_count = 1;
  std::vector<uint32_t> osts;  // empty until instantiated; then size() == stripe_count
  // Copies of each stripe object; 0: not said (the cluster's default applies when the MDS
  // places the component; an instantiated component with 0 has one). With replicas > 1 each
  // entry of `osts` is a chain id (IsChain) naming that many OSTs in distinct failure domains,
  // else an OST index.
  uint32_t replicas = 0;

  bool instantiated() const { return !osts.empty(); }
  bool operator==(const LayoutComponent&) const = default;
};

struct FileLayout {
  std::vector<LayoutComponent> components;
  uint32_t pattern = 0;  // 0 adaptive default, 1 explicit

  bool empty() const { return components.empty(); }
  bool operator==(const FileLayout&) const = default;
  // Index of the component covering `offset`, or -1.
  int ComponentFor(uint64_t offset) const;
  // True when every component covering [0, end) is instantiated.
  bool InstantiatedUpTo(uint64_t end) const;
  // Checks that components are contiguous from 0, sizes are powers of two multiples of 4 KiB
  // (64 KiB .. 4 GiB), counts are 1..kMaxStripeCount, OSTs distinct within a component and
  // component ends (except EOF) aligned to the stripe size. kInvalidArgument on failure.
  Status Validate() const;
  // "comp 0 [0, 64 MiB) 1 x 1 MiB osts 2; comp 1 ...".
  std::string ToString() const;
};

// One piece of a file range mapped onto one object.
struct StripeExtent {
  uint32_t comp_index = 0;  // index into components
  uint32_t comp_id = 0;
  uint32_t stripe = 0;
  uint32_t ost = 0;  // valid when the component is instantiated; an OST or a chain (IsChain)
  uint64_t file_offset = 0;
  uint64_t obj_offset = 0;
  uint64_t len = 0;
};

// Splits [offset, offset+len) into extents, each within one stripe unit, in file order.
// Extents of uninstantiated components have ost = UINT32_MAX.
std::vector<StripeExtent> MapRange(const FileLayout& layout, uint64_t offset, uint64_t len);

// Length the object (comp, stripe) must have for the file to be `file_size` long.
uint64_t ObjectLengthForFileSize(const LayoutComponent& comp, uint32_t stripe, uint64_t file_size);

// File size implied by object (comp, stripe) having length `obj_len` (0 when obj_len is 0).
uint64_t FileEndFromObjectLength(const LayoutComponent& comp, uint32_t stripe, uint64_t obj_len);

}  // namespace ciuic
