#include "client/node_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace ciuic::client {
namespace {

namespace fs = std::filesystem;

class NodeCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ciuic-node-cache-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::unique_ptr<NodeCache> Open(uint64_t max_bytes = uint64_t{1} << 30) {
    NodeCacheOptions o;
    o.dir = dir_;
    o.max_bytes = max_bytes;
    o.min_free_ratio = 0;
    auto c = NodeCache::Open(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  static std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937 rng(seed);
    for (auto& b : v)
      b = static_cast<uint8_t>(rng());
    return v;
  }
  // Every regular file below DIR/blocks.
  std::vector<fs::path> Files() {
    std::vector<fs::path> out;
    for (auto& e : fs::recursive_directory_iterator(fs::path(dir_) / "blocks"))
      if (e.is_regular_file())
        out.push_back(e.path());
    return out;
  }
  std::string dir_;
  const Fid fid_{0x1234, 0, 0};
};

TEST_F(NodeCacheTest, ABlockIsServedOnlyForItsOwnKey) {
  auto c = Open();
  std::vector<uint8_t> whole = Bytes(kNodeCacheBlock, 1), tail = Bytes(5000, 2);
  ASSERT_TRUE(c->Put(fid_, 7, 0, whole.data(), whole.size()).ok());
  ASSERT_TRUE(c->Put(fid_, 7, 3, tail.data(), tail.size()).ok());
  std::vector<uint8_t> got(kNodeCacheBlock);
  auto n = c->Get(fid_, 7, 0, got.data());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, whole.size());
  EXPECT_EQ(got, whole);
  n = c->Get(fid_, 7, 3, got.data());
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, tail.size());
  EXPECT_EQ(0, std::memcmp(got.data(), tail.data(), tail.size()));
  // Another data version, block or file: a miss.
  EXPECT_EQ(c->Get(fid_, 8, 0, got.data()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->Get(fid_, 7, 1, got.data()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->Get(Fid{0x1235, 0, 0}, 7, 0, got.data()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->hits(), 2u);
  EXPECT_EQ(c->misses(), 3u);
  // Another process (a new NodeCache on the same directory) finds them: the directory is the
  // index, and it survives restarts.
  auto again = Open();
  EXPECT_TRUE(again->Get(fid_, 7, 0, got.data()).ok());
  auto st = again->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->blocks, 2u);
}

TEST_F(NodeCacheTest, ARangeReadsAndChecksOnlyItsSlices) {
  auto c = Open();
  std::vector<uint8_t> data = Bytes(kNodeCacheBlock - 100, 7);
  ASSERT_TRUE(c->Put(fid_, 1, 0, data.data(), data.size()).ok());
  std::vector<uint8_t> got(kNodeCacheBlock);
  size_t len = 0;
  for (auto [off, n] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 4096},
           {5000, 10},
           {4095, 2},
           {data.size() - 3000, 5000},
           {0, kNodeCacheBlock},
           {8192, 8192},                          // whole slices: read in place
           {data.size() / 4096 * 4096, 5000}}) {  // in place up to the short last slice
    auto r = c->GetRange(fid_, 1, 0, off, n, got.data(), &len);
    ASSERT_TRUE(r.ok()) << off << " " << r.status().ToString();
    const size_t want = std::min<uint64_t>(n, data.size() - off);
    EXPECT_EQ(*r, want) << off;
    EXPECT_EQ(len, data.size());
    EXPECT_EQ(0, std::memcmp(got.data(), data.data() + off, want)) << off;
  }
  EXPECT_FALSE(c->GetRange(fid_, 1, 0, data.size(), 10, got.data(), &len).ok());
  // A bad slice outside the range is not read; one inside fails the range and removes the block.
  const fs::path f = Files()[0];
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 10));
    io.put('\x33');
  }
  EXPECT_TRUE(c->GetRange(fid_, 1, 0, 0, 4096, got.data(), &len).ok());
  EXPECT_FALSE(c->GetRange(fid_, 1, 0, data.size() / 4096 * 4096, 4096, got.data(), &len).ok());
  EXPECT_TRUE(Files().empty());
}

TEST_F(NodeCacheTest, ACorruptBlockIsRemovedAndReportedAsAMiss) {
  auto c = Open();
  std::vector<uint8_t> data = Bytes(300000, 3);
  ASSERT_TRUE(c->Put(fid_, 1, 0, data.data(), data.size()).ok());
  ASSERT_EQ(Files().size(), 1u);
  const fs::path f = Files()[0];
  {
    // One flipped byte in the middle of the data.
    int fd = ::open(f.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b;
    const off_t at = static_cast<off_t>(fs::file_size(f) - 150000);
    ASSERT_EQ(::pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &b, 1, at), 1);
    ::close(fd);
  }
  std::vector<uint8_t> got(kNodeCacheBlock);
  EXPECT_EQ(c->Get(fid_, 1, 0, got.data()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->corrupt(), 1u);
  EXPECT_TRUE(Files().empty());
  // A truncated block and a header naming another key are misses too.
  ASSERT_TRUE(c->Put(fid_, 1, 0, data.data(), data.size()).ok());
  fs::resize_file(Files()[0], 1000);
  EXPECT_EQ(c->Get(fid_, 1, 0, got.data()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c->Put(fid_, 1, 0, data.data(), data.size()).ok());
  fs::rename(Files()[0], Files()[0].parent_path() / "2-0");  // now named data version 2
  EXPECT_EQ(c->Get(fid_, 2, 0, got.data()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->corrupt(), 3u);
}

TEST_F(NodeCacheTest, AFillerThatDiedLeavesNothingVisibleAndItsFileGoesAtTheNextScan) {
  auto c = Open();
  std::vector<uint8_t> data = Bytes(4096, 4);
  ASSERT_TRUE(c->Put(fid_, 1, 0, data.data(), data.size()).ok());
  const fs::path block = Files()[0];
  // What a filler killed before its rename leaves: a temporary file of a dead process, beside
  // the name of a block that was never made visible.
  pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  ASSERT_GT(child, 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  const fs::path dead = block.parent_path() / fmt::format("1-1.tmp.{}.0", static_cast<long>(child));
  std::ofstream(dead) << "half a block";
  const fs::path live =
      block.parent_path() / fmt::format("1-2.tmp.{}.0", static_cast<long>(::getpid()));
  std::ofstream(live) << "being written";
  std::vector<uint8_t> got(kNodeCacheBlock);
  EXPECT_EQ(c->Get(fid_, 1, 1, got.data()).status().code(), StatusCode::kNotFound);
  // Another process's open takes the size from the shared count (no walk of the cache); the
  // next scan (an eviction, or the status) removes the dead filler's file.
  auto again = Open();
  EXPECT_TRUE(fs::exists(dead));
  ASSERT_TRUE(again->Stats().ok());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));  // its filler still runs
  EXPECT_TRUE(again->Get(fid_, 1, 0, got.data()).ok());
  // Without the shared count (a cache made before it, or one that cannot map it), an open
  // scans: and removes such files at once.
  fs::remove(fs::path(dir_) / "stats");
  std::ofstream(dead) << "half a block";
  auto third = Open();
  EXPECT_FALSE(fs::exists(dead));
}

TEST_F(NodeCacheTest, EvictionRemovesTheLeastRecentlyUsedFirst) {
  const uint64_t file = 48 + 4 * 256 + kNodeCacheBlock;  // one whole block's file
  auto c = Open(4 * file + file / 2);
  std::vector<uint8_t> data = Bytes(kNodeCacheBlock, 5);
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_TRUE(c->Put(fid_, 1, i, data.data(), data.size()).ok());
  // Use times set by hand (no clock in the test): block 0 oldest, then 1, 2, 3; a hit on 0
  // makes it the newest.
  int64_t t = 1000000;
  for (uint64_t i = 0; i < 4; ++i) {
    const std::string p =
        fmt::format("{}/blocks/{:02x}/0-{:x}-0/1-{:x}", dir_, fid_.seq & 0xff, fid_.seq, i);
    timespec ts[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), ts, 0), 0) << p;
    t += 10;
  }
  std::vector<uint8_t> got(kNodeCacheBlock);
  ASSERT_TRUE(c->Get(fid_, 1, 0, got.data()).ok());  // now, far after t
  // A fifth block does not fit: the least recently used (1) goes, then (to leave room) 2.
  ASSERT_TRUE(c->Put(fid_, 1, 4, data.data(), data.size()).ok());
  EXPECT_TRUE(c->Get(fid_, 1, 0, got.data()).ok());
  EXPECT_FALSE(c->Get(fid_, 1, 1, got.data()).ok());
  EXPECT_TRUE(c->Get(fid_, 1, 4, got.data()).ok());
  auto st = c->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_LE(st->bytes, 4 * file + file / 2);
}

TEST_F(NodeCacheTest, CountersAreSharedByEveryProcessOfTheDirectory) {
  auto a = Open();
  auto b = Open();  // another process's view of the same directory
  std::vector<uint8_t> data = Bytes(10000, 8);
  a->CountFill(fid_, 1, 0, data.size());
  ASSERT_TRUE(a->Put(fid_, 1, 0, data.data(), data.size()).ok());
  std::vector<uint8_t> got(kNodeCacheBlock);
  ASSERT_TRUE(b->Get(fid_, 1, 0, got.data()).ok());
  size_t len = 0;
  ASSERT_TRUE(b->GetRange(fid_, 1, 0, 100, 50, got.data(), &len).ok());
  auto st = Open()->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->counters.fills, 1u);
  EXPECT_EQ(st->counters.fill_bytes, data.size());
  EXPECT_EQ(st->counters.hits, 2u);
  EXPECT_EQ(st->counters.hit_bytes, data.size() + 50);
  EXPECT_EQ(st->counters.corrupt, 0u);
}

TEST_F(NodeCacheTest, APlanEvictsWhatItNeedsLatestAndWhatItNeverNeedsFirst) {
  const uint64_t file = 48 + 4 * 256 + kNodeCacheBlock;
  auto c = Open();
  std::vector<uint8_t> data = Bytes(kNodeCacheBlock, 9);
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_TRUE(c->Put(fid_, 1, i, data.data(), data.size()).ok());
    const std::string p =
        fmt::format("{}/blocks/{:02x}/0-{:x}-0/1-{:x}", dir_, fid_.seq & 0xff, fid_.seq, i);
    timespec ts[2] = {{1000000 + static_cast<time_t>(i), 0}, {1000000 + static_cast<time_t>(i), 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), ts, 0), 0);
  }
  auto order = [&] {
    std::vector<uint64_t> out;
    auto o = c->EvictionOrder();
    EXPECT_TRUE(o.ok());
    for (const auto& b : *o)
      out.push_back(b.index);
    return out;
  };
  // Without a plan: least recently used first.
  EXPECT_EQ(order(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  // The plan reads 3, 1, 5, 0, then 3 again; 2 and 4 are not in it.
  std::vector<NodeCache::BlockRef> plan;
  for (uint64_t i : {3, 1, 5, 0, 3})
    plan.push_back(NodeCache::BlockRef{fid_, 1, i});
  c->SetPlan(plan);
  EXPECT_EQ(order(), (std::vector<uint64_t>{2, 4, 0, 5, 1, 3}));
  // A hit on 3 uses its first occurrence: its next use is now the plan's last.
  std::vector<uint8_t> got(kNodeCacheBlock);
  ASSERT_TRUE(c->Get(fid_, 1, 3, got.data()).ok());
  EXPECT_EQ(order(), (std::vector<uint64_t>{2, 4, 3, 0, 5, 1}));
  // Room for three: the three needed soonest stay.
  ASSERT_TRUE(c->Evict(3 * file).ok());
  EXPECT_EQ(order(), (std::vector<uint64_t>{0, 5, 1}));
  // A fill of 1 uses it; with no plan again, least recently used first.
  c->CountFill(fid_, 1, 1, kNodeCacheBlock);
  EXPECT_EQ(order().front(), 1u);
  c->SetPlan({});
  EXPECT_EQ(order(), (std::vector<uint64_t>{0, 1, 5}));
}

TEST_F(NodeCacheTest, OneFillOfABlockAtATime) {
  auto c = Open();
  NodeCache::FillLock a = c->LockFill(fid_, 1, 0);
  ASSERT_TRUE(a.held());
  // Another open of the lock file (another process, or thread) cannot take it meanwhile.
  EXPECT_FALSE(c->LockFill(fid_, 1, 0, /*wait=*/false).held());
  a = NodeCache::FillLock();
  EXPECT_TRUE(c->LockFill(fid_, 1, 0, /*wait=*/false).held());
}

// Write-through staging: a commit caches the blocks written whole (the last up to the size)
// under the version it is given and removes every staged file; all writers of the directory
// together stage at most half the cache, counted in the shared stats.
TEST_F(NodeCacheTest, StagedWritesAreCommittedWholeAndBoundedAcrossWriters) {
  auto c = Open(4 * kNodeCacheBlock + 8 * 4096);      // room for 4 blocks: 2 may be staged
  auto other = Open(4 * kNodeCacheBlock + 8 * 4096);  // another process's view of the directory
  const std::vector<uint8_t> data = Bytes(2 * kNodeCacheBlock + 100, 8);
  auto a = c->StageWrites(fid_);
  a->Write(data.data(), 3000, 0);                                // block 0 in two pieces
  a->Write(data.data() + 3000, kNodeCacheBlock - 3000, 3000);    // ... now whole
  a->Write(data.data() + kNodeCacheBlock, 10, kNodeCacheBlock);  // block 1: 10 bytes only
  EXPECT_EQ(a->staged(), 2 * kNodeCacheBlock);
  // The budget is spent: another writer stages nothing now.
  const Fid fid2{0x999, 0, 0};
  auto b = other->StageWrites(fid2);
  b->Write(data.data(), 4096, 0);
  EXPECT_EQ(b->staged(), 0u);
  EXPECT_EQ(a->Commit(7, data.size()), 1u);            // block 1 was not written whole
  EXPECT_TRUE(Files().size() == 1) << Files().size();  // staged files gone, one block cached
  std::vector<uint8_t> got(kNodeCacheBlock);
  ASSERT_TRUE(c->Get(fid_, 7, 0, got.data()).ok());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin()));
  EXPECT_EQ(c->Get(fid_, 7, 1, got.data()).status().code(), StatusCode::kNotFound);
  // A block left out stays out for that stage (it could not be whole any more)...
  b->Write(data.data(), 4096, 0);
  EXPECT_EQ(b->staged(), 0u);
  // ... but a new one stages, and a short last block is cached up to the size.
  b = other->StageWrites(fid2);
  b->Write(data.data(), 4096, 0);
  EXPECT_EQ(b->staged(), kNodeCacheBlock);
  EXPECT_EQ(b->Commit(3, 4096), 1u);
  auto n = other->Get(fid2, 3, 0, got.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4096u);
  // A stage dropped without a commit leaves nothing.
  {
    auto d = c->StageWrites(fid2);
    d->Write(data.data(), 100, 0);
  }
  EXPECT_EQ(Files().size(), 2u);
  auto st = c->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->counters.written, 2u);
  EXPECT_EQ(st->counters.written_bytes, kNodeCacheBlock + 4096);
}

// Readers waiting for a fill wait together: WaitFill returns once the filler lets go, for
// every waiter at once (a shared lock), and right away when no fill runs.
TEST_F(NodeCacheTest, ReadersWaitForAFillTogether) {
  auto c = Open();
  c->WaitFill(fid_, 1, 0);  // no fill: returns
  NodeCache::FillLock filler = c->LockFill(fid_, 1, 0);
  ASSERT_TRUE(filler.held());
  std::atomic<int> through{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      c->WaitFill(fid_, 1, 0);
      through.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(through.load(), 0);  // the fill still runs
  filler = NodeCache::FillLock();
  for (auto& t : waiters)
    t.join();
  EXPECT_EQ(through.load(), 3);
  EXPECT_TRUE(c->LockFill(fid_, 1, 0, /*wait=*/false).held());  // no waiter kept it
}

// LockOrWaitFill: the lock when no one fills; otherwise a wait for the filler, every waiter at
// once, and no lock.
TEST_F(NodeCacheTest, LockOrWaitFillTakesAFreeLockAndWaitsOutAHeldOne) {
  auto c = Open();
  NodeCache::FillLock filler = c->LockOrWaitFill(fid_, 1, 0);
  ASSERT_TRUE(filler.held());
  std::atomic<int> through{0}, held{0};
  std::atomic<bool> released{false};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      const bool late = released.load();  // a slow thread may only start after the fill
      if (c->LockOrWaitFill(fid_, 1, 0).held() && !late)
        held.fetch_add(1);
      through.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(through.load(), 0);  // the fill still runs
  released = true;
  filler = NodeCache::FillLock();
  for (auto& t : waiters)
    t.join();
  EXPECT_EQ(through.load(), 3);
  EXPECT_EQ(held.load(), 0);  // those that came during the fill waited; none took the lock
  EXPECT_TRUE(c->LockOrWaitFill(fid_, 1, 0).held());  // and none kept it
}

TEST_F(NodeCacheTest, AMissingDeviceIsAMissNeverAFailedRead) {
  auto c = Open();
  std::vector<uint8_t> data = Bytes(8192, 6);
  ASSERT_TRUE(c->Put(fid_, 1, 0, data.data(), data.size()).ok());
  fs::remove_all(dir_);
  std::vector<uint8_t> got(kNodeCacheBlock);
  EXPECT_EQ(c->Get(fid_, 1, 0, got.data()).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(c->Put(fid_, 1, 1, data.data(), data.size()).ok());
  // A cache that cannot be made at all is a clear error for the one who asked for it.
  NodeCacheOptions o;
  o.dir = "/proc/ciuic-no-such-cache";
  EXPECT_FALSE(NodeCache::Open(o).ok());
}

TEST_F(NodeCacheTest, ADeviceUnderItsFreeShareEmptiesTheCacheAndStoresNothing) {
  std::vector<uint8_t> data = Bytes(8192, 7);
  {
    auto c = Open();
    for (uint64_t i = 0; i < 4; ++i)
      ASSERT_TRUE(c->Put(fid_, 1, i, data.data(), data.size()).ok());
  }
  // No device is 99.9 % free: the first put empties the cache, stores nothing, and says why;
  // the next puts within a second are refused without another look at the device.
  NodeCacheOptions o;
  o.dir = dir_;
  o.min_free_ratio = 0.999;
  auto c = NodeCache::Open(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Status st = (*c)->Put(fid_, 1, 9, data.data(), data.size());
  EXPECT_EQ(st.code(), StatusCode::kNoSpace) << st.ToString();
  EXPECT_NE(st.message().find("not caching"), std::string::npos) << st.message();
  EXPECT_TRUE(Files().empty());
  EXPECT_EQ((*c)->Put(fid_, 1, 10, data.data(), data.size()).code(), StatusCode::kNoSpace);
  std::vector<uint8_t> got(kNodeCacheBlock);
  EXPECT_EQ((*c)->Get(fid_, 1, 0, got.data()).status().code(), StatusCode::kNotFound);
  auto stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counters.put_failures, 2u);
  EXPECT_EQ(stats->blocks, 0u);
}

TEST_F(NodeCacheTest, TheFreeShareComesFromTheCallerTheEnvironmentOrTheClusterFile) {
  ::unsetenv("CIUIC_NODE_CACHE_MIN_FREE");
  EXPECT_DOUBLE_EQ(ResolveNodeCache(dir_, 0, "", 0).min_free_ratio, 0.10);
  EXPECT_DOUBLE_EQ(ResolveNodeCache(dir_, 0, "", 0, -1, 25).min_free_ratio, 0.25);
  ::setenv("CIUIC_NODE_CACHE_MIN_FREE", "5", 1);
  EXPECT_DOUBLE_EQ(ResolveNodeCache(dir_, 0, "", 0, -1, 25).min_free_ratio, 0.05);
  EXPECT_DOUBLE_EQ(ResolveNodeCache(dir_, 0, "", 0, 0, 25).min_free_ratio, 0.0);
  ::setenv("CIUIC_NODE_CACHE_MIN_FREE", "120", 1);  // not a percentage: ignored, logged
  EXPECT_DOUBLE_EQ(ResolveNodeCache(dir_, 0, "", 0, -1, 25).min_free_ratio, 0.25);
  ::unsetenv("CIUIC_NODE_CACHE_MIN_FREE");
}

}  // namespace
}  // namespace ciuic::client
