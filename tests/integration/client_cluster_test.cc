// Integration tests of the client's namespace operations and of failures on a MiniCluster:
// big directories, renames, unlink of open files, OSS and MDS restarts, durability of fsync.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ciuic/client.h"
#include "client/client_core.h"
#include "common/fault.h"
#include "net/pb_convert.h"
#include "testing/mini_cluster.h"
#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

std::unique_ptr<MiniCluster> StartCluster(MiniClusterOptions o = {}) {
  auto c = MiniCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

std::unique_ptr<Client> Connect(MiniCluster* c, int ost_retry_ms = 30000) {
  ClientOptions o;
  o.uid = 0;
  o.gid = 0;
  o.ost_retry_ms = ost_retry_ms;
  auto cl = c->NewClient(o);
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  return cl.ok() ? std::move(*cl) : nullptr;
}

TEST(ClientNamespaceTest, BadPathsAreRejectedWithThePath) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1, .mds_in_memory = true});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  auto st = c->Stat("relative/path");
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("relative/path"), std::string::npos);
  EXPECT_EQ(c->Mkdir("/a//b").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Mkdir("/" + std::string(256, 'n')).code(), StatusCode::kNameTooLong);
  auto missing = c->Stat("/no/such/file");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/no/such/file"), std::string::npos)
      << missing.status().ToString();
}

TEST(ClientNamespaceTest, ReadDirOf100000Entries) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1, .mds_in_memory = true});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Mkdir("/big").ok());
  constexpr int kEntries = 100000;
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kEntries; i += kThreads) {
        if (!c->Mknod("/big/f" + std::to_string(i), S_IFREG | 0644).ok())
          ++failures;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  ASSERT_EQ(failures.load(), 0);
  auto entries = c->ReadDir("/big");
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), static_cast<size_t>(kEntries));
  std::set<std::string> names;
  for (const auto& e : *entries) {
    names.insert(e.name);
    EXPECT_EQ(e.type, static_cast<uint32_t>(S_IFREG));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kEntries));
  EXPECT_TRUE(names.count("f0") && names.count("f99999"));
  // Paging with plus returns attributes and resumes at the cookie.
  auto page = c->ReadDirPage("/big", 0, 1000, true);
  ASSERT_TRUE(page.ok());
  ASSERT_FALSE(page->entries.empty());
  EXPECT_LE(page->entries.size(), 1000u);  // "." and ".." take two of the first page's slots
  for (const auto& e : page->entries)
    EXPECT_TRUE(e.name != "." && e.name != "..");
  EXPECT_TRUE(page->entries[0].has_attr);
  EXPECT_FALSE(page->eof);
  auto next = c->ReadDirPage("/big", page->next_cookie, 1000);
  ASSERT_TRUE(next.ok());
  ASSERT_FALSE(next->entries.empty());
  EXPECT_EQ(names.count(next->entries[0].name), 1u);
  EXPECT_NE(next->entries[0].name, page->entries.back().name);
}

TEST(ClientNamespaceTest, RenameEdgeCases) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1, .mds_in_memory = true});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->MkdirAll("/r/d1/sub").ok());
  ASSERT_TRUE(c->Mkdir("/r/d2").ok());
  ASSERT_TRUE(c->Mkdir("/r/empty").ok());
  ASSERT_TRUE(c->WriteFile("/r/a", "A").ok());
  ASSERT_TRUE(c->WriteFile("/r/b", "B").ok());
  // File over file replaces it.
  ASSERT_TRUE(c->Rename("/r/a", "/r/b").ok());
  EXPECT_EQ(c->Stat("/r/a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c->ReadFile("/r/b").value_or(""), "A");
  // Rename onto itself is a no-op.
  EXPECT_TRUE(c->Rename("/r/b", "/r/b").ok());
  // Directory over an empty directory replaces it; over a non-empty one fails.
  ASSERT_TRUE(c->WriteFile("/r/d2/x", "x").ok());
  EXPECT_EQ(c->Rename("/r/d1", "/r/d2").code(), StatusCode::kNotEmpty);
  ASSERT_TRUE(c->Rename("/r/d1", "/r/empty").ok());
  auto sub = c->Stat("/r/empty/sub");
  EXPECT_TRUE(sub.ok() && sub->is_dir());
  // Kinds must match.
  EXPECT_EQ(c->Rename("/r/b", "/r/d2").code(), StatusCode::kIsADirectory);
  EXPECT_EQ(c->Rename("/r/d2", "/r/b").code(), StatusCode::kNotADirectory);
  // A directory cannot move under itself.
  EXPECT_EQ(c->Rename("/r/empty", "/r/empty/sub/inner").code(), StatusCode::kInvalidArgument);
  // Missing source.
  EXPECT_EQ(c->Rename("/r/nope", "/r/other").code(), StatusCode::kNotFound);
  // RENAME_NOREPLACE and RENAME_EXCHANGE.
  ASSERT_TRUE(c->WriteFile("/r/c", "C").ok());
  EXPECT_EQ(c->Rename("/r/b", "/r/c", 1).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(c->Rename("/r/b", "/r/c", 2).ok());
  EXPECT_EQ(c->ReadFile("/r/b").value_or(""), "C");
  EXPECT_EQ(c->ReadFile("/r/c").value_or(""), "A");
  // Renaming a directory moves its subtree: the client's cached parent paths follow.
  ASSERT_TRUE(c->WriteFile("/r/empty/sub/f", "deep").ok());
  ASSERT_TRUE(c->Rename("/r/empty", "/r/moved").ok());
  EXPECT_EQ(c->ReadFile("/r/moved/sub/f").value_or(""), "deep");
  EXPECT_EQ(c->WriteFile("/r/empty/sub/g", "g").code(), StatusCode::kNotFound);
  ASSERT_TRUE(c->WriteFile("/r/moved/sub/g", "g").ok());
}

TEST(ClientNamespaceTest, LinksXattrsModesAndOpenedUnlinkedFile) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 2});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  std::string data = Pattern(300000, 3);
  ASSERT_TRUE(c->WriteFile("/f", data).ok());
  ASSERT_TRUE(c->Symlink("/f", "/l").ok());
  EXPECT_EQ(c->Readlink("/l").value_or(""), "/f");
  EXPECT_TRUE(c->Lstat("/l")->is_symlink());
  EXPECT_EQ(c->Stat("/l")->size, data.size());
  ASSERT_TRUE(c->Link("/f", "/hard").ok());
  EXPECT_EQ(c->Stat("/f")->nlink, 2u);
  ASSERT_TRUE(c->SetXattr("/f", "user.k", "v").ok());
  EXPECT_EQ(c->GetXattr("/f", "user.k").value_or(""), "v");
  auto names = c->ListXattr("/f");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"user.k"});
  ASSERT_TRUE(c->RemoveXattr("/f", "user.k").ok());
  EXPECT_EQ(c->GetXattr("/f", "user.k").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(c->Chmod("/f", 0600).ok());
  EXPECT_EQ(c->Stat("/f")->mode & 07777, 0600u);

  // Unlink while open: the handle keeps reading until it is closed.
  auto f = c->Open("/f", O_RDONLY);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(c->Unlink("/f").ok());
  ASSERT_TRUE(c->Unlink("/hard").ok());
  EXPECT_EQ(c->Stat("/f").status().code(), StatusCode::kNotFound);
  auto other = Connect(cluster.get());
  ASSERT_TRUE(other);
  EXPECT_EQ(other->Stat("/hard").status().code(), StatusCode::kNotFound);
  std::string got(data.size(), '\0');
  auto r = (*f)->Pread(got.data(), got.size(), 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, data.size());
  EXPECT_TRUE(got == data);
  EXPECT_TRUE((*f)->Close().ok());
}

TEST(ClientFailureTest, StoppedOssFailsWithinTheRetryBoundNamingTheOstAndRecovers) {
  auto cluster = StartCluster({.num_oss = 2, .osts_per_oss = 1});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get(), /*ost_retry_ms=*/1500);
  ASSERT_TRUE(c);
  FileLayout layout = Striped(2, 64 << 10);
  OpenOptions oo;
  oo.layout = &layout;
  std::string data = Pattern(1 << 20, 4);
  {
    auto f = c->Open("/ha", O_CREAT | O_WRONLY, 0644, oo);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Fsync().ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  ASSERT_TRUE(cluster->StopOss(1).ok());
  auto start = std::chrono::steady_clock::now();
  auto r = c->ReadFile("/ha");
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("OST 1"), std::string::npos) << r.status().ToString();
  // It gave up (did not hang); the bound is 1.5 s, this only catches a hang.
  EXPECT_LT(elapsed, std::chrono::seconds(30));
  ASSERT_TRUE(cluster->RestartOss(1).ok());
  auto again = c->ReadFile("/ha");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again == data);
  // IO started while the OSS is down completes once it is back within the bound.
  auto patient = Connect(cluster.get(), /*ost_retry_ms=*/60000);
  ASSERT_TRUE(patient);
  auto f = patient->Open("/ha", O_WRONLY, 0);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(cluster->StopOss(1).ok());
  std::string fresh = Pattern(1 << 20, 5);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
  (*f)->PwriteAsync(fresh.data(), fresh.size(), 0, [&](Result<size_t> r) {
    std::lock_guard<std::mutex> lock(mu);
    result = r.ok() ? Status::OK() : r.status();
    done = true;
    cv.notify_all();
  });
  ASSERT_TRUE(cluster->RestartOss(1).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  EXPECT_TRUE(result.ok()) << result.ToString();
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE(c->ReadFile("/ha").value_or("") == fresh);
}

// Blocking work on the client's pool (a reader's restore, an instantiation) waits for OST
// calls. Those calls must never need a pool thread themselves: a client with no OSS
// connection yet, whose pool threads all wait on reads, still connects and completes them.
// (Connects queued behind the waiters on one pool once deadlocked a restore whose OSSes
// restarted.)
TEST(ClientFailureTest, PoolThreadsWaitingOnOstCallsDoNotStarveTheirConnects) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  const FileLayout layout = Striped(4, 64 << 10);
  OpenOptions oo;
  oo.layout = &layout;
  const std::string data = Pattern(256 << 10, 9);
  {
    auto f = c->Open("/p", O_CREAT | O_WRONLY, 0644, oo);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto st = c->Stat("/p");
  ASSERT_TRUE(st.ok());
  ClientOptions o;
  o.uid = 0;
  o.gid = 0;
  o.cluster_file = cluster->cluster_file();
  auto core = client::ClientCore::Create(o);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  // More waiters than pool threads, each reading every stripe object from every OST.
  constexpr int kWaiters = 8;
  std::vector<std::promise<Status>> results(kWaiters);
  std::vector<std::future<Status>> got;
  for (int w = 0; w < kWaiters; ++w) {
    got.push_back(results[w].get_future());
    ASSERT_TRUE((*core)->pool().TrySubmit([&, w] {
      std::vector<std::shared_ptr<client::OstCall>> calls;
      for (uint32_t s = 0; s < 4; ++s) {
        for (uint32_t ost = 0; ost < static_cast<uint32_t>(cluster->num_osts()); ++ost) {
          auto call = std::make_shared<client::OstCall>();
          call->type = net::MsgType::kRead;
          call->ost = ost;
          auto req = std::make_unique<pb::ReadReq>();
          req->set_ost(ost);
          net::ToPb(Fid{st->ino, st->fid_mds, st->fid_ver}, req->mutable_obj()->mutable_fid());
          req->mutable_obj()->set_comp(1);
          req->mutable_obj()->set_stripe(s);
          req->set_length(64 << 10);
          call->req = std::move(req);
          calls.push_back(std::move(call));
        }
      }
      results[w].set_value((*core)->OstCallAll(std::move(calls)));
    }));
  }
  for (int w = 0; w < kWaiters; ++w) {
    // Generous: this catches a deadlock, not slowness.
    ASSERT_EQ(got[w].wait_for(std::chrono::seconds(120)), std::future_status::ready) << w;
    Status r = got[w].get();
    EXPECT_TRUE(r.ok()) << r.ToString();
  }
  (*core)->Shutdown();
}

TEST(ClientFailureTest, MdsRestartKeepsNamespaceAndFsyncedDataSurvivesRestarts) {
  auto cluster = StartCluster({.num_oss = 2, .osts_per_oss = 2});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->MkdirAll("/keep/deep/dir").ok());
  FileLayout layout = Striped(4, 64 << 10);
  OpenOptions oo;
  oo.layout = &layout;
  std::string data = Pattern((2 << 20) + 4321, 6);
  {
    auto f = c->Open("/keep/deep/data", O_CREAT | O_WRONLY, 0644, oo);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Fsync().ok());
    // Crash-like: every server goes away with the file still open, then comes back.
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(cluster->StopOss(i).ok());
    ASSERT_TRUE(cluster->RestartMds().ok());
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(cluster->RestartOss(i).ok());
    ASSERT_TRUE(cluster->WaitForOsts(4).ok());
    (*f)->Close().IgnoreError();  // the session may have been reset; the data was fsynced
  }
  // The same client reconnects; a new client sees the same namespace.
  auto st = c->Stat("/keep/deep/dir");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->is_dir());
  auto c2 = Connect(cluster.get());
  ASSERT_TRUE(c2);
  auto got = c2->ReadFile("/keep/deep/data");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), data.size());
  EXPECT_TRUE(*got == data);
  // And the MDS alone restarting while a client is idle is invisible to it.
  ASSERT_TRUE(cluster->RestartMds().ok());
  ASSERT_TRUE(c->WriteFile("/keep/after", "after restart").ok());
  EXPECT_EQ(c2->ReadFile("/keep/after").value_or(""), "after restart");
}

// A close that found the MDS out of reach for the whole retry window is sent again once the
// MDS answers: the open does not stay for the session's life, and a close that wrote still
// counts as a write (its data version moves).
TEST(ClientFailureTest, CloseLostInAnMdsOutageIsSentWhenItAnswersAgain) {
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get(), /*ost_retry_ms=*/300);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->WriteFile("/f", "one").ok());
  auto before = c->Stat("/f");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  auto f = c->Open("/f", O_WRONLY, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Pwrite("two", 3, 0).ok());
  ASSERT_TRUE((*f)->Fsync().ok());
  ASSERT_TRUE(cluster->StopMds().ok());
  EXPECT_FALSE((*f)->Close().ok());  // the MDS is gone for longer than the retry window
  ASSERT_TRUE(cluster->RestartMds().ok());
  // The next session renewal (every third of the lease) delivers it.
  uint64_t version = before->data_version;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (version == before->data_version && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    auto other = Connect(cluster.get());
    ASSERT_TRUE(other);
    auto st = other->Stat("/f");
    if (st.ok())
      version = st->data_version;
  }
  EXPECT_EQ(version, before->data_version + 1);
  EXPECT_EQ(c->ReadFile("/f").value_or(""), "two");
}

TEST(ClientFailureTest, ClientOpensANewSessionWhenTheMdsForgotIt) {
  // An in-memory MDS comes back empty: it knows neither the namespace nor our session.
  auto cluster = StartCluster({.num_oss = 1, .osts_per_oss = 1, .mds_in_memory = true});
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Mkdir("/before").ok());
  ASSERT_TRUE(cluster->RestartMds().ok());
  ASSERT_TRUE(cluster->WaitForOsts(1).ok());
  EXPECT_EQ(c->Stat("/before").status().code(), StatusCode::kNotFound);
  Status st = c->Mkdir("/after");  // a mutation: needs a session the MDS knows
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(c->WriteFile("/after/f", "data").ok());
  EXPECT_EQ(c->ReadFile("/after/f").value_or(""), "data");
}

}  // namespace
}  // namespace ciuic::testing

namespace ciuic::testing {
namespace {

// Reads into a client's SharedMemory from OSSes on this host are placed there by the OSS (its
// counter says so) and are byte for byte what was written, striped over all OSTs; an OSS that
// restarted (and forgot the region) is read over TCP at once and registered with again after.
TEST(ClientSharedMemoryTest, ColocatedOssesPlaceReadsAndRestartsFallBackToTcp) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  const std::string data = Pattern((3 << 20) + 5000, 11);
  FileLayout layout = Striped(4, 1 << 20);
  OpenOptions oo;
  oo.layout = &layout;
  {
    auto f = c->Open("/shm", O_CREAT | O_WRONLY, 0644, oo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Pwrite(data.data(), data.size(), 0).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto mem = c->NewSharedMemory(8 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  uint8_t* base = (*mem)->data();
  auto f = c->Open("/shm", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  auto read_and_check = [&](size_t at, uint64_t off, size_t len) {
    std::memset(base + at, 0xee, len);
    auto n = (*f)->Pread(base + at, len, off);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, std::min<size_t>(len, data.size() - off));
    EXPECT_EQ(std::memcmp(base + at, data.data() + off, *n), 0) << "at " << at << " off " << off;
  };
  uint64_t before = cluster->shm_reads();
  read_and_check(4096, 0, 3 << 20);  // aligned: three stripes on three OSTs
  EXPECT_GE(cluster->shm_reads() - before, 3u);
  before = cluster->shm_reads();
  read_and_check(100, 777, 100000);        // unaligned: head and tail over TCP, the middle placed
  read_and_check(1 << 20, 3 << 20, 8192);  // past the end: the short tail
  EXPECT_GE(cluster->shm_reads(), before);

  // Another client with shared-memory reads off: nothing placed by the OSSes, same bytes.
  ClientOptions off;
  off.shm_reads = false;
  auto plain = cluster->NewClient(off);
  ASSERT_TRUE(plain.ok());
  auto pmem = (*plain)->NewSharedMemory(4 << 20);
  ASSERT_TRUE(pmem.ok());
  auto pf = (*plain)->Open("/shm", O_RDONLY, 0);
  ASSERT_TRUE(pf.ok());
  before = cluster->shm_reads();
  ASSERT_EQ((*pf)->Pread((*pmem)->data(), 2 << 20, 1 << 20).value_or(0), size_t{2} << 20);
  EXPECT_EQ(std::memcmp((*pmem)->data(), data.data() + (1 << 20), 2 << 20), 0);
  EXPECT_EQ(cluster->shm_reads(), before);

  // Both OSSes restart: they no longer know the region. Reads fall back to TCP at once, then
  // register again.
  ASSERT_TRUE(cluster->RestartOss(0).ok());
  ASSERT_TRUE(cluster->RestartOss(1).ok());
  ASSERT_EQ(cluster->shm_reads(), 0u);
  read_and_check(0, 0, 3 << 20);
  read_and_check(0, 0, 3 << 20);
  EXPECT_GE(cluster->shm_reads(), 3u);
}

// A PreadAsync that ends at the end of the file inside a block, with room in the buffer for the
// whole block, is one request placed in shared memory: the bytes are the file's, what follows
// them up to the block's end is zeros (even where the object still holds bytes past a
// truncation), and the count is the file's.
TEST(ClientSharedMemoryTest, AsyncReadAtEndOfFileReadsWholeBlocksIntoSharedMemory) {
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  auto c = Connect(cluster.get());
  ASSERT_TRUE(c);
  const std::string data = Pattern(73728, 5);
  for (const char* path : {"/sample", "/truncated"}) {
    auto f = c->Open(path, O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const size_t len = std::string(path) == "/sample" ? 70001 : data.size();
    ASSERT_TRUE((*f)->Pwrite(data.data(), len, 0).ok());
    if (std::string(path) == "/truncated") {
      ASSERT_TRUE((*f)->Truncate(70001).ok());
    }
    ASSERT_TRUE((*f)->Close().ok());
  }
  auto mem = c->NewSharedMemory(1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  uint8_t* buf = (*mem)->data();
  for (const char* path : {"/sample", "/truncated"}) {
    SCOPED_TRACE(path);
    auto f = c->Open(path, O_RDONLY, 0);
    ASSERT_TRUE(f.ok());
    std::memset(buf, 0xee, 1 << 20);
    const uint64_t before = cluster->shm_reads();
    std::promise<Result<size_t>> done;
    (*f)->PreadAsync(buf, 1 << 20, 0, [&](Result<size_t> r) { done.set_value(std::move(r)); });
    Result<size_t> n = done.get_future().get();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 70001u);
    EXPECT_EQ(std::memcmp(buf, data.data(), 70001), 0);
    EXPECT_EQ(std::count(buf + 70001, buf + 73728, 0), 73728 - 70001);
    EXPECT_EQ(buf[73728], 0xee);  // nothing past the block
    EXPECT_EQ(cluster->shm_reads() - before, 1u);
    // A buffer without room for the whole block: the file's bytes, nothing written past them.
    std::memset(buf, 0xee, 1 << 20);
    std::promise<Result<size_t>> tight;
    (*f)->PreadAsync(buf + 4096, 70001 - 4096, 4096,
                     [&](Result<size_t> r) { tight.set_value(std::move(r)); });
    n = tight.get_future().get();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 70001u - 4096);
    EXPECT_EQ(std::memcmp(buf + 4096, data.data() + 4096, 70001 - 4096), 0);
    EXPECT_EQ(buf[70001], 0xee);
  }
}

// Reads queued while the client's network thread is busy go to their OSS as ReadBatch frames
// (docs/formats/wire.md "Read batches"): issued from a read's completion (which runs on that
// thread), 63 small reads cannot be sent before it returns, so they leave batched. The bytes are
// those of reads sent one by one, placed in shared memory or over TCP; with batching off no
// batch is sent. An IO error of one read in a batch fails that read alone.
struct BatchCase {
  bool shm;
  bool batch;
};

class ReadBatchTest : public ::testing::TestWithParam<BatchCase> {};

TEST_P(ReadBatchTest, ReadsQueuedTogetherTravelInOneFrameWithTheSameBytes) {
  const BatchCase bc = GetParam();
  auto cluster = StartCluster();
  ASSERT_TRUE(cluster);
  ClientOptions o;
  o.uid = 0;
  o.gid = 0;
  o.shm_reads = bc.shm;
  o.batch_reads = bc.batch;
  auto made = cluster->NewClient(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto c = std::move(*made);
  constexpr int kFiles = 64;
  std::vector<std::string> data;
  std::vector<std::unique_ptr<File>> files;
  for (int i = 0; i < kFiles; ++i) {
    // Up to 16 KiB: over TCP too, every read is small enough to be batched.
    data.push_back(Pattern(1000 + 211 * i, static_cast<uint32_t>(i)));
    const std::string path = fmt::format("/b{}", i);
    auto w = c->Open(path, O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->Pwrite(data.back().data(), data.back().size(), 0).ok());
    ASSERT_TRUE((*w)->Close().ok());
    auto f = c->Open(path, O_RDONLY, 0);
    ASSERT_TRUE(f.ok());
    files.push_back(std::move(*f));
  }
  auto mem = c->NewSharedMemory(kFiles * 16384);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  uint8_t* base = (*mem)->data();
  auto run = [&](std::vector<Result<size_t>>* results) {
    std::memset(base, 0xee, kFiles * 16384);
    std::mutex mu;
    std::condition_variable cv;
    int left = kFiles;
    results->assign(kFiles, Status::Internal("not done"));
    auto done = [&](int i, Result<size_t> r) {
      std::lock_guard<std::mutex> lock(mu);
      (*results)[static_cast<size_t>(i)] = std::move(r);
      if (--left == 0)
        cv.notify_all();
    };
    files[0]->PreadAsync(base, 16384, 0, [&](Result<size_t> r) {
      for (int i = 1; i < kFiles; ++i) {
        files[static_cast<size_t>(i)]->PreadAsync(base + i * 16384, 16384, 0,
                                                  [&, i](Result<size_t> ri) { done(i, ri); });
      }
      done(0, std::move(r));
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left == 0; });
  };
  const uint64_t batches0 = cluster->read_batches();
  std::vector<Result<size_t>> results;
  run(&results);
  for (int i = 0; i < kFiles; ++i) {
    ASSERT_TRUE(results[static_cast<size_t>(i)].ok())
        << i << ": " << results[static_cast<size_t>(i)].status().ToString();
    ASSERT_EQ(*results[static_cast<size_t>(i)], data[static_cast<size_t>(i)].size());
    ASSERT_EQ(std::memcmp(base + i * 16384, data[static_cast<size_t>(i)].data(),
                          data[static_cast<size_t>(i)].size()),
              0)
        << i;
  }
  const uint64_t batches = cluster->read_batches() - batches0;
  if (bc.batch) {
    EXPECT_GE(batches, 2u);  // 63 reads, at most 32 per batch
  } else {
    EXPECT_EQ(batches, 0u);
  }

  // One read's IO fails: that read alone reports it.
  {
    ScopedFault fault("io.read", Status::IoError("injected read error"), 1);
    run(&results);
    EXPECT_EQ(fault.hits(), 1);
  }
  int failed = 0;
  for (int i = 0; i < kFiles; ++i) {
    const auto& r = results[static_cast<size_t>(i)];
    if (!r.ok()) {
      ++failed;
      EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
      EXPECT_NE(r.status().message().find("injected read error"), std::string::npos);
      continue;
    }
    ASSERT_EQ(std::memcmp(base + i * 16384, data[static_cast<size_t>(i)].data(),
                          data[static_cast<size_t>(i)].size()),
              0)
        << i;
  }
  EXPECT_EQ(failed, 1);
}

INSTANTIATE_TEST_SUITE_P(Paths,
                         ReadBatchTest,
                         ::testing::Values(BatchCase{true, true},
                                           BatchCase{false, true},
                                           BatchCase{true, false}),
                         [](const auto& info) {
                           return std::string(info.param.shm ? "Shm" : "Tcp") +
                                  (info.param.batch ? "Batched" : "OneByOne");
                         });

}  // namespace
}  // namespace ciuic::testing
