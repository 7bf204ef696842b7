// Time helpers: wall-clock timestamps with nanoseconds and 64-bit seconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace ciuic {

struct Timespec {
  int64_t sec = 0;
  uint32_t nsec = 0;
  bool operator==(const Timespec&) const = default;
};

inline Timespec NowTimespec() {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return Timespec{ns / 1000000000, static_cast<uint32_t>(ns % 1000000000)};
}

inline int64_t WallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline int64_t MonoMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace ciuic
