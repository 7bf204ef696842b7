// ThreadPool: a fixed set of threads running queued closures, with a bounded queue.
// Used as the BlockingPool for RocksDB calls, fsync and big copies so network threads never
// block. Thread-safe. Stop() refuses new work, runs what is queued, then joins.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ciuic {

class ThreadPool {
 public:
  ThreadPool(size_t threads, size_t max_queue, std::string name = "pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `fn`. Returns false when the queue is full or the pool stopped (caller answers
  // kUnavailable).
  bool TrySubmit(std::function<void()> fn);
  // Queues `fn`, waiting for room. Returns false only when stopped.
  bool Submit(std::function<void()> fn);
  void Stop();
  size_t queued() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable room_cv_;
  std::deque<std::function<void()>> queue_;
  size_t max_queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ciuic
