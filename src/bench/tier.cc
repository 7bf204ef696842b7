#include "bench/tier.h"

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/parallel.h"
#include "ciuic/client.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "objstore/object_store_factory.h"

namespace ciuic::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The file's bytes: chunk `i` (io_size bytes) is a xorshift stream seeded by i, so any chunk can
// be made again without keeping the file.
void FillChunk(uint64_t index, std::vector<char>* buf) {
  uint64_t x = (index + 1) * 0x9E3779B97F4A7C15ull;
  auto* w = reinterpret_cast<uint64_t*>(buf->data());
  for (size_t i = 0; i < buf->size() / 8; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w[i] = x;
  }
}

// Reads the whole file on `readers` threads (chunks handed out in order) through one open
// file, checking each chunk's CRC against `want`.
Status ReadAll(File* f, const TierOptions& o, const std::vector<uint32_t>& want) {
  const uint64_t chunks = want.size();
  std::vector<std::vector<char>> bufs(o.readers, std::vector<char>(o.io_size));
  return ParallelFor(o.readers, chunks, [&](int t, uint64_t i) -> Status {
    auto& b = bufs[t];
    size_t got = 0;
    while (got < b.size()) {
      CIUIC_ASSIGN_OR_RETURN(size_t n,
                             f->Pread(b.data() + got, b.size() - got, i * o.io_size + got));
      if (n == 0)
        return Status::IoError(fmt::format("tier: short read at {}", i * o.io_size + got));
      got += n;
    }
    if (Crc32c(b.data(), b.size()) != want[i])
      return Status::Corruption(fmt::format("tier: wrong bytes at offset {}", i * o.io_size));
    return Status::OK();
  });
}

}  // namespace

Status RunTierPhase(const TierOptions& o, Report* report) {
  if (o.size == 0 || o.size % o.io_size != 0)
    return Status::InvalidArgument(
        fmt::format("tier: size {} is not a multiple of {}", o.size, o.io_size));
  ClientOptions co;
  co.cluster_file = o.cluster_file;
  CIUIC_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
  CIUIC_ASSIGN_OR_RETURN(auto cf, ClusterFile::Load(o.cluster_file));
  objstore::ObjectStoreConfig sc;
  sc.create_local_root = false;
  CIUIC_ASSIGN_OR_RETURN(auto store, objstore::OpenObjectStore(o.cold_url, sc));

  const std::string dir = "/ciuic-bench-tier";
  const std::string path = fmt::format("{}/run{}.bin", dir, o.run);
  Status ms = client->Mkdir(dir, 0755);
  if (!ms.ok() && ms.code() != StatusCode::kAlreadyExists)
    return ms;
  client->Unlink(path).IgnoreError();
  const uint64_t chunks = o.size / o.io_size;
  std::vector<uint32_t> crcs(chunks);

  // Write (not timed), striped over every OST by the layout policy's size hint.
  o.progress(fmt::format("tier: writing {} MiB", o.size >> 20));
  {
    OpenOptions oo;
    oo.size_hint = o.size;
    CIUIC_ASSIGN_OR_RETURN(auto f, client->Open(path, O_CREAT | O_RDWR | O_TRUNC, 0644, oo));
    std::vector<std::vector<char>> bufs(o.readers, std::vector<char>(o.io_size));
    CIUIC_RETURN_IF_ERROR(ParallelFor(o.readers, chunks, [&](int t, uint64_t i) -> Status {
      auto& b = bufs[t];
      FillChunk(i, &b);
      crcs[i] = Crc32c(b.data(), b.size());
      CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pwrite(b.data(), b.size(), i * o.io_size));
      if (n != b.size())
        return Status::IoError("tier: short write");
      return Status::OK();
    }));
    CIUIC_RETURN_IF_ERROR(f->Fsync());
    CIUIC_RETURN_IF_ERROR(f->Close());
  }
  const double gb = static_cast<double>(o.size) / 1e9;

  // Hot: from the OSTs.
  o.drop_caches();
  {
    auto t0 = Clock::now();
    CIUIC_ASSIGN_OR_RETURN(auto f, client->Open(path, O_RDONLY));
    {
      // The first read, in the middle of the file (released below: restore by extents waits
      // for its own chunks only, the rest of the restore following in the background).
      std::vector<char> first(std::min<uint64_t>(o.size, 1 << 20));
      CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pread(first.data(), first.size(), o.size / 2));
      (void)n;
      report
          ->Add("tier", "tier_hot_first_read", "ciuic", Seconds(t0, Clock::now()) * 1000, "ms",
                false)
          .note = "open of the file on the OSTs + 1 MiB read at its middle";
    }
    CIUIC_RETURN_IF_ERROR(ReadAll(f.get(), o, crcs));
    report->Add("tier", "tier_read_hot", "ciuic", gb / Seconds(t0, Clock::now()), "GB/s", true);
  }

  // Archive: every OSS copies its objects to the store.
  o.progress("tier: hsm archive");
  {
    auto t0 = Clock::now();
    CIUIC_RETURN_IF_ERROR(client->HsmArchive(path));
    report->Add("tier", "tier_archive", "ciuic", gb / Seconds(t0, Clock::now()), "GB/s", true);
  }

  // The store's own limit: parallel ranged GETs of the archived objects (not the .crc files).
  CIUIC_ASSIGN_OR_RETURN(HsmStatus hs, client->HsmGetState(path));
  CIUIC_ASSIGN_OR_RETURN(FileStat st, client->Stat(path));
  const std::string prefix = fmt::format("{}/{:#x}:{:#x}:{:#x}/{}/", cf.cluster_uuid, st.fid_mds,
                                         st.ino, st.fid_ver, hs.archived_version);
  struct Range {
    std::string key;
    uint64_t off, len;
  };
  std::vector<Range> ranges;
  uint64_t store_bytes = 0;
  objstore::ListOptions lo;
  lo.prefix = prefix;
  for (;;) {
    CIUIC_ASSIGN_OR_RETURN(auto page, store->List(lo));
    for (const auto& obj : page.objects) {
      if (obj.key.size() >= 4 && obj.key.compare(obj.key.size() - 4, 4, ".crc") == 0)
        continue;
      for (uint64_t off = 0; off < obj.size; off += o.get_range)
        ranges.push_back({obj.key, off, std::min(o.get_range, obj.size - off)});
      store_bytes += obj.size;
    }
    if (page.next.empty())
      break;
    lo.start = page.next;
  }
  if (store_bytes != o.size)
    return Status::Corruption(fmt::format("tier: {} holds {} bytes of the file under {}, not {}",
                                          store->Describe(), store_bytes, prefix, o.size));
  o.progress(
      fmt::format("tier: {} parallel ranged GETs from {}", ranges.size(), store->Describe()));
  o.drop_caches();
  double store_gbs = 0;
  {
    std::vector<std::vector<char>> bufs(o.get_threads, std::vector<char>(o.get_range));
    std::atomic<uint32_t> sink{0};
    auto t0 = Clock::now();
    CIUIC_RETURN_IF_ERROR(
        ParallelFor(o.get_threads, ranges.size(), [&](int t, uint64_t i) -> Status {
          const Range& r = ranges[i];
          std::span<char> dst(bufs[t].data(), r.len);
          CIUIC_ASSIGN_OR_RETURN(size_t n, store->Get(r.key, r.off, dst));
          if (n != r.len)
            return Status::IoError(fmt::format("tier: short GET of {} at {}", r.key, r.off));
          sink += Crc32c(dst.data(), n);  // the same per-byte work as the file reads' check
          return Status::OK();
        }));
    store_gbs = gb / Seconds(t0, Clock::now());
    report->Add("tier", "tier_store_get", "ciuic", store_gbs, "GB/s", true).note = fmt::format(
        "{} threads x {} MiB ranged GETs, {}", o.get_threads, o.get_range >> 20, store->Describe());
  }

  // Release, then read: the open restores the file from the store.
  o.progress("tier: hsm release, then read (restore)");
  CIUIC_ASSIGN_OR_RETURN(StatFs before, client->Statfs());
  CIUIC_RETURN_IF_ERROR(client->HsmRelease(path));
  {
    // The OSSes delete the objects when they next poll the MDS's work log, and a restore waits
    // for that: time the restore, not the heartbeat. Free space tells when it happened.
    const auto t0 = Clock::now();
    for (;;) {
      CIUIC_ASSIGN_OR_RETURN(StatFs now, client->Statfs());
      if (now.free_bytes >= before.free_bytes + o.size / 10 * 9 || Seconds(t0, Clock::now()) > 60)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    report->Note(fmt::format("tier: the release was applied on the OSTs {:.1f} s after it returned",
                             Seconds(t0, Clock::now())));
  }
  CIUIC_ASSIGN_OR_RETURN(HsmStatus rs, client->HsmGetState(path));
  if (rs.state != HsmState::kReleased)
    return Status::Internal(
        fmt::format("tier: {} is {} after release, not released", path, HsmStateName(rs.state)));
  o.drop_caches();
  {
    auto t0 = Clock::now();
    CIUIC_ASSIGN_OR_RETURN(auto f, client->Open(path, O_RDONLY));
    {
      // Restore by extents: the first read, in the middle of the file, waits for its own
      // chunks only (the rest of the restore follows in the background).
      std::vector<char> first(std::min<uint64_t>(o.size, 1 << 20));
      CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pread(first.data(), first.size(), o.size / 2));
      (void)n;
      report
          ->Add("tier", "tier_restore_first_read", "ciuic", Seconds(t0, Clock::now()) * 1000, "ms",
                false)
          .note = "open of the released file + 1 MiB read at its middle";
    }
    CIUIC_RETURN_IF_ERROR(ReadAll(f.get(), o, crcs));
    const double restore_gbs = gb / Seconds(t0, Clock::now());
    report->Add("tier", "tier_read_restore", "ciuic", restore_gbs, "GB/s", true);
    report->Add("tier", "tier_restore_vs_store", "ciuic", restore_gbs / store_gbs, "ratio", true);
  }
  // Unlinking the file deletes its copy too (OST work log, docs/design.md "HSM").
  return client->Unlink(path);
}

}  // namespace ciuic::bench
