// The node cache through the client (docs/design.md "Node cache"): two clients of one machine
// share it, so the second read of a file costs the OSTs nothing (proven by the OSSes' own read
// counters); a file rewritten elsewhere is never served stale; a corrupt cached block is read
// from the OSTs again; asynchronous reads (the mount's, the loader's) go through it too.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

namespace fs = std::filesystem;

class NodeCacheIt : public ::testing::Test {
 protected:
  void SetUp() override {
    MiniClusterOptions o;
    o.num_oss = 2;
    auto c = MiniCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c);
    char tmpl[] = "/tmp/ciuic-node-cache-it-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_dir_ = tmpl;
    writer_ = NewClient("");
  }
  void TearDown() override {
    writer_.reset();
    cluster_.reset();
    std::error_code ec;
    fs::remove_all(cache_dir_, ec);
  }
  std::unique_ptr<Client> NewClient(const std::string& cache_dir) {
    ClientOptions co;
    co.node_cache_dir = cache_dir;
    // The counts below need every fill kept: a build machine's disk under the default free
    // share (10 %) would empty the cache at each look (NodeCacheTest covers that rule).
    co.node_cache_min_free_pct = 0;
    auto c = cluster_->NewClient(co);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  uint64_t OstReadBytes() { return cluster_->OstReadBytes(); }
  void Write(const std::string& path, const std::string& data) {
    FileLayout l = Striped(2, 1u << 20);
    OpenOptions oo;
    oo.layout = &l;
    auto f = writer_->Open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644, oo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  std::string Read(Client* c, const std::string& path, uint64_t off, size_t len) {
    auto f = c->Open(path, O_RDONLY);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    std::string out(len, '\0');
    auto n = (*f)->Pread(out.data(), len, off);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    out.resize(n.ok() ? *n : 0);
    EXPECT_TRUE((*f)->Close().ok());
    return out;
  }
  // Every block file of the cache.
  std::vector<fs::path> Blocks() {
    std::vector<fs::path> out;
    for (auto& e : fs::recursive_directory_iterator(fs::path(cache_dir_) / "blocks"))
      if (e.is_regular_file())
        out.push_back(e.path());
    return out;
  }

  std::unique_ptr<MiniCluster> cluster_;
  std::string cache_dir_;
  std::unique_ptr<Client> writer_;
};

TEST_F(NodeCacheIt, TheSecondClientOfAMachineReadsFromTheCacheNotTheOsts) {
  const std::string data = Pattern((5u << 20) + 1000, 1);
  Write("/f", data);
  auto a = NewClient(cache_dir_);
  auto b = NewClient(cache_dir_);
  const uint64_t before = OstReadBytes();
  EXPECT_EQ(Read(a.get(), "/f", 0, data.size()), data);
  const uint64_t after_a = OstReadBytes();
  EXPECT_GE(after_a - before, data.size());
  EXPECT_EQ(Blocks().size(), 6u);  // five whole blocks and the 1000-byte tail
  // The other client: every byte from the cache, whole and in parts.
  EXPECT_EQ(Read(b.get(), "/f", 0, data.size()), data);
  EXPECT_EQ(Read(b.get(), "/f", (3u << 19), 5000), data.substr(3u << 19, 5000));
  EXPECT_EQ(Read(b.get(), "/f", data.size() - 10, 100), data.substr(data.size() - 10));
  EXPECT_EQ(OstReadBytes(), after_a);
  // Opting out reads the OSTs.
  OpenOptions oo;
  oo.no_node_cache = true;
  auto f = b->Open("/f", O_RDONLY, 0, oo);
  ASSERT_TRUE(f.ok());
  std::string got(4096, '\0');
  ASSERT_TRUE((*f)->Pread(got.data(), got.size(), 0).ok());
  EXPECT_GT(OstReadBytes(), after_a);
}

TEST_F(NodeCacheIt, AFileRewrittenElsewhereIsNeverServedStale) {
  const std::string v1 = Pattern(3u << 20, 2), v2 = Pattern(3u << 20, 3);
  Write("/g", v1);
  auto a = NewClient(cache_dir_);
  EXPECT_EQ(Read(a.get(), "/g", 0, v1.size()), v1);
  // Another client (another machine: no cache) rewrites it; the data version moves at close.
  Write("/g", v2);
  const uint64_t before = OstReadBytes();
  EXPECT_EQ(Read(a.get(), "/g", 0, v2.size()), v2);
  EXPECT_GE(OstReadBytes() - before, v2.size());
  // Both versions' blocks are there; the new ones serve the next reader.
  auto b = NewClient(cache_dir_);
  const uint64_t mid = OstReadBytes();
  EXPECT_EQ(Read(b.get(), "/g", 0, v2.size()), v2);
  EXPECT_EQ(OstReadBytes(), mid);
}

TEST_F(NodeCacheIt, ACorruptCachedBlockIsReadFromTheOstsAgain) {
  const std::string data = Pattern(1u << 20, 4);
  Write("/h", data);
  auto a = NewClient(cache_dir_);
  EXPECT_EQ(Read(a.get(), "/h", 0, data.size()), data);
  ASSERT_EQ(Blocks().size(), 1u);
  {
    std::fstream f(Blocks()[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(Blocks()[0]) - 7));
    f.put('\x5a');
  }
  const uint64_t before = OstReadBytes();
  EXPECT_EQ(Read(a.get(), "/h", 0, data.size()), data);
  EXPECT_GE(OstReadBytes() - before, data.size());
  // Filled again, good: the next read is a hit.
  const uint64_t mid = OstReadBytes();
  EXPECT_EQ(Read(a.get(), "/h", 0, data.size()), data);
  EXPECT_EQ(OstReadBytes(), mid);
}

TEST_F(NodeCacheIt, AsynchronousReadsGoThroughTheCache) {
  const std::string data = Pattern((2u << 20) + 4096, 5);
  Write("/k", data);
  auto a = NewClient(cache_dir_);
  auto read_async = [&](Client* c) {
    auto f = c->Open("/k", O_RDONLY);
    EXPECT_TRUE(f.ok());
    std::string out(data.size(), '\0');
    std::promise<Result<size_t>> done;
    (*f)->PreadAsync(out.data(), out.size(), 0,
                     [&done](Result<size_t> r) { done.set_value(std::move(r)); });
    Result<size_t> r = done.get_future().get();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE((*f)->Close().ok());
    return out;
  };
  EXPECT_EQ(read_async(a.get()), data);
  const uint64_t mid = OstReadBytes();
  auto b = NewClient(cache_dir_);
  EXPECT_EQ(read_async(b.get()), data);
  EXPECT_EQ(OstReadBytes(), mid);
}

TEST_F(NodeCacheIt, AFullCacheDeviceNeverFailsARead) {
  // A 3 MiB file system as the cache device (tmpfs: needs root, as the watermark tests do).
  const std::string dev = cache_dir_ + "/small";
  fs::create_directories(dev);
  if (::mount("tmpfs", dev.c_str(), "tmpfs", 0, "size=3m") != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (not root?)";
  struct Unmount {
    std::string d;
    ~Unmount() { ::umount2(d.c_str(), MNT_DETACH); }
  } unmount{dev};
  const std::string data = Pattern(8u << 20, 7);
  Write("/full", data);
  {
    // Two clients at once, each filling what the device takes and then missing the rest.
    auto a = NewClient(dev);
    auto b = NewClient(dev);
    std::string got_a, got_b;
    std::thread ta([&] { got_a = Read(a.get(), "/full", 0, data.size()); });
    std::thread tb([&] { got_b = Read(b.get(), "/full", 0, data.size()); });
    ta.join();
    tb.join();
    EXPECT_EQ(got_a, data);
    EXPECT_EQ(got_b, data);
    // And again, with the device full of the first blocks: hits and misses mixed.
    EXPECT_EQ(Read(a.get(), "/full", (1u << 20) + 77, 5u << 20),
              data.substr((1u << 20) + 77, 5u << 20));
  }
  // The device was kept from filling up: the cache evicts down to its free ratio.
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(dev.c_str(), &vfs), 0);
  EXPECT_GT(vfs.f_bavail, 0u);
}

TEST_F(NodeCacheIt, ACacheDirectoryThatCannotBeMadeLeavesTheClientWithoutOne) {
  const std::string data = Pattern(100000, 6);
  Write("/m", data);
  auto a = NewClient("/proc/ciuic-no-cache-here");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Read(a.get(), "/m", 0, data.size()), data);
}

// Write-through: a writer with the node cache caches what it wrote whole when its close is the
// file's only change since its open; readers of the machine then read nothing from the OSTs.
TEST_F(NodeCacheIt, WhatAWriterWroteWholeIsCachedAtItsClose) {
  auto w = NewClient(cache_dir_);
  const std::string data = Pattern((3u << 20) + 777, 20);
  {
    FileLayout l = Striped(2, 1u << 20);
    OpenOptions oo;
    oo.layout = &l;
    auto f = w->Open("/wt", O_CREAT | O_WRONLY | O_TRUNC, 0644, oo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    // In pieces that cross blocks, one rewritten, and one asynchronous.
    ASSERT_TRUE((*f)->Pwrite(data.data(), 1500000, 0).ok());
    ASSERT_TRUE((*f)->Pwrite(data.data() + 1500000, data.size() - 1500000, 1500000).ok());
    ASSERT_TRUE((*f)->Pwrite(data.data() + 4096, 8192, 4096).ok());
    std::promise<Result<size_t>> done;
    (*f)->PwriteAsync(data.data() + (2u << 20), 100, 2u << 20,
                      [&done](Result<size_t> r) { done.set_value(std::move(r)); });
    ASSERT_TRUE(done.get_future().get().ok());
    ASSERT_TRUE((*f)->Fsync().ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  EXPECT_EQ(Blocks().size(), 4u);  // three whole blocks and the 777-byte tail
  auto r = NewClient(cache_dir_);
  const uint64_t before = OstReadBytes();
  EXPECT_EQ(Read(r.get(), "/wt", 0, data.size()), data);
  EXPECT_EQ(Read(w.get(), "/wt", 1u << 20, 5000), data.substr(1u << 20, 5000));
  EXPECT_EQ(OstReadBytes(), before);
  // A rewrite of part of a block caches only the blocks it wrote whole, under the new version.
  std::string v2 = data;
  const std::string patch = Pattern((1u << 20) + 10, 21);
  v2.replace(1u << 20, patch.size(), patch);
  {
    auto f = w->Open("/wt", O_WRONLY);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(patch.data(), patch.size(), 1u << 20).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  const uint64_t mid = OstReadBytes();
  EXPECT_EQ(Read(r.get(), "/wt", 0, v2.size()), v2);
  // Blocks 0, 2 and 3 came from the OSTs; block 1 from the cache.
  EXPECT_EQ(OstReadBytes() - mid, v2.size() - (1u << 20));
}

TEST_F(NodeCacheIt, AWriterNotAloneCachesNothing) {
  auto a = NewClient(cache_dir_);
  const std::string base = Pattern(2u << 20, 22);
  Write("/two", base);
  auto open_w = [](Client* c) {
    auto f = c->Open("/two", O_WRONLY);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return std::move(*f);
  };
  auto write = [](File* f, const std::string& s, uint64_t off) {
    ASSERT_TRUE(f->Pwrite(s.data(), s.size(), off).ok());
  };
  // Another writer (another machine) writes into a's block 0 and closes first: a's close is
  // not the only change since its open.
  std::string want = base;
  const std::string mine = Pattern(1u << 20, 23), theirs = Pattern(4096, 24);
  {
    auto fa = open_w(a.get());
    auto fb = open_w(writer_.get());
    write(fa.get(), mine, 0);
    ASSERT_TRUE(fa->Fsync().ok());
    write(fb.get(), theirs, 8192);
    ASSERT_TRUE(fb->Close().ok());
    ASSERT_TRUE(fa->Close().ok());
    want.replace(0, mine.size(), mine);
    want.replace(8192, theirs.size(), theirs);
  }
  EXPECT_TRUE(Blocks().empty());
  // Another open still held at a's close (a reader, or a writer that may still write): the
  // same.
  {
    auto fa = open_w(a.get());
    auto fb = writer_->Open("/two", O_RDONLY);
    ASSERT_TRUE(fb.ok());
    write(fa.get(), mine, 1u << 20);
    ASSERT_TRUE(fa->Close().ok());
    ASSERT_TRUE((*fb)->Close().ok());
    want.replace(1u << 20, mine.size(), mine);
  }
  EXPECT_TRUE(Blocks().empty());
  // A truncate through the handle drops what it staged.
  {
    auto fa = open_w(a.get());
    write(fa.get(), mine, 0);
    ASSERT_TRUE(fa->Truncate(want.size()).ok());
    ASSERT_TRUE(fa->Close().ok());
    want.replace(0, mine.size(), mine);
  }
  EXPECT_TRUE(Blocks().empty());
  auto r = NewClient(cache_dir_);
  EXPECT_EQ(Read(r.get(), "/two", 0, want.size()), want);
}

// Opting a directory out: files created in it are neither filled into the cache when read nor
// written through, on any client; including a file again brings it back.
TEST_F(NodeCacheIt, AnExcludedDirectoryIsReadAndWrittenPastTheCache) {
  ASSERT_TRUE(writer_->Mkdir("/ex", 0755).ok());
  ASSERT_TRUE(writer_->SetNodeCacheExcluded("/ex", true).ok());
  const std::string data = Pattern((2u << 20) + 5, 30);
  Write("/ex/f", data);
  auto st = writer_->Stat("/ex/f");
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->no_node_cache);
  auto a = NewClient(cache_dir_);
  for (int i = 0; i < 2; ++i) {
    const uint64_t before = OstReadBytes();
    EXPECT_EQ(Read(a.get(), "/ex/f", 0, data.size()), data);
    EXPECT_GE(OstReadBytes() - before, data.size());
  }
  {
    auto f = a->Open("/ex/g", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  EXPECT_TRUE(Blocks().empty());
  // Included again (a client that has not seen the file yet reads it through the cache).
  ASSERT_TRUE(writer_->SetNodeCacheExcluded("/ex/f", false).ok());
  auto b = NewClient(cache_dir_);
  EXPECT_EQ(Read(b.get(), "/ex/f", 0, data.size()), data);
  EXPECT_EQ(Blocks().size(), 3u);
}

}  // namespace
}  // namespace ciuic::testing
