#include "client/timer_queue.h"

#include <vector>

#include "common/time_util.h"

namespace ciuic::client {

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() {
  Stop();
}

bool TimerQueue::After(int64_t delay_ms, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_)
    return false;
  due_.emplace(MonoMillis() + delay_ms, std::move(fn));
  cv_.notify_one();
  return true;
}

void TimerQueue::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable())
    thread_.join();
  std::multimap<int64_t, std::function<void()>> early;
  {
    std::lock_guard<std::mutex> lock(mu_);
    early.swap(due_);
  }
  for (auto& [when, fn] : early) {
    try {
      fn();
    } catch (...) {
      // A closure must not throw; the others still run.
    }
  }
}

void TimerQueue::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const int64_t now = MonoMillis();
    auto first = due_.begin();
    if (first->first > now) {
      cv_.wait_for(lock, std::chrono::milliseconds(first->first - now));
      continue;
    }
    std::vector<std::function<void()>> run;
    while (!due_.empty() && due_.begin()->first <= now) {
      run.push_back(std::move(due_.begin()->second));
      due_.erase(due_.begin());
    }
    lock.unlock();
    for (auto& fn : run) {
      try {
        fn();
      } catch (...) {
        // A closure must not throw; keep the timer thread alive if one does.
      }
    }
    run.clear();
    lock.lock();
  }
}

}  // namespace ciuic::client
