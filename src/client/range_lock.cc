#include "client/range_lock.h"

#include <condition_variable>
#include <memory>
#include <vector>

namespace ciuic::client {

void RangeLock::Acquire(uint64_t begin, uint64_t end, bool write, GrantFn on_granted) {
  Range r{begin, end, write};
  bool granted = true;
  Ticket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = next_++;
    // Conflicting with anything earlier (granted or waiting) means waiting: FIFO among overlaps.
    for (const Entry& e : entries_) {
      if (Conflicts(e.range, r)) {
        granted = false;
        break;
      }
    }
    entries_.push_back(Entry{t, r, granted, granted ? nullptr : std::move(on_granted)});
  }
  if (granted && on_granted)
    on_granted(t);
}

RangeLock::Ticket RangeLock::AcquireBlocking(uint64_t begin, uint64_t end, bool write) {
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto w = std::make_shared<Waiter>();
  Ticket ticket = 0;
  Acquire(begin, end, write, [w, &ticket](Ticket t) {
    std::lock_guard<std::mutex> lock(w->mu);
    ticket = t;
    w->done = true;
    w->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(w->mu);
  w->cv.wait(lock, [&] { return w->done; });
  return ticket;
}

void RangeLock::Release(Ticket t) {
  std::vector<std::pair<Ticket, GrantFn>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->ticket == t) {
        entries_.erase(it);
        break;
      }
    }
    // Grant each waiter that no earlier entry (granted or still waiting) conflicts with.
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->granted)
        continue;
      bool blocked = false;
      for (auto jt = entries_.begin(); jt != it; ++jt) {
        if (Conflicts(jt->range, it->range)) {
          blocked = true;
          break;
        }
      }
      if (!blocked) {
        it->granted = true;
        if (it->on_granted)
          ready.emplace_back(it->ticket, std::move(it->on_granted));
        it->on_granted = nullptr;
      }
    }
  }
  for (auto& [ticket, fn] : ready)
    fn(ticket);
}

size_t RangeLock::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Entry& e : entries_)
    n += e.granted ? 1 : 0;
  return n;
}

}  // namespace ciuic::client
