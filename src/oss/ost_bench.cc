// ost_bench: OstStore throughput next to raw direct IO on the same disk (fio-like: O_DIRECT,
// a fixed queue depth, one file), with each IO engine. Not a test.
//
//   ost_bench --dir DIR [--size 1G] [--engine both|io_uring|posix] [--seconds 5]
//
// Phases per engine: raw sequential 1 MiB writes (QD 8) to a new file + fdatasync, the same
// again over the laid-out file (as fio measures), sequential 1 MiB reads (QD 8), 4 KiB random
// reads (QD 32); then the same through OstStore (new object + Sync, overwrite + Sync, reads,
// random 4 KiB reads with the block checksums returned).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/buffer.h"
#include "common/config.h"
#include "io/io_engine.h"
#include "oss/ost_store.h"

namespace ciuic::oss {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps `qd` ops in flight until `total` ops are done or `deadline` passes. `issue(i, done)`
// starts op i and calls done(ok) when it completes (on any thread).
struct Runner {
  uint64_t Run(int qd,
               uint64_t total,
               Clock::time_point deadline,
               const std::function<void(uint64_t, std::function<void(bool)>)>& issue) {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t next = 0, completed = 0, failed = 0;
    int inflight = 0;
    std::function<void(bool)> done;
    auto start_one = [&]() -> bool {
      // Requires mu.
      if (next >= total || Clock::now() >= deadline)
        return false;
      ++inflight;
      uint64_t i = next++;
      mu.unlock();
      issue(i, done);
      mu.lock();
      return true;
    };
    done = [&](bool ok) {
      std::unique_lock<std::mutex> lock(mu);
      --inflight;
      ++completed;
      if (!ok)
        ++failed;
      if (!start_one() && inflight == 0)
        cv.notify_all();
    };
    std::unique_lock<std::mutex> lock(mu);
    for (int k = 0; k < qd; ++k) {
      if (!start_one())
        break;
    }
    cv.wait(lock, [&] { return inflight == 0 && (next >= total || Clock::now() >= deadline); });
    if (failed > 0)
      fmt::print(stderr, "  {} ops failed\n", failed);
    return completed;
  }
};

struct Rate {
  double mib_s;
  double iops;
};

Rate Measure(uint64_t ops, uint64_t bytes_per_op, Clock::time_point t0) {
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return Rate{double(ops * bytes_per_op) / (1 << 20) / s, double(ops) / s};
}

void RunRaw(io::IoEngine* e, const std::string& path, uint64_t size, double seconds) {
  auto fh = e->Open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT);
  if (!fh.ok()) {
    fmt::print(stderr, "open {}: {}\n", path, fh.status().ToString());
    return;
  }
  constexpr size_t kSeq = 1 << 20;
  constexpr int kSeqQd = 8, kRandQd = 32;
  std::vector<AlignedBuffer> bufs;
  for (int i = 0; i < kRandQd; ++i) {
    bufs.emplace_back(kSeq);
    std::memset(bufs.back().data(), 0x5a + i, kSeq);
  }
  const uint64_t nseq = size / kSeq;
  Runner r;
  auto t0 = Clock::now();
  uint64_t n = r.Run(kSeqQd, nseq, Clock::time_point::max(), [&](uint64_t i, auto done) {
    e->SubmitAsync(io::IoOp{io::IoKind::kWrite, *fh, i * kSeq, bufs[i % kSeqQd].data(), kSeq},
                   [done](Result<size_t> res) { done(res.ok()); });
  });
  e->Fdatasync(*fh).IgnoreError();  // timing only
  Rate w = Measure(n, kSeq, t0);
  // Second pass over the laid-out file, as fio measures writes.
  t0 = Clock::now();
  n = r.Run(kSeqQd, nseq, Clock::time_point::max(), [&](uint64_t i, auto done) {
    e->SubmitAsync(io::IoOp{io::IoKind::kWrite, *fh, i * kSeq, bufs[i % kSeqQd].data(), kSeq},
                   [done](Result<size_t> res) { done(res.ok()); });
  });
  e->Fdatasync(*fh).IgnoreError();  // timing only
  Rate ow = Measure(n, kSeq, t0);
  t0 = Clock::now();
  n = r.Run(kSeqQd, nseq, Clock::time_point::max(), [&](uint64_t i, auto done) {
    e->SubmitAsync(io::IoOp{io::IoKind::kRead, *fh, i * kSeq, bufs[i % kSeqQd].data(), kSeq},
                   [done](Result<size_t> res) { done(res.ok()); });
  });
  Rate rd = Measure(n, kSeq, t0);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> offs(1 << 22);
  for (auto& o : offs)
    o = (rng() % (size / 4096)) * 4096;
  t0 = Clock::now();
  auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::atomic<uint64_t> slot{0};
  n = r.Run(kRandQd, offs.size(), deadline, [&](uint64_t i, auto done) {
    uint8_t* b = bufs[slot.fetch_add(1) % kRandQd].data();
    e->SubmitAsync(io::IoOp{io::IoKind::kRead, *fh, offs[i], b, 4096},
                   [done](Result<size_t> res) { done(res.ok()); });
  });
  Rate rr = Measure(n, 4096, t0);
  fmt::print(
      "  raw direct IO  write new {:5.0f} MiB/s  overwrite {:5.0f} MiB/s  read {:5.0f} MiB/s  "
      "4K rand read QD32 {:6.0f} IOPS\n",
      w.mib_s, ow.mib_s, rd.mib_s, rr.iops);
  e->Close(*fh).IgnoreError();
  e->Unlink(path).IgnoreError();
}

void RunStore(io::IoEngine* e, const std::string& dir, uint64_t size, double seconds) {
  OstStore::Options o;
  o.dir = dir;
  o.index = 0;
  o.cluster_uuid = "bench";
  o.engine = e;
  auto store = OstStore::Open(o);
  if (!store.ok()) {
    fmt::print(stderr, "open store: {}\n", store.status().ToString());
    return;
  }
  OstStore& s = **store;
  const ObjectId id{Fid{1, 0, 0}, 0, 0};
  constexpr size_t kSeq = 1 << 20;
  constexpr int kSeqQd = 8, kRandQd = 32;
  const uint64_t nseq = size / kSeq;
  Runner r;
  auto t0 = Clock::now();
  // Like the network layer's recycled receive buffers: one per op in flight.
  std::vector<AlignedBuffer> bufs(kSeqQd);
  std::mutex bufs_mu;
  for (auto& b : bufs) {
    b.Resize(kSeq);
    std::memset(b.data(), 0x33, kSeq);
  }
  std::vector<AlignedBuffer*> idle;
  for (auto& b : bufs)
    idle.push_back(&b);
  uint64_t n = r.Run(kSeqQd, nseq, Clock::time_point::max(), [&](uint64_t i, auto done) {
    AlignedBuffer* buf;
    {
      std::lock_guard<std::mutex> lock(bufs_mu);
      buf = idle.back();
      idle.pop_back();
    }
    s.WriteAsync(id, i * kSeq, buf, [done, buf, &idle, &bufs_mu](Result<uint64_t> res) {
      {
        std::lock_guard<std::mutex> lock(bufs_mu);
        idle.push_back(buf);
      }
      done(res.ok());
    });
  });
  Status st = s.Sync({id});
  if (!st.ok())
    fmt::print(stderr, "sync: {}\n", st.ToString());
  Rate w = Measure(n, kSeq, t0);
  t0 = Clock::now();
  n = r.Run(kSeqQd, nseq, Clock::time_point::max(), [&](uint64_t i, auto done) {
    AlignedBuffer* buf;
    {
      std::lock_guard<std::mutex> lock(bufs_mu);
      buf = idle.back();
      idle.pop_back();
    }
    s.WriteAsync(id, i * kSeq, buf, [done, buf, &idle, &bufs_mu](Result<uint64_t> res) {
      {
        std::lock_guard<std::mutex> lock(bufs_mu);
        idle.push_back(buf);
      }
      done(res.ok());
    });
  });
  st = s.Sync({id});
  if (!st.ok())
    fmt::print(stderr, "sync: {}\n", st.ToString());
  Rate ow = Measure(n, kSeq, t0);
  t0 = Clock::now();
  n = r.Run(kSeqQd, nseq, Clock::time_point::max(), [&](uint64_t i, auto done) {
    s.ReadAsync(id, i * kSeq, kSeq, [done](Result<ReadResult> res) { done(res.ok()); });
  });
  Rate rd = Measure(n, kSeq, t0);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> offs(1 << 22);
  for (auto& off : offs)
    off = (rng() % (size / 4096)) * 4096;
  t0 = Clock::now();
  auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  n = r.Run(kRandQd, offs.size(), deadline, [&](uint64_t i, auto done) {
    s.ReadAsync(id, offs[i], 4096, [done](Result<ReadResult> res) { done(res.ok()); });
  });
  Rate rr = Measure(n, 4096, t0);
  fmt::print(
      "  OstStore       write new {:5.0f} MiB/s  overwrite {:5.0f} MiB/s  read {:5.0f} MiB/s  "
      "4K rand read QD32 {:6.0f} IOPS\n",
      w.mib_s, ow.mib_s, rd.mib_s, rr.iops);
  st = s.Destroy(id);
  if (!st.ok())
    fmt::print(stderr, "destroy: {}\n", st.ToString());
}

int Main(int argc, char** argv) {
  CLI::App app{"ost_bench: OstStore vs raw direct IO on one disk"};
  std::string dir, size_str = "1G", engine = "both";
  double seconds = 5;
  app.add_option("--dir", dir, "directory on the disk to measure (a subdirectory is used)")
      ->required();
  app.add_option("--size", size_str, "bytes per file/object (default 1G)");
  app.add_option("--engine", engine, "both, io_uring or posix");
  app.add_option("--seconds", seconds, "duration of the random read phases");
  CLI11_PARSE(app, argc, argv);
  Result<uint64_t> size = ParseSize(size_str);
  if (!size.ok() || *size < (8u << 20)) {
    fmt::print(stderr, "ost_bench: bad --size\n");
    return 1;
  }
  std::vector<io::IoEngineKind> kinds;
  if (engine == "both" || engine == "io_uring")
    kinds.push_back(io::IoEngineKind::kUring);
  if (engine == "both" || engine == "posix")
    kinds.push_back(io::IoEngineKind::kPosix);
  std::string work = dir + "/ost-bench";
  std::filesystem::create_directories(work);
  for (io::IoEngineKind k : kinds) {
    auto e = io::NewDiskIoEngine(k);
    if (!e.ok()) {
      fmt::print("{}: {}\n", k == io::IoEngineKind::kUring ? "io_uring" : "posix",
                 e.status().ToString());
      continue;
    }
    fmt::print("engine {} ({} per file)\n", (*e)->name(), FormatSize(*size));
    RunRaw(e->get(), work + "/raw", *size, seconds);
    std::filesystem::remove_all(work + "/ost");
    RunStore(e->get(), work + "/ost", *size, seconds);
    std::filesystem::remove_all(work + "/ost");
  }
  std::filesystem::remove_all(work);
  return 0;
}

}  // namespace
}  // namespace ciuic::oss

int main(int argc, char** argv) {
  return ciuic::oss::Main(argc, argv);
}
