#include "common/layout.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "common/config.h"

namespace ciuic {

int FileLayout::ComponentFor(uint64_t offset) const {
  for (size_t i = 0; i < components.size(); ++i) {
    if (offset >= components[i].start && offset < components[i].end)
      return static_cast<int>(i);
  }
  return -1;
}

bool FileLayout::InstantiatedUpTo(uint64_t end) const {
  for (const auto& c : components) {
    if (c.start >= end)
      break;
    if (!c.instantiated())
      return false;
  }
  return true;
}

Status FileLayout::Validate() const {
  if (components.empty())
    return Status::InvalidArgument("layout has no components");
  uint64_t expect = 0;
  for (size_t i = 0; i < components.size(); ++i) {
    const auto& c = components[i];
    if (c.start != expect) {
      return Status::InvalidArgument(
          fmt::format("component {} starts at {}, expected {}", i, c.start, expect));
    }
    if (c.end <= c.start)
      return Status::InvalidArgument(fmt::format("component {} is empty", i));
    if (c.stripe_size < (64u << 10) || c.stripe_size % 4096 != 0 ||
        (c.stripe_size & (c.stripe_size - 1)) != 0) {
      return Status::InvalidArgument(
          fmt::format("stripe size {} must be a power of two of at least 64 KiB", c.stripe_size));
    }
    if (c.stripe_count == 0 || c.stripe_count > kMaxStripeCount) {
      return Status::InvalidArgument(
          fmt::format("stripe count {} out of range 1..{}", c.stripe_count, kMaxStripeCount));
    }
    if (c.replicas > kMaxReplicas) {
      return Status::InvalidArgument(
          fmt::format("replica count {} out of range 1..{}", c.replicas, kMaxReplicas));
    }
    if (c.end != kLayoutEof && c.end % c.stripe_size != 0) {
      return Status::InvalidArgument(
          fmt::format("component {} end {} is not a multiple of its stripe size", i, c.end));
    }
    if (!c.osts.empty()) {
      if (c.osts.size() != c.stripe_count) {
        return Status::InvalidArgument(fmt::format("component {} has {} OSTs for {} stripes", i,
                                                   c.osts.size(), c.stripe_count));
      }
      std::set<uint32_t> seen(c.osts.begin(), c.osts.end());
      if (seen.size() != c.osts.size()) {
        return Status::InvalidArgument(fmt::format("component {} repeats an OST", i));
      }
      for (uint32_t o : c.osts) {
        if (IsChain(o) != (c.replicas > 1)) {
          return Status::InvalidArgument(fmt::format("component {} with {} replicas names {} {}", i,
                                                     c.replicas, IsChain(o) ? "chain" : "OST",
                                                     IsChain(o) ? o - kChainBase : o));
        }
      }
    }
    expect = c.end;
  }
  if (expect != kLayoutEof)
    return Status::InvalidArgument("last component must extend to EOF");
  return Status::OK();
}

std::string FileLayout::ToString() const {
  std::string out;
  for (size_t i = 0; i < components.size(); ++i) {
    const auto& c = components[i];
    std::string end = c.end == kLayoutEof ? "EOF" : FormatSize(c.end);
    std::string osts;
    for (auto o : c.osts)
      osts += fmt::format("{}{}", osts.empty() ? "" : ",", IsChain(o) ? o - kChainBase : o);
    out += fmt::format("{}comp {} [{}, {}) {} x {}", i ? "; " : "", c.id, FormatSize(c.start), end,
                       c.stripe_count, FormatSize(c.stripe_size));
    if (c.replicas > 1) {
      out += fmt::format(" r{} chains {}", c.replicas, osts.empty() ? "-" : osts);
    } else {
      out += fmt::format(" osts {}", osts.empty() ? "-" : osts);
    }
  }
  return out;
}

std::vector<StripeExtent> MapRange(const FileLayout& layout, uint64_t offset, uint64_t len) {
  std::vector<StripeExtent> out;
  uint64_t pos = offset;
  const uint64_t stop = len > kLayoutEof - offset ? kLayoutEof : offset + len;
  while (pos < stop) {
    int ci = layout.ComponentFor(pos);
    if (ci < 0)
      break;
    const auto& c = layout.components[static_cast<size_t>(ci)];
    const uint64_t s = c.stripe_size;
    const uint64_t rel = pos - c.start;
    const uint64_t unit = rel / s;
    const uint64_t in_unit = rel % s;
    const uint64_t unit_end = std::min({c.end, stop, pos + (s - in_unit)});
    StripeExtent e;
    e.comp_index = static_cast<uint32_t>(ci);
    e.comp_id = c.id;
    e.stripe = static_cast<uint32_t>(unit % c.stripe_count);
    e.ost = c.instantiated() ? c.osts[e.stripe] : UINT32_MAX;
    e.file_offset = pos;
    e.obj_offset = (unit / c.stripe_count) * s + in_unit;
    e.len = unit_end - pos;
    out.push_back(e);
    pos = unit_end;
  }
  return out;
}

uint64_t ObjectLengthForFileSize(const LayoutComponent& c, uint32_t stripe, uint64_t file_size) {
  if (file_size <= c.start)
    return 0;
  const uint64_t r = std::min(file_size, c.end) - c.start;
  const uint64_t s = c.stripe_size;
  const uint64_t row = s * c.stripe_count;
  const uint64_t full_rows = r / row;
  const uint64_t rem = r % row;
  uint64_t tail = 0;
  if (rem > uint64_t{stripe} * s)
    tail = std::min<uint64_t>(rem - uint64_t{stripe} * s, s);
  return full_rows * s + tail;
}

uint64_t FileEndFromObjectLength(const LayoutComponent& c, uint32_t stripe, uint64_t obj_len) {
  if (obj_len == 0)
    return 0;
  const uint64_t s = c.stripe_size;
  const uint64_t last = obj_len - 1;
  const uint64_t row = last / s;
  const uint64_t within = last % s;
  return c.start + (row * c.stripe_count + stripe) * s + within + 1;
}

}  // namespace ciuic
