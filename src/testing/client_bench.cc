// client_bench: throughput of a striped sequential write+read through libciuic on a 4-OST
// MiniCluster, next to pwrite/pread with O_DIRECT on a local file in the same file system, in the
// same run. A measuring program, not a test: it prints a small table.
//
//   client_bench [--size-mib N] [--block-mib N]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ciuic/client.h"
#include "common/buffer.h"
#include "testing/mini_cluster.h"

namespace {

using Clock = std::chrono::steady_clock;

double MiBps(uint64_t bytes, Clock::duration d) {
  return bytes / 1048576.0 / std::chrono::duration<double>(d).count();
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

  // ciuic: write + fsync.
  auto f = (*client)->Open("/bench", O_CREAT | O_RDWR | O_TRUNC, 0644, oo);
  if (!f.ok())
    return Fail("open", f.status());
  auto t0 = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    auto r = (*f)->Pwrite(buf.data(), block, off);
    if (!r.ok())
      return Fail("pwrite", r.status());
  }
  if (auto st = (*f)->Fsync(); !st.ok())
    return Fail("fsync", st);
  auto cw = Clock::now() - t0;
  if (auto st = (*f)->Close(); !st.ok())
    return Fail("close", st);
  // ciuic: read (the OSS reads with O_DIRECT: no server page cache helps).
  auto g = (*client)->Open("/bench", O_RDONLY, 0);
  if (!g.ok())
    return Fail("open", g.status());
  t0 = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    auto r = (*g)->Pread(buf.data(), block, off);
    if (!r.ok())
      return Fail("pread", r.status());
  }
  auto cr = Clock::now() - t0;
  (*g)->Close().IgnoreError();                // read-only
  (*client)->Unlink("/bench").IgnoreError();  // frees the space for the local run

  // Local file, O_DIRECT, same file system as the OSTs.
  std::string local = (*cluster)->dir() + "/local-odirect";
  int fd = ::open(local.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0)
    return Fail("open local", ciuic::Status::FromErrno(errno, local));
  t0 = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    if (::pwrite(fd, buf.data(), block, static_cast<off_t>(off)) != static_cast<ssize_t>(block)) {
      return Fail("local pwrite", ciuic::Status::FromErrno(errno, local));
    }
  }
  ::fdatasync(fd);
  auto lw = Clock::now() - t0;
  t0 = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    if (::pread(fd, buf.data(), block, static_cast<off_t>(off)) != static_cast<ssize_t>(block)) {
      return Fail("local pread", ciuic::Status::FromErrno(errno, local));
    }
  }
  auto lr = Clock::now() - t0;
  ::close(fd);
  ::unlink(local.c_str());

  std::printf("%llu MiB sequential, %llu MiB requests, 4 OSTs (2 OSS x 2), stripes 4 x 1 MiB\n",
              static_cast<unsigned long long>(size_mib),
              static_cast<unsigned long long>(block_mib));
  std::printf("%-28s %10s %10s\n", "", "write", "read");
  std::printf("%-28s %7.0f MiB/s %7.0f MiB/s\n", "ciuic client (write+fsync)", MiBps(total, cw),
              MiBps(total, cr));
  std::printf("%-28s %7.0f MiB/s %7.0f MiB/s\n", "local O_DIRECT (+fdatasync)", MiBps(total, lw),
              MiBps(total, lr));
  return 0;
}
