// HsmMover against a real OstStore (on the in-memory IO engine) and the in-memory object store:
// the archived layout, verification, restore, and what corrupt or missing copies do.
#include "oss/hsm_mover.h"

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "io/mem_io_engine.h"
#include "objstore/mem_object_store.h"

namespace ciuic::oss {
namespace {

constexpr const char* kUuid = "11111111-2222-4333-8444-555555555555";

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s)
    c = static_cast<char>(rng());
  return s;
}

class HsmMoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(engine_.MkdirAll("/ost").ok());
    OstStore::Options o;
    o.dir = "/ost/0";
    o.index = 0;
    o.cluster_uuid = kUuid;
    o.engine = &engine_;
    auto s = OstStore::Open(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ost_ = std::move(*s);
  }

  void WriteObject(const ObjectId& id, const std::string& data) {
    auto r = ost_->Write(
        id, 0,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::string ReadObject(const ObjectId& id) {
    auto st = ost_->Stat(id);
    EXPECT_TRUE(st.ok());
    if (!st.ok() || !st->exists)
      return "";
    auto r = ost_->Read(id, 0, st->length);
    EXPECT_TRUE(r.ok());
    return std::string(reinterpret_cast<const char*>(r->data->data()), st->length);
  }

  io::MemIoEngine engine_;
  std::unique_ptr<OstStore> ost_;
  objstore::MemObjectStore store_{
      objstore::MemObjectStore::Options{.name = "hsm", .part_bytes = 1 << 20, .parallel_parts = 3}};
  HsmMover mover_{&store_, kUuid};
  const ObjectId id_{Fid{0x2a, 0, 0}, 1, 2};
};

TEST(HsmKeyTest, NamesClusterFidVersionComponentAndStripe) {
  EXPECT_EQ(HsmObjectKey("u", ObjectId{Fid{0x2a, 3, 0}, 1, 2}, 7), "u/0x3:0x2a:0x0/7/1.2");
  EXPECT_EQ(HsmCrcKey("u", ObjectId{Fid{0x2a, 3, 0}, 1, 2}, 7), "u/0x3:0x2a:0x0/7/1.2.crc");
}

TEST(HsmCrcFormatTest, RoundTripsAndRefusesDamage) {
  ArchivedCrcs c;
  c.length = 10000;
  c.data_version = 5;
  c.crcs = {1, 2, 3};
  const std::string enc = EncodeArchivedCrcs(c);
  auto d = DecodeArchivedCrcs(enc, "k");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->length, 10000u);
  EXPECT_EQ(d->data_version, 5u);
  EXPECT_EQ(d->crcs, c.crcs);
  for (size_t i = 0; i < enc.size(); i += 7) {
    std::string bad = enc;
    bad[i] ^= 0x10;
    auto r = DecodeArchivedCrcs(bad, "k");
    ASSERT_FALSE(r.ok()) << "flipped byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  }
  EXPECT_FALSE(DecodeArchivedCrcs(enc.substr(0, enc.size() - 1), "k").ok());
  c.crcs.push_back(4);  // 4 CRCs for 3 blocks
  EXPECT_FALSE(DecodeArchivedCrcs(EncodeArchivedCrcs(c), "k").ok());
}

// Odd sizes: a partial last block, parts of the streamed put not on block boundaries.
TEST_F(HsmMoverTest, ArchiveVerifyReleaseRestoreRoundTrip) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, size_t{3 * 1024 * 1024 + 123}}) {
    SCOPED_TRACE(size);
    const ObjectId id{Fid{0x100 + size, 0, 0}, 0, 0};
    const std::string data = RandomBytes(size, static_cast<uint32_t>(size));
    if (size > 0)
      WriteObject(id, data);
    auto a = mover_.Archive(ost_.get(), id, 3);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(*a, size);
    auto copy = store_.GetAll(HsmObjectKey(kUuid, id, 3));
    ASSERT_TRUE(copy.ok());
    EXPECT_EQ(*copy, data);
    ASSERT_TRUE(store_.Head(HsmCrcKey(kUuid, id, 3)).ok());
    auto v = mover_.Verify(ost_.get(), id, 3);
    ASSERT_TRUE(v.ok()) << v.status().ToString();

    ASSERT_TRUE(ost_->Release(id).ok());
    EXPECT_FALSE(ost_->Stat(id)->exists);
    auto r = mover_.Restore(ost_.get(), id, 3);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(ReadObject(id), data);
    EXPECT_TRUE(ost_->VerifyRange(id, 0, size).ok());
  }
}

TEST_F(HsmMoverTest, VerifyFailsWhenTheObjectChangedOrTheCopyIsMissing) {
  WriteObject(id_, RandomBytes(20000, 1));
  ASSERT_TRUE(mover_.Archive(ost_.get(), id_, 1).ok());
  // A write since the archive: release must not happen.
  WriteObject(id_, "changed");
  auto v = mover_.Verify(ost_.get(), id_, 1);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kCorruption);
  EXPECT_NE(v.status().message().find("differs from its archived copy"), std::string::npos)
      << v.status().ToString();
  // No copy of that version at all.
  auto m = mover_.Verify(ost_.get(), id_, 2);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
}

TEST_F(HsmMoverTest, RestoreRefusesACorruptCopyAndNamesTheKey) {
  const std::string data = RandomBytes(50000, 2);
  WriteObject(id_, data);
  ASSERT_TRUE(mover_.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  const std::string key = HsmObjectKey(kUuid, id_, 1);
  std::string bad = data;
  bad[40000] ^= 1;
  ASSERT_TRUE(store_.Put(key, bad).ok());
  auto r = mover_.Restore(ost_.get(), id_, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("offset 36864"), std::string::npos) << r.status().ToString();

  // A truncated copy, and a missing one.
  ASSERT_TRUE(store_.Put(key, data.substr(0, 100)).ok());
  EXPECT_EQ(mover_.Restore(ost_.get(), id_, 1).status().code(), StatusCode::kCorruption);
  ASSERT_TRUE(store_.Delete(key).ok());
  auto m = mover_.Restore(ost_.get(), id_, 1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("missing"), std::string::npos) << m.status().ToString();
}

// A copy left complete by an earlier try is kept; a leftover that does not match is replaced.
TEST_F(HsmMoverTest, ArchiveKeepsAMatchingCopyAndReplacesAStaleLeftover) {
  const std::string data = RandomBytes(9000, 3);
  WriteObject(id_, data);
  ASSERT_TRUE(mover_.Archive(ost_.get(), id_, 4).ok());
  const uint64_t puts = store_.TEST_calls().put + store_.TEST_calls().put_stream;
  ASSERT_TRUE(mover_.Archive(ost_.get(), id_, 4).ok());
  EXPECT_EQ(store_.TEST_calls().put + store_.TEST_calls().put_stream, puts);

  ASSERT_TRUE(store_.Put(HsmObjectKey(kUuid, id_, 5), "leftover of a cut archive").ok());
  ASSERT_TRUE(mover_.Archive(ost_.get(), id_, 5).ok());
  EXPECT_EQ(*store_.GetAll(HsmObjectKey(kUuid, id_, 5)), data);

  ASSERT_TRUE(mover_.Remove(id_, 4).ok());
  EXPECT_EQ(store_.Head(HsmObjectKey(kUuid, id_, 4)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_.Head(HsmCrcKey(kUuid, id_, 4)).status().code(), StatusCode::kNotFound);
}

// A restore writes under the staging name and adopts the object whole: a leftover staging
// object of a cut restore is replaced, and none remains afterwards; the object survives a
// power cut once Restore returned.
TEST_F(HsmMoverTest, RestoreStagesTheObjectAndAdoptsItWhole) {
  const std::string data = RandomBytes(5 << 20, 5);
  WriteObject(id_, data);
  ASSERT_TRUE(mover_.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  const ObjectId staging = HsmStagingId(id_);
  EXPECT_NE(staging.FileName(), id_.FileName());
  WriteObject(staging, "half of an earlier restore");
  EXPECT_FALSE(ost_->Stat(id_)->exists);
  ASSERT_TRUE(mover_.Restore(ost_.get(), id_, 1).ok());
  EXPECT_FALSE(ost_->Stat(staging)->exists);
  EXPECT_EQ(ReadObject(id_), data);
  // Durable: a power cut right after keeps the adopted object whole.
  ost_->TEST_SkipCleanShutdown();
  ost_.reset();
  engine_.SimulatePowerLoss();
  SetUp();
  EXPECT_EQ(ReadObject(id_), data);
  EXPECT_TRUE(ost_->VerifyRange(id_, 0, data.size()).ok());
  EXPECT_FALSE(ost_->Stat(staging)->exists);
}

// A file removed while its restore runs: the destroy's tombstone refuses the adopt, so the
// fill cannot bring back an object nothing would ever delete again.
TEST_F(HsmMoverTest, RestoreOfAnObjectDestroyedMeanwhileAdoptsNothing) {
  HsmMover mover{&store_, kUuid, /*fill_threads=*/1, /*fill_chunk=*/64 << 10};
  const std::string data = RandomBytes(1 << 20, 7);
  WriteObject(id_, data);
  ASSERT_TRUE(mover.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  std::promise<void> destroyed;
  std::shared_future<void> gate = destroyed.get_future().share();
  store_.TEST_SetGetHook([gate](std::string_view key, uint64_t) {
    if (!key.ends_with(".crc"))
      gate.wait();  // every chunk waits for the destroy
  });
  auto f = mover.StartRestore(ost_.get(), id_, 1);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(ost_->Destroy(id_).ok());
  destroyed.set_value();
  Result<uint64_t> r = (*f)->Wait();
  EXPECT_EQ(r.status().code(), StatusCode::kStale) << r.status().ToString();
  store_.TEST_SetGetHook(nullptr);
  EXPECT_FALSE(ost_->Stat(id_)->exists);
  EXPECT_FALSE(ost_->Stat(HsmStagingId(id_))->exists);
}

// Restore by extents: a reader's chunks jump the queue. A slow store (10 ms per GET), two fill
// threads and 64 chunks: the reader of the last chunk is served long before the fill ends,
// from the staging object, and the fill adopts the object whole only once that read is over.
TEST_F(HsmMoverTest, RestoreByExtentsServesAReadersChunksFirst) {
  HsmMover mover{&store_, kUuid, /*fill_threads=*/2, /*fill_chunk=*/64 << 10};
  const std::string data = RandomBytes(4 << 20, 6);
  WriteObject(id_, data);
  ASSERT_TRUE(mover.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  store_.TEST_SetGetHook([](std::string_view key, uint64_t) {
    if (!key.ends_with(".crc"))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  auto f = mover.StartRestore(ost_.get(), id_, 1);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->chunk_count(), 64u);
  const uint64_t at = data.size() - 10000;
  std::promise<std::pair<Status, bool>> ready;
  (*f)->WhenReadable(at, 5000, [&](Status s, bool staging) { ready.set_value({s, staging}); });
  auto got = ready.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  auto [st, staging] = got.get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(staging);
  EXPECT_LT((*f)->chunks_done(), (*f)->chunk_count() / 2);
  auto r = ost_->Read((*f)->staging(), at, 5000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(r->data->data()) + (at - r->aligned_offset), 5000),
      data.substr(at, 5000));
  // Pinned: every chunk can arrive, but the staging object keeps its name until Unpin.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*f)->chunks_done() < (*f)->chunk_count() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ((*f)->chunks_done(), (*f)->chunk_count());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(mover.fills().Find(0, id_), *f);
  EXPECT_FALSE(ost_->Stat(id_)->exists);
  (*f)->Unpin();
  auto w = (*f)->Wait();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, data.size());
  store_.TEST_SetGetHook(nullptr);
  EXPECT_EQ(mover.fills().Find(0, id_), nullptr);
  EXPECT_EQ(ReadObject(id_), data);
  EXPECT_FALSE(ost_->Stat((*f)->staging())->exists);
  // A second start of the same object while one runs joins it; after the end, the outcome is
  // remembered for a late waiter.
  auto recent = mover.fills().Recent(0, id_);
  ASSERT_TRUE(recent.has_value());
  EXPECT_EQ(**recent, data.size());
  // A reader after the end reads the object itself.
  std::promise<std::pair<Status, bool>> late;
  (*f)->WhenReadable(0, 10, [&](Status s, bool staging) { late.set_value({s, staging}); });
  auto l = late.get_future().get();
  EXPECT_TRUE(l.first.ok());
  EXPECT_FALSE(l.second);
}

// A bad chunk fails the readers waiting on the fill and the fill itself, and leaves neither
// the object nor its staging object behind.
TEST_F(HsmMoverTest, RestoreByExtentsFailsItsReadersOnACorruptChunk) {
  HsmMover mover{&store_, kUuid, /*fill_threads=*/2, /*fill_chunk=*/64 << 10};
  const std::string data = RandomBytes(1 << 20, 7);
  WriteObject(id_, data);
  ASSERT_TRUE(mover.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  std::string bad = data;
  bad[(1 << 20) - 5] ^= 1;
  ASSERT_TRUE(store_.Put(HsmObjectKey(kUuid, id_, 1), bad).ok());
  auto f = mover.StartRestore(ost_.get(), id_, 1);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::promise<Status> ready;
  (*f)->WhenReadable((1 << 20) - 100, 100, [&](Status s, bool) { ready.set_value(s); });
  Status st = ready.get_future().get();
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  auto w = (*f)->Wait();
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kCorruption);
  EXPECT_FALSE(ost_->Stat(id_)->exists);
  EXPECT_FALSE(ost_->Stat(HsmStagingId(id_))->exists);
}

// Two starts of one object: one fill, and both wait on it.
TEST_F(HsmMoverTest, ASecondStartJoinsTheFillInProgress) {
  HsmMover mover{&store_, kUuid, /*fill_threads=*/1, /*fill_chunk=*/64 << 10};
  const std::string data = RandomBytes(1 << 20, 8);
  WriteObject(id_, data);
  ASSERT_TRUE(mover.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  std::promise<void> open_gate;
  std::shared_future<void> gate = open_gate.get_future().share();
  store_.TEST_SetGetHook([gate](std::string_view key, uint64_t) {
    if (!key.ends_with(".crc"))
      gate.wait();
  });
  auto a = mover.StartRestore(ost_.get(), id_, 1);
  ASSERT_TRUE(a.ok());
  const uint64_t gets = store_.TEST_calls().get;
  auto b = mover.StartRestore(ost_.get(), id_, 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(store_.TEST_calls().get, gets);  // not even the CRCs again
  open_gate.set_value();
  EXPECT_EQ(*(*b)->Wait(), data.size());
  store_.TEST_SetGetHook(nullptr);
  EXPECT_EQ(ReadObject(id_), data);
}

// Starts of one object from several threads at once: one fill, and no start deletes the staging
// object another's fill is writing (the bytes come back whole).
TEST_F(HsmMoverTest, ConcurrentStartsMakeOneFill) {
  HsmMover mover{&store_, kUuid, /*fill_threads=*/4, /*fill_chunk=*/64 << 10};
  const std::string data = RandomBytes(2 << 20, 9);
  WriteObject(id_, data);
  ASSERT_TRUE(mover.Archive(ost_.get(), id_, 1).ok());
  ASSERT_TRUE(ost_->Release(id_).ok());
  std::atomic<int> data_gets{0};
  store_.TEST_SetGetHook([&data_gets](std::string_view key, uint64_t) {
    if (!key.ends_with(".crc")) {
      data_gets.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::vector<std::shared_ptr<ObjectFill>> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      auto f = mover.StartRestore(ost_.get(), id_, 1);
      if (f.ok())
        got[i] = *f;
    });
  }
  for (auto& t : threads)
    t.join();
  for (const auto& f : got) {
    ASSERT_NE(f, nullptr);
    auto w = f->Wait();  // the same fill, or (a late start) one that ended already
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(*w, data.size());
  }
  store_.TEST_SetGetHook(nullptr);
  EXPECT_EQ(data_gets.load(), 32);  // one fill's chunks, once
  EXPECT_EQ(ReadObject(id_), data);
  EXPECT_TRUE(ost_->VerifyRange(id_, 0, data.size()).ok());
}

// An OST block that fails its own checksum is never archived.
TEST_F(HsmMoverTest, ArchiveRefusesACorruptOstObject) {
  WriteObject(id_, RandomBytes(8192, 4));
  ASSERT_TRUE(ost_->Sync({id_}).ok());
  ost_.reset();  // closed cleanly: the next open reads the files as they are
  // Flip a byte of the object file under the store.
  const std::string path = "/ost/0/objects/" + id_.FileName();
  auto fh = engine_.Open(path, O_RDWR, 0);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  char b = 0;
  ASSERT_TRUE(engine_.RunSync(io::IoOp{io::IoKind::kRead, *fh, 5000, &b, 1}).ok());
  b = static_cast<char>(b ^ 1);
  ASSERT_TRUE(engine_.RunSync(io::IoOp{io::IoKind::kWrite, *fh, 5000, &b, 1}).ok());
  ASSERT_TRUE(engine_.Fsync(*fh).ok());
  engine_.Close(*fh).IgnoreError();  // test
  SetUp();
  auto a = mover_.Archive(ost_.get(), id_, 1);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kCorruption) << a.status().ToString();
}

}  // namespace
}  // namespace ciuic::oss
