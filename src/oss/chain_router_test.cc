// ChainRouter's write order at the head and its clean reads (docs/design.md "Replication").
#include "oss/chain_router.h"

#include <vector>

#include <gtest/gtest.h>

namespace ciuic::oss {
namespace {

ObjectId Obj(uint64_t seq) {
  return ObjectId{Fid{seq, 0, 0}, 0, 0};
}

TEST(ChainRouterTest, OverlappingWritesAreOrderedAtTheHeadOnly) {
  ChainRouter r(nullptr, nullptr, net::ChannelOptions());
  std::vector<int> started;
  r.OrderedBegin(true, Obj(1), 0, 100, [&] { started.push_back(1); });
  r.OrderedBegin(true, Obj(1), 50, 100, [&] { started.push_back(2); });   // overlaps 1: waits
  r.OrderedBegin(true, Obj(1), 500, 100, [&] { started.push_back(3); });  // apart: runs
  r.OrderedBegin(true, Obj(2), 0, 100, [&] { started.push_back(4); });    // another object
  r.OrderedBegin(false, Obj(1), 0, 100, [&] { started.push_back(5); });   // not the head
  EXPECT_EQ(started, (std::vector<int>{1, 3, 4, 5}));
  r.OrderedEnd(Obj(1), 0, 100);
  EXPECT_EQ(started, (std::vector<int>{1, 3, 4, 5, 2}));
}

TEST(ChainRouterTest, ReadsOfADirtyRangeWaitForTheWritesInFlightWhenTheyCame) {
  ChainRouter r(nullptr, nullptr, net::ChannelOptions());
  std::vector<int> ran;
  r.WhenClean(Obj(1), 0, 4096, [&] { ran.push_back(0); });  // nothing in flight: at once
  r.MarkDirty(Obj(1), 0, 8192);
  r.WhenClean(Obj(1), 4096, 100, [&] { ran.push_back(1); });      // overlaps: waits
  r.WhenClean(Obj(1), 1 << 20, 4096, [&] { ran.push_back(2); });  // elsewhere: at once
  r.WhenClean(Obj(2), 0, 4096, [&] { ran.push_back(3); });        // another object
  // A later write to the range does not hold up the read that came before it...
  r.MarkDirty(Obj(1), 4096, 4096);
  r.WhenClean(Obj(1), 4096, 10, [&] { ran.push_back(4); });  // ...but holds up a later read
  EXPECT_EQ(ran, (std::vector<int>{0, 2, 3}));
  r.ClearDirty(Obj(1), 0, 8192);
  EXPECT_EQ(ran, (std::vector<int>{0, 2, 3, 1}));
  r.ClearDirty(Obj(1), 4096, 4096);
  EXPECT_EQ(ran, (std::vector<int>{0, 2, 3, 1, 4}));
  EXPECT_EQ(r.dirty_objects(), 0u);
  // A punch marks [length, end of the object).
  r.MarkDirty(Obj(3), 1000, UINT64_MAX - 1000);
  r.WhenClean(Obj(3), 1 << 30, 10, [&] { ran.push_back(5); });
  EXPECT_EQ(ran.back(), 4);
  r.ClearDirty(Obj(3), 1000, UINT64_MAX - 1000);
  EXPECT_EQ(ran.back(), 5);
}

}  // namespace
}  // namespace ciuic::oss
