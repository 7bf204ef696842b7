#include "common/thread_pool.h"

#include <pthread.h>

#include "common/logging.h"

namespace ciuic {

ThreadPool::ThreadPool(size_t threads, size_t max_queue, std::string name) : max_queue_(max_queue) {
  for (size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this, name, i] {
      std::string tn = (name + std::to_string(i)).substr(0, 15);
      pthread_setname_np(pthread_self(), tn.c_str());
      Run();
    });
  }
}

ThreadPool::~ThreadPool() {
  Stop();
}

bool ThreadPool::TrySubmit(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_)
      return false;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
}

bool ThreadPool::Submit(std::function<void()> fn) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    room_cv_.wait(lock, [&] { return stopping_ || queue_.size() < max_queue_; });
    if (stopping_)
      return false;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
}

void ThreadPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty())
      return;
    stopping_ = true;
  }
  cv_.notify_all();
  room_cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id())
      t.join();
  }
  threads_.clear();
}

size_t ThreadPool::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void ThreadPool::Run() {
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      fn = std::move(queue_.front());
      queue_.pop_front();
    }
    room_cv_.notify_one();
    try {
      fn();
    } catch (const std::exception& e) {
      LOG_ERROR("uncaught exception in pool task: {}", e.what());
    }
  }
}

}  // namespace ciuic
