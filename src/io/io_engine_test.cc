// Contract tests run against every IoEngine: the disk engines on a temp directory of the real
// disk, MemIoEngine in memory.
#include "io/io_engine.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "common/buffer.h"
#include "common/submit_batch.h"
#include "io/mem_io_engine.h"
#include "io/posix_io_engine.h"
#include "io/uring_io_engine.h"

namespace ciuic::io {
namespace {

// A real temp directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ciuic-io-test-XXXXXX";
    char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path_ = p == nullptr ? "/tmp" : p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct PosixFactory {
  static std::unique_ptr<IoEngine> Make() { return std::make_unique<PosixIoEngine>(); }
};
struct UringFactory {
  static std::unique_ptr<IoEngine> Make() {
    // A small ring so the tests also drive the queue-full paths.
    auto r = UringIoEngine::Create(16);
    if (!r.ok())
      return nullptr;
    return std::move(*r);
  }
};
struct MemFactory {
  static std::unique_ptr<IoEngine> Make() { return std::make_unique<MemIoEngine>(); }
};

template <typename F>
class IoEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = F::Make();
    if (engine_ == nullptr)
      GTEST_SKIP() << "io_uring is not available here";
    if (std::string(engine_->name()) == "mem") {
      root_ = "/io-test";
      ASSERT_TRUE(engine_->MkdirAll(root_).ok());
    } else {
      tmp_ = std::make_unique<TempDir>();
      root_ = tmp_->path();
    }
  }
  void TearDown() override {
    engine_.reset();
    tmp_.reset();
  }
  std::string P(const std::string& name) const { return root_ + "/" + name; }
  FileHandle Create(const std::string& name, int extra = 0) {
    auto fh = engine_->Open(P(name), O_RDWR | O_CREAT | extra);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    return fh.value_or(-1);
  }

  std::unique_ptr<TempDir> tmp_;
  std::unique_ptr<IoEngine> engine_;
  std::string root_;
};

using Engines = ::testing::Types<PosixFactory, UringFactory, MemFactory>;
TYPED_TEST_SUITE(IoEngineTest, Engines);

TYPED_TEST(IoEngineTest, OpenMissingIsNotFoundAndCreateMakesEmptyFile) {
  auto missing = this->engine_->Open(this->P("nope"), O_RDWR);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  FileHandle fh = this->Create("a");
  auto st = this->engine_->Stat(fh);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->size, 0u);
  auto excl = this->engine_->Open(this->P("a"), O_RDWR | O_CREAT | O_EXCL);
  EXPECT_EQ(excl.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, WritesAndReadsAtOffsets) {
  FileHandle fh = this->Create("f");
  std::string a = "hello", b = "world!";
  ASSERT_TRUE(this->engine_->PwriteAll(fh, a.data(), a.size(), 0).ok());
  ASSERT_TRUE(this->engine_->PwriteAll(fh, b.data(), b.size(), 100).ok());
  char buf[106] = {};
  auto n = this->engine_->Pread(fh, buf, sizeof(buf), 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 106u);
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ(std::string(buf + 100, 6), "world!");
  // The gap between the two writes is a hole: zeros.
  EXPECT_TRUE(std::all_of(buf + 5, buf + 100, [](char c) { return c == 0; }));
  EXPECT_EQ(this->engine_->Stat(fh)->size, 106u);
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, ShortReadAtEndOfFile) {
  FileHandle fh = this->Create("f");
  std::string data(1000, 'x');
  ASSERT_TRUE(this->engine_->PwriteAll(fh, data.data(), data.size(), 0).ok());
  std::vector<char> buf(4096);
  auto n = this->engine_->Pread(fh, buf.data(), buf.size(), 600);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 400u);
  n = this->engine_->Pread(fh, buf.data(), buf.size(), 5000);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, HolesReadAsZeros) {
  FileHandle fh = this->Create("f");
  std::string data(4096, 'z');
  ASSERT_TRUE(this->engine_->PwriteAll(fh, data.data(), data.size(), 1 << 20).ok());
  std::vector<char> buf(8192, 'q');
  auto n = this->engine_->Pread(fh, buf.data(), buf.size(), 4096);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, buf.size());
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; }));
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, TruncateShrinksAndGrowsWithZeros) {
  FileHandle fh = this->Create("f");
  std::string data(10000, 'a');
  ASSERT_TRUE(this->engine_->PwriteAll(fh, data.data(), data.size(), 0).ok());
  ASSERT_TRUE(this->engine_->Truncate(fh, 100).ok());
  EXPECT_EQ(this->engine_->Stat(fh)->size, 100u);
  ASSERT_TRUE(this->engine_->Truncate(fh, 5000).ok());
  std::vector<char> buf(5000);
  ASSERT_EQ(*this->engine_->Pread(fh, buf.data(), buf.size(), 0), 5000u);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + 100, [](char c) { return c == 'a'; }));
  EXPECT_TRUE(std::all_of(buf.begin() + 100, buf.end(), [](char c) { return c == 0; }));
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, PunchHoleZerosRangeAndKeepsSize) {
  FileHandle fh = this->Create("f");
  std::string data(16384, 'p');
  ASSERT_TRUE(this->engine_->PwriteAll(fh, data.data(), data.size(), 0).ok());
  ASSERT_TRUE(this->engine_->PunchHole(fh, 4096, 8192).ok());
  EXPECT_EQ(this->engine_->Stat(fh)->size, 16384u);
  std::vector<char> buf(16384);
  ASSERT_EQ(*this->engine_->Pread(fh, buf.data(), buf.size(), 0), 16384u);
  EXPECT_EQ(buf[4095], 'p');
  EXPECT_TRUE(std::all_of(buf.begin() + 4096, buf.begin() + 12288, [](char c) { return c == 0; }));
  EXPECT_EQ(buf[12288], 'p');
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, FsyncAndFdatasyncSucceed) {
  FileHandle fh = this->Create("f");
  ASSERT_TRUE(this->engine_->PwriteAll(fh, "x", 1, 0).ok());
  EXPECT_TRUE(this->engine_->Fsync(fh).ok());
  EXPECT_TRUE(this->engine_->Fdatasync(fh).ok());
  EXPECT_TRUE(this->engine_->SyncDir(this->root_).ok());
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, UnlinkRenameAndListDir) {
  ASSERT_TRUE(this->engine_->Close(this->Create("a")).ok());
  ASSERT_TRUE(this->engine_->Close(this->Create("b")).ok());
  ASSERT_TRUE(this->engine_->MkdirAll(this->P("sub/dir")).ok());
  ASSERT_TRUE(this->engine_->Rename(this->P("a"), this->P("sub/c")).ok());
  ASSERT_TRUE(this->engine_->Unlink(this->P("b")).ok());
  EXPECT_EQ(this->engine_->Unlink(this->P("b")).code(), StatusCode::kNotFound);
  EXPECT_EQ(this->engine_->StatPath(this->P("a")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(this->engine_->StatPath(this->P("sub/c")).ok());
  auto names = this->engine_->ListDir(this->root_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"sub"});
  names = this->engine_->ListDir(this->P("sub"));
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"c", "dir"}));
  EXPECT_EQ(this->engine_->ListDir(this->P("missing")).status().code(), StatusCode::kNotFound);
}

TYPED_TEST(IoEngineTest, StatFsReportsSpace) {
  auto fs = this->engine_->StatFs(this->root_);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  EXPECT_GT(fs->capacity, 0u);
  EXPECT_LE(fs->free, fs->capacity);
}

TYPED_TEST(IoEngineTest, DirectIoAlignedReadWrite) {
  FileHandle fh = this->Create("direct", O_DIRECT);
  AlignedBuffer out(64 << 10);
  for (size_t i = 0; i < out.size(); ++i)
    out.data()[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE(this->engine_->PwriteAll(fh, out.data(), out.size(), 4096).ok());
  AlignedBuffer in(64 << 10);
  auto n = this->engine_->Pread(fh, in.data(), in.size(), 4096);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, in.size());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
  // A read past the end of an O_DIRECT file is short at the (aligned) end.
  n = this->engine_->Pread(fh, in.data(), in.size(), 64 << 10);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4096u);
  ASSERT_TRUE(this->engine_->Close(fh).ok());
}

TYPED_TEST(IoEngineTest, DirectReadOfUnalignedFileEndIsShort) {
  FileHandle plain = this->Create("tail");
  std::string data(5000, 't');
  ASSERT_TRUE(this->engine_->PwriteAll(plain, data.data(), data.size(), 0).ok());
  ASSERT_TRUE(this->engine_->Fsync(plain).ok());
  auto direct = this->engine_->Open(this->P("tail"), O_RDONLY | O_DIRECT);
  ASSERT_TRUE(direct.ok());
  AlignedBuffer in(8192);
  auto n = this->engine_->Pread(*direct, in.data(), in.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 5000u);
  EXPECT_EQ(in.data()[4999], 't');
  ASSERT_TRUE(this->engine_->Close(*direct).ok());
  ASSERT_TRUE(this->engine_->Close(plain).ok());
}

TYPED_TEST(IoEngineTest, LockFileIsExclusiveUntilClose) {
  FileHandle a = this->Create("lock");
  auto b = this->engine_->Open(this->P("lock"), O_RDWR);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(this->engine_->LockFile(a).ok());
  EXPECT_EQ(this->engine_->LockFile(*b).code(), StatusCode::kBusy);
  ASSERT_TRUE(this->engine_->Close(a).ok());
  EXPECT_TRUE(this->engine_->LockFile(*b).ok());
  ASSERT_TRUE(this->engine_->Close(*b).ok());
}

TYPED_TEST(IoEngineTest, ManyConcurrentAsyncOps) {
  unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  constexpr int kFiles = 8, kBlocksPerFile = 64, kBlock = 4096;
  std::vector<FileHandle> files;
  for (int i = 0; i < kFiles; ++i)
    files.push_back(this->Create("c" + std::to_string(i), O_DIRECT));
  // Each (file, block) gets a pattern derived from its position; ops are issued in random order.
  AlignedBuffer src(size_t{kFiles} * kBlocksPerFile * kBlock);
  for (size_t i = 0; i < src.size(); ++i)
    src.data()[i] = static_cast<uint8_t>((i / kBlock) ^ rng());
  std::vector<int> order(kFiles * kBlocksPerFile);
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int>(i);
  std::shuffle(order.begin(), order.end(), rng);

  std::mutex mu;
  std::condition_variable cv;
  int remaining = static_cast<int>(order.size());
  std::atomic<int> failures{0};
  auto op_for = [&](int i, IoKind kind, uint8_t* base) {
    int file = i / kBlocksPerFile, block = i % kBlocksPerFile;
    return IoOp{kind, files[file], uint64_t(block) * kBlock, base + size_t(i) * kBlock, kBlock};
  };
  auto done = [&](Result<size_t> r) {
    if (!r.ok() || *r != size_t{kBlock})
      failures.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    if (--remaining == 0)
      cv.notify_all();
  };
  // More writes than the engine queues: a full queue answers kUnavailable, and those writes are
  // submitted again once the others are done (as an OSS client retries).
  std::vector<int> todo = order;
  for (int round = 0; !todo.empty(); ++round) {
    ASSERT_LT(round, 1000);
    std::vector<int> refused;
    remaining = static_cast<int>(todo.size());
    for (int i : todo) {
      this->engine_->SubmitAsync(op_for(i, IoKind::kWrite, src.data()), [&, i](Result<size_t> r) {
        if (!r.ok() && r.status().code() == StatusCode::kUnavailable) {
          std::lock_guard<std::mutex> lock(mu);
          refused.push_back(i);
          if (--remaining == 0)
            cv.notify_all();
          return;
        }
        done(std::move(r));
      });
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return remaining == 0; }));
    }
    todo.swap(refused);
  }
  EXPECT_EQ(failures.load(), 0);

  // Reads are chained from callbacks: each completion submits the next op, and the first
  // completion fans out more ops than the ring holds (the reaper-thread overflow path).
  AlignedBuffer dst(src.size());
  remaining = static_cast<int>(order.size());
  std::atomic<size_t> next{1};
  std::function<void(Result<size_t>)> chain = [&](Result<size_t> r) {
    size_t k = next.fetch_add(1);
    if (k < order.size())
      this->engine_->SubmitAsync(op_for(order[k], IoKind::kRead, dst.data()), chain);
    if (k == 1) {
      for (int j = 0; j < 40; ++j) {
        size_t m = next.fetch_add(1);
        if (m < order.size()) {
          this->engine_->SubmitAsync(op_for(order[m], IoKind::kRead, dst.data()), chain);
        }
      }
    }
    done(std::move(r));
  };
  this->engine_->SubmitAsync(op_for(order[0], IoKind::kRead, dst.data()), chain);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return remaining == 0; }));
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  for (FileHandle fh : files)
    ASSERT_TRUE(this->engine_->Close(fh).ok());
}

// A ring of 4 with room for 4 more queued, and reads of an empty pipe that stay in flight until
// the test writes to it: the 9th submission must be refused with kUnavailable at once (it used
// to wait for room, which a network thread must never do), and the 8 accepted reads must all
// complete once data arrives.
TEST(UringIoEngineTest, FullQueueRefusesWithoutWaitingAndLosesNothing) {
  auto made = UringIoEngine::Create(4, 4);
  if (!made.ok())
    GTEST_SKIP() << "io_uring unavailable: " << made.status().ToString();
  std::unique_ptr<UringIoEngine> engine = std::move(*made);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  constexpr int kAccepted = 8;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<size_t>> results(kAccepted + 1);
  std::vector<bool> answered(kAccepted + 1, false);
  char bytes[kAccepted + 1] = {};
  auto submit_all = [&] {
    for (int i = 0; i <= kAccepted; ++i) {
      engine->SubmitAsync(IoOp{IoKind::kRead, fds[0], 0, &bytes[i], 1}, [&, i](Result<size_t> r) {
        std::lock_guard<std::mutex> lock(mu);
        results[i] = std::move(r);
        answered[i] = true;
        cv.notify_all();
      });
    }
  };
  // Submit from another thread so a submission that waits shows up as a timeout, not a hang.
  std::mutex sub_mu;
  std::condition_variable sub_cv;
  bool submitted = false;
  bool may_exit = false;
  std::thread submitter([&] {
    submit_all();
    std::unique_lock<std::mutex> lock(sub_mu);
    submitted = true;
    sub_cv.notify_all();
    // io_uring cancels the pending reads of a thread that exits: stay until they are done.
    sub_cv.wait(lock, [&] { return may_exit; });
  });
  bool returned;
  {
    std::unique_lock<std::mutex> lock(sub_mu);
    returned = sub_cv.wait_for(lock, std::chrono::seconds(10), [&] { return submitted; });
  }
  bool refused_in_time;
  {
    std::unique_lock<std::mutex> lock(mu);
    refused_in_time =
        cv.wait_for(lock, std::chrono::seconds(10), [&] { return bool(answered[kAccepted]); });
  }
  EXPECT_TRUE(returned) << "SubmitAsync waited for room in a full queue";
  EXPECT_TRUE(refused_in_time) << "the op beyond the queue was not refused";
  // Feed the pipe: every accepted read completes (plus the 9th, if it was wrongly accepted).
  const char data[] = "abcdefghi";
  ASSERT_EQ(write(fds[1], data, kAccepted + 1), kAccepted + 1);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] {
      return std::count(answered.begin(), answered.begin() + kAccepted, true) == kAccepted;
    }));
  }
  {
    std::lock_guard<std::mutex> lock(sub_mu);
    may_exit = true;
    sub_cv.notify_all();
  }
  submitter.join();
  std::string got;
  for (int i = 0; i < kAccepted; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status().ToString();
    EXPECT_EQ(*results[i], 1u);
    got += bytes[i];
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, std::string(data, kAccepted));  // each byte read once: none lost
  ASSERT_FALSE(results[kAccepted].ok());
  EXPECT_EQ(results[kAccepted].status().code(), StatusCode::kUnavailable);
  EXPECT_NE(results[kAccepted].status().message().find("queue full"), std::string::npos);
  EXPECT_EQ(engine->TEST_Refused(), 1u);
  engine.reset();
  close(fds[0]);
  close(fds[1]);
}

// Ops submitted inside a SubmitBatch reach the kernel with one io_uring_submit when it ends.
TEST(UringIoEngineTest, SubmitBatchIsOneSyscall) {
  auto made = UringIoEngine::Create(16);
  if (!made.ok())
    GTEST_SKIP() << "io_uring unavailable: " << made.status().ToString();
  std::unique_ptr<UringIoEngine> engine = std::move(*made);
  TempDir dir;
  auto fh = engine->Open(dir.path() + "/f", O_RDWR | O_CREAT, 0600);
  ASSERT_TRUE(fh.ok());
  std::vector<char> buf(8 * 4096, 'x');
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 8;
  int failures = 0;
  const uint64_t before = engine->TEST_SubmitCalls();
  {
    SubmitBatch batch;
    for (int i = 0; i < 8; ++i) {
      engine->SubmitAsync(
          IoOp{IoKind::kWrite, *fh, uint64_t(i) * 4096, buf.data() + i * 4096, 4096},
          [&](Result<size_t> r) {
            std::lock_guard<std::mutex> lock(mu);
            failures += !r.ok() || *r != 4096u;
            if (--remaining == 0)
              cv.notify_all();
          });
    }
    EXPECT_EQ(engine->TEST_SubmitCalls(), before);  // held back until the batch ends
  }
  EXPECT_EQ(engine->TEST_SubmitCalls(), before + 1);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return remaining == 0; }));
  }
  EXPECT_EQ(failures, 0);
  ASSERT_TRUE(engine->Close(*fh).ok());
}

TEST(IoEngineFactoryTest, ParsesKindsAndBuildsAnEngine) {
  EXPECT_EQ(*ParseIoEngineKind("auto"), IoEngineKind::kAuto);
  EXPECT_EQ(*ParseIoEngineKind("io_uring"), IoEngineKind::kUring);
  EXPECT_EQ(*ParseIoEngineKind("uring"), IoEngineKind::kUring);
  EXPECT_EQ(*ParseIoEngineKind("posix"), IoEngineKind::kPosix);
  EXPECT_EQ(ParseIoEngineKind("aio").status().code(), StatusCode::kInvalidArgument);
  auto posix = NewDiskIoEngine(IoEngineKind::kPosix);
  ASSERT_TRUE(posix.ok());
  EXPECT_STREQ((*posix)->name(), "posix");
  auto any = NewDiskIoEngine(IoEngineKind::kAuto);
  ASSERT_TRUE(any.ok());
  auto uring = NewDiskIoEngine(IoEngineKind::kUring);
  if (uring.ok()) {
    EXPECT_STREQ((*uring)->name(), "io_uring");
    EXPECT_STREQ((*any)->name(), "io_uring");
  } else {
    EXPECT_EQ(uring.status().code(), StatusCode::kNotSupported);
    EXPECT_STREQ((*any)->name(), "posix");
  }
}

// Out of descriptors is kUnavailable (retryable), not an IO error.
TEST(DiskIoEngineTest, EmfileIsUnavailable) {
  auto e = NewDiskIoEngine(IoEngineKind::kPosix);
  ASSERT_TRUE(e.ok());
  char tmpl[] = "/tmp/ciuic-emfile-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  size_t open_now = 0;
  for ([[maybe_unused]] const auto& d : std::filesystem::directory_iterator("/proc/self/fd"))
    ++open_now;
  struct rlimit low = old;
  low.rlim_cur = open_now + 8;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<FileHandle> fhs;
  Status last;
  for (int i = 0; i < 64; ++i) {
    auto fh = (*e)->Open(dir + "/f" + std::to_string(i), O_RDWR | O_CREAT);
    if (!fh.ok()) {
      last = fh.status();
      break;
    }
    fhs.push_back(*fh);
  }
  for (FileHandle fh : fhs)
    EXPECT_TRUE((*e)->Close(fh).ok());
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  EXPECT_LT(fhs.size(), 64u);
  EXPECT_EQ(last.code(), StatusCode::kUnavailable) << last.ToString();
  EXPECT_NE(last.message().find("Too many open files"), std::string::npos) << last.ToString();
}

}  // namespace
}  // namespace ciuic::io
