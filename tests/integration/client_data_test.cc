// Integration tests of the client's data path on a MiniCluster: striping, sparse files,
// concurrency, truncate, PFL, readahead, write aggregation, async IO, corruption detection.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "common/fid.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

class ClientDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MiniClusterOptions o;
    o.num_oss = 2;
    o.osts_per_oss = 2;
    auto c = MiniCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cluster_ = std::move(*c).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    auto c = cluster_->NewClient();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(*c);
  }

  std::unique_ptr<File> OpenOrDie(const std::string& path,
                                  int flags,
                                  const FileLayout* layout = nullptr) {
    OpenOptions oo;
    oo.layout = layout;
    auto f = client_->Open(path, flags, 0644, oo);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(*f) : nullptr;
  }

  static MiniCluster* cluster_;
  std::unique_ptr<Client> client_;
};

MiniCluster* ClientDataTest::cluster_ = nullptr;

TEST_F(ClientDataTest, StripedRandomWritesMatchALocalReferenceFile) {
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937_64 rng(seed);
  const std::string ref_path = cluster_->dir() + "/ref-striped";
  int ref = ::open(ref_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(ref, 0);
  FileLayout layout = Striped(4, 64 << 10);
  auto f = OpenOrDie("/striped", O_CREAT | O_RDWR | O_EXCL, &layout);
  ASSERT_TRUE(f);
  const uint64_t max_end = 6 << 20;
  uint64_t size = 0;
  for (int i = 0; i < 120; ++i) {
    const uint64_t off = rng() % max_end;
    uint64_t len = 1 + rng() % (i % 4 == 0 ? (1 << 20) : (40 << 10));
    if (i % 5 == 0)
      len = (len + 4095) / 4096 * 4096;
    std::string data = Pattern(len, rng());
    auto n = f->Pwrite(data.data(), len, off);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, len);
    ASSERT_EQ(::pwrite(ref, data.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
    size = std::max(size, off + len);
    if (i % 10 == 0) {  // read back through the open handle too (sees buffered writes)
      const uint64_t roff = rng() % size;
      const uint64_t rlen = 1 + rng() % (300 << 10);
      std::string got(rlen, '\0'), want(rlen, '\0');
      auto r = f->Pread(got.data(), rlen, roff);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ssize_t w = ::pread(ref, want.data(), rlen, static_cast<off_t>(roff));
      ASSERT_EQ(*r, static_cast<size_t>(w));
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), *r)) << "at " << roff;
    }
  }
  ASSERT_TRUE(f->Close().ok());

  auto st = client_->Stat("/striped");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, size);
  auto g = OpenOrDie("/striped", O_RDONLY);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->layout().components.at(0).stripe_count, 4u);
  for (int i = 0; i < 60; ++i) {
    uint64_t off = rng() % size;
    uint64_t len = 1 + rng() % (i % 3 == 0 ? (2 << 20) : (100 << 10));
    if (i % 4 == 0) {
      off &= ~uint64_t{4095};
      len = (len + 4095) & ~uint64_t{4095};
    }
    std::string got(len, '\0'), want(len, '\0');
    auto r = g->Pread(got.data(), len, off);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ssize_t w = ::pread(ref, want.data(), len, static_cast<off_t>(off));
    ASSERT_EQ(*r, static_cast<size_t>(w)) << "off " << off << " len " << len;
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), *r)) << "off " << off << " len " << len;
  }
  auto whole = client_->ReadFile("/striped");
  ASSERT_TRUE(whole.ok());
  std::string want(size, '\0');
  ASSERT_EQ(::pread(ref, want.data(), size, 0), static_cast<ssize_t>(size));
  EXPECT_TRUE(*whole == want);
  ::close(ref);
}

TEST_F(ClientDataTest, SparseFileBeyond4GiBReadsZerosInHoles) {
  FileLayout layout = Striped(2, 1 << 20);
  auto f = OpenOrDie("/sparse", O_CREAT | O_RDWR, &layout);
  ASSERT_TRUE(f);
  const uint64_t far = (5ull << 30) + 12345;
  const uint64_t edge = (4ull << 30) - 100;  // spans the 4 GiB boundary
  std::string a = Pattern(70000, 1), b = Pattern(5000, 2);
  ASSERT_TRUE(f->Pwrite(a.data(), a.size(), far).ok());
  ASSERT_TRUE(f->Pwrite(b.data(), b.size(), edge).ok());
  ASSERT_TRUE(f->Fsync().ok());
  auto st = f->Stat();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, far + a.size());
  std::string got(a.size() + 8192, 'x');
  auto r = f->Pread(got.data(), got.size(), far - 8192);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(*r, got.size());
  EXPECT_EQ(got.substr(0, 8192), std::string(8192, '\0'));
  EXPECT_TRUE(got.substr(8192) == a);
  std::string got_b(b.size(), 'x');
  ASSERT_TRUE(f->Pread(got_b.data(), got_b.size(), edge).ok());
  EXPECT_TRUE(got_b == b);
  std::string hole(1 << 20, 'x');
  ASSERT_TRUE(f->Pread(hole.data(), hole.size(), 1ull << 30).ok());
  EXPECT_EQ(hole, std::string(1 << 20, '\0'));
  // Past EOF: short, then nothing.
  std::string tail(100000, 'x');
  r = f->Pread(tail.data(), tail.size(), far + a.size() - 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 10u);
  r = f->Pread(tail.data(), tail.size(), far + a.size() + 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);
  ASSERT_TRUE(f->Close().ok());
}

TEST_F(ClientDataTest, ConcurrentClientsWriteDisjointRangesAndReadEachOther) {
  FileLayout layout = Striped(4, 64 << 10);
  {
    auto f = OpenOrDie("/shared", O_CREAT | O_WRONLY | O_EXCL, &layout);
    ASSERT_TRUE(f && f->Close().ok());
  }
  constexpr int kWriters = 4;
  constexpr uint64_t kPart = (1 << 20) + 333;  // unaligned so neighbours share blocks
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      auto c = cluster_->NewClient();
      if (!c.ok()) {
        ++failures;
        return;
      }
      auto f = (*c)->Open("/shared", O_WRONLY, 0);
      if (!f.ok()) {
        ++failures;
        return;
      }
      std::string data = Pattern(kPart, 100 + w);
      // Several writes per writer, out of order, some small (aggregated).
      for (uint64_t off = 0; off < kPart;) {
        uint64_t n = std::min<uint64_t>(kPart - off, off % 3 == 0 ? 5000 : 200000);
        if (!(*f)->Pwrite(data.data() + off, n, w * kPart + off).ok())
          ++failures;
        off += n;
      }
      if (!(*f)->Close().ok())
        ++failures;
    });
  }
  for (auto& t : threads)
    t.join();
  ASSERT_EQ(failures.load(), 0);
  for (int r = 0; r < kWriters; ++r) {
    auto c = cluster_->NewClient();
    ASSERT_TRUE(c.ok());
    auto data = (*c)->ReadFile("/shared");
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    ASSERT_EQ(data->size(), kWriters * kPart);
    for (int w = 0; w < kWriters; ++w) {
      ASSERT_TRUE(data->substr(w * kPart, kPart) == Pattern(kPart, 100 + w)) << "part " << w;
    }
  }
}

TEST_F(ClientDataTest, SizeIsRightForAnotherClientAfterFsyncAndAfterClose) {
  auto other = cluster_->NewClient();
  ASSERT_TRUE(other.ok());
  auto f = OpenOrDie("/sized", O_CREAT | O_WRONLY);
  ASSERT_TRUE(f);
  std::string d = Pattern((1 << 20) + 123, 5);
  ASSERT_TRUE(f->Pwrite(d.data(), d.size(), 0).ok());
  ASSERT_TRUE(f->Fsync().ok());
  auto st = (*other)->Stat("/sized");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, d.size());
  ASSERT_TRUE(f->Pwrite("tail", 4, 3 << 20).ok());  // small: sits in the write buffer
  ASSERT_TRUE(f->Close().ok());
  st = (*other)->Stat("/sized");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, (3u << 20) + 4);
  auto data = (*other)->ReadFile("/sized");
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->substr(3 << 20), "tail");
  EXPECT_TRUE(data->substr(0, d.size()) == d);
}

TEST_F(ClientDataTest, TruncateDownThenUpReadsZeros) {
  FileLayout layout = Striped(3, 64 << 10);
  auto f = OpenOrDie("/trunc", O_CREAT | O_RDWR, &layout);
  ASSERT_TRUE(f);
  std::string full(3 << 20, '\xAA');
  ASSERT_TRUE(f->Pwrite(full.data(), full.size(), 0).ok());
  const uint64_t cut = (1 << 20) + 100;
  ASSERT_TRUE(f->Truncate(cut).ok());
  ASSERT_TRUE(f->Truncate(3 << 20).ok());
  std::string got(3 << 20, 'x');
  auto r = f->Pread(got.data(), got.size(), 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(*r, got.size());
  EXPECT_EQ(got.substr(0, cut), std::string(cut, '\xAA'));
  EXPECT_EQ(got.substr(cut), std::string((3 << 20) - cut, '\0'));
  ASSERT_TRUE(f->Close().ok());
  // Path truncate from another client, then reopen.
  auto other = cluster_->NewClient();
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Truncate("/trunc", 10).ok());
  ASSERT_TRUE((*other)->Truncate("/trunc", 70000).ok());
  auto data = client_->ReadFile("/trunc");
  ASSERT_TRUE(data.ok());
  ASSERT_EQ(data->size(), 70000u);
  EXPECT_EQ(data->substr(0, 10), std::string(10, '\xAA'));
  EXPECT_EQ(data->substr(10), std::string(70000 - 10, '\0'));
  // O_TRUNC on open empties the file.
  auto t = OpenOrDie("/trunc", O_WRONLY | O_TRUNC);
  ASSERT_TRUE(t && t->Close().ok());
  auto st = client_->Stat("/trunc");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, 0u);
}

TEST_F(ClientDataTest, WriteSpanningPflComponents) {
  FileLayout layout;
  LayoutComponent a;
  a.id = 1;
  a.start = 0;
  a.end = 1 << 20;
  a.stripe_size = 64 << 10;
  a.stripe_count = 1;
  LayoutComponent b;
  b.id = 2;
  b.start = 1 << 20;
  b.end = 4 << 20;
  b.stripe_size = 64 << 10;
  b.stripe_count = 2;
  LayoutComponent c;
  c.id = 3;
  c.start = 4 << 20;
  c.end = kLayoutEof;
  c.stripe_size = 1 << 20;
  c.stripe_count = 4;
  layout.components = {a, b, c};
  layout.pattern = 1;
  auto f = OpenOrDie("/pfl", O_CREAT | O_RDWR, &layout);
  ASSERT_TRUE(f);
  std::string d = Pattern(3 << 20, 9);
  ASSERT_TRUE(f->Pwrite(d.data(), d.size(), 512 << 10).ok());  // comps 0 and 1
  auto l = f->layout();
  ASSERT_EQ(l.components.size(), 3u);
  EXPECT_TRUE(l.components[0].instantiated());
  EXPECT_TRUE(l.components[1].instantiated());
  std::string e = Pattern(1 << 20, 10);
  ASSERT_TRUE(f->Pwrite(e.data(), e.size(), (4 << 20) - 4096).ok());  // comps 1 and 2
  ASSERT_TRUE(f->Close().ok());
  auto got = client_->GetLayout("/pfl");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->components.size(), 3u);
  for (const auto& comp : got->components)
    EXPECT_TRUE(comp.instantiated()) << got->ToString();
  auto data = client_->ReadFile("/pfl");
  ASSERT_TRUE(data.ok());
  ASSERT_EQ(data->size(), (5u << 20) - 4096);
  EXPECT_EQ(data->substr(0, 512 << 10), std::string(512 << 10, '\0'));
  EXPECT_TRUE(data->substr(512 << 10, d.size()) == d);
  const size_t gap = (4 << 20) - 4096 - (512 << 10) - d.size();
  EXPECT_EQ(data->substr((512 << 10) + d.size(), gap), std::string(gap, '\0'));
  EXPECT_TRUE(data->substr((4 << 20) - 4096) == e);
}

TEST_F(ClientDataTest, SmallSequentialWritesAndReadsThroughBufferAndReadahead) {
  FileLayout layout = Striped(4, 64 << 10);
  auto f = OpenOrDie("/seq", O_CREAT | O_WRONLY, &layout);
  ASSERT_TRUE(f);
  std::string d = Pattern((3 << 20) + 777, 11);
  for (size_t off = 0; off < d.size(); off += 4096) {
    size_t n = std::min<size_t>(4096, d.size() - off);
    auto w = f->Write(d.data() + off, n);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
  }
  ASSERT_TRUE(f->Close().ok());
  auto g = OpenOrDie("/seq", O_RDONLY);
  ASSERT_TRUE(g);
  std::string got;
  char buf[3000];
  for (;;) {
    auto r = g->Read(buf, sizeof(buf));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (*r == 0)
      break;
    got.append(buf, *r);
  }
  EXPECT_EQ(got.size(), d.size());
  EXPECT_TRUE(got == d);
  ASSERT_TRUE(g->Close().ok());
}

TEST_F(ClientDataTest, AppendsFromSeveralHandlesOfOneClientDoNotOverlap) {
  constexpr int kThreads = 4, kRecords = 50, kLen = 1000;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto f = client_->Open("/appended", O_CREAT | O_WRONLY | O_APPEND, 0644);
      if (!f.ok()) {
        ++failures;
        return;
      }
      for (int i = 0; i < kRecords; ++i) {
        std::string rec(kLen, static_cast<char>('a' + t));
        if (!(*f)->Write(rec.data(), rec.size()).ok())
          ++failures;
      }
      if (!(*f)->Close().ok())
        ++failures;
    });
  }
  for (auto& t : threads)
    t.join();
  ASSERT_EQ(failures.load(), 0);
  auto data = client_->ReadFile("/appended");
  ASSERT_TRUE(data.ok());
  ASSERT_EQ(data->size(), static_cast<size_t>(kThreads * kRecords * kLen));
  for (size_t r = 0; r < data->size(); r += kLen) {
    ASSERT_EQ(data->substr(r, kLen), std::string(kLen, (*data)[r])) << "record at " << r;
  }
}

TEST_F(ClientDataTest, HandlesOfOneClientSeeEachOthersBufferedWrites) {
  auto a = OpenOrDie("/two-handles", O_CREAT | O_RDWR);
  auto b = OpenOrDie("/two-handles", O_RDWR);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Pwrite("hello", 5, 100).ok());  // small: stays in a's buffer
  char got[5] = {};
  auto r = b->Pread(got, 5, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(*r, 5u);
  EXPECT_EQ(std::string(got, 5), "hello");
  // A later big write through b over a's newer buffered bytes wins.
  ASSERT_TRUE(a->Pwrite("aaaa", 4, 200).ok());
  std::string big(1 << 20, 'b');
  ASSERT_TRUE(b->Pwrite(big.data(), big.size(), 0).ok());
  ASSERT_TRUE(a->Close().ok());
  ASSERT_TRUE(b->Close().ok());
  auto data = client_->ReadFile("/two-handles");
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, big);
}

TEST_F(ClientDataTest, AsyncReadsAtQueueDepth32) {
  FileLayout layout = Striped(4, 64 << 10);
  std::string d = Pattern(8 << 20, 12);
  {
    auto f = OpenOrDie("/async", O_CREAT | O_WRONLY, &layout);
    ASSERT_TRUE(f);
    std::mutex mu;
    std::condition_variable cv;
    int left = 8;
    Status first;
    for (int i = 0; i < 8; ++i) {  // async writes straight from our buffer
      f->PwriteAsync(d.data() + i * (1 << 20), 1 << 20, i * (1ull << 20), [&](Result<size_t> r) {
        std::lock_guard<std::mutex> lock(mu);
        if (!r.ok() && first.ok())
          first = r.status();
        if (--left == 0)
          cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left == 0; });
    ASSERT_TRUE(first.ok()) << first.ToString();
    lock.unlock();
    ASSERT_TRUE(f->Close().ok());
  }
  auto f = OpenOrDie("/async", O_RDONLY);
  ASSERT_TRUE(f);
  constexpr int kOps = 256, kDepth = 32, kLen = 4096;
  std::vector<std::string> bufs(kDepth, std::string(kLen, '\0'));
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, bad = 0;
  std::vector<int> free_slots;
  for (int s = 0; s < kDepth; ++s)
    free_slots.push_back(s);
  std::mt19937 rng(7);
  for (int op = 0; op < kOps; ++op) {
    const uint64_t off = (rng() % ((8 << 20) / kLen)) * kLen;
    int slot;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_slots.empty(); });  // keep kDepth reads in flight
      slot = free_slots.back();
      free_slots.pop_back();
    }
    f->PreadAsync(bufs[slot].data(), kLen, off, [&, slot, off](Result<size_t> r) {
      const bool good = r.ok() && *r == kLen && bufs[slot] == d.substr(off, kLen);
      std::lock_guard<std::mutex> lock(mu);
      if (!good)
        ++bad;
      ++done;
      free_slots.push_back(slot);
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == kOps; });
  EXPECT_EQ(bad, 0);
}

TEST_F(ClientDataTest, CorruptedByteOnDiskIsReportedAsCorruption) {
  FileLayout layout = Striped(1, 64 << 10);
  std::string d = Pattern(200000, 13);
  {
    auto f = OpenOrDie("/corrupt", O_CREAT | O_WRONLY, &layout);
    ASSERT_TRUE(f);
    ASSERT_TRUE(f->Pwrite(d.data(), d.size(), 0).ok());
    ASSERT_TRUE(f->Fsync().ok());
    ASSERT_TRUE(f->Close().ok());
  }
  auto st = client_->Stat("/corrupt");
  ASSERT_TRUE(st.ok());
  auto l = client_->GetLayout("/corrupt");
  ASSERT_TRUE(l.ok());
  const uint32_t ost = l->components.at(0).osts.at(0);
  ObjectId oid{Fid{st->ino, st->fid_mds, st->fid_ver}, l->components[0].id, 0};
  std::string obj = FindObjectFile(cluster_->OstDir(ost), oid.FileName());
  ASSERT_FALSE(obj.empty()) << "no " << oid.FileName() << " under " << cluster_->OstDir(ost);
  {
    std::fstream io(obj, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(io.good());
    io.seekg(70000);
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    io.seekp(70000);
    io.write(&c, 1);
  }
  auto other = cluster_->NewClient();
  ASSERT_TRUE(other.ok());
  auto data = (*other)->ReadFile("/corrupt");
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kCorruption) << data.status().ToString();
  EXPECT_NE(data.status().message().find(oid.FileName()), std::string::npos)
      << data.status().ToString();
  EXPECT_NE(data.status().message().find("OST " + std::to_string(ost)), std::string::npos)
      << data.status().ToString();
  // Blocks that were not damaged still read.
  auto f = (*other)->Open("/corrupt", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  std::string head(65536, '\0');
  auto r = (*f)->Pread(head.data(), head.size(), 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(head == d.substr(0, 65536));
}

}  // namespace
}  // namespace ciuic::testing
