#include "meta/layout_policy.h"

#include <algorithm>

#include <fmt/format.h>

namespace ciuic::meta {
namespace {

LayoutComponent Comp(uint32_t id, uint64_t start, uint64_t end, uint32_t count) {
  LayoutComponent c;
  c.id = id;
  c.start = start;
  c.end = end;
  c.stripe_size = kDefaultStripeSize;
  c.stripe_count = count;
  return c;
}

}  // namespace

FileLayout AdaptiveLayout(uint64_t size_hint, bool random_access, uint32_t live_osts) {
  const uint32_t cap = std::max<uint32_t>(live_osts, 1);
  FileLayout l;
  l.pattern = 0;
  if (size_hint == 0) {
    l.components.push_back(Comp(0, 0, 64ull << 20, 1));
    l.components.push_back(Comp(1, 64ull << 20, 1ull << 30, std::min<uint32_t>(4, cap)));
    l.components.push_back(Comp(2, 1ull << 30, kLayoutEof, std::min<uint32_t>(16, cap)));
    return l;
  }
  uint64_t count = 1;
  if (size_hint >= kSmallFileLimit) {
    count = random_access ? std::min<uint64_t>(16, size_hint / (64ull << 20))
                          : std::min<uint64_t>(4, size_hint / (256ull << 20));
    count = std::max<uint64_t>(count, 1);
  }
  l.components.push_back(
      Comp(0, 0, kLayoutEof, std::min<uint32_t>(static_cast<uint32_t>(count), cap)));
  return l;
}

Status ValidateExplicitLayout(const FileLayout& l) {
  if (l.components.size() > kMaxComponents) {
    return Status::InvalidArgument(fmt::format("layout has {} components; at most {} allowed",
                                               l.components.size(), kMaxComponents));
  }
  return l.Validate();
}

FileLayout FromTemplate(const FileLayout& t, uint32_t live_osts) {
  const uint32_t cap = std::max<uint32_t>(live_osts, 1);
  FileLayout l = t;
  for (auto& c : l.components) {
    c.osts.clear();
    c.stripe_count = std::min(c.stripe_count, cap);
  }
  return l;
}

FileLayout AsTemplate(const FileLayout& t) {
  FileLayout l = t;
  l.pattern = 1;
  for (auto& c : l.components)
    c.osts.clear();
  return l;
}

}  // namespace ciuic::meta
