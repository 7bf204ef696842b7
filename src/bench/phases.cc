#include "bench/phases.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/cache.h"
#include "bench/cpu_use.h"
#include "common/config.h"

namespace ciuic::bench {
namespace {
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;

AlignedBuf FilledBuffer(size_t len, uint64_t seed) {
  AlignedBuf buf(static_cast<char*>(std::aligned_alloc(4096, len)));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= len; i += 8) {
    uint64_t v = rng();
    std::memcpy(buf.get() + i, &v, 8);
  }
  return buf;
}

// Runs fn(i) on `n` threads; returns the first error.
Status RunThreads(int n, const std::function<Status(int)>& fn) {
  std::vector<std::thread> ts;
  std::mutex mu;
  Status first;
  for (int i = 0; i < n; ++i) {
    ts.emplace_back([&, i] {
      Status s;
      try {
        s = fn(i);
      } catch (const std::exception& e) {
        s = Status::Internal(e.what());
      }
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok())
          first = s;
      }
    });
  }
  for (auto& t : ts)
    t.join();
  return first;
}

// Client 0 is `t` itself; the others are forks (own connection for ciuic).
Result<std::vector<Target*>> Clients(Target& t,
                                     int n,
                                     std::vector<std::unique_ptr<Target>>* owned) {
  std::vector<Target*> out{&t};
  for (int i = 1; i < n; ++i) {
    CIUIC_ASSIGN_OR_RETURN(auto f, t.Fork());
    owned->push_back(std::move(f));
    out.push_back(owned->back().get());
  }
  return out;
}

constexpr double kGB = 1e9;

void RecordDone(Metric& m, double first, double last) {
  m.extra["first_done_s"].push_back(first);
  m.extra["last_done_s"].push_back(last);
}

// One seq pass (write or read) over all clients; returns {first done, last done} seconds.
Result<std::pair<double, double>> SeqPass(const std::vector<Target*>& clients,
                                          const Options& o,
                                          bool shared,
                                          bool write,
                                          uint64_t per_stream) {
  const int nc = static_cast<int>(clients.size());
  const int nt = o.threads;
  const uint64_t total = per_stream * static_cast<uint64_t>(nc * nt);
  // Files: shared: one per client handle of "shared.dat"; fpp: one per stream.
  std::vector<std::vector<std::unique_ptr<BFile>>> files(static_cast<size_t>(nc));
  auto fpp_name = [](int c, int k) { return fmt::format("fpp-{}-{}.dat", c, k); };
  if (shared && write) {
    // Client 0 creates (and truncates) the file before the others open it.
    CIUIC_ASSIGN_OR_RETURN(auto f, clients[0]->Open(clients[0]->Path("shared.dat"), true, total));
    files[0].push_back(std::move(f));
  }
  for (int c = 0; c < nc; ++c) {
    if (shared) {
      if (!(write && c == 0)) {
        CIUIC_ASSIGN_OR_RETURN(auto f,
                               clients[static_cast<size_t>(c)]->Open(
                                   clients[static_cast<size_t>(c)]->Path("shared.dat"), false, 0));
        files[static_cast<size_t>(c)].push_back(std::move(f));
      }
      continue;
    }
    for (int k = 0; k < nt; ++k) {
      Target* t = clients[static_cast<size_t>(c)];
      CIUIC_ASSIGN_OR_RETURN(auto f, t->Open(t->Path(fpp_name(c, k)), write, per_stream));
      files[static_cast<size_t>(c)].push_back(std::move(f));
    }
  }
  std::vector<double> done(static_cast<size_t>(nc), 0);
  const auto start = Clock::now();
  Status s = RunThreads(nc, [&](int c) -> Status {
    auto& mine = files[static_cast<size_t>(c)];
    Status st = RunThreads(nt, [&](int k) -> Status {
      BFile& f = shared ? *mine[0] : *mine[static_cast<size_t>(k)];
      const uint64_t base = shared ? per_stream * static_cast<uint64_t>(c * nt + k) : 0;
      AlignedBuf buf = FilledBuffer(o.block, static_cast<uint64_t>(c * nt + k + 1));
      for (uint64_t off = 0; off < per_stream; off += o.block) {
        if (write) {
          CIUIC_RETURN_IF_ERROR(f.Pwrite(buf.get(), o.block, base + off));
        } else {
          CIUIC_ASSIGN_OR_RETURN(size_t got, f.Pread(buf.get(), o.block, base + off));
          if (got != o.block)
            return Status::IoError(fmt::format("short read at {}: {} bytes", base + off, got));
        }
      }
      return write && !shared ? f.Fsync() : Status::OK();
    });
    if (st.ok() && write && shared)
      st = mine[0]->Fsync();
    for (auto& f : mine) {
      Status cs = f->Close();
      if (st.ok())
        st = cs;
    }
    done[static_cast<size_t>(c)] = Seconds(start, Clock::now());
    return st;
  });
  CIUIC_RETURN_IF_ERROR(s);
  return std::make_pair(*std::min_element(done.begin(), done.end()),
                        *std::max_element(done.begin(), done.end()));
}

AlignedBuf AlignedZero(size_t len) {
  AlignedBuf b(static_cast<char*>(std::aligned_alloc(4096, len)));
  std::memset(b.get(), 0, len);
  return b;
}

std::vector<std::pair<double, double>> CdfPoints(const std::vector<double>& us) {
  std::vector<std::pair<double, double>> pts;
  for (double p : {1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9})
    pts.emplace_back(p, Percentile(us, p));
  return pts;
}

// Writes `path` with `size` bytes in 1 MiB blocks and fsyncs it.
Status WriteDataFile(Target& t, const std::string& path, uint64_t size) {
  CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(path, true, size));
  const size_t block = 1u << 20;
  AlignedBuf buf = FilledBuffer(block, 42);
  for (uint64_t off = 0; off < size; off += block)
    CIUIC_RETURN_IF_ERROR(f->Pwrite(buf.get(), block, off));
  CIUIC_RETURN_IF_ERROR(f->Fsync());
  return f->Close();
}

// Reads and writes the OSSes served through clients' shared memory so far; -1 when the target
// has no cluster whose counters can be read.
double ShmIos(const Target& t, bool writes) {
  if (t.cluster_file().empty())
    return -1;
  Result<double> n = SumOssMetric(
      t.cluster_file(), writes ? "ciuic_oss_shm_writes_total" : "ciuic_oss_shm_reads_total");
  return n.ok() ? *n : -1;
}

// Records which share of `ios` IOs went through shared memory (from the OSSes' counters) and
// the copies per byte that implies (docs/benchmark.md "Copies per byte"): none for those, and
// `tcp_copies` for the rest (the kernel's socket copies on both ends, plus the client's copy out
// of its connection buffer for reads answered in batches).
void RecordCopies(Metric& m, double shm_before, double shm_after, double ios, double tcp_copies) {
  if (shm_before < 0 || shm_after < 0 || ios <= 0)
    return;
  const double share = std::clamp((shm_after - shm_before) / ios, 0.0, 1.0);
  m.extra["shm_share"] = share;
  m.extra["copies_per_byte"] = tcp_copies * (1 - share);
}

}  // namespace

uint64_t RandFileSize(const Options& o) {
  return o.rand_file / (1u << 20) * (1u << 20);
}

Status RunSeqPhase(Target& t, const PhaseContext& ctx) {
  const Options& o = *ctx.options;
  std::vector<std::unique_ptr<Target>> owned;
  CIUIC_ASSIGN_OR_RETURN(auto clients, Clients(t, o.clients, &owned));
  const uint64_t streams = static_cast<uint64_t>(o.clients * o.threads);
  const uint64_t per_stream = o.size / streams / o.block * o.block;
  const double total = static_cast<double>(per_stream * streams);
  for (bool shared : {false, true}) {
    const std::string kind = shared ? "shared" : "fpp";
    ctx.drop_caches();
    CIUIC_ASSIGN_OR_RETURN(auto w, SeqPass(clients, o, shared, true, per_stream));
    Metric& mw =
        ctx.report->Add("seq", "seq_write_" + kind, t.name(), total / w.second / kGB, "GB/s", true);
    RecordDone(mw, w.first, w.second);
    ctx.drop_caches();
    CIUIC_ASSIGN_OR_RETURN(auto r, SeqPass(clients, o, shared, false, per_stream));
    Metric& mr =
        ctx.report->Add("seq", "seq_read_" + kind, t.name(), total / r.second / kGB, "GB/s", true);
    RecordDone(mr, r.first, r.second);
    ctx.progress(fmt::format("{} seq {}: write {:.3f} GB/s, read {:.3f} GB/s ({} x {} x {})",
                             t.name(), kind, total / w.second / kGB, total / r.second / kGB,
                             o.clients, o.threads, FormatSize(per_stream)));
    // Cleanup: the data of this pass.
    if (shared) {
      t.Unlink(t.Path("shared.dat")).IgnoreError();  // best-effort cleanup
    } else {
      for (int c = 0; c < o.clients; ++c) {
        for (int k = 0; k < o.threads; ++k)
          t.Unlink(t.Path(fmt::format("fpp-{}-{}.dat", c, k))).IgnoreError();  // cleanup
      }
    }
  }
  // Through a ring (ciuic): one stream of o.block IOs, 8 in flight, the write fsynced before its
  // time is taken; over memory shared with the OSSes (rows seq_{write,read}_ring) and over
  // ordinary memory, the same IOs over TCP (seq_{write,read}_async, the plain async API).
  const std::string ring_path = t.Path("ring.dat");
  const uint64_t ring_bytes = o.size / o.block * o.block;
  for (bool shared : {false, true}) {
    for (bool write : {true, false}) {
      ctx.drop_caches();
      CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(ring_path, write, ring_bytes));
      const double shm0 = ShmIos(t, write);
      const auto start = Clock::now();
      Status st = f->RingSequential(write, ring_bytes, o.block, 8, shared);
      if (st.code() == StatusCode::kNotSupported) {
        f->Close().IgnoreError();           // nothing was written
        t.Unlink(ring_path).IgnoreError();  // cleanup: not ciuic, no ring rows
        return Status::OK();
      }
      if (st.ok() && write)
        st = f->Fsync();
      const double secs = Seconds(start, Clock::now());
      const double shm1 = ShmIos(t, write);
      Status cs = f->Close();
      if (st.ok())
        st = cs;
      if (!st.ok()) {
        t.Unlink(ring_path).IgnoreError();  // cleanup
        return st;
      }
      const std::string name =
          fmt::format("seq_{}_{}", write ? "write" : "read", shared ? "ring" : "async");
      const double gbs = static_cast<double>(ring_bytes) / secs / kGB;
      Metric& m = ctx.report->Add("seq", name, t.name(), gbs, "GB/s", true);
      // The client splits IOs at stripe boundaries: count OST requests as IOs of a stripe unit
      // at most (the default 1 MiB).
      const double ios = static_cast<double>(ring_bytes) /
                         static_cast<double>(std::min<uint64_t>(o.block, uint64_t{1} << 20));
      RecordCopies(m, shm0, shm1, ios, 2);
      ctx.progress(fmt::format("{} seq {} {}: {:.3f} GB/s ({} in {} IOs, 8 in flight{})", t.name(),
                               shared ? "ring" : "async", write ? "write" : "read", gbs,
                               FormatSize(ring_bytes), FormatSize(o.block),
                               m.extra.contains("shm_share")
                                   ? fmt::format(", {:.0f}% through shared memory",
                                                 m.extra["shm_share"].get<double>() * 100)
                                   : ""));
    }
  }
  t.Unlink(ring_path).IgnoreError();  // cleanup
  return Status::OK();
}

Status RunRandPhase(Target& t, const PhaseContext& ctx) {
  const Options& o = *ctx.options;
  const uint64_t size = RandFileSize(o);
  const std::string path = t.Path("rand.dat");
  CIUIC_RETURN_IF_ERROR(WriteDataFile(t, path, size));
  // The plain API's async reads into ordinary memory, then (ciuic) the same through a ring
  // over shared memory: rows rand_read_4k and rand_read_4k_ring.
  for (bool ring : {false, true}) {
    ctx.drop_caches();
    CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(path, false, 0));
    const double shm0 = ShmIos(t, false);
    const CpuUse cpu0 = ReadCpuUse();
    auto start = Clock::now();
    const uint64_t seed = 1234 + static_cast<uint64_t>(ctx.run);
    auto ops = ring ? f->RingRandomReads(size, o.qd, o.batch, o.rand_seconds, seed)
                    : f->RandomReads(size, o.qd, o.batch, o.rand_seconds, seed);
    double secs = Seconds(start, Clock::now());
    const CpuUse cpu = ReadCpuUse() - cpu0;
    const double shm1 = ShmIos(t, false);
    f->Close().IgnoreError();  // read-only: nothing to lose
    if (ring && ops.status().code() == StatusCode::kNotSupported)
      break;  // not ciuic
    if (!ops.ok()) {
      t.Unlink(path).IgnoreError();  // cleanup
      return ops.status();
    }
    const std::string name = ring ? "rand_read_4k_ring" : "rand_read_4k";
    double iops = static_cast<double>(*ops) / secs;
    Metric& m = ctx.report->Add("rand", name, t.name(), iops, "IOPS", true);
    m.extra["qd"] = o.qd;
    m.extra["batch"] = o.batch;
    m.extra["file_bytes"] = size;
    RecordCopies(m, shm0, shm1, static_cast<double>(*ops), 3);
    ReportCpuPerOp(ctx.report, "rand", name, t.name(), cpu, static_cast<double>(*ops));
    ctx.progress(fmt::format(
        "{} rand 4 KiB{} QD{} batch {}: {:.0f} IOPS over {}; per read {:.1f} us CPU ({:.1f} in "
        "this process), {:.2f} context switches",
        t.name(), ring ? " ring" : "", o.qd, o.batch, iops, FormatSize(size),
        cpu.machine_s * 1e6 / *ops, cpu.self_s * 1e6 / *ops,
        static_cast<double>(cpu.machine_cs) / *ops));
  }
  t.Unlink(path).IgnoreError();  // cleanup
  return Status::OK();
}

Status RunLatencyPhase(Target& t, const PhaseContext& ctx) {
  const Options& o = *ctx.options;
  const int n = o.latency_ops;
  // Small reads: a file big enough that reads are spread (reuses the rand file if present).
  const uint64_t size = std::min<uint64_t>(RandFileSize(o), 256ull << 20);
  const std::string path = t.Path("lat.dat");
  CIUIC_RETURN_IF_ERROR(WriteDataFile(t, path, size));
  ctx.drop_caches();
  std::vector<double> read_us;
  {
    CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(path, false, 0));
    AlignedBuf buf = AlignedZero(4096);
    std::mt19937_64 rng(99 + static_cast<uint64_t>(ctx.run));
    for (int i = 0; i < n; ++i) {
      uint64_t off = (rng() % (size / 4096)) * 4096;
      auto a = Clock::now();
      auto got = f->Pread(buf.get(), 4096, off);
      read_us.push_back(Seconds(a, Clock::now()) * 1e6);
      CIUIC_RETURN_IF_ERROR(got.status());
    }
    f->Close().IgnoreError();  // read-only
  }
  t.Unlink(path).IgnoreError();  // cleanup

  const std::string dir = t.Path(fmt::format("lat-{}", ctx.run));
  t.RemoveAll(dir).IgnoreError();  // leftovers of an interrupted run
  CIUIC_RETURN_IF_ERROR(t.Mkdir(dir));
  std::vector<double> create_us, stat_us, unlink_us;
  auto name = [&](int k) { return fmt::format("{}/f{:07d}", dir, k); };
  auto timed = [&](std::vector<double>* v, const std::function<Status(const std::string&)>& op) {
    for (int k = 0; k < n; ++k) {
      auto a = Clock::now();
      Status s = op(name(k));
      v->push_back(Seconds(a, Clock::now()) * 1e6);
      CIUIC_RETURN_IF_ERROR(s);
    }
    return Status::OK();
  };
  CIUIC_RETURN_IF_ERROR(timed(&create_us, [&](const std::string& p) { return t.CreateEmpty(p); }));
  ctx.drop_caches();
  CIUIC_RETURN_IF_ERROR(timed(&stat_us, [&](const std::string& p) { return t.Stat(p); }));
  CIUIC_RETURN_IF_ERROR(timed(&unlink_us, [&](const std::string& p) { return t.Unlink(p); }));
  t.Rmdir(dir).IgnoreError();  // cleanup

  struct Kind {
    const char* name;
    std::vector<double>* us;
  };
  for (const Kind& k : {Kind{"read_4k", &read_us}, Kind{"create", &create_us},
                        Kind{"stat", &stat_us}, Kind{"unlink", &unlink_us}}) {
    LatencyStats s = ComputeLatency(*k.us);
    const std::string base = std::string("lat_") + k.name;
    ctx.report->Add("latency", base + "_p50", t.name(), s.p50, "us", false);
    ctx.report->Add("latency", base + "_p99", t.name(), s.p99, "us", false);
    ctx.report->Add("latency", base + "_p999", t.name(), s.p999, "us", false);
    if (ctx.run == 0 && (std::strcmp(k.name, "read_4k") == 0 || std::strcmp(k.name, "stat") == 0))
      ctx.report->AddSeries(base, t.name(), CdfPoints(*k.us));
  }
  LatencyStats r = ComputeLatency(read_us);
  LatencyStats s = ComputeLatency(stat_us);
  ctx.progress(fmt::format(
      "{} latency: 4 KiB read p50 {:.1f} / p99 {:.1f} / p99.9 {:.1f} us; stat p50 {:.1f} / p99 "
      "{:.1f} us ({} ops each)",
      t.name(), r.p50, r.p99, r.p999, s.p50, s.p99, n));
  return Status::OK();
}

Status RunMetaPhase(Target& t, const PhaseContext& ctx) {
  const Options& o = *ctx.options;
  std::vector<std::unique_ptr<Target>> owned;
  CIUIC_ASSIGN_OR_RETURN(auto clients, Clients(t, o.meta_clients, &owned));
  const int nc = o.meta_clients;
  const int n = o.meta_files;
  const std::string root = t.Path(fmt::format("meta-{}", ctx.run));
  t.RemoveAll(root).IgnoreError();  // leftovers of an interrupted run
  for (bool shared : {true, false}) {
    const std::string kind = shared ? "shared" : "perclient";
    auto dir_of = [&](int c) {
      return shared ? root + "/shared" : fmt::format("{}/client{}", root, c);
    };
    for (int c = 0; c < (shared ? 1 : nc); ++c)
      CIUIC_RETURN_IF_ERROR(t.Mkdir(dir_of(c)));
    auto name = [&](int c, int k) { return fmt::format("{}/c{}-f{:07d}", dir_of(c), c, k); };
    ctx.drop_caches();
    // One step = every client does its part; the step's time ends when the last client is done.
    // The CPU time and context switches of each step go to `cpu[op]`.
    enum { kCreate, kStat, kReaddir, kUnlink };
    CpuUse cpu[4];
    int op = kCreate;
    auto step = [&](const std::function<Status(Target&, int)>& fn) -> Result<double> {
      const CpuUse c0 = ReadCpuUse();
      auto a = Clock::now();
      CIUIC_RETURN_IF_ERROR(
          RunThreads(nc, [&](int c) { return fn(*clients[static_cast<size_t>(c)], c); }));
      const double secs = Seconds(a, Clock::now());
      cpu[op++] = ReadCpuUse() - c0;
      return secs;
    };
    CIUIC_ASSIGN_OR_RETURN(double tc, step([&](Target& ct, int c) -> Status {
                             for (int k = 0; k < n; ++k)
                               CIUIC_RETURN_IF_ERROR(ct.CreateEmpty(name(c, k)));
                             return Status::OK();
                           }));
    CIUIC_ASSIGN_OR_RETURN(double ts, step([&](Target& ct, int c) -> Status {
                             for (int k = 0; k < n; ++k)
                               CIUIC_RETURN_IF_ERROR(ct.Stat(name(c, k)));
                             return Status::OK();
                           }));
    size_t listed = 0;
    std::mutex mu;
    CIUIC_ASSIGN_OR_RETURN(double tr, step([&](Target& ct, int c) -> Status {
                             CIUIC_ASSIGN_OR_RETURN(size_t got, ct.ReadDir(dir_of(c)));
                             size_t want = static_cast<size_t>(shared ? n * nc : n);
                             if (got != want)
                               return Status::IoError(fmt::format(
                                   "readdir {}: {} entries, expected {}", dir_of(c), got, want));
                             std::lock_guard<std::mutex> g(mu);
                             listed += got;
                             return Status::OK();
                           }));
    CIUIC_ASSIGN_OR_RETURN(double tu, step([&](Target& ct, int c) -> Status {
                             for (int k = 0; k < n; ++k)
                               CIUIC_RETURN_IF_ERROR(ct.Unlink(name(c, k)));
                             return Status::OK();
                           }));
    const double ops = static_cast<double>(n) * nc;
    for (auto [i, what] : {std::pair{kCreate, "create"}, {kStat, "stat"}, {kUnlink, "unlink"}})
      ReportCpuPerOp(ctx.report, "meta", fmt::format("meta_{}_{}", what, kind), t.name(), cpu[i],
                     ops);
    ctx.report->Add("meta", "meta_create_" + kind, t.name(), ops / tc, "ops/s", true);
    ctx.report->Add("meta", "meta_stat_" + kind, t.name(), ops / ts, "ops/s", true);
    ctx.report->Add("meta", "meta_readdir_" + kind, t.name(), static_cast<double>(listed) / tr,
                    "entries/s", true);
    ctx.report->Add("meta", "meta_unlink_" + kind, t.name(), ops / tu, "ops/s", true);
    double all = 3 * ops / (tc + ts + tu);
    ctx.report->Add("meta", "meta_all_" + kind, t.name(), all, "ops/s", true);
    ctx.progress(fmt::format(
        "{} meta {} ({} clients x {} files): create {:.0f}, stat {:.0f}, readdir {:.0f} "
        "entries/s, unlink {:.0f}; all {:.0f} ops/s",
        t.name(), kind, nc, n, ops / tc, ops / ts, static_cast<double>(listed) / tr, ops / tu,
        all));
  }
  t.RemoveAll(root).IgnoreError();  // cleanup
  return Status::OK();
}

}  // namespace ciuic::bench
