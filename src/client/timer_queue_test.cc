#include "client/timer_queue.h"

#include <condition_variable>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

namespace ciuic::client {
namespace {

TEST(TimerQueueTest, RunsClosuresInDueOrder) {
  TimerQueue q;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  ASSERT_TRUE(q.After(30, [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
    cv.notify_all();
  }));
  ASSERT_TRUE(q.After(0, [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
    cv.notify_all();
  }));
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return order.size() == 2; });
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST(TimerQueueTest, StopRunsPendingClosuresAndRefusesNewOnes) {
  TimerQueue q;
  int ran = 0;
  ASSERT_TRUE(q.After(3600 * 1000, [&] { ++ran; }));
  q.Stop();
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(q.After(0, [&] { ++ran; }));
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace ciuic::client
