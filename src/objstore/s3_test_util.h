// Small helpers shared by the S3 test binaries (s3_test, s3_server_test). Test-only.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/status.h"
#include "objstore/s3_credentials.h"

namespace ciuic::objstore::testutil {

// An environment with no variables, so no test reads the machine's AWS settings.
inline EnvLookup NoEnv() {
  return [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
}

// `n` bytes from a generator seeded with `seed`.
inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) {
    c = static_cast<char>(rng());
  }
  return s;
}

// Passes when `s` is OK; otherwise fails showing it.
inline ::testing::AssertionResult IsOk(const Status& s) {
  if (s.ok()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << s.ToString();
}

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace ciuic::objstore::testutil
