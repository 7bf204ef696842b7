#include "oss/ost_store.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "common/fault.h"
#include "io/mem_io_engine.h"
#include "oss/ost_format.h"

namespace ciuic::oss {
namespace {

constexpr char kUuid[] = "11111111-2222-4333-8444-555555555555";

ObjectId Obj(uint64_t seq, uint32_t stripe = 0) {
  return ObjectId{Fid{seq, 0, 0}, 0, stripe};
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v)
    b = static_cast<uint8_t>(rng());
  return v;
}

// Reads [off, off+len) and checks it verifies; returns the bytes.
std::vector<uint8_t> ReadVerified(OstStore& s, const ObjectId& id, uint64_t off, uint64_t len) {
  Result<ReadResult> r = s.Read(id, off, len);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok())
    return {};
  Status v = VerifyReadResult(*r, s.index(), id);
  EXPECT_TRUE(v.ok()) << v.ToString();
  const uint8_t* p = r->data->data() + (off - r->aligned_offset);
  return std::vector<uint8_t>(p, p + len);
}

class OstStoreMemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(engine_.MkdirAll("/ost").ok());
    ASSERT_TRUE(engine_.SyncDir("/").ok());
  }

  Result<std::unique_ptr<OstStore>> OpenStore(uint32_t index = 0,
                                              std::string uuid = kUuid,
                                              std::string dir = "/ost/0") {
    OstStore::Options o;
    o.dir = std::move(dir);
    o.index = index;
    o.cluster_uuid = std::move(uuid);
    o.engine = &engine_;
    return OstStore::Open(std::move(o));
  }
  std::unique_ptr<OstStore> MustOpen() {
    auto s = OpenStore();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // Crash (no clean shutdown) and lose everything not durable, then reopen.
  std::unique_ptr<OstStore> PowerCycle(std::unique_ptr<OstStore> s) {
    s->TEST_SkipCleanShutdown();
    s.reset();
    engine_.SimulatePowerLoss();
    return MustOpen();
  }

  io::MemIoEngine engine_;
};

TEST_F(OstStoreMemTest, FormatsOnFirstUseAndChecksTheStamp) {
  ASSERT_TRUE(OpenStore().ok());
  EXPECT_TRUE(OpenStore().ok());  // reopen after a clean close
  auto other = OpenStore(0, "99999999-2222-4333-8444-555555555555");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("belongs to another cluster"), std::string::npos)
      << other.status().ToString();
  auto wrong_index = OpenStore(3);
  ASSERT_FALSE(wrong_index.ok());
  EXPECT_NE(wrong_index.status().message().find("is OST 0, not OST 3"), std::string::npos)
      << wrong_index.status().ToString();
}

TEST_F(OstStoreMemTest, SecondOpenOfTheSameOstIsBusy) {
  auto a = OpenStore();
  ASSERT_TRUE(a.ok());
  auto b = OpenStore();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kBusy);
  a->reset();
  EXPECT_TRUE(OpenStore().ok());
}

TEST_F(OstStoreMemTest, UnalignedWritesReadBackExactlyAndVerify) {
  auto s = MustOpen();
  ObjectId id = Obj(7);
  auto a = Pattern(10000, 1), b = Pattern(3000, 2);
  ASSERT_EQ(*s->Write(id, 100, a), 10100u);
  ASSERT_EQ(*s->Write(id, 5000, b), 10100u);  // overwrite inside, edges read-modify-written
  std::vector<uint8_t> want(10100, 0);
  std::memcpy(want.data() + 100, a.data(), a.size());
  std::memcpy(want.data() + 5000, b.data(), b.size());
  EXPECT_EQ(ReadVerified(*s, id, 0, 10100), want);
  EXPECT_EQ(ReadVerified(*s, id, 4097, 3),
            std::vector<uint8_t>(want.begin() + 4097, want.begin() + 4100));
  auto st = s->Stat(id);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->exists);
  EXPECT_EQ(st->length, 10100u);
  // Reads past the end are whole zero blocks that verify.
  auto r = s->Read(id, 9000, 20000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->aligned_offset, 8192u);
  EXPECT_EQ(r->object_length, 10100u);
  EXPECT_EQ(r->data->size(), AlignUp(29000, 4096) - 8192);
  EXPECT_EQ(r->block_crcs.size(), r->data->size() / 4096 * 2);
  EXPECT_TRUE(VerifyReadResult(*r, 0, id).ok());
}

TEST_F(OstStoreMemTest, MissingObjectReadsAsZerosWithExistsFalse) {
  auto s = MustOpen();
  auto r = s->Read(Obj(1), 0, 4096);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->exists);
  EXPECT_EQ(r->object_length, 0u);
  EXPECT_TRUE(VerifyReadResult(*r, 0, Obj(1)).ok());
  auto st = s->Stat(Obj(1));
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->exists);
}

TEST_F(OstStoreMemTest, HolesReadAsVerifiedZeros) {
  auto s = MustOpen();
  auto a = Pattern(4096, 3);
  ASSERT_TRUE(s->Write(Obj(2), 1 << 20, a).ok());
  EXPECT_EQ(ReadVerified(*s, Obj(2), 0, 8192), std::vector<uint8_t>(8192, 0));
  EXPECT_EQ(ReadVerified(*s, Obj(2), 1 << 20, 4096), a);
}

TEST_F(OstStoreMemTest, ConcurrentSmallWritesSharingBlocks) {
  auto s = MustOpen();
  ObjectId id = Obj(3);
  constexpr int kWrites = 64, kSize = 100;
  std::mutex mu;
  std::condition_variable cv;
  int remaining = kWrites;
  std::atomic<int> failures{0};
  auto all = Pattern(kWrites * kSize, 4);
  std::vector<AlignedBuffer> bufs(kWrites);
  for (int i = 0; i < kWrites; ++i) {
    bufs[i].Resize(kSize);
    std::memcpy(bufs[i].data(), all.data() + i * kSize, kSize);
    s->WriteAsync(id, uint64_t(i) * kSize, &bufs[i], [&](Result<uint64_t> r) {
      if (!r.ok())
        failures.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu);
      if (--remaining == 0)
        cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return remaining == 0; }));
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(s->Stat(id)->length, uint64_t(kWrites * kSize));
  EXPECT_EQ(ReadVerified(*s, id, 0, all.size()), all);
}

TEST_F(OstStoreMemTest, PunchZeroesThePartialBlockAndFixesItsChecksum) {
  auto s = MustOpen();
  ObjectId id = Obj(4);
  auto a = Pattern(3 * 4096 + 500, 5);
  ASSERT_TRUE(s->Write(id, 0, a).ok());
  ASSERT_TRUE(s->Punch(id, 5000).ok());
  EXPECT_EQ(s->Stat(id)->length, 5000u);
  auto got = ReadVerified(*s, id, 0, 8192);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 5000, a.begin()));
  EXPECT_TRUE(std::all_of(got.begin() + 5000, got.end(), [](uint8_t c) { return c == 0; }));
  // Growing the object again exposes zeros, not the old bytes.
  ASSERT_TRUE(s->Write(id, 20000, a).ok());
  got = ReadVerified(*s, id, 4096, 20000 - 4096);
  EXPECT_TRUE(std::all_of(got.begin() + 904, got.end(), [](uint8_t c) { return c == 0; }));
  EXPECT_EQ(ReadVerified(*s, id, 20000, a.size()), a);
  // Punch up only moves the length; punching a missing object is fine.
  ASSERT_TRUE(s->Punch(id, 100000).ok());
  EXPECT_EQ(s->Stat(id)->length, 100000u);
  EXPECT_TRUE(s->Punch(Obj(999), 0).ok());
  ASSERT_TRUE(s->Punch(id, 0).ok());
  EXPECT_EQ(s->Stat(id)->length, 0u);
  EXPECT_EQ(ReadVerified(*s, id, 0, 4096), std::vector<uint8_t>(4096, 0));
}

TEST_F(OstStoreMemTest, PunchSurvivesPowerLoss) {
  auto s = MustOpen();
  ObjectId id = Obj(5);
  auto a = Pattern(64 << 10, 6);
  ASSERT_TRUE(s->Write(id, 0, a).ok());
  ASSERT_TRUE(s->Sync({id}).ok());
  ASSERT_TRUE(s->Punch(id, 10000).ok());
  s = PowerCycle(std::move(s));
  EXPECT_EQ(s->Stat(id)->length, 10000u);
  auto got = ReadVerified(*s, id, 0, 12288);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 10000, a.begin()));
  EXPECT_TRUE(std::all_of(got.begin() + 10000, got.end(), [](uint8_t c) { return c == 0; }));
}

TEST_F(OstStoreMemTest, DestroyLeavesATombstoneThatSurvivesRestart) {
  auto s = MustOpen();
  ObjectId id = Obj(6);
  ASSERT_TRUE(s->Write(id, 0, Pattern(100, 7)).ok());
  ASSERT_TRUE(s->Destroy(id).ok());
  EXPECT_FALSE(s->Stat(id)->exists);
  EXPECT_EQ(s->Write(id, 0, Pattern(10, 8)).status().code(), StatusCode::kStale);
  EXPECT_TRUE(s->Destroy(id).ok());       // idempotent
  EXPECT_TRUE(s->Destroy(Obj(66)).ok());  // never written: still leaves a tombstone
  s = PowerCycle(std::move(s));
  EXPECT_EQ(s->Write(id, 0, Pattern(10, 8)).status().code(), StatusCode::kStale);
  EXPECT_EQ(s->Write(Obj(66), 0, Pattern(10, 8)).status().code(), StatusCode::kStale);
  EXPECT_TRUE(s->Write(Obj(67), 0, Pattern(10, 8)).ok());
}

// Tombstones are collected once older than the grace period (issue 13): within it a write to
// the destroyed object is still refused, after it the tombstone is gone; tombstones found at a
// start get a whole grace period again, and a collection lost to a power cut only brings a
// tombstone back (still refusing writes, collected later).
TEST_F(OstStoreMemTest, TombstonesAreCollectedAfterTheGracePeriod) {
  using std::chrono::milliseconds;
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.tombstone_grace = milliseconds(1000);
  std::atomic<int64_t> clock_ms{1'000'000};
  o.test_clock_ms = &clock_ms;
  auto tombs_on_disk = [&] {
    auto names = engine_.ListDir("/ost/0/objects");
    EXPECT_TRUE(names.ok());
    size_t n = 0;
    for (const std::string& name : names.ok() ? *names : std::vector<std::string>{})
      n += name.ends_with(".dead");
    return n;
  };
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE((*s)->Write(Obj(1), 0, Pattern(100, 1)).ok());
  ASSERT_TRUE((*s)->Destroy(Obj(1)).ok());
  ASSERT_TRUE((*s)->Destroy(Obj(1)).ok());  // idempotent: still one tombstone to collect
  clock_ms += 999;
  EXPECT_EQ(*(*s)->CollectTombstones(100), 0u);
  EXPECT_EQ((*s)->Write(Obj(1), 0, Pattern(10, 2)).status().code(), StatusCode::kStale);
  clock_ms += 2;
  EXPECT_EQ(*(*s)->CollectTombstones(100), 1u);
  EXPECT_EQ(tombs_on_disk(), 0u);
  EXPECT_EQ((*s)->tombstones_pending(), 0u);

  // Durable tombstone, then a power cut: found again at start, with a fresh grace period.
  ASSERT_TRUE((*s)->Destroy(Obj(2)).ok());
  (*s)->TEST_SkipCleanShutdown();
  s->reset();
  engine_.SimulatePowerLoss();
  s = OstStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->tombstones_pending(), 1u);
  EXPECT_EQ(*(*s)->CollectTombstones(100), 0u);
  EXPECT_EQ((*s)->Write(Obj(2), 0, Pattern(10, 3)).status().code(), StatusCode::kStale);
  clock_ms += 1001;
  EXPECT_EQ(*(*s)->CollectTombstones(100), 1u);
  // The collection was not synced: a power cut brings the tombstone back, never loses more.
  (*s)->TEST_SkipCleanShutdown();
  s->reset();
  engine_.SimulatePowerLoss();
  s = OstStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_LE(tombs_on_disk(), 1u);
  EXPECT_EQ((*s)->tombstones_pending(), tombs_on_disk());
  if (tombs_on_disk() == 1) {
    EXPECT_EQ((*s)->Write(Obj(2), 0, Pattern(10, 3)).status().code(), StatusCode::kStale);
  }
}

// Under create/destroy churn with a background pass of bounded work, the tombstones on disk stay
// bounded by the destroys of one grace period (plus one pass), instead of growing forever.
TEST_F(OstStoreMemTest, TombstoneCountStaysBoundedUnderChurn) {
  using std::chrono::milliseconds;
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.tombstone_grace = milliseconds(1000);
  std::atomic<int64_t> clock_ms{1'000'000};
  o.test_clock_ms = &clock_ms;
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  constexpr int kObjects = 2000;
  constexpr int kPerStep = 20;  // objects created and destroyed per 100 ms
  size_t peak = 0;
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_TRUE((*s)->Write(Obj(5000 + i), 0, Pattern(64, i)).ok());
    ASSERT_TRUE((*s)->Destroy(Obj(5000 + i)).ok());
    if (i % kPerStep == kPerStep - 1) {
      clock_ms += 100;
      ASSERT_TRUE((*s)->CollectTombstones(64).ok());
    }
    auto names = engine_.ListDir("/ost/0/objects");
    ASSERT_TRUE(names.ok());
    peak = std::max(peak, names->size());
  }
  // One grace period holds 10 steps of 20 destroys.
  EXPECT_LE(peak, size_t{11 * kPerStep});
  EXPECT_LE((*s)->tombstones_pending(), size_t{11 * kPerStep});
}

// DestroyMany: one directory sync for the whole batch, and every destroy in it is as durable as
// a Destroy of its own (tombstones survive a power cut); objects outside the batch are untouched.
TEST_F(OstStoreMemTest, DestroyManyIsDurableWithOneSync) {
  auto s = MustOpen();
  std::vector<ObjectId> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(Obj(400 + i));
    ASSERT_TRUE(s->Write(ids.back(), 0, Pattern(5000, i)).ok());
  }
  ASSERT_TRUE(s->Write(Obj(499), 0, Pattern(5000, 9)).ok());
  ASSERT_TRUE(s->Sync({ids[0], ids[1], ids[2], ids[3], ids[4], Obj(499)}).ok());
  ids.push_back(Obj(450));  // never written: still leaves a tombstone
  std::vector<Status> results;
  s->DestroyMany(ids, &results);
  ASSERT_EQ(results.size(), ids.size());
  for (const Status& r : results)
    EXPECT_TRUE(r.ok()) << r.ToString();
  s->DestroyMany({}, &results);
  EXPECT_TRUE(results.empty());
  s = PowerCycle(std::move(s));
  for (const ObjectId& id : ids) {
    EXPECT_FALSE(s->Stat(id)->exists) << id.FileName();
    EXPECT_EQ(s->Write(id, 0, Pattern(10, 8)).status().code(), StatusCode::kStale);
  }
  auto kept = ReadVerified(*s, Obj(499), 0, 5000);
  EXPECT_TRUE(kept == Pattern(5000, 9));
}

// Background writeback: objects written and left unsynced are synced once idle, oldest first, a
// batch at a time, and then survive a power cut; recently written ones wait.
TEST_F(OstStoreMemTest, IdleUnsyncedObjectsAreSyncedInTheBackground) {
  auto s = MustOpen();
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(s->Write(Obj(700 + i), 0, Pattern(9000, i)).ok());
  EXPECT_EQ(s->SyncIdleObjects(10, std::chrono::hours(1)).value(), 0u);  // all written just now
  EXPECT_EQ(s->SyncIdleObjects(2, std::chrono::milliseconds(0)).value(), 2u);
  EXPECT_EQ(s->SyncIdleObjects(10, std::chrono::milliseconds(0)).value(), 1u);
  EXPECT_EQ(s->SyncIdleObjects(10, std::chrono::milliseconds(0)).value(), 0u);  // nothing left
  EXPECT_EQ(s->background_syncs(), 3u);
  ASSERT_TRUE(s->Write(Obj(703), 0, Pattern(9000, 3)).ok());  // not synced by anyone
  s = PowerCycle(std::move(s));
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(ReadVerified(*s, Obj(700 + i), 0, 9000) == Pattern(9000, i)) << i;
  EXPECT_NE(ReadVerified(*s, Obj(703), 0, 9000), Pattern(9000, 3));  // the control was lost
}

TEST_F(OstStoreMemTest, FullOstFailsCleanlyAndKeepsWhatWasWritten) {
  auto s = MustOpen();
  engine_.SetCapacity(engine_.UsedBytes() + (1 << 20));
  ObjectId id = Obj(8);
  auto a = Pattern(512 << 10, 9);
  ASSERT_TRUE(s->Write(id, 0, a).ok());
  ASSERT_TRUE(s->Sync({id}).ok());
  auto big = Pattern(1 << 20, 10);
  auto r = s->Write(id, 512 << 10, big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace);
  EXPECT_NE(r.status().message().find("OST 0"), std::string::npos) << r.status().ToString();
  r = s->Write(Obj(9), 0, big);
  EXPECT_EQ(r.status().code(), StatusCode::kNoSpace);
  EXPECT_EQ(s->Stat(id)->length, a.size());
  EXPECT_EQ(ReadVerified(*s, id, 0, a.size()), a);
  // Overwriting allocated space still works.
  auto c = Pattern(4096, 11);
  ASSERT_TRUE(s->Write(id, 4096, c).ok());
  std::memcpy(a.data() + 4096, c.data(), c.size());
  EXPECT_EQ(ReadVerified(*s, id, 0, a.size()), a);
  s = PowerCycle(std::move(s));
  auto got = ReadVerified(*s, id, 0, a.size());
  EXPECT_EQ(s->Stat(id)->length, a.size());
}

TEST_F(OstStoreMemTest, FailedWritesNeverLeaveFalseCorruption) {
  auto s = MustOpen();
  ObjectId id = Obj(10);
  auto a = Pattern(16384, 12);
  ASSERT_TRUE(s->Write(id, 0, a).ok());
  // The checksum write fails: nothing changes.
  for (int i = 0; i < 3; ++i) {
    ScopedFault f("io.write", Status::IoError("injected"), 1);
    EXPECT_EQ(s->Write(id, 4096, Pattern(4096, 13 + i)).status().code(), StatusCode::kIoError);
  }
  EXPECT_EQ(ReadVerified(*s, id, 0, a.size()), a);
  // The data landed but the write reports failure (as a partial write would), three times in a
  // row on the same block and once past the end: whatever the disk holds verifies, and bytes
  // past the length stay zeros.
  std::vector<uint8_t> last;
  for (int i = 0; i < 3; ++i) {
    ScopedFault f("oss.write.after_data", Status::IoError("injected"), 1);
    last = Pattern(4096, 20 + i);
    EXPECT_FALSE(s->Write(id, 4096, last).ok());
  }
  {
    ScopedFault f("oss.write.after_data", Status::IoError("injected"), 1);
    EXPECT_FALSE(s->Write(id, 16384 - 100, Pattern(300, 30)).ok());
  }
  EXPECT_EQ(s->Stat(id)->length, a.size());
  auto got = ReadVerified(*s, id, 0, a.size());
  EXPECT_TRUE(std::equal(got.begin() + 4096, got.begin() + 8192, last.begin()));
  auto r = s->Read(id, 16384, 4096);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(s->Write(id, 20000, Pattern(10, 31)).ok());
  EXPECT_EQ(ReadVerified(*s, id, 16384, 20000 - 16384), std::vector<uint8_t>(20000 - 16384, 0));
}

TEST_F(OstStoreMemTest, SyncedDataSurvivesPowerLossAndUnsyncedIsOldOrNew) {
  auto s = MustOpen();
  ObjectId id = Obj(11);
  auto v1 = Pattern(64 << 10, 14);
  ASSERT_TRUE(s->Write(id, 0, v1).ok());
  ASSERT_TRUE(s->Sync({id}).ok());
  // Unsynced: overwrite twice (slot 1 no longer holds the synced checksum) and extend.
  auto v2 = Pattern(32 << 10, 15), v3 = Pattern(32 << 10, 16), v4 = Pattern(10000, 17);
  ASSERT_TRUE(s->Write(id, 8192, v2).ok());
  ASSERT_TRUE(s->Write(id, 8192, v3).ok());
  ASSERT_TRUE(s->Write(id, 64 << 10, v4).ok());
  s = PowerCycle(std::move(s));
  uint64_t len = s->Stat(id)->length;
  EXPECT_TRUE(len == v1.size() || len == v1.size() + v4.size()) << len;
  auto got = ReadVerified(*s, id, 0, v1.size());
  for (size_t b = 0; b < v1.size() / 4096; ++b) {
    const uint8_t* g = got.data() + b * 4096;
    bool old_ok = std::memcmp(g, v1.data() + b * 4096, 4096) == 0;
    bool new_ok = b >= 2 && b < 10 && std::memcmp(g, v3.data() + (b - 2) * 4096, 4096) == 0;
    EXPECT_TRUE(old_ok || new_ok) << "block " << b;
  }
}

TEST_F(OstStoreMemTest, ProcessCrashKeepsAcknowledgedWrites) {
  auto s = MustOpen();
  ObjectId id = Obj(12);
  auto a = Pattern(100000, 18);
  ASSERT_TRUE(s->Write(id, 0, a).ok());
  s->TEST_SkipCleanShutdown();
  s.reset();  // like kill -9: the page cache (here: volatile state) survives
  s = MustOpen();
  EXPECT_EQ(s->Stat(id)->length, a.size());
  EXPECT_EQ(ReadVerified(*s, id, 0, a.size()), a);
}

TEST_F(OstStoreMemTest, FailedSyncKeepsTheObjectRecoverable) {
  auto s = MustOpen();
  ObjectId id = Obj(13);
  ASSERT_TRUE(s->Write(id, 0, Pattern(8192, 19)).ok());
  ASSERT_TRUE(s->Sync({id}).ok());
  ASSERT_TRUE(s->Write(id, 0, Pattern(8192, 20)).ok());
  ASSERT_TRUE(s->Write(id, 0, Pattern(8192, 21)).ok());
  {
    ScopedFault f("io.fsync", Status::IoError("injected"));
    EXPECT_EQ(s->Sync({id}).code(), StatusCode::kIoError);
  }
  s = PowerCycle(std::move(s));
  EXPECT_EQ(ReadVerified(*s, id, 0, 8192), Pattern(8192, 19));
}

TEST_F(OstStoreMemTest, RandomWorkloadWithPowerLossesNeverCorrupts) {
  unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto s = MustOpen();
  constexpr int kObjects = 4;
  constexpr size_t kMax = 256 << 10;
  // durable[o]: content as of the last sync; current[o]: as written.
  std::vector<std::vector<uint8_t>> durable(kObjects), current(kObjects);
  for (int round = 0; round < 6; ++round) {
    for (int step = 0; step < 40; ++step) {
      int o = static_cast<int>(rng() % kObjects);
      ObjectId id = Obj(100 + o);
      if (rng() % 8 == 0) {
        ASSERT_TRUE(s->Sync({id}).ok());
        durable[o] = current[o];
        continue;
      }
      size_t off = rng() % kMax, len = 1 + rng() % (64 << 10);
      if (rng() % 2 == 0)
        off = AlignDown(off, 4096);
      auto data = Pattern(len, static_cast<uint32_t>(rng()));
      ASSERT_TRUE(s->Write(id, off, data).ok());
      if (current[o].size() < off + len)
        current[o].resize(off + len, 0);
      std::memcpy(current[o].data() + off, data.data(), len);
    }
    s = PowerCycle(std::move(s));
    for (int o = 0; o < kObjects; ++o) {
      ObjectId id = Obj(100 + o);
      uint64_t len = s->Stat(id)->length;
      ASSERT_GE(len, durable[o].size());
      auto got = ReadVerified(*s, id, 0, std::max<uint64_t>(len, 1));
      // Synced bytes that nothing overwrote since must be intact; others are old or new.
      EXPECT_TRUE(len <= current[o].size() || len == durable[o].size());
      for (size_t i = 0; i < durable[o].size(); ++i) {
        if (durable[o][i] == current[o][i]) {
          ASSERT_EQ(got[i], durable[o][i]) << "object " << o << " byte " << i;
        }
      }
      // Take the recovered state as the new truth.
      current[o].assign(got.begin(), got.begin() + len);
      durable[o] = current[o];
      ASSERT_TRUE(s->Sync({id}).ok());
    }
  }
}

TEST_F(OstStoreMemTest, CleanObjectsAreEvictedFromTheCache) {
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.max_cached_objects = 16;
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE((*s)->Write(Obj(200 + i), 0, Pattern(10, i)).ok());
    ASSERT_TRUE((*s)->Sync({Obj(200 + i)}).ok());
  }
  EXPECT_LE((*s)->TEST_CachedObjects(), 17u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(ReadVerified(**s, Obj(200 + i), 0, 10), Pattern(10, i));
  }
}

// The bug behind the 4,096-object cap: objects written but never synced (a client that closes
// without fsync) were never evicted, so one OST held two fds per object it had ever seen.
TEST_F(OstStoreMemTest, UnsyncedObjectsAreSyncedAndClosedBeyondTheCap) {
  constexpr size_t kCap = 16;
  constexpr int kObjects = 2000;
  const size_t base = engine_.OpenHandles();
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.max_cached_objects = kCap;
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const size_t opened = engine_.OpenHandles();  // stamp lock + dirty log
  size_t peak = 0;
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_TRUE((*s)->Write(Obj(1000 + i), 0, Pattern(100 + i % 50, i)).ok()) << i;
    peak = std::max(peak, engine_.OpenHandles());
  }
  EXPECT_LE(peak, opened + 2 * kCap + 2);
  EXPECT_LE((*s)->TEST_CachedObjects(), kCap);
  EXPECT_GE((*s)->TEST_DirtyEvictions(), static_cast<uint64_t>(kObjects) - kCap);
  // Evicted objects were made durable before they were closed.
  (*s)->TEST_SkipCleanShutdown();
  s->reset();
  engine_.SimulatePowerLoss();
  EXPECT_EQ(engine_.OpenHandles(), base);
  auto again = OstStore::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  peak = 0;
  for (int i = 0; i < kObjects - static_cast<int>(kCap); ++i) {
    auto len = 100 + i % 50;
    ASSERT_EQ(ReadVerified(**again, Obj(1000 + i), 0, len), Pattern(len, i)) << i;
    peak = std::max(peak, engine_.OpenHandles());
  }
  EXPECT_LE(peak, opened + 2 * kCap + 2);
  EXPECT_LE((*again)->TEST_CachedObjects(), kCap);
}

// An eviction that must sync an unsynced object syncs it outside the OST's load lock: while it
// is held in that sync, another object still loads, and the object being evicted can be opened
// again and read; its data stays durable.
TEST_F(OstStoreMemTest, EvictionSyncsOutsideTheLoadLock) {
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.max_cached_objects = 1;
  auto opened = OstStore::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<OstStore> s = std::move(*opened);
  ASSERT_TRUE(s->Write(Obj(1), 0, Pattern(5000, 1)).ok());  // unsynced, cached
  std::mutex mu;
  std::condition_variable cv;
  bool held = false;
  bool release = false;
  s->TEST_SetBeforeEvictionSync([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (held)
      return;  // only the first eviction is held
    held = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  auto let_go = [&] {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
  };
  // Loading object 2 evicts object 1, which needs a sync first: held there. Object 1 is skipped
  // while its write's completion still holds it (a loaded machine can be that slow), so more
  // loads follow until one evicts it.
  std::vector<std::future<Result<uint64_t>>> loads;
  loads.push_back(
      std::async(std::launch::async, [&] { return s->Write(Obj(2), 0, Pattern(100, 2)); }));
  for (int k = 0;; ++k) {
    std::unique_lock<std::mutex> lock(mu);
    if (cv.wait_for(lock, std::chrono::seconds(1), [&] { return held; }))
      break;
    lock.unlock();
    if (k == 10) {
      let_go();
      FAIL() << "no eviction sync happened";
    }
    loads.push_back(std::async(std::launch::async, [&s, k] {
      return s->Write(Obj(100 + static_cast<uint64_t>(k)), 0, Pattern(100, 5));
    }));
  }
  auto other = std::async(std::launch::async, [&] { return s->Write(Obj(3), 0, Pattern(100, 3)); });
  auto reopen = std::async(std::launch::async, [&] { return s->Read(Obj(1), 0, 5000); });
  const bool other_done = other.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  const bool reopen_done = reopen.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  let_go();
  EXPECT_TRUE(other_done) << "loading another object waited for an eviction's sync";
  EXPECT_TRUE(reopen_done) << "opening the object being evicted waited for its sync";
  for (auto& l : loads)
    ASSERT_TRUE(l.get().ok());
  ASSERT_TRUE(other.get().ok());
  Result<ReadResult> r = reopen.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->exists);
  EXPECT_EQ(r->object_length, 5000u);
  EXPECT_TRUE(VerifyReadResult(*r, 0, Obj(1)).ok());
  EXPECT_EQ(std::vector<uint8_t>(r->data->data(), r->data->data() + 5000), Pattern(5000, 1));
  // Written again after being reopened, then a client sync: all of it survives a power cut.
  ASSERT_TRUE(s->Write(Obj(1), 5000, Pattern(100, 4)).ok());
  ASSERT_TRUE(s->Sync({Obj(1), Obj(2), Obj(3)}).ok());
  s->TEST_SkipCleanShutdown();
  s.reset();
  engine_.SimulatePowerLoss();
  auto again = OstStore::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ReadVerified(**again, Obj(1), 0, 5000), Pattern(5000, 1));
  EXPECT_EQ(ReadVerified(**again, Obj(1), 5000, 100), Pattern(100, 4));
  EXPECT_EQ(ReadVerified(**again, Obj(2), 0, 100), Pattern(100, 2));
  EXPECT_EQ(ReadVerified(**again, Obj(3), 0, 100), Pattern(100, 3));
}

TEST_F(OstStoreMemTest, DestroyedPunchedAndFailedObjectsCloseTheirHandles) {
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.max_cached_objects = 8;
  const size_t base = engine_.OpenHandles();
  {
    auto s = OstStore::Open(o);
    ASSERT_TRUE(s.ok());
    const size_t opened = engine_.OpenHandles();
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE((*s)->Write(Obj(300 + i), 0, Pattern(5000, i)).ok());
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE((*s)->Punch(Obj(300 + i), 100).ok());
    EXPECT_LE(engine_.OpenHandles(), opened + 2 * 8);
    for (int i = 0; i < 40; ++i)
      ASSERT_TRUE((*s)->Destroy(Obj(300 + i)).ok());
    EXPECT_EQ(engine_.OpenHandles(), opened);
    // A failed load (checksum file gone) closes the data file it opened.
    ASSERT_TRUE((*s)->Write(Obj(400), 0, Pattern(10, 1)).ok());
    ASSERT_TRUE((*s)->Sync({Obj(400)}).ok());
  }
  ASSERT_TRUE(engine_.Unlink("/ost/0/objects/" + Obj(400).FileName() + ".crc").ok());
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok());
  const size_t opened = engine_.OpenHandles();
  Result<ReadResult> r = (*s)->Read(Obj(400), 0, 10);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_EQ(engine_.OpenHandles(), opened);
  s->reset();
  EXPECT_EQ(engine_.OpenHandles(), base);
}

TEST_F(OstStoreMemTest, OutOfHandlesClosesIdleObjectsAndRetries) {
  OstStore::Options o;
  o.dir = "/ost/0";
  o.cluster_uuid = kUuid;
  o.engine = &engine_;
  o.max_cached_objects = 1000;  // the cap never bites: only EMFILE makes room
  const size_t base = engine_.OpenHandles();
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok());
  engine_.SetMaxOpenHandles(engine_.OpenHandles() + 20);
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE((*s)->Write(Obj(500 + i), 0, Pattern(300, i)).ok()) << i;
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(ReadVerified(**s, Obj(500 + i), 0, 300), Pattern(300, i)) << i;
  EXPECT_GT((*s)->TEST_Evictions(), 0u);
  engine_.SetMaxOpenHandles(0);
  s->reset();
  // The last object references can be dropped by the engine's completion thread just after the
  // store is gone: wait for those handles, or the full table below would free up under us.
  for (int i = 0; i < 500 && engine_.OpenHandles() != base; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(engine_.OpenHandles(), base);
  // Nothing to close: a clear, retryable error, and success once handles are free again.
  s = OstStore::Open(o);
  ASSERT_TRUE(s.ok());
  // Open objects' handles are closed at once; the rest of the table is full.
  engine_.SetMaxOpenHandles(engine_.OpenHandles());
  Result<uint64_t> w = (*s)->Write(Obj(700), 0, Pattern(10, 7));
  ASSERT_EQ(w.status().code(), StatusCode::kUnavailable) << w.status().ToString();
  EXPECT_NE(w.status().message().find("out of file descriptors"), std::string::npos)
      << w.status().message();
  Result<ReadResult> r = (*s)->Read(Obj(500), 0, 300);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  engine_.SetMaxOpenHandles(0);
  ASSERT_TRUE((*s)->Write(Obj(700), 0, Pattern(10, 7)).ok());
  EXPECT_EQ(ReadVerified(**s, Obj(700), 0, 10), Pattern(10, 7));
  EXPECT_EQ(ReadVerified(**s, Obj(500), 0, 300), Pattern(300, 0));
}

// Real disk: a temp directory, the default disk engine.
class OstStoreDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ciuic-ost-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto e = io::NewDiskIoEngine(io::IoEngineKind::kAuto);
    ASSERT_TRUE(e.ok());
    engine_ = std::move(*e);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Result<std::unique_ptr<OstStore>> OpenStore() {
    OstStore::Options o;
    o.dir = dir_ + "/ost";
    o.index = 2;
    o.cluster_uuid = kUuid;
    o.engine = engine_.get();
    return OstStore::Open(std::move(o));
  }
  std::string dir_;
  std::unique_ptr<io::IoEngine> engine_;
};

size_t CountOpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// The reported case on a real disk: many small objects written (never synced) and read back
// keep the process's descriptors within two per cached object.
TEST_F(OstStoreDiskTest, ManyObjectsKeepTheProcessFdCountBounded) {
  constexpr size_t kCap = 8;
  constexpr int kObjects = 300;
  const size_t base = CountOpenFds();
  OstStore::Options o;
  o.dir = dir_ + "/ost";
  o.cluster_uuid = kUuid;
  o.engine = engine_.get();
  o.max_cached_objects = kCap;
  auto s = OstStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const size_t limit = CountOpenFds() + 2 * kCap + 2;
  size_t peak = 0;
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_TRUE((*s)->Write(Obj(2000 + i), 0, Pattern(200, i)).ok()) << i;
    if (i % 10 == 0)
      peak = std::max(peak, CountOpenFds());
  }
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_EQ(ReadVerified(**s, Obj(2000 + i), 0, 200), Pattern(200, i)) << i;
    if (i % 10 == 0)
      peak = std::max(peak, CountOpenFds());
  }
  EXPECT_LE(peak, limit);
  s->reset();
  EXPECT_EQ(CountOpenFds(), base);
}

TEST_F(OstStoreDiskTest, FlippedByteOnDiskIsReportedAsCorruption) {
  ObjectId id = Obj(42, 3);
  auto a = Pattern(64 << 10, 22);
  {
    auto s = OpenStore();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE((*s)->Write(id, 0, a).ok());
    ASSERT_TRUE((*s)->Sync({id}).ok());
    EXPECT_EQ(ReadVerified(**s, id, 0, a.size()), a);
  }
  {
    std::fstream f(dir_ + "/ost/objects/" + id.FileName(),
                   std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(10000);
    char c = static_cast<char>(a[10000] ^ 0x40);
    f.write(&c, 1);
  }
  auto s = OpenStore();
  ASSERT_TRUE(s.ok());
  Status v = (*s)->VerifyRange(id, 0, a.size());
  ASSERT_EQ(v.code(), StatusCode::kCorruption) << v.ToString();
  EXPECT_NE(v.message().find("OST 2"), std::string::npos) << v.message();
  EXPECT_NE(v.message().find(id.FileName()), std::string::npos) << v.message();
  EXPECT_NE(v.message().find("offset 8192"), std::string::npos) << v.message();
  EXPECT_TRUE((*s)->VerifyRange(id, 0, 8192).ok());
  EXPECT_TRUE((*s)->VerifyRange(id, 12288, 4096).ok());
}

TEST_F(OstStoreDiskTest, TwoStoresCannotServeOneOst) {
  auto a = OpenStore();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = OpenStore();
  ASSERT_EQ(b.status().code(), StatusCode::kBusy);
  EXPECT_NE(b.status().message().find("in use by another process"), std::string::npos);
}

TEST_F(OstStoreDiskTest, LargeAlignedWritesAndStatfs) {
  auto s = OpenStore();
  ASSERT_TRUE(s.ok());
  ObjectId id = Obj(43);
  auto a = Pattern(4 << 20, 23);
  ASSERT_TRUE((*s)->Write(id, 0, a).ok());
  ASSERT_TRUE((*s)->Write(id, 4 << 20, std::span<const uint8_t>(a.data(), 777)).ok());
  EXPECT_EQ((*s)->Stat(id)->length, (4u << 20) + 777);
  EXPECT_EQ(ReadVerified(**s, id, 0, a.size()), a);
  auto fs = (*s)->Statfs();
  ASSERT_TRUE(fs.ok());
  EXPECT_GT(fs->capacity, 0u);
  EXPECT_NE(fs->device_id, 0u);
  // Files are grown ahead of writes; a clean stop cuts them back to the exact length.
  s->reset();
  EXPECT_EQ(std::filesystem::file_size(dir_ + "/ost/objects/" + id.FileName()), (4u << 20) + 777);
  auto again = OpenStore();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Stat(id)->length, (4u << 20) + 777);
}

// Resync (docs/design.md "Replication"): objects record the chain they were created under, and
// two copies compare by digest.
TEST_F(OstStoreMemTest, ChainObjectsAreListedAndDigestsCompareContent) {
  auto a = MustOpen();
  auto b_or = OpenStore(1, kUuid, "/ost/1");
  ASSERT_TRUE(b_or.ok()) << b_or.status().ToString();
  auto b = std::move(*b_or);
  constexpr uint32_t kChain = 0x10001;
  const auto v = Pattern(3 * 4096 + 100, 40);
  for (OstStore* s : {a.get(), b.get()}) {
    ASSERT_TRUE(s->Write(Obj(1), 0, v, kChain).ok());
    ASSERT_TRUE(s->Write(Obj(2, 1), 4096, v, kChain).ok());
    ASSERT_TRUE(s->Write(Obj(3), 0, v, kChain + 1).ok());
    ASSERT_TRUE(s->Write(Obj(4), 0, v).ok());
  }
  auto listed = a->ListChainObjects(kChain);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, (std::vector<ObjectId>{Obj(1), Obj(2, 1)}));
  for (const ObjectId& id : {Obj(1), Obj(2, 1), Obj(3), Obj(4)}) {
    auto da = a->ObjectDigest(id), db = b->ObjectDigest(id);
    ASSERT_TRUE(da.ok() && db.ok());
    EXPECT_TRUE(da->exists);
    EXPECT_EQ(da->crc, db->crc) << id.FileName();
    EXPECT_EQ(da->length, db->length);
  }
  EXPECT_NE(a->ObjectDigest(Obj(1))->crc, a->ObjectDigest(Obj(2, 1))->crc);
  // One byte, or the length, differs: so does the digest.
  const std::vector<uint8_t> one = {static_cast<uint8_t>(v[5000] ^ 1)};
  ASSERT_TRUE(b->Write(Obj(1), 5000, one, kChain).ok());
  EXPECT_NE(a->ObjectDigest(Obj(1))->crc, b->ObjectDigest(Obj(1))->crc);
  ASSERT_TRUE(b->Punch(Obj(2, 1), 4096 + v.size() - 1).ok());
  EXPECT_NE(a->ObjectDigest(Obj(2, 1))->crc, b->ObjectDigest(Obj(2, 1))->crc);
  EXPECT_FALSE(a->ObjectDigest(Obj(9))->exists);
  // The chain is in the checksum header: it survives a restart.
  a.reset();
  a = MustOpen();
  listed = a->ListChainObjects(kChain);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);
}

TEST_F(OstStoreMemTest, AfterPowerLossTheLatestChecksumDescribesTheData) {
  auto s = MustOpen();
  const ObjectId id = Obj(21);
  const auto v1 = Pattern(64 << 10, 41);
  ASSERT_TRUE(s->Write(id, 0, v1, 0x10001).ok());
  ASSERT_TRUE(s->Sync({id}).ok());
  const auto v2 = Pattern(32 << 10, 42);
  ASSERT_TRUE(s->Write(id, 8192, v2, 0x10001).ok());  // not synced: lost in part or whole
  s = PowerCycle(std::move(s));
  const uint64_t len = s->Stat(id)->length;
  const auto got = ReadVerified(*s, id, 0, len);
  // A copy written in one go holds the same bytes with fresh checksums: equal digests mean
  // that every block's latest checksum is its data's, whichever write survived.
  auto fresh_or = OpenStore(1, kUuid, "/ost/1");
  ASSERT_TRUE(fresh_or.ok());
  auto fresh = std::move(*fresh_or);
  ASSERT_TRUE(fresh->Write(id, 0, got, 0x10001).ok());
  EXPECT_EQ(s->ObjectDigest(id)->crc, fresh->ObjectDigest(id)->crc);
}

TEST(OstFormatTest, ObjectFileNamesParseBack) {
  const ObjectId id{Fid{0x123456789abcull, 3, 0x80000001u}, 7, 12};
  ObjectId back;
  ASSERT_TRUE(ParseObjectFileName(id.FileName(), &back));
  EXPECT_EQ(back, id);
  for (const char* bad : {"", "1-2-3.4", "1-2-3.4.5.6", "1-2-3.4.5.crc", "x-2-3.4.5", "1--3.4.5",
                          "1-2-100000000.4.5", "1-11111111111111111-3.4.5", "ost.stamp"}) {
    EXPECT_FALSE(ParseObjectFileName(bad, &back)) << bad;
  }
}

TEST_F(OstStoreMemTest, EachFormatDrawsItsOwnIncarnation) {
  uint64_t first;
  {
    auto s = MustOpen();
    first = s->incarnation();
    EXPECT_NE(first, 0u);
  }
  EXPECT_EQ(MustOpen()->incarnation(), first);  // kept across restarts
  auto other = OpenStore(1, kUuid, "/ost/1");
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->incarnation(), first);
  // Stamps written before incarnations existed read as 0 (unknown).
  auto old =
      OstStamp::Parse("ciuic-ost-stamp\nformat_version = 1\ncluster_uuid = u\nost_index = 2\n");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->incarnation, 0u);
  EXPECT_FALSE(OstStamp::Parse(OstStamp{1, "u", 2, 5}.Encode() + "incarnation = zz\n").ok());
  auto round = OstStamp::Parse(OstStamp{1, "u", 2, 0xabcdef0123456789ull}.Encode());
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_EQ(round->incarnation, 0xabcdef0123456789ull);
}

}  // namespace
}  // namespace ciuic::oss
