// client_bench: throughput of a striped sequential write+read through libciuic on a 4-OST
// MiniCluster, next to pwrite/pread with O_DIRECT on a local file in the same file system, in the
// same run. A measuring program, not a test: it prints a small table.
//
//   client_bench [--size-mib N] [--block-mib N]
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "common/buffer.h"
#include "testing/mini_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;

double MiBps(uint64_t bytes, Clock::duration d) {
  return bytes / 1048576.0 / std::chrono::duration<double>(d).count();
}

// CPU seconds used by this process (servers and client together: they share it here).
double CpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

struct Phase {
  Clock::duration wall{};
  double cpu = 0;
};

// Runs `qd` requests of `block` bytes at a time over [0, total) with the async API.
ciuic::Status RunAsync(ciuic::File* f,
                       bool write,
                       uint64_t total,
                       uint64_t block,
                       int qd,
                       std::vector<ciuic::AlignedBuffer>& bufs) {
  std::mutex mu;
  std::condition_variable cv;
  int inflight = 0;
  ciuic::Status first;
  std::vector<int> free_slots;
  for (int i = 0; i < qd; ++i)
    free_slots.push_back(i);
  for (uint64_t off = 0; off < total; off += block) {
    int slot;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !free_slots.empty(); });
      slot = free_slots.back();
      free_slots.pop_back();
      ++inflight;
    }
    auto cb = [&, slot](ciuic::Result<size_t> r) {
      std::lock_guard<std::mutex> lock(mu);
      if (!r.ok() && first.ok())
        first = r.status();
      free_slots.push_back(slot);
      --inflight;
      cv.notify_all();
    };
    if (write) {
      f->PwriteAsync(bufs[slot].data(), block, off, cb);
    } else {
      f->PreadAsync(bufs[slot].data(), block, off, cb);
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return inflight == 0; });
  return first;
}

int Fail(const std::string& what, const ciuic::Status& st) {
  std::fprintf(stderr, "client_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size_mib = 1024, block_mib = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--size-mib") == 0)
      size_mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--block-mib") == 0) {
      block_mib = std::strtoull(argv[i + 1], nullptr, 10);
    }
  }
  const uint64_t total = size_mib << 20, block = block_mib << 20;
  ciuic::AlignedBuffer buf(block);
  for (size_t i = 0; i < block; ++i)
    buf.data()[i] = static_cast<uint8_t>(i * 7 + (i >> 12));

  ciuic::testing::MiniClusterOptions mo;
  mo.num_oss = 2;
  mo.osts_per_oss = 2;
  auto cluster = ciuic::testing::MiniCluster::Start(mo);
  if (!cluster.ok())
    return Fail("starting the cluster", cluster.status());
  auto client = (*cluster)->NewClient();
  if (!client.ok())
    return Fail("connecting", client.status());

  ciuic::FileLayout layout;
  ciuic::LayoutComponent comp;
  comp.stripe_size = 1 << 20;
  comp.stripe_count = 4;
  layout.components.push_back(comp);
  layout.pattern = 1;
  ciuic::OpenOptions oo;
  oo.layout = &layout;

  std::vector<ciuic::AlignedBuffer> bufs;
  for (int i = 0; i < 4; ++i) {
    bufs.emplace_back(block);
    std::memcpy(bufs.back().data(), buf.data(), block);
  }
  auto measure = [&](const char* name, int qd, Phase* w, Phase* r) -> int {
    auto f = (*client)->Open(name, O_CREAT | O_RDWR | O_TRUNC, 0644, oo);
    if (!f.ok())
      return Fail("open", f.status());
    double c0 = CpuSeconds();
    auto t0 = Clock::now();
    if (qd <= 1) {
      for (uint64_t off = 0; off < total; off += block) {
        auto n = (*f)->Pwrite(buf.data(), block, off);
        if (!n.ok())
          return Fail("pwrite", n.status());
      }
    } else if (auto st = RunAsync(f->get(), true, total, block, qd, bufs); !st.ok()) {
      return Fail("async write", st);
    }
    if (auto st = (*f)->Fsync(); !st.ok())
      return Fail("fsync", st);
    w->wall = Clock::now() - t0;
    w->cpu = CpuSeconds() - c0;
    if (auto st = (*f)->Close(); !st.ok())
      return Fail("close", st);
    // The OSS reads with O_DIRECT: no server page cache helps the read.
    auto g = (*client)->Open(name, O_RDONLY, 0);
    if (!g.ok())
      return Fail("open", g.status());
    c0 = CpuSeconds();
    t0 = Clock::now();
    if (qd <= 1) {
      for (uint64_t off = 0; off < total; off += block) {
        auto n = (*g)->Pread(buf.data(), block, off);
        if (!n.ok())
          return Fail("pread", n.status());
      }
    } else if (auto st = RunAsync(g->get(), false, total, block, qd, bufs); !st.ok()) {
      return Fail("async read", st);
    }
    r->wall = Clock::now() - t0;
    r->cpu = CpuSeconds() - c0;
    (*g)->Close().IgnoreError();            // read-only
    (*client)->Unlink(name).IgnoreError();  // frees the space for the next run
    return 0;
  };
  Phase cw, cr, aw, ar, lw, lr;
  if (int rc = measure("/bench-sync", 1, &cw, &cr); rc != 0)
    return rc;
  if (int rc = measure("/bench-async", 4, &aw, &ar); rc != 0)
    return rc;

  // Local file, O_DIRECT, same file system as the OSTs.
  std::string local = (*cluster)->dir() + "/local-odirect";
  int fd = ::open(local.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0)
    return Fail("open local", ciuic::Status::FromErrno(errno, local));
  double c0 = CpuSeconds();
  auto t0 = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    if (::pwrite(fd, buf.data(), block, static_cast<off_t>(off)) != static_cast<ssize_t>(block)) {
      return Fail("local pwrite", ciuic::Status::FromErrno(errno, local));
    }
  }
  ::fdatasync(fd);
  lw.wall = Clock::now() - t0;
  lw.cpu = CpuSeconds() - c0;
  c0 = CpuSeconds();
  t0 = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    if (::pread(fd, buf.data(), block, static_cast<off_t>(off)) != static_cast<ssize_t>(block)) {
      return Fail("local pread", ciuic::Status::FromErrno(errno, local));
    }
  }
  lr.wall = Clock::now() - t0;
  lr.cpu = CpuSeconds() - c0;
  ::close(fd);
  ::unlink(local.c_str());

  std::printf("%llu MiB sequential, %llu MiB requests, 4 OSTs (2 OSS x 2), stripes 4 x 1 MiB\n",
              static_cast<unsigned long long>(size_mib),
              static_cast<unsigned long long>(block_mib));
  std::printf("%-34s %12s %12s   %s\n", "", "write", "read", "CPU s/GiB (w, r)");
  const double gib = total / double(1ull << 30);
  auto row = [&](const char* name, const Phase& w, const Phase& r) {
    std::printf("%-34s %6.0f MiB/s %6.0f MiB/s   %.2f, %.2f\n", name, MiBps(total, w.wall),
                MiBps(total, r.wall), w.cpu / gib, r.cpu / gib);
  };
  row("ciuic, sync (write+fsync)", cw, cr);
  row("ciuic, async QD4 (write+fsync)", aw, ar);
  row("local O_DIRECT, sync (+fdatasync)", lw, lr);
  return 0;
}
