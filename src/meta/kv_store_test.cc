// The KvStore contract, run against MemKvStore and RocksKvStore, plus RocksKvStore's durability
// under a simulated power loss.
#include "meta/kv_store.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include "meta/mem_kv_store.h"
#include "meta/power_loss_fs.h"
#include "meta/rocks_kv_store.h"

namespace ciuic::meta {
namespace {

// A temporary directory removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ciuic-kv-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct MemFactory {
  std::unique_ptr<KvStore> Make() { return std::make_unique<MemKvStore>(); }
};

struct RocksFactory {
  TempDir dir;
  std::unique_ptr<KvStore> Make() {
    RocksKvStore::Options o;
    o.path = dir.path() + "/db";
    auto r = RocksKvStore::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }
};

template <typename F>
class KvStoreContractTest : public ::testing::Test {
 protected:
  void SetUp() override { kv_ = factory_.Make(); }
  F factory_;
  std::unique_ptr<KvStore> kv_;
};

using Factories = ::testing::Types<MemFactory, RocksFactory>;
TYPED_TEST_SUITE(KvStoreContractTest, Factories);

std::vector<std::string> Keys(KvStore* kv, Cf cf, std::string_view from, std::string upper) {
  std::vector<std::string> out;
  auto it = kv->NewIterator(cf, std::move(upper));
  for (it->Seek(from); it->Valid(); it->Next())
    out.emplace_back(it->key());
  EXPECT_TRUE(it->status().ok());
  return out;
}

TYPED_TEST(KvStoreContractTest, GetMissingKeyIsNotFound) {
  std::string v;
  EXPECT_EQ(this->kv_->Get(Cf::kInodes, "nope", &v).code(), StatusCode::kNotFound);
}

TYPED_TEST(KvStoreContractTest, PutThenGetReturnsValueAndCfsAreSeparate) {
  WriteBatch b;
  b.Put(Cf::kInodes, "k", "inode");
  b.Put(Cf::kDentries, "k", "dentry");
  ASSERT_TRUE(this->kv_->Write(b, false).ok());
  std::string v;
  ASSERT_TRUE(this->kv_->Get(Cf::kInodes, "k", &v).ok());
  EXPECT_EQ(v, "inode");
  ASSERT_TRUE(this->kv_->Get(Cf::kDentries, "k", &v).ok());
  EXPECT_EQ(v, "dentry");
  EXPECT_EQ(this->kv_->Get(Cf::kXattrs, "k", &v).code(), StatusCode::kNotFound);
}

TYPED_TEST(KvStoreContractTest, BatchAppliesInOrderAndDeletes) {
  WriteBatch b;
  b.Put(Cf::kSystem, "a", "1");
  b.Put(Cf::kSystem, "a", "2");
  b.Put(Cf::kSystem, "b", "x");
  b.Delete(Cf::kSystem, "b");
  ASSERT_TRUE(this->kv_->Write(b, true).ok());
  std::string v;
  ASSERT_TRUE(this->kv_->Get(Cf::kSystem, "a", &v).ok());
  EXPECT_EQ(v, "2");
  EXPECT_EQ(this->kv_->Get(Cf::kSystem, "b", &v).code(), StatusCode::kNotFound);
  ASSERT_TRUE(this->kv_->SyncWal().ok());
}

TYPED_TEST(KvStoreContractTest, BinaryKeysAndValuesRoundTrip) {
  std::string key("\x00\x01\xff\x00", 4);
  std::string value("\x00\xfe\x00", 3);
  WriteBatch b;
  b.Put(Cf::kXattrs, key, value);
  ASSERT_TRUE(this->kv_->Write(b, false).ok());
  std::string v;
  ASSERT_TRUE(this->kv_->Get(Cf::kXattrs, key, &v).ok());
  EXPECT_EQ(v, value);
}

TYPED_TEST(KvStoreContractTest, IteratorIsOrderedAndBounded) {
  WriteBatch b;
  for (const char* k : {"b2", "a1", "b1", "c1", "b3"})
    b.Put(Cf::kDentries, k, k);
  b.Put(Cf::kInodes, "b15", "other cf");
  ASSERT_TRUE(this->kv_->Write(b, false).ok());
  EXPECT_EQ(Keys(this->kv_.get(), Cf::kDentries, "b", "c"),
            (std::vector<std::string>{"b1", "b2", "b3"}));
  EXPECT_EQ(Keys(this->kv_.get(), Cf::kDentries, "b15", "c"),
            (std::vector<std::string>{"b2", "b3"}));
  EXPECT_EQ(Keys(this->kv_.get(), Cf::kDentries, "", ""),
            (std::vector<std::string>{"a1", "b1", "b2", "b3", "c1"}));
  EXPECT_TRUE(Keys(this->kv_.get(), Cf::kDentries, "d", "").empty());
  auto it = this->kv_->NewIterator(Cf::kDentries, "z");
  it->Seek("b1");
  ASSERT_TRUE(it->Valid());
  EXPECT_EQ(it->value(), "b1");
}

TYPED_TEST(KvStoreContractTest, MultiGetReportsEachKey) {
  WriteBatch b;
  b.Put(Cf::kInodes, "x", "1");
  b.Put(Cf::kInodes, "z", "3");
  ASSERT_TRUE(this->kv_->Write(b, false).ok());
  std::vector<std::string> keys{"x", "y", "z"};
  std::vector<std::string> values;
  std::vector<Status> st;
  this->kv_->MultiGet(Cf::kInodes, keys, &values, &st);
  ASSERT_EQ(st.size(), 3u);
  EXPECT_TRUE(st[0].ok());
  EXPECT_EQ(values[0], "1");
  EXPECT_EQ(st[1].code(), StatusCode::kNotFound);
  EXPECT_TRUE(st[2].ok());
  EXPECT_EQ(values[2], "3");
}

TYPED_TEST(KvStoreContractTest, ConcurrentReadersSeeWholeBatches) {
  // A writer commits batches that keep "a" and "b" equal; readers must never see them differ
  // in one iteration... per-key reads may interleave, so check the atomic unit: both keys in
  // one batch become visible together when read by an iterator created afterwards.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 2000; ++i) {
      WriteBatch b;
      b.Put(Cf::kSystem, "a", std::to_string(i));
      b.Put(Cf::kSystem, "b", std::to_string(i));
      ASSERT_TRUE(this->kv_->Write(b, false).ok());
    }
    stop = true;
  });
  int checks = 0;
  while (!stop || checks == 0) {
    std::string last_b;
    if (this->kv_->Get(Cf::kSystem, "b", &last_b).ok()) {
      std::string a;
      ASSERT_TRUE(this->kv_->Get(Cf::kSystem, "a", &a).ok());
      // "a" is written in the same batch as "b", so it is at least as new.
      EXPECT_GE(std::stoi(a), std::stoi(last_b));
    }
    ++checks;
  }
  writer.join();
}

TYPED_TEST(KvStoreContractTest, IteratorToleratesConcurrentDeletes) {
  WriteBatch b;
  for (int i = 0; i < 100; ++i)
    b.Put(Cf::kDentries, fmt::format("k{:03}", i), "v");
  ASSERT_TRUE(this->kv_->Write(b, false).ok());
  auto it = this->kv_->NewIterator(Cf::kDentries, "");
  it->Seek("");
  int seen = 0;
  std::string prev;
  while (it->Valid()) {
    std::string k(it->key());
    EXPECT_GT(k, prev);
    prev = k;
    WriteBatch d;
    d.Delete(Cf::kDentries, k);
    ASSERT_TRUE(this->kv_->Write(d, false).ok());
    ++seen;
    it->Next();
  }
  EXPECT_EQ(seen, 100);
}

// ---------------------------------------------------------------------------------------------
// RocksKvStore specifics.

TEST(RocksKvStoreTest, PersistsAcrossReopen) {
  TempDir dir;
  RocksKvStore::Options o;
  o.path = dir.path() + "/db";
  {
    auto kv = RocksKvStore::Open(o);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    WriteBatch b;
    b.Put(Cf::kOstLog, "task", "destroy");
    ASSERT_TRUE((*kv)->Write(b, false).ok());
  }
  auto kv = RocksKvStore::Open(o);
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  std::string v;
  ASSERT_TRUE((*kv)->Get(Cf::kOstLog, "task", &v).ok());
  EXPECT_EQ(v, "destroy");
}

TEST(RocksKvStoreTest, SecondOpenOfSameDirIsBusy) {
  TempDir dir;
  RocksKvStore::Options o;
  o.path = dir.path() + "/db";
  auto a = RocksKvStore::Open(o);
  ASSERT_TRUE(a.ok());
  auto b = RocksKvStore::Open(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kBusy) << b.status().ToString();
}

TEST(RocksKvStoreTest, RefusesForeignFormatVersion) {
  TempDir dir;
  RocksKvStore::Options o;
  o.path = dir.path() + "/db";
  {
    auto kv = RocksKvStore::Open(o);
    ASSERT_TRUE(kv.ok());
    WriteBatch b;
    b.Put(Cf::kSystem, kFormatVersionKey, "999");
    ASSERT_TRUE((*kv)->Write(b, true).ok());
  }
  auto kv = RocksKvStore::Open(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(kv.status().message().find("999"), std::string::npos);
}

TEST(RocksKvStoreTest, DataDirUnderAFileIsAClearError) {
  TempDir dir;
  { std::ofstream(dir.path() + "/file") << "x"; }
  RocksKvStore::Options o;
  o.path = dir.path() + "/file/db";
  auto kv = RocksKvStore::Open(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), StatusCode::kNotADirectory) << kv.status().ToString();
  EXPECT_NE(kv.status().message().find("cannot open data dir"), std::string::npos);
}

TEST(RocksKvStoreTest, UnwritableDirIsAClearError) {
  if (geteuid() == 0)
    GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  std::filesystem::permissions(
      dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  RocksKvStore::Options o;
  o.path = dir.path() + "/db";
  auto kv = RocksKvStore::Open(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().code(), StatusCode::kPermissionDenied) << kv.status().ToString();
  EXPECT_NE(kv.status().message().find("Permission denied"), std::string::npos);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
}

TEST(RocksKvStoreTest, ReadsFromFlushedFiles) {
  TempDir dir;
  RocksKvStore::Options o;
  o.path = dir.path() + "/db";
  auto kv = RocksKvStore::Open(o);
  ASSERT_TRUE(kv.ok());
  WriteBatch b;
  for (int i = 0; i < 1000; ++i)
    b.Put(Cf::kDentries, fmt::format("{:06}", i), "v");
  ASSERT_TRUE((*kv)->Write(b, false).ok());
  ASSERT_TRUE((*kv)->TEST_Flush().ok());
  EXPECT_EQ(Keys(kv->get(), Cf::kDentries, "000990", "").size(), 10u);
  std::string v;
  EXPECT_TRUE((*kv)->Get(Cf::kDentries, "000500", &v).ok());
}

// Opens a store through a PowerLossFs.
struct PowerLossRig {
  TempDir dir;
  std::shared_ptr<PowerLossFs> fs = std::make_shared<PowerLossFs>(rocksdb::FileSystem::Default());
  std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
  std::unique_ptr<RocksKvStore> kv;

  void Open() {
    RocksKvStore::Options o;
    o.path = dir.path() + "/db";
    o.env = env.get();
    auto r = RocksKvStore::Open(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    kv = std::move(r).value();
  }
  // Cuts power, closes the store, drops what was not synced and powers back on.
  uint64_t PowerCycle(uint64_t torn_seed) {
    fs->SetActive(false);
    kv.reset();
    auto dropped = fs->DropUnsyncedData(torn_seed);
    EXPECT_TRUE(dropped.ok()) << dropped.status().ToString();
    fs->SetActive(true);
    return dropped.value_or(0);
  }
};

Status Put(KvStore* kv, std::string_view key, std::string_view value, bool sync) {
  WriteBatch b;
  b.Put(Cf::kInodes, key, value);
  b.Put(Cf::kDentries, key, value);  // two column families in one atomic batch
  return kv->Write(b, sync);
}

TEST(RocksKvStorePowerLossTest, SyncedWritesSurviveUnsyncedVanish) {
  PowerLossRig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open());
  ASSERT_TRUE(Put(rig.kv.get(), "early", "unsynced-but-covered", false).ok());
  ASSERT_TRUE(Put(rig.kv.get(), "synced", "yes", true).ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(Put(rig.kv.get(), fmt::format("lost{}", i), "no", false).ok());
  }
  EXPECT_GT(rig.fs->UnsyncedBytes(), 0u);
  EXPECT_GT(rig.PowerCycle(0), 0u);

  ASSERT_NO_FATAL_FAILURE(rig.Open());
  std::string v;
  ASSERT_TRUE(rig.kv->Get(Cf::kInodes, "synced", &v).ok());
  EXPECT_EQ(v, "yes");
  // A synced write makes every earlier write durable (the WAL is one sequence).
  ASSERT_TRUE(rig.kv->Get(Cf::kDentries, "early", &v).ok());
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(rig.kv->Get(Cf::kInodes, fmt::format("lost{}", i), &v).code(), StatusCode::kNotFound);
  }
  // The store still works and keeps what is synced from now on.
  ASSERT_TRUE(Put(rig.kv.get(), "after", "1", true).ok());
  rig.PowerCycle(0);
  ASSERT_NO_FATAL_FAILURE(rig.Open());
  EXPECT_TRUE(rig.kv->Get(Cf::kInodes, "after", &v).ok());
  EXPECT_TRUE(rig.kv->Get(Cf::kInodes, "synced", &v).ok());
}

// A failed WAL write (dead disk, full disk) leaves RocksDB refusing writes; its SyncWAL() then
// asserted (aborting the MDS) instead of returning an error. Found by the whole-cluster power-cut
// test: a group commit failed and the next fsync mutation synced the WAL.
TEST(RocksKvStorePowerLossTest, SyncAndWritesAfterAFailedWriteReturnTheErrorInsteadOfAborting) {
  PowerLossRig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open());
  ASSERT_TRUE(Put(rig.kv.get(), "before", "1", true).ok());
  rig.fs->SetActive(false);
  EXPECT_FALSE(Put(rig.kv.get(), "dead", "x", false).ok());
  Status sync = rig.kv->SyncWal();
  EXPECT_FALSE(sync.ok());
  EXPECT_NE(sync.message().find("restart the MDS"), std::string::npos) << sync.ToString();
  rig.fs->SetActive(true);  // the disk is back, but the store stays stopped until reopened
  EXPECT_FALSE(Put(rig.kv.get(), "later", "x", true).ok());
  EXPECT_FALSE(rig.kv->SyncWal().ok());
  std::string v;
  EXPECT_TRUE(rig.kv->Get(Cf::kInodes, "before", &v).ok());  // reads still work
  rig.PowerCycle(0);
  ASSERT_NO_FATAL_FAILURE(rig.Open());
  EXPECT_TRUE(rig.kv->Get(Cf::kInodes, "before", &v).ok());
  ASSERT_TRUE(Put(rig.kv.get(), "reopened", "1", true).ok());
  ASSERT_TRUE(rig.kv->SyncWal().ok());
}

// As the MDS syncs for FsyncDir: unsynced writes, then SyncWal(); power cuts with torn tails.
TEST(RocksKvStorePowerLossTest, SyncWalMakesEarlierWritesDurableAcrossTornPowerCuts) {
  const uint64_t seed = std::random_device{}() | 1;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  PowerLossRig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open());
  std::vector<std::string> synced;
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < 50; ++i) {
      const std::string k = fmt::format("r{}-{:03}", round, i);
      ASSERT_TRUE(Put(rig.kv.get(), k, "v", false).ok());
      if (rng() % 8 == 0) {
        ASSERT_TRUE(rig.kv->SyncWal().ok());
        synced.push_back(k);
      }
    }
    rig.PowerCycle(rng() % 2 == 0 ? 0 : (rng() | 1));
    ASSERT_NO_FATAL_FAILURE(rig.Open());
    for (const std::string& k : synced) {
      std::string v;
      ASSERT_TRUE(rig.kv->Get(Cf::kInodes, k, &v).ok()) << "round " << round << ": lost " << k;
    }
  }
}

TEST(RocksKvStorePowerLossTest, TornUnsyncedTailNeverCorruptsOrSplitsABatch) {
  const uint64_t seed = std::random_device{}() | 1;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  PowerLossRig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Open());
  int synced_upto = -1;
  for (int round = 0; round < 5; ++round) {
    const int base = round * 100;
    for (int i = 0; i < 100; ++i) {
      bool sync = rng() % 10 == 0;
      ASSERT_TRUE(Put(rig.kv.get(), fmt::format("{:06}", base + i), "v", sync).ok());
      if (sync)
        synced_upto = base + i;
    }
    rig.PowerCycle(rng() | 1);
    ASSERT_NO_FATAL_FAILURE(rig.Open());
    // Every synced key is there; every key is in both column families or in neither (atomic
    // batches); what survives is a prefix of the writes (no holes).
    bool hole = false;
    for (int i = 0; i < base + 100; ++i) {
      std::string k = fmt::format("{:06}", i), v;
      Status a = rig.kv->Get(Cf::kInodes, k, &v);
      Status b = rig.kv->Get(Cf::kDentries, k, &v);
      ASSERT_EQ(a.ok(), b.ok()) << k;
      if (i <= synced_upto) {
        ASSERT_TRUE(a.ok()) << "synced key lost: " << k;
      }
      if (!a.ok())
        hole = true;
      if (i >= base && hole) {
        ASSERT_FALSE(a.ok()) << "hole before " << k;
      }
    }
    // Rewrite the round's keys that vanished so the next round starts from a full prefix.
    for (int i = base; i < base + 100; ++i) {
      ASSERT_TRUE(Put(rig.kv.get(), fmt::format("{:06}", i), "v", false).ok());
    }
    ASSERT_TRUE(rig.kv->SyncWal().ok());
    synced_upto = base + 99;
  }
}

}  // namespace
}  // namespace ciuic::meta
