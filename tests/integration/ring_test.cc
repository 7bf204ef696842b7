// Rings (include/ciuic/ring.h) on a MiniCluster: reads and writes between files and a
// shared-memory region, placed by co-located OSSes or carried over TCP, their completions,
// errors and limits, and the region rules.
#include "ciuic/ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

std::unique_ptr<MiniCluster> StartCluster(MiniClusterOptions o = {}) {
  auto c = MiniCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

std::unique_ptr<Client> Connect(MiniCluster* c, bool shm = true) {
  ClientOptions o;
  o.uid = 0;
  o.gid = 0;
  o.shm_reads = shm;
  auto cl = c->NewClient(o);
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  return cl.ok() ? std::move(*cl) : nullptr;
}

// Submits what is prepared and waits for all of it; completions by user_data.
std::map<uint64_t, int64_t> RunAll(Ring* ring) {
  std::map<uint64_t, int64_t> got;
  auto n = ring->Submit();
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  std::vector<RingCompletion> c(64);
  size_t want = n.ok() ? *n : 0;
  while (got.size() < want) {
    auto w = ring->Wait(c, 1, -1);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok())
      break;
    for (size_t i = 0; i < *w; ++i) {
      EXPECT_TRUE(got.emplace(c[i].user_data, c[i].result).second)
          << "completed twice: " << c[i].user_data;
    }
  }
  return got;
}

// The same writes and reads through a ring, with shared memory (the OSSes take and place the
// bytes in the region: their counters say so) and without (TCP, as from another host): the
// files hold the same bytes, the region receives the same bytes. A write that is not whole
// aligned blocks goes through the OSS's bounce buffer and leaves the region as it was.
TEST(RingTest, ColocatedAndTcpPathsMoveTheSameBytes) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  const std::string data = Pattern(4 << 20, 21);
  FileLayout layout = Striped(4, 1 << 20);
  OpenOptions oo;
  oo.layout = &layout;
  for (bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "tcp");
    auto c = Connect(cluster.get(), shm);
    ASSERT_TRUE(c);
    auto mem = c->NewSharedMemory(16 << 20);
    ASSERT_TRUE(mem.ok()) << mem.status().ToString();
    uint8_t* base = (*mem)->data();
    std::memcpy(base, data.data(), data.size());
    auto ring = Ring::Create(*mem, 64);
    ASSERT_TRUE(ring.ok()) << ring.status().ToString();
    const std::string path = shm ? "/ring-shm" : "/ring-tcp";
    auto w = c->Open(path, O_CREAT | O_RDWR, 0644, oo);
    ASSERT_TRUE(w.ok()) << w.status().ToString();

    const uint64_t writes0 = cluster->shm_writes();
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE((*ring)
                      ->Prepare({.file = w->get(),
                                 .write = true,
                                 .offset = i << 20,
                                 .len = 1 << 20,
                                 .region_offset = i << 20,
                                 .user_data = 100 + i})
                      .ok());
    }
    auto done = RunAll(ring->get());
    ASSERT_EQ(done.size(), 4u);
    for (uint64_t i = 0; i < 4; ++i)
      EXPECT_EQ(done[100 + i], 1 << 20);
    EXPECT_EQ(cluster->shm_writes() - writes0, shm ? 4u : 0u);

    // Not whole blocks: the region must come back untouched.
    const std::string before(reinterpret_cast<char*>(base) + (8 << 20), 12288);
    std::memcpy(base + (8 << 20), data.data() + 777, 5000);
    const std::string region_bytes(reinterpret_cast<char*>(base) + (8 << 20), 12288);
    ASSERT_TRUE((*ring)
                    ->Prepare({.file = w->get(),
                               .write = true,
                               .offset = (1 << 20) + 777,
                               .len = 5000,
                               .region_offset = 8 << 20,
                               .user_data = 7})
                    .ok());
    done = RunAll(ring->get());
    EXPECT_EQ(done[7], 5000);
    EXPECT_EQ(std::memcmp(base + (8 << 20), region_bytes.data(), region_bytes.size()), 0);
    ASSERT_TRUE((*w)->Close().ok());

    // What the file holds, read by a plain client over TCP.
    std::string want = data;
    std::memcpy(want.data() + (1 << 20) + 777, data.data() + 777, 5000);
    auto plain = Connect(cluster.get(), false);
    auto r = plain->Open(path, O_RDONLY, 0);
    ASSERT_TRUE(r.ok());
    std::string got(want.size(), '\0');
    ASSERT_EQ((*r)->Pread(got.data(), got.size(), 0).value_or(0), got.size());
    EXPECT_TRUE(got == want);

    // Read back through the ring into another part of the region.
    auto rf = c->Open(path, O_RDONLY, 0);
    ASSERT_TRUE(rf.ok());
    std::memset(base + (4 << 20), 0xee, 4 << 20);
    const uint64_t reads0 = cluster->shm_reads();
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE((*ring)
                      ->Prepare({.file = rf->get(),
                                 .offset = i << 20,
                                 .len = 1 << 20,
                                 .region_offset = (4 << 20) + (i << 20),
                                 .user_data = i})
                      .ok());
    }
    done = RunAll(ring->get());
    for (uint64_t i = 0; i < 4; ++i)
      EXPECT_EQ(done[i], 1 << 20);
    EXPECT_EQ(std::memcmp(base + (4 << 20), want.data(), want.size()), 0);
    if (shm) {
      EXPECT_GE(cluster->shm_reads() - reads0, 4u);
    } else {
      EXPECT_EQ(cluster->shm_reads(), reads0);
    }
  }
}

// OSSes that restarted no longer know the region: a write taken from it is sent over TCP at
// once (the client registers again for the next ones), and nothing is lost.
TEST(RingTest, WritesFallBackToTcpWhenTheOssForgotTheRegion) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto mem = c->NewSharedMemory(1 << 20);
  ASSERT_TRUE(mem.ok());
  const std::string data = Pattern(1 << 20, 8);
  std::memcpy((*mem)->data(), data.data(), data.size());
  auto ring = Ring::Create(*mem, 8);
  ASSERT_TRUE(ring.ok());
  auto f = c->Open("/again", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(f.ok());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    if (round == 1) {
      ASSERT_TRUE(cluster->RestartOss(0).ok());
    }
    const uint64_t w0 = cluster->shm_writes();
    ASSERT_TRUE((*ring)
                    ->Prepare({.file = f->get(),
                               .write = true,
                               .offset = 0,
                               .len = 1 << 19,
                               .region_offset = uint64_t(round % 2) << 19,
                               .user_data = 1})
                    .ok());
    auto done = RunAll(ring->get());
    EXPECT_EQ(done[1], 1 << 19);
    // The first write after the restart went over TCP; the next is taken from the region.
    EXPECT_EQ(cluster->shm_writes() - w0, round == 1 ? 0u : 1u);
    std::string got(1 << 19, '\0');
    ASSERT_EQ((*f)->Pread(got.data(), got.size(), 0).value_or(0), got.size());
    EXPECT_TRUE(got == data.substr(size_t(round % 2) << 19, 1 << 19));
  }
}

// Every IO completes exactly once with its own result: short at the end of the file, 0 past
// it, -errno for the one that fails while the others succeed.
TEST(RingTest, PartialCompletionsAndPerIoErrors) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  const std::string data = Pattern(10000, 3);
  {
    auto f = c->Open("/small", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto mem = c->NewSharedMemory(1 << 20);
  ASSERT_TRUE(mem.ok());
  auto ring = Ring::Create(*mem, 8);
  ASSERT_TRUE(ring.ok());
  auto f = c->Open("/small", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*ring)->Prepare({.file = f->get(), .offset = 0, .len = 4096, .user_data = 1}).ok());
  ASSERT_TRUE((*ring)
                  ->Prepare({.file = f->get(),
                             .offset = 8192,
                             .len = 8192,
                             .region_offset = 65536,
                             .user_data = 2})
                  .ok());
  ASSERT_TRUE((*ring)
                  ->Prepare({.file = f->get(),
                             .offset = 20000,
                             .len = 4096,
                             .region_offset = 131072,
                             .user_data = 3})
                  .ok());
  // A write to a file opened read-only.
  ASSERT_TRUE((*ring)
                  ->Prepare({.file = f->get(),
                             .write = true,
                             .offset = 0,
                             .len = 4096,
                             .region_offset = 196608,
                             .user_data = 4})
                  .ok());
  EXPECT_EQ((*ring)->prepared(), 4u);
  auto done = RunAll(ring->get());
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done[1], 4096);
  EXPECT_EQ(done[2], 10000 - 8192);
  EXPECT_EQ(done[3], 0);
  EXPECT_LT(done[4], 0);
  EXPECT_EQ(std::memcmp((*mem)->data(), data.data(), 4096), 0);
  EXPECT_EQ(std::memcmp((*mem)->data() + 65536, data.data() + 8192, 10000 - 8192), 0);
  EXPECT_EQ((*ring)->in_flight(), 0u);
  EXPECT_EQ((*ring)->ready(), 0u);
}

// Bad IOs are refused at Prepare with nothing queued; a ring holds at most `entries` IOs until
// they are waited for; a wait that cannot be satisfied is refused; a wait for IOs held up by a
// stopped OSS times out, and they complete once it is back.
TEST(RingTest, LimitsRefusalsAndTimeouts) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  EXPECT_EQ(Ring::Create(nullptr, 4).status().code(), StatusCode::kInvalidArgument);
  auto mem = c->NewSharedMemory(64 << 10);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(Ring::Create(*mem, 0).status().code(), StatusCode::kInvalidArgument);
  auto ring = Ring::Create(*mem, 4);
  ASSERT_TRUE(ring.ok());
  auto f = c->Open("/f", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(f.ok());
  Ring& r = **ring;
  EXPECT_EQ(r.Prepare({.file = f->get(), .len = 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Prepare({.len = 4096}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Prepare({.fixed_file = 3, .len = 4096}).code(), StatusCode::kInvalidArgument);
  Status outside = r.Prepare({.file = f->get(), .len = 8192, .region_offset = 60 << 10});
  EXPECT_EQ(outside.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.message().find("outside"), std::string::npos) << outside.ToString();
  EXPECT_EQ(r.prepared(), 0u);
  std::vector<RingCompletion> out(8);
  EXPECT_EQ(r.Wait(out, 1, 0).status().code(), StatusCode::kInvalidArgument);

  std::memset((*mem)->data(), 'w', 16384);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(r.Prepare({.file = f->get(),
                           .write = true,
                           .offset = i * 4096,
                           .len = 4096,
                           .region_offset = i * 4096,
                           .user_data = i})
                    .ok());
  }
  EXPECT_EQ(r.Prepare({.file = f->get(), .len = 4096}).code(), StatusCode::kBusy);
  auto done = RunAll(&r);
  EXPECT_EQ(done.size(), 4u);
  EXPECT_EQ(r.Wait(out, 9, -1).status().code(), StatusCode::kInvalidArgument);

  // The OSS stops: a read waits (the client retries for ost_retry_ms), the wait times out and
  // leaves it in flight; back, the read completes.
  ASSERT_TRUE((*f)->Close().ok());
  auto rf = c->Open("/f", O_RDONLY, 0);
  ASSERT_TRUE(rf.ok());
  ASSERT_TRUE(cluster->StopOss(0).ok());
  ASSERT_TRUE(r.Prepare({.file = rf->get(), .len = 16384, .user_data = 9}).ok());
  ASSERT_EQ(r.Submit().value_or(0), 1u);
  auto w = r.Wait(out, 1, 50);
  EXPECT_EQ(w.status().code(), StatusCode::kTimedOut) << w.status().ToString();
  EXPECT_EQ(r.in_flight(), 1u);
  ASSERT_TRUE(cluster->RestartOss(0).ok());
  w = r.Wait(out, 1, -1);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(*w, 1u);
  EXPECT_EQ(out[0].user_data, 9u);
  EXPECT_EQ(out[0].result, 16384);
  EXPECT_EQ(std::count((*mem)->data(), (*mem)->data() + 16384, 'w'), 16384);
}

// Many rings at once, one per thread over one region each, on registered files.
TEST(RingTest, ManyRingsOnRegisteredFiles) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  const std::string data = Pattern(1 << 20, 9);
  {
    auto f = c->Open("/shared", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  constexpr int kRings = 8;
  std::vector<std::thread> threads;
  std::vector<int> ok(kRings, 0);
  for (int t = 0; t < kRings; ++t) {
    threads.emplace_back([&, t] {
      auto mem = c->NewSharedMemory(1 << 20);
      auto f = c->Open("/shared", O_RDONLY, 0);
      if (!mem.ok() || !f.ok())
        return;
      auto ring = Ring::Create(*mem, 256);
      if (!ring.ok())
        return;
      auto idx = (*ring)->RegisterFile(std::shared_ptr<File>(std::move(*f)));
      if (!idx.ok())
        return;
      for (uint64_t i = 0; i < 256; ++i) {
        // 256 blocks of 4 KiB in a shuffled order: block (i * 97) % 256.
        const uint64_t b = (i * 97) % 256;
        if (!(*ring)
                 ->Prepare({.fixed_file = *idx,
                            .offset = b * 4096,
                            .len = 4096,
                            .region_offset = b * 4096,
                            .user_data = b})
                 .ok())
          return;
      }
      if ((*ring)->Submit().value_or(0) != 256)
        return;
      // The file is dropped while its reads are in flight: they hold it.
      if (!(*ring)->UnregisterFile(*idx).ok())
        return;
      std::vector<RingCompletion> out(256);
      size_t got = 0;
      std::set<uint64_t> seen;
      while (got < 256) {
        auto w = (*ring)->Wait(out, 1, -1);
        if (!w.ok())
          return;
        for (size_t i = 0; i < *w; ++i) {
          if (out[i].result != 4096 || !seen.insert(out[i].user_data).second)
            return;
        }
        got += *w;
      }
      ok[t] = std::memcmp((*mem)->data(), data.data(), data.size()) == 0 ? 1 : 0;
    });
  }
  for (auto& th : threads)
    th.join();
  for (int t = 0; t < kRings; ++t)
    EXPECT_EQ(ok[t], 1) << "ring " << t;
}

// A region from the caller's memfd must be sealed against resizing; a sealed one works as the
// client's own (co-located reads placed in it).
TEST(RingTest, UnsealedRegionsAreRefused) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  int fd = memfd_create("ring-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  auto refused = c->ImportSharedMemory(fd);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("resized"), std::string::npos)
      << refused.status().ToString();
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);  // growing is still allowed
  EXPECT_EQ(c->ImportSharedMemory(fd).status().code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
  auto mem = c->ImportSharedMemory(fd);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  close(fd);  // the client mapped its own duplicate
  EXPECT_EQ(c->ImportSharedMemory(-1).status().code(), StatusCode::kInvalidArgument);

  const std::string data = Pattern(1 << 20, 4);
  {
    auto f = c->Open("/imported", O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto ring = Ring::Create(*mem, 4);
  ASSERT_TRUE(ring.ok());
  auto f = c->Open("/imported", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  const uint64_t reads0 = cluster->shm_reads();
  ASSERT_TRUE((*ring)->Prepare({.file = f->get(), .len = 1 << 20}).ok());
  auto done = RunAll(ring->get());
  EXPECT_EQ(done[0], 1 << 20);
  EXPECT_EQ(std::memcmp((*mem)->data(), data.data(), data.size()), 0);
  EXPECT_GE(cluster->shm_reads() - reads0, 1u);
}

// After fork() the child's calls on the parent's ring are refused; the parent's go on.
TEST(RingTest, AForkedChildCannotUseTheParentsRing) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto mem = c->NewSharedMemory(64 << 10);
  ASSERT_TRUE(mem.ok());
  auto ring = Ring::Create(*mem, 4);
  ASSERT_TRUE(ring.ok());
  auto f = c->Open("/forked", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(f.ok());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Status s = (*ring)->Prepare({.file = f->get(), .write = true, .len = 4096});
    std::vector<RingCompletion> out(1);
    auto w = (*ring)->Wait(out, 0, 0);
    _exit(s.code() == StatusCode::kNotSupported && w.status().code() == StatusCode::kNotSupported
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::memset((*mem)->data(), 'p', 4096);
  ASSERT_TRUE(
      (*ring)->Prepare({.file = f->get(), .write = true, .len = 4096, .user_data = 5}).ok());
  auto done = RunAll(ring->get());
  EXPECT_EQ(done[5], 4096);
}

}  // namespace
}  // namespace ciuic::testing
