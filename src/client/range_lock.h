// RangeLock: orders IO on byte ranges of one file inside one client (Decision 6: one client never
// has two overlapping writes to the same range in flight). Writers exclude overlapping readers
// and writers; readers share. Waiters are served first-come first-served among overlapping
// ranges. Acquire never blocks: when the range is busy, `on_granted` runs later from the
// Release() that frees it (on whatever thread calls Release). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>

namespace ciuic::client {

class RangeLock {
 public:
  struct Range {
    uint64_t begin = 0;
    uint64_t end = 0;  // exclusive
    bool write = false;
  };
  using Ticket = uint64_t;

  using GrantFn = std::function<void(Ticket)>;
  // Acquires [begin, end). `on_granted(ticket)` runs exactly once, either inside this call
  // (range free) or later from the Release() that frees it; pass the ticket to Release.
  void Acquire(uint64_t begin, uint64_t end, bool write, GrantFn on_granted);
  // Blocking form for user threads (never call on a network thread).
  Ticket AcquireBlocking(uint64_t begin, uint64_t end, bool write);
  void Release(Ticket t);
  // Number of granted ranges (tests).
  size_t held() const;

 private:
  struct Entry {
    Ticket ticket;
    Range range;
    bool granted;
    GrantFn on_granted;
  };
  static bool Conflicts(const Range& a, const Range& b) {
    return a.begin < b.end && b.begin < a.end && (a.write || b.write);
  }

  mutable std::mutex mu_;
  std::list<Entry> entries_;  // in arrival order
  Ticket next_ = 1;
};

}  // namespace ciuic::client
