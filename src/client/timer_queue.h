// TimerQueue: runs closures after a delay on one thread of its own (retry backoff, lease renewal).
// Closures must be short and must not block for long (they hand blocking work to a pool).
// Thread-safe. Stop() joins the thread and then runs every closure not yet due at once, on the
// calling thread (so work waiting on a retry learns of the shutdown instead of hanging).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace ciuic::client {

class TimerQueue {
 public:
  TimerQueue();
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // Runs `fn` on the timer thread after `delay_ms`. Returns false (and drops `fn`) once stopped.
  bool After(int64_t delay_ms, std::function<void()> fn);
  void Stop();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<int64_t, std::function<void()>> due_;  // monotonic ms -> closure
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ciuic::client
