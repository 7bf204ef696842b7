// Checkpoint engine on a real in-process cluster (MiniCluster: MDS + OSS over TCP).
#include <fcntl.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "checkpoint/convert.h"
#include "checkpoint/manifest.h"
#include "ciuic/checkpoint.h"
#include "testing/mini_cluster.h"

namespace ciuic::checkpoint {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = testing::MiniCluster::Start({.num_oss = 2, .osts_per_oss = 2});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(c).value();
    auto cl = cluster_->NewClient();
    ASSERT_TRUE(cl.ok()) << cl.status().ToString();
    client_ = std::move(cl).value();
  }
  void TearDown() override {
    client_.reset();
    cluster_.reset();
  }

  std::unique_ptr<testing::MiniCluster> cluster_;
  std::unique_ptr<Client> client_;
};

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

TensorToSave Spec(const std::string& name,
                  const std::string& dtype,
                  std::vector<int64_t> shape,
                  const void* data) {
  TensorToSave t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  t.nbytes = static_cast<size_t>(NumElements(t.shape)) * DTypeSize(dtype);
  return t;
}

TEST_F(CheckpointTest, SaveAndLoadRoundTripWithConversion) {
  // 3 MiB of weights (several 1 MiB chunks), int64 step counts, a 0-d tensor and an empty one.
  const std::vector<float> w = RandomFloats(768 * 1024 + 3, 1);
  std::vector<int64_t> steps(1000);
  std::iota(steps.begin(), steps.end(), -500);
  const double scalar = 3.25;
  SaveOptions o;
  o.chunk_bytes = 1 << 20;
  o.convert = {{"model.*", HalfKind::kBFloat16}};
  std::vector<TensorToSave> ts = {
      Spec("model.w", "float32", {static_cast<int64_t>(w.size())}, w.data()),
      Spec("optim.w", "float32", {3, static_cast<int64_t>(w.size() / 3)}, w.data()),
      Spec("optim.step", "int64", {10, 100}, steps.data()), Spec("scalar", "float64", {}, &scalar),
      Spec("empty", "float32", {0, 4}, nullptr)};
  o.extra_json = R"({"epoch": 7})";
  auto stats = Save(*client_, "/ck/step-1", ts, o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->bytes_written, stats->bytes_in - w.size() * 2);

  auto latest = Latest(*client_, "/ck");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "step-1");
  auto m = ReadManifest(*client_, "/ck");  // via `latest`
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->dir, "/ck/step-1");
  EXPECT_EQ(m->extra_json, R"({"epoch":7})");
  EXPECT_EQ(m->Find("model.w")->stored_dtype, "bfloat16");
  EXPECT_EQ(m->Find("optim.w")->stored_dtype, "float32");

  std::vector<uint16_t> bf(w.size());
  std::vector<float> up(w.size());
  std::vector<float> opt(w.size() / 3 * 3);
  std::vector<int64_t> steps2(1000);
  double scalar2 = 0;
  ASSERT_TRUE(Load(*client_, *m,
                   {{"model.w", bf.data(), bf.size() * 2},
                    {"model.w", up.data(), up.size() * 4, 0, -1, true},
                    {"optim.w", opt.data(), opt.size() * 4},
                    {"optim.step", steps2.data(), steps2.size() * 8},
                    {"scalar", &scalar2, 8},
                    {"empty", nullptr, 0}})
                  .ok());
  std::vector<uint16_t> want(w.size());
  NarrowFloat32(w.data(), want.data(), w.size(), HalfKind::kBFloat16);
  EXPECT_EQ(bf, want);
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_EQ(Fp32ToBf16Bits(std::bit_cast<uint32_t>(up[i])), want[i]);
  EXPECT_EQ(0, std::memcmp(opt.data(), w.data(), opt.size() * 4));
  EXPECT_EQ(steps2, steps);
  EXPECT_EQ(scalar2, scalar);

  // A slice of rows [1, 2) of optim.w, and errors that name what is wrong.
  const size_t row = w.size() / 3;
  std::vector<float> slice(row);
  ASSERT_TRUE(Load(*client_, *m, {{"optim.w", slice.data(), row * 4, 1, 2}}).ok());
  EXPECT_EQ(0, std::memcmp(slice.data(), w.data() + row, row * 4));
  Status st = Load(*client_, *m, {{"nope", slice.data(), 4}});
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  st = Load(*client_, *m, {{"optim.w", slice.data(), 4, 1, 2}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("optim.w"), std::string::npos);
}

TEST_F(CheckpointTest, ShardsOfTwoRanksLoadWholeOrSlicedAcrossTheBoundary) {
  const std::vector<float> all = RandomFloats(10 * 1000, 2);  // global [10, 1000]
  SaveOptions o;
  o.chunk_bytes = 8192;
  o.update_latest = false;
  for (int rank = 0; rank < 2; ++rank) {
    TensorToSave t = Spec("w", "float32", {5, 1000}, all.data() + rank * 5000);
    t.global_shape = {10, 1000};
    t.offsets = {rank * 5, 0};
    std::vector<TensorToSave> ts = {t};
    const double rep = 1.5;
    if (rank == 0)
      ts.push_back(Spec("replicated", "float64", {1}, &rep));
    ASSERT_TRUE(SaveShard(*client_, "/ck2/s", "id-1", rank, ts, o).ok());
  }
  // Nothing is visible before the commit.
  EXPECT_EQ(ReadManifest(*client_, "/ck2/s").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(Commit(*client_, "/ck2/s", "id-1", 2, o).ok());
  auto m = ReadManifest(*client_, "/ck2/s");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->Find("w")->shards.size(), 2u);
  std::vector<float> got(all.size());
  ASSERT_TRUE(Load(*client_, *m, {{"w", got.data(), got.size() * 4}}).ok());
  EXPECT_EQ(got, all);
  std::vector<float> mid(4 * 1000);  // rows [3, 7) span both shards
  ASSERT_TRUE(Load(*client_, *m, {{"w", mid.data(), mid.size() * 4, 3, 7}}).ok());
  EXPECT_EQ(0, std::memcmp(mid.data(), all.data() + 3000, mid.size() * 4));
  // A commit with a missing rank fails and commits nothing.
  ASSERT_TRUE(
      SaveShard(*client_, "/ck2/t", "id-2", 0, {Spec("w", "float32", {1}, all.data())}, o).ok());
  EXPECT_EQ(Commit(*client_, "/ck2/t", "id-2", 2, o).code(), StatusCode::kNotFound);
  EXPECT_EQ(ReadManifest(*client_, "/ck2/t").status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, CorruptedByteFailsLoadNamingTheTensor) {
  const std::vector<float> w = RandomFloats(100000, 3);
  ASSERT_TRUE(Save(*client_, "/ck3/a", {Spec("layer.bias", "float32", {100000}, w.data())}).ok());
  auto m = ReadManifest(*client_, "/ck3/a");
  ASSERT_TRUE(m.ok());
  const ShardInfo& s = m->Find("layer.bias")->shards[0];
  // Flip one byte through the client (the OSS's block checksums stay valid; ours must catch it).
  auto f = client_->Open("/ck3/a/" + s.file, O_WRONLY);
  ASSERT_TRUE(f.ok());
  char byte = 0;
  {
    auto r = client_->Open("/ck3/a/" + s.file, O_RDONLY);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE((*r)->Pread(&byte, 1, s.offset + 1234).ok());
    ASSERT_TRUE((*r)->Close().ok());
  }
  byte ^= 0x20;
  ASSERT_TRUE((*f)->Pwrite(&byte, 1, s.offset + 1234).ok());
  ASSERT_TRUE((*f)->Close().ok());
  std::vector<float> got(w.size());
  Status st = Load(*client_, *m, {{"layer.bias", got.data(), got.size() * 4}});
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("layer.bias"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.ToString();
}

TEST_F(CheckpointTest, UncommittedSaveLeavesPreviousCheckpointAndIsCleanedUp) {
  const std::vector<float> a = RandomFloats(5000, 4);
  const std::vector<float> b = RandomFloats(5000, 5);
  ASSERT_TRUE(Save(*client_, "/ck4/x", {Spec("t", "float32", {5000}, a.data())}).ok());
  // A save that dies before its commit: over the same path and into a new sibling.
  ASSERT_TRUE(
      SaveShard(*client_, "/ck4/x", "dead1", 0, {Spec("t", "float32", {5000}, b.data())}).ok());
  ASSERT_TRUE(
      SaveShard(*client_, "/ck4/y", "dead2", 0, {Spec("t", "float32", {5000}, b.data())}).ok());
  auto m = ReadManifest(*client_, "/ck4");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->dir, "/ck4/x");
  std::vector<float> got(5000);
  ASSERT_TRUE(Load(*client_, *m, {{"t", got.data(), got.size() * 4}}).ok());
  EXPECT_EQ(got, a);
  EXPECT_EQ(ReadManifest(*client_, "/ck4/y").status().code(), StatusCode::kNotFound);
  auto inc = ListIncomplete(*client_, "/ck4");
  ASSERT_TRUE(inc.ok());
  EXPECT_EQ(inc->size(), 3u);  // x's data and part files of dead1, and the directory y
  ASSERT_TRUE(CleanIncomplete(*client_, "/ck4").ok());
  inc = ListIncomplete(*client_, "/ck4");
  ASSERT_TRUE(inc.ok());
  EXPECT_TRUE(inc->empty());
  EXPECT_EQ(client_->Stat("/ck4/y").status().code(), StatusCode::kNotFound);
  // Saving over x again replaces it and removes the old data file.
  ASSERT_TRUE(Save(*client_, "/ck4/x", {Spec("t", "float32", {5000}, b.data())}).ok());
  auto entries = client_->ReadDir("/ck4/x");
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 2u);  // MANIFEST.json + one data file
  m = ReadManifest(*client_, "/ck4/x");
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(Load(*client_, *m, {{"t", got.data(), got.size() * 4}}).ok());
  EXPECT_EQ(got, b);
}

TEST_F(CheckpointTest, CommitRefusesMissingDataAndAutoCleanSparesYoungSaves) {
  const std::vector<float> a = RandomFloats(5000, 7);
  // A save whose data file vanished before its commit is not committed.
  ASSERT_TRUE(
      SaveShard(*client_, "/ck5/gone", "g1", 0, {Spec("t", "float32", {5000}, a.data())}).ok());
  ASSERT_TRUE(client_->Unlink("/ck5/gone/" + DataFileName("g1", 0)).ok());
  Status st = Commit(*client_, "/ck5/gone", "g1", 1);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(ReadManifest(*client_, "/ck5/gone").status().code(), StatusCode::kNotFound);
  // A save in progress in a sibling (young files) survives another save's automatic cleanup.
  ASSERT_TRUE(
      SaveShard(*client_, "/ck5/busy", "b1", 0, {Spec("t", "float32", {5000}, a.data())}).ok());
  ASSERT_TRUE(Save(*client_, "/ck5/done", {Spec("t", "float32", {5000}, a.data())}).ok());
  EXPECT_TRUE(client_->Stat("/ck5/busy/" + DataFileName("b1", 0)).ok());
  ASSERT_TRUE(Commit(*client_, "/ck5/busy", "b1", 1).ok());
  EXPECT_TRUE(ReadManifest(*client_, "/ck5/busy").ok());
}

TEST_F(CheckpointTest, WriteConvertedWritesHalves) {
  const std::vector<float> w = RandomFloats((1 << 20) * 3 + 17, 6);
  auto f = client_->Open("/raw.f16", O_CREAT | O_RDWR);
  ASSERT_TRUE(f.ok());
  auto n = WriteConverted(**f, 0, w.data(), w.size(), HalfKind::kFloat16);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, w.size() * 2);
  std::vector<uint16_t> got(w.size()), want(w.size());
  auto r = (*f)->Pread(got.data(), got.size() * 2, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, got.size() * 2);
  NarrowFloat32(w.data(), want.data(), w.size(), HalfKind::kFloat16);
  EXPECT_EQ(got, want);
  ASSERT_TRUE((*f)->Close().ok());
}

// N ranks of one machine loading one checkpoint through the node cache reach the OSTs once for
// each block (single flight, issue 16), proven by the OSSes' read counters; and a checkpoint
// saved on the machine loads from the cache without the OSTs (write-through).
TEST_F(CheckpointTest, RanksOfOneMachineLoadThroughTheNodeCacheOnce) {
  char tmpl[] = "/tmp/ciuic-ckpt-cache-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ClientOptions co;
  co.node_cache_dir = dir;
  co.node_cache_min_free_pct = 0;
  const std::vector<float> w = RandomFloats(1536 * 1024 + 5, 9);  // 6 MiB and a bit
  const std::vector<float> w2 = RandomFloats(w.size(), 10);
  SaveOptions o;
  o.chunk_bytes = 1 << 20;
  const auto spec = [&](const std::vector<float>& v) {
    return std::vector<TensorToSave>{
        Spec("w", "float32", {static_cast<int64_t>(v.size())}, v.data())};
  };
  ASSERT_TRUE(Save(*client_, "/ckc/a", spec(w), o).ok());  // saved elsewhere: no cache
  auto m = ReadManifest(*client_, "/ckc");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto file_size = [&](const Manifest& man) {
    auto st = client_->Stat(man.dir + "/" + man.Find("w")->shards.at(0).file);
    EXPECT_TRUE(st.ok());
    return st.ok() ? st->size : 0;
  };
  const uint64_t size = file_size(*m);
  constexpr int kRanks = 4;
  std::vector<std::unique_ptr<Client>> ranks;
  for (int i = 0; i < kRanks; ++i) {
    auto c = cluster_->NewClient(co);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ranks.push_back(std::move(c).value());
  }
  std::vector<std::vector<float>> got(kRanks, std::vector<float>(w.size()));
  std::vector<Status> sts(kRanks);
  const uint64_t before = cluster_->OstReadBytes();
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < kRanks; ++i) {
      ts.emplace_back([&, i] {
        sts[i] = Load(*ranks[i], *m, {{"w", got[i].data(), got[i].size() * 4}});
      });
    }
    for (auto& t : ts)
      t.join();
  }
  for (int i = 0; i < kRanks; ++i) {
    ASSERT_TRUE(sts[i].ok()) << sts[i].ToString();
    EXPECT_EQ(got[i], w) << "rank " << i;
  }
  const uint64_t read = cluster_->OstReadBytes() - before;
  EXPECT_GE(read, size);
  EXPECT_LE(read, size * 11 / 10) << kRanks << " ranks read " << read << " of " << size;

  // Saved on this machine: loaded with no byte from the OSTs.
  auto saver = cluster_->NewClient(co);
  ASSERT_TRUE(saver.ok());
  ASSERT_TRUE(Save(**saver, "/ckc/b", spec(w2), o).ok());
  auto m2 = ReadManifest(*client_, "/ckc");
  ASSERT_TRUE(m2.ok());
  ASSERT_EQ(m2->dir, "/ckc/b");
  const uint64_t mid = cluster_->OstReadBytes();
  std::vector<float> back(w2.size());
  ASSERT_TRUE(Load(*ranks[0], *m2, {{"w", back.data(), back.size() * 4}}).ok());
  EXPECT_EQ(back, w2);
  EXPECT_EQ(cluster_->OstReadBytes(), mid);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace ciuic::checkpoint
