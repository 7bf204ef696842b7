#include "loader/prefetch_engine.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "client/node_cache.h"
#include "testing/mini_cluster.h"

namespace ciuic::loader {
namespace {

std::string Bytes(int i, size_t n) {
  std::string s(n, '\0');
  for (size_t k = 0; k < n; ++k) {
    s[k] = static_cast<char>((i * 131 + static_cast<int>(k)) & 0xff);
  }
  return s;
}

// Takes every sample from a started engine with Next() and checks each against `expected`, then
// that the engine has ended.
void ExpectSamplesInOrder(PrefetchEngine& engine,
                          const std::vector<SampleRef>& order,
                          const std::function<std::string(const SampleRef&)>& expected) {
  for (const SampleRef& ref : order) {
    auto r = engine.Next();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->has_value());
    EXPECT_EQ((*r)->view(), expected(ref));
  }
  EXPECT_FALSE(engine.Next().value().has_value());
}

TEST(PrefetchEngineTest, ReturnsSamplesInTheGivenOrderWithinBudget) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 2}).value();
  std::shared_ptr<Client> client(cluster->NewClient().value());
  // Two "shards" with 20 samples each, plus per-sample files.
  std::vector<std::string> sources;
  std::vector<SampleRef> order;
  for (int s = 0; s < 2; ++s) {
    std::string shard;
    for (int i = 0; i < 20; ++i) {
      shard += Bytes(s * 100 + i, 5000);
    }
    sources.push_back(fmt::format("/shard{}", s));
    ASSERT_TRUE(client->WriteFile(sources.back(), shard).ok());
  }
  for (int i = 19; i >= 0; --i) {
    for (int s = 1; s >= 0; --s) {
      order.push_back({static_cast<uint32_t>(s), static_cast<uint64_t>(i) * 5000, 5000});
    }
  }
  PrefetchOptions o;
  o.budget_bytes = 20000;  // four samples
  o.opener_threads = 3;
  PrefetchEngine engine(client, sources, order, o);
  ASSERT_TRUE(engine.Start().ok());
  size_t n = 0;
  while (true) {
    auto r = engine.Next();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (!r->has_value()) {
      break;
    }
    const SampleRef& ref = order[n++];
    EXPECT_EQ(
        (*r)->view(),
        Bytes(static_cast<int>(ref.source) * 100 + static_cast<int>(ref.offset / 5000), 5000));
  }
  EXPECT_EQ(n, order.size());
  EXPECT_LE(engine.stats().peak_buffered, 20000u);
  EXPECT_EQ(engine.stats().opens, 2u);
}

// NextBatch hands out samples in order, n at a time (a short last batch, then 0); the buffers stay
// valid after the engine is gone; a consumed sample's buffer is reused for a later read.
TEST(PrefetchEngineTest, BatchesInOrderAndBuffersAreReused) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 2}).value();
  std::shared_ptr<Client> client(cluster->NewClient().value());
  std::string shard;
  for (int i = 0; i < 23; ++i)
    shard += Bytes(i, 3000);
  ASSERT_TRUE(client->WriteFile("/shard", shard).ok());
  std::vector<SampleRef> order;
  for (int i = 22; i >= 0; --i)
    order.push_back({0, static_cast<uint64_t>(i) * 3000, 3000});
  order.push_back({0, 5, 0});  // an empty sample
  std::vector<SampleBuffer> kept;
  {
    PrefetchOptions o;
    o.budget_bytes = 9000;
    PrefetchEngine engine(client, {"/shard"}, order, o);
    ASSERT_TRUE(engine.Start().ok());
    std::vector<SampleBuffer> got;
    size_t total = 0;
    while (true) {
      got.clear();
      auto n = engine.NextBatch(5, &got);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      ASSERT_EQ(*n, got.size());
      if (*n == 0)
        break;
      EXPECT_EQ(*n, std::min<size_t>(5, order.size() - total));
      for (size_t i = 0; i < got.size(); ++i, ++total) {
        const SampleRef& ref = order[total];
        EXPECT_EQ(got[i].view(), shard.substr(ref.offset, ref.length)) << total;
      }
      kept.push_back(std::move(got[0]));
    }
    EXPECT_EQ(total, order.size());
    EXPECT_LE(engine.stats().peak_buffered, 9000u);
    EXPECT_EQ(engine.stats().samples, order.size());
  }
  EXPECT_EQ(kept[0].view(), shard.substr(22 * 3000, 3000));  // outlives the engine
  EXPECT_EQ(kept[4].view(), shard.substr(2 * 3000, 3000));

  // Budget of one sample, each released at once: the reads reuse a couple of buffers rather than
  // new memory per sample.
  PrefetchOptions o;
  o.budget_bytes = 3000;
  o.opener_threads = 2;
  PrefetchEngine engine(client, {"/shard"}, std::vector<SampleRef>(order.begin(), order.end() - 1),
                        o);
  ASSERT_TRUE(engine.Start().ok());
  std::set<const char*> seen;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    auto r = engine.Next();
    ASSERT_TRUE(r.ok() && r->has_value());
    EXPECT_EQ((*r)->view(), shard.substr(order[i].offset, 3000));
    seen.insert((*r)->data() - order[i].offset % 4096);  // the sample's 4 KiB blocks
  }
  EXPECT_LE(seen.size(), 3u);
}

TEST(PrefetchEngineTest, MissingFileAndShortSampleAreErrors) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 1}).value();
  std::shared_ptr<Client> client(cluster->NewClient().value());
  ASSERT_TRUE(client->WriteFile("/f", "abc").ok());
  PrefetchOptions o;
  o.keep_sources_open = false;
  {
    PrefetchEngine e(client, {"/f", "/missing"}, {{0, 0, 3}, {1, 0, 3}}, o);
    ASSERT_TRUE(e.Start().ok());
    EXPECT_EQ(e.Next().value().value().view(), "abc");
    EXPECT_EQ(e.Next().status().code(), StatusCode::kNotFound);
  }
  {
    PrefetchEngine e(client, {"/f"}, {{0, 1, 10}}, o);
    ASSERT_TRUE(e.Start().ok());
    EXPECT_EQ(e.Next().status().code(), StatusCode::kCorruption);
  }
  PrefetchEngine e(client, {"/f"}, {{3, 0, 1}}, o);
  EXPECT_EQ(e.Start().code(), StatusCode::kInvalidArgument);
}

TEST(PrefetchEngineTest, ResolvedSourcesReadWithoutOpens) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 2}).value();
  std::shared_ptr<Client> client(cluster->NewClient().value());
  ASSERT_TRUE(client->Mkdir("/d").ok());
  std::vector<std::string> sources;
  std::vector<SampleRef> order;
  for (int i = 0; i < 30; ++i) {
    sources.push_back(fmt::format("/d/s{}", i));
    ASSERT_TRUE(client->WriteFile(sources.back(), Bytes(i, 1000 + 37 * i)).ok());
  }
  for (int i = 29; i >= 0; i -= 2)
    order.push_back({static_cast<uint32_t>(i), 0, 1000 + 37 * static_cast<uint64_t>(i)});
  order.push_back({5, 10, 20});  // a range of a file
  auto resolved = ResolveSources(*client, sources, 4);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  ASSERT_EQ((*resolved)->size(), sources.size());
  EXPECT_EQ((**resolved)[7].size, 1000u + 37 * 7);
  PrefetchOptions o;
  o.keep_sources_open = false;
  PrefetchEngine engine(client, sources, order, o, *resolved);
  ASSERT_TRUE(engine.Start().ok());
  ExpectSamplesInOrder(engine, order, [](const SampleRef& ref) {
    return Bytes(static_cast<int>(ref.source), 1000 + 37 * ref.source)
        .substr(ref.offset, ref.length);
  });
  EXPECT_EQ(engine.stats().opens, 0u);  // no MDS open for any sample

  // Resolution errors name the path; a resolved table must match the sources.
  auto missing = ResolveSources(*client, {"/d/s1", "/d/nope"}, 2);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/d/nope"), std::string::npos);
  EXPECT_EQ(ResolveSources(*client, {"/d"}, 1).status().code(), StatusCode::kInvalidArgument);
  PrefetchEngine wrong(client, {"/d/s1", "/d/s2"}, {{0, 0, 1}}, o, *resolved);
  EXPECT_EQ(wrong.Start().code(), StatusCode::kInvalidArgument);
}

// Shards resolved once and read in an order that hops between more shards than the engine keeps
// open: every LRU miss reopens from the resolved layout, so the epoch needs no MDS at all (it is
// stopped before the engine starts).
TEST(PrefetchEngineTest, ResolvedShardsReopenWithoutTheMds) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 2}).value();
  std::shared_ptr<Client> client(cluster->NewClient().value());
  std::vector<std::string> sources;
  for (int s = 0; s < 6; ++s) {
    std::string shard;
    for (int i = 0; i < 4; ++i)
      shard += Bytes(s * 10 + i, 3000);
    sources.push_back(fmt::format("/shard{}", s));
    ASSERT_TRUE(client->WriteFile(sources.back(), shard).ok());
  }
  std::vector<SampleRef> order;
  for (int i = 0; i < 4; ++i) {
    for (int s = 0; s < 6; ++s)
      order.push_back(
          {static_cast<uint32_t>((s * 5 + i) % 6), static_cast<uint64_t>(i) * 3000, 3000});
  }
  auto resolved = ResolveSources(*client, sources, 3);
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  ASSERT_TRUE(cluster->StopMds().ok());
  PrefetchOptions o;
  o.max_open_sources = 2;  // far fewer than the shards the order hops between
  PrefetchEngine engine(client, sources, order, o, *resolved);
  ASSERT_TRUE(engine.Start().ok());
  ExpectSamplesInOrder(engine, order, [](const SampleRef& ref) {
    return Bytes(static_cast<int>(ref.source) * 10 + static_cast<int>(ref.offset / 3000), 3000);
  });
  EXPECT_EQ(engine.stats().opens, 0u);
}

}  // namespace
}  // namespace ciuic::loader

namespace ciuic::loader {
namespace {

// A co-located OSS places samples straight into the pool's shared memory; one pool serves engine
// after engine (its memory stays mapped); without shared memory the same reads go over TCP.
TEST(PrefetchEngineTest, SamplesLandInSharedMemoryOfAPoolKeptAcrossEngines) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 2}).value();
  std::shared_ptr<Client> client(cluster->NewClient().value());
  std::string shard;
  std::vector<SampleRef> order;
  for (int i = 0; i < 40; ++i) {
    const size_t n = 1 + static_cast<size_t>(i) * 997 % 30000;
    order.push_back({0, shard.size(), n});
    shard += Bytes(i, n);
  }
  shard += std::string(8192, 'z');  // so that the last sample's covering blocks are whole
  ASSERT_TRUE(client->WriteFile("/shard", shard).ok());
  std::reverse(order.begin(), order.end());
  auto expected = [&](const SampleRef& r) { return shard.substr(r.offset, r.length); };

  auto pool = NewSamplePool(client.get(), size_t{1} << 20, true);
  uint64_t before = cluster->shm_reads();
  for (int round = 0; round < 2; ++round) {
    PrefetchOptions o;
    o.budget_bytes = size_t{1} << 20;
    PrefetchEngine engine(client, {"/shard"}, order, o, nullptr, pool);
    ASSERT_TRUE(engine.Start().ok());
    ExpectSamplesInOrder(engine, order, expected);
    // Shared memory in use: the buffers of at most the budget plus a sample, in size classes.
    EXPECT_GT(engine.stats().pool_shared_bytes, 0u);
    EXPECT_LE(engine.stats().pool_shared_bytes, size_t{2} << 20);
    const uint64_t now = cluster->shm_reads();
    EXPECT_GE(now - before, order.size()) << "round " << round;  // every sample, one read each
    before = now;
  }

  // The same reads without shared memory: correct, and none of them placed by the OSS.
  PrefetchOptions o;
  o.shared_memory = false;
  PrefetchEngine engine(client, {"/shard"}, order, o);
  ASSERT_TRUE(engine.Start().ok());
  ExpectSamplesInOrder(engine, order, expected);
  EXPECT_EQ(cluster->shm_reads(), before);
}

}  // namespace
}  // namespace ciuic::loader

namespace ciuic::loader {
namespace {

// A data set read by the engine with resolved sources goes through the node cache, keyed by the
// data version of the resolve: a second epoch (another client of the machine) costs the OSTs
// nothing, and a file rewritten since is read anew once it is resolved again.
TEST(PrefetchEngineTest, ResolvedSourcesReadThroughTheNodeCacheAtTheirDataVersion) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 2}).value();
  char tmpl[] = "/tmp/ciuic-loader-cache-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string cache_dir = tmpl;
  ClientOptions co;
  co.node_cache_dir = cache_dir;
  co.node_cache_min_free_pct = 0;  // a build machine's full disk must not empty it
  std::shared_ptr<Client> writer(cluster->NewClient().value());
  std::vector<std::string> sources;
  std::vector<SampleRef> order;
  for (int i = 0; i < 8; ++i) {
    sources.push_back(fmt::format("/sample{}", i));
    ASSERT_TRUE(writer->WriteFile(sources.back(), Bytes(i, 300000)).ok());
    order.push_back({static_cast<uint32_t>(7 - i), 0, 300000});
  }
  auto epoch = [&](const std::shared_ptr<const ResolvedSources>& resolved, int version) {
    std::shared_ptr<Client> client(cluster->NewClient(co).value());
    ASSERT_TRUE(client->HasNodeCache());
    PrefetchEngine engine(client, sources, order, PrefetchOptions{}, resolved);
    ASSERT_TRUE(engine.Start().ok());
    ExpectSamplesInOrder(engine, order, [&](const SampleRef& ref) {
      return Bytes(static_cast<int>(ref.source) + version, 300000);
    });
  };
  auto resolved = ResolveSources(*writer, sources, 4).value();
  const uint64_t before = cluster->OstReadBytes();
  epoch(resolved, 0);
  const uint64_t after_first = cluster->OstReadBytes();
  EXPECT_GE(after_first - before, 8u * 300000);
  epoch(resolved, 0);
  EXPECT_EQ(cluster->OstReadBytes(), after_first);  // every sample from the cache
  // Rewritten: a new data version, new keys.
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(writer->WriteFile(sources[i], Bytes(i + 50, 300000)).ok());
  epoch(ResolveSources(*writer, sources, 4).value(), 50);
  EXPECT_GT(cluster->OstReadBytes(), after_first);
  std::error_code ec;
  std::filesystem::remove_all(cache_dir, ec);
}

// The next epoch's order follows this one's in the node cache's plan: with a cache of about four
// of eight one-block samples, what the next epoch reads first (samples 0 and 1) stays cached
// through the end of this epoch. Without it they are the blocks needed never again and least
// recently used: among the first to go.
TEST(PrefetchEngineTest, TheNextEpochsOrderKeepsWhatItReadsFirstCached) {
  auto cluster = testing::MiniCluster::Start({.num_oss = 1, .osts_per_oss = 1}).value();
  std::shared_ptr<Client> writer(cluster->NewClient().value());
  constexpr size_t kSample = client::kNodeCacheBlock;
  std::vector<std::string> sources;
  std::vector<SampleRef> order;
  for (int i = 0; i < 8; ++i) {
    sources.push_back(fmt::format("/one-block{}", i));
    ASSERT_TRUE(writer->WriteFile(sources.back(), Bytes(i, kSample)).ok());
    order.push_back({static_cast<uint32_t>(i), 0, kSample});
  }
  auto resolved = ResolveSources(*writer, sources, 4).value();
  auto cached_after_epoch = [&] {
    char tmpl[] = "/tmp/ciuic-loader-plan-XXXXXX";
    EXPECT_NE(::mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    ClientOptions co;
    co.node_cache_dir = dir;
    co.node_cache_min_free_pct = 0;
    co.node_cache_bytes = 4 * (kSample + 1072) + 4096;  // four block files
    std::set<int> cached;
    {
      std::shared_ptr<Client> client(cluster->NewClient(co).value());
      PrefetchOptions po;
      po.max_inflight = 2;
      po.next_order = order;  // the next epoch reads 0, 1, ... again
      PrefetchEngine engine(client, sources, order, po, resolved);
      EXPECT_TRUE(engine.Start().ok());
      ExpectSamplesInOrder(engine, order, [&](const SampleRef& ref) {
        return Bytes(static_cast<int>(ref.source), kSample);
      });
    }
    client::NodeCacheOptions no;
    no.dir = dir;
    no.min_free_ratio = 0;
    auto nc = client::NodeCache::Open(no).value();
    std::vector<uint8_t> buf(kSample);
    for (int i = 0; i < 8; ++i) {
      const ResolvedSource& r = (*resolved)[static_cast<size_t>(i)];
      if (nc->Get(Fid{r.id.seq, r.id.mds, r.id.ver}, r.data_version, 0, buf.data()).ok())
        cached.insert(i);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return cached;
  };
  // (Without it, which blocks stay depends on their mtimes, which may tie: not checked.)
  const std::set<int> cached = cached_after_epoch();
  EXPECT_TRUE(cached.count(0) && cached.count(1)) << ::testing::PrintToString(cached);
  EXPECT_LE(cached.size(), 4u);
}

}  // namespace
}  // namespace ciuic::loader
