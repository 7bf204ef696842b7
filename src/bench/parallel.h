// ParallelFor for the benchmark's phases. Thread-safety: joins its threads before returning.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::bench {

// Runs fn(t, i) for i in [0, n) on `threads` threads (t: the thread's index, for its buffer);
// the first error wins and stops the rest.
inline Status ParallelFor(int threads, uint64_t n, const std::function<Status(int, uint64_t)>& fn) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (uint64_t i; (i = next.fetch_add(1)) < n;) {
        Status s = fn(t, i);
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(mu);
          if (first.ok())
            first = s;
          next = n;  // stop the others
        }
      }
    });
  }
  for (auto& t : ts)
    t.join();
  return first;
}

}  // namespace ciuic::bench
