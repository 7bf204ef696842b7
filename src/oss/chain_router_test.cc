// ChainRouter's write order at the head and its clean reads (docs/design.md "Replication").
#include "oss/chain_router.h"

#include <thread>
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

// The barrier a resync waits on before it lists the head's objects: mutations checked under a
// chain version older than the member's `since` (their routes leave the member out) must end
// first; those of newer versions, and of other chains, do not hold it up.
TEST(ChainRouterTest, AResyncWaitsForMutationsCheckedUnderOlderChainVersions) {
  ChainRouter r(nullptr, nullptr, net::ChannelOptions());
  const uint32_t chain = 0x10001, other = 0x10002;
  EXPECT_TRUE(r.WaitMutationsBefore(chain, 5, 0));
  r.MutationBegin(chain, 4);
  r.MutationBegin(chain, 4);
  r.MutationBegin(chain, 5);
  r.MutationBegin(other, 1);
  EXPECT_FALSE(r.WaitMutationsBefore(chain, 5, 10));
  EXPECT_TRUE(r.WaitMutationsBefore(chain, 4, 0));  // only older than 4 count
  std::thread ender([&] {
    r.MutationEnd(chain, 4);
    r.MutationEnd(chain, 4);
  });
  EXPECT_TRUE(r.WaitMutationsBefore(chain, 5, 60000));
  ender.join();
  EXPECT_FALSE(r.WaitMutationsBefore(chain, 6, 0));  // the version-5 one is still in flight
  r.MutationEnd(chain, 5);
  EXPECT_TRUE(r.WaitMutationsBefore(chain, 6, 0));
  EXPECT_TRUE(r.WaitMutationsBefore(0x10000, UINT64_MAX, 0));  // a chain below: nothing
}

}  // namespace
}  // namespace ciuic::oss
