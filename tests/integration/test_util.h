// Helpers shared by the integration tests: deterministic data, layouts, object-file lookup.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "ciuic/layout.h"

namespace ciuic::testing {

// `n` bytes that depend on `seed` and on the position (cheap to make, easy to tell apart).
inline std::string Pattern(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t k = 0; k < 8 && i + k < n; ++k)
      s[i + k] = static_cast<char>(x >> (8 * k));
  }
  return s;
}

// One component over the whole file: `count` stripes of `stripe_size` (the MDS picks OSTs
// unless `osts` is given).
inline FileLayout Striped(uint32_t count, uint32_t stripe_size, std::vector<uint32_t> osts = {}) {
  FileLayout l;
  LayoutComponent c;
  c.id = 1;
  c.start = 0;
  c.end = kLayoutEof;
  c.stripe_size = stripe_size;
  c.stripe_count = count;
  c.osts = std::move(osts);
  l.components.push_back(c);
  l.pattern = 1;
  return l;
}

// Finds the data file of object `name` under `dir` (any depth; checksum and other side files
// have suffixes). Returns "" when absent.
inline std::string FindObjectFile(const std::string& dir, const std::string& name) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && it->path().filename() == name)
      return it->path().string();
  }
  return "";
}

}  // namespace ciuic::testing
