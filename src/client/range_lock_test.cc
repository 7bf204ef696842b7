#include "client/range_lock.h"

#include <vector>

#include <gtest/gtest.h>

namespace ciuic::client {
namespace {

TEST(RangeLockTest, ReadersShareWritersExclude) {
  RangeLock l;
  std::vector<int> order;
  RangeLock::Ticket r1 = 0, r2 = 0, w = 0, r3 = 0;
  l.Acquire(0, 100, false, [&](RangeLock::Ticket t) { r1 = t, order.push_back(1); });
  l.Acquire(50, 150, false, [&](RangeLock::Ticket t) { r2 = t, order.push_back(2); });
  l.Acquire(90, 95, true, [&](RangeLock::Ticket t) { w = t, order.push_back(3); });
  // A reader after a waiting writer on an overlapping range queues behind it (FIFO).
  l.Acquire(0, 10, false, [&](RangeLock::Ticket t) { r3 = t, order.push_back(4); });
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4}));  // [0,10) does not overlap the writer
  l.Release(r1);
  EXPECT_EQ(order.size(), 3u);  // r2 still holds [50,150)
  l.Release(r2);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4, 3}));
  l.Release(w);
  l.Release(r3);
  EXPECT_EQ(l.held(), 0u);
}

TEST(RangeLockTest, OverlappingWritersAreOrdered) {
  RangeLock l;
  std::vector<int> order;
  RangeLock::Ticket a = 0, b = 0, c = 0;
  l.Acquire(0, 10, true, [&](RangeLock::Ticket t) { a = t, order.push_back(1); });
  l.Acquire(5, 15, true, [&](RangeLock::Ticket t) { b = t, order.push_back(2); });
  l.Acquire(12, 20, true, [&](RangeLock::Ticket t) { c = t, order.push_back(3); });
  EXPECT_EQ(order, (std::vector<int>{1}));  // c overlaps the waiting b
  l.Release(a);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  l.Release(b);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  l.Release(c);
  EXPECT_EQ(l.held(), 0u);
}

}  // namespace
}  // namespace ciuic::client
