// A progress bar on stderr for the CLI's long commands (put, get, hsm -r): bytes done of the
// total, optionally items (files) done of theirs, and the rate, redrawn five times a second.
// Drawn only when stderr is a terminal. Add/AddItem may be called from any thread.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "common/config.h"

namespace ciuic {

class Progress {
 public:
  // `items` > 0 also shows "done/items <item_name>".
  Progress(std::string label, uint64_t total, uint64_t items = 0, std::string item_name = "files")
      : label_(std::move(label)), total_(total), items_(items), item_name_(std::move(item_name)) {
    enabled_ = ::isatty(STDERR_FILENO) != 0;
    start_ = std::chrono::steady_clock::now();
    if (enabled_) {
      thread_ = std::thread([this] {
        while (!done_.load()) {
          Draw(false);
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return done_.load(); });
        }
      });
    }
  }
  ~Progress() { Finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void Add(uint64_t n) { done_bytes_.fetch_add(n, std::memory_order_relaxed); }
  void AddItem() { done_items_.fetch_add(1, std::memory_order_relaxed); }
  void Finish() {
    if (done_.exchange(true))
      return;
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
    if (enabled_)
      Draw(true);
  }
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  uint64_t bytes() const { return done_bytes_.load(); }

 private:
  void Draw(bool final) {
    const uint64_t d = done_bytes_.load();
    const double secs = std::max(Seconds(), 1e-6);
    double pct = total_ ? 100.0 * static_cast<double>(d) / static_cast<double>(total_) : 100.0;
    if (total_ == 0 && items_ > 0)  // empty files: the count is the measure
      pct = 100.0 * static_cast<double>(done_items_.load()) / static_cast<double>(items_);
    constexpr int kWidth = 30;
    const int fill = std::clamp(static_cast<int>(pct / 100.0 * kWidth), 0, kWidth);
    const std::string items =
        items_ > 0 ? fmt::format(" {}/{} {}", done_items_.load(), items_, item_name_) : "";
    fmt::print(stderr, "\r{} [{}{}] {:5.1f}%{} {} / {} {}/s   {}", label_, std::string(fill, '#'),
               std::string(kWidth - fill, ' '), pct, items, FormatSize(d), FormatSize(total_),
               FormatSize(static_cast<uint64_t>(static_cast<double>(d) / secs)), final ? "\n" : "");
    std::fflush(stderr);
  }

  std::string label_;
  uint64_t total_;
  uint64_t items_;
  std::string item_name_;
  bool enabled_ = false;
  std::atomic<uint64_t> done_bytes_{0};
  std::atomic<uint64_t> done_items_{0};
  std::atomic<bool> done_{false};
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace ciuic
