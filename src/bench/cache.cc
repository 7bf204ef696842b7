#include "bench/cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/parallel.h"
#include "ciuic/client.h"
#include "client/node_cache.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "net/http_server.h"

namespace ciuic::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kIo = 1u << 20;  // request size of the sequential reads
constexpr uint64_t kSmall = 4096;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Chunk `i` of the file: a xorshift stream seeded by i.
void Fill(uint64_t i, char* buf, size_t n) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
  auto* w = reinterpret_cast<uint64_t*>(buf);
  for (size_t k = 0; k < n / 8; ++k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w[k] = x;
  }
}

}  // namespace

Result<double> SumOssMetric(const std::string& cluster_file, const std::string& name) {
  const fs::path run = fs::path(cluster_file).parent_path() / "run";
  std::error_code ec;
  double total = 0;
  int found = 0;
  for (const auto& e : fs::directory_iterator(run, ec)) {
    const std::string file = e.path().filename().string();
    if (file.rfind("oss", 0) != 0 || file.find(".metrics_port") == std::string::npos)
      continue;
    int port = 0;
    {
      FILE* f = std::fopen(e.path().c_str(), "r");
      if (f == nullptr || std::fscanf(f, "%d", &port) != 1)
        port = 0;
      if (f != nullptr)
        std::fclose(f);
    }
    if (port <= 0)
      continue;
    CIUIC_ASSIGN_OR_RETURN(
        net::HttpResponse r,
        net::HttpGet(HostPort{"127.0.0.1", static_cast<uint16_t>(port)}, "/metrics", 5000));
    // Lines "name value" and "name{labels} value".
    for (size_t at = 0; (at = r.body.find("\n" + name, at)) != std::string::npos;) {
      at += 1 + name.size();
      if (at >= r.body.size() || (r.body[at] != ' ' && r.body[at] != '{'))
        continue;
      const size_t sp = r.body[at] == ' ' ? at : r.body.find("} ", at);
      if (sp == std::string::npos)
        break;
      total += std::strtod(r.body.c_str() + sp + (r.body[sp] == ' ' ? 1 : 2), nullptr);
    }
    ++found;
  }
  if (found == 0)
    return Status::NotFound(fmt::format("no OSS metrics endpoints under {}", run.string()));
  return total;
}

namespace {

// Bytes the cluster's OSSes have read from their OSTs, from their metrics endpoints (the
// cluster directory's run/oss*.metrics_port); NotFound when the cluster has none.
Result<uint64_t> OstReadBytes(const std::string& cluster_file) {
  CIUIC_ASSIGN_OR_RETURN(double b, SumOssMetric(cluster_file, "ciuic_ost_read_bytes_total"));
  return static_cast<uint64_t>(b);
}

Result<std::unique_ptr<Client>> Connect(const CacheOptions& o, const std::string& cache_dir) {
  ClientOptions co;
  co.cluster_file = o.cluster_file;
  co.node_cache_dir = cache_dir;
  co.node_cache_bytes = o.size * 2 + (64u << 20);
  // The cache's size cap bounds what it takes; its free share is not measured here, and a
  // device under it (a full build machine) would empty the cache at every look.
  co.node_cache_min_free_pct = 0;
  return Client::Connect(co);
}

// Reads chunks [0, n) on `readers` threads, each a contiguous share in order (so a local
// file's readahead sees sequential readers), calling read(t, i) for chunk i.
Status ReadShares(int readers, uint64_t n, const std::function<Status(int, uint64_t)>& read) {
  return ParallelFor(readers, static_cast<uint64_t>(readers), [&](int t, uint64_t share) -> Status {
    const uint64_t lo = n * share / static_cast<uint64_t>(readers);
    const uint64_t hi = n * (share + 1) / static_cast<uint64_t>(readers);
    for (uint64_t i = lo; i < hi; ++i)
      CIUIC_RETURN_IF_ERROR(read(t, i));
    return Status::OK();
  });
}

// Reads the whole file through `f` in 1 MiB requests and checks each.
Status ReadSeq(File* f, const CacheOptions& o, const std::vector<uint32_t>& crcs) {
  std::vector<std::vector<char>> bufs(o.readers, std::vector<char>(kIo));
  return ReadShares(o.readers, crcs.size(), [&](int t, uint64_t i) -> Status {
    CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pread(bufs[t].data(), kIo, i * kIo));
    if (n != kIo || Crc32c(bufs[t].data(), kIo) != crcs[i])
      return Status::Corruption(fmt::format("cache: wrong bytes at offset {}", i * kIo));
    return Status::OK();
  });
}

// 4 KiB reads at random aligned offsets on `threads` threads for `seconds`: IOPS. `read` reads
// 4 KiB at an offset into a buffer.
Result<double> RandIops(const CacheOptions& o,
                        const std::function<Result<size_t>(char*, uint64_t)>& read) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  Status first;
  std::mutex mu;
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int t = 0; t < o.rand_threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
      std::vector<char> buf(kSmall);
      while (!stop.load()) {
        const uint64_t off = (rng() % (o.size / kSmall)) * kSmall;
        Result<size_t> n = read(buf.data(), off);
        if (!n.ok() || *n != kSmall) {
          std::lock_guard<std::mutex> l(mu);
          if (first.ok())
            first = n.ok() ? Status::IoError("cache: short 4 KiB read") : n.status();
          stop = true;
          break;
        }
        ops.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.rand_seconds));
  stop = true;
  for (auto& t : ts)
    t.join();
  CIUIC_RETURN_IF_ERROR(first);
  return static_cast<double>(ops.load()) / Seconds(t0, Clock::now());
}

// Three shuffled epochs over a data set of 1 MiB files twice the cache's size, with `plan` (each
// epoch tells the cache its order and the next epoch's, as a data loader knows them from its
// seed) or without (LRU). Adds the hit ratio of epochs 2 and 3, from the cache's shared
// counters.
Status RunEpochs(const CacheOptions& o,
                 const std::vector<std::string>& files,
                 const std::string& cache_dir,
                 bool plan,
                 Report* report) {
  std::error_code ec;
  fs::remove_all(cache_dir, ec);
  const uint64_t per_file = kIo + 48 + 4 * (kIo / 4096);  // a cached block's file
  ClientOptions co;
  co.cluster_file = o.cluster_file;
  co.node_cache_dir = cache_dir;
  co.node_cache_bytes = per_file * files.size() / 2;
  co.node_cache_min_free_pct = 0;  // as Connect's
  CIUIC_ASSIGN_OR_RETURN(auto client, Client::Connect(co));
  client::NodeCacheOptions no;
  no.dir = cache_dir;
  no.max_bytes = co.node_cache_bytes;
  no.min_free_ratio = 0;
  CIUIC_ASSIGN_OR_RETURN(auto counters, client::NodeCache::Open(no));
  auto order_of = [&](int epoch) {
    std::vector<size_t> order(files.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
    return order;
  };
  std::vector<char> buf(kIo);
  for (int epoch = 0; epoch < 3; ++epoch) {
    const std::vector<size_t> order = order_of(epoch);
    if (plan) {
      std::vector<Client::PlannedRead> reads;
      for (int e : {epoch, epoch + 1}) {
        for (size_t i : order_of(e))
          reads.push_back(Client::PlannedRead{files[i], 0, kIo, FileId{}, 0});
      }
      CIUIC_RETURN_IF_ERROR(client->SetNodeCachePlan(reads));
    }
    CIUIC_ASSIGN_OR_RETURN(client::NodeCacheStats before, counters->Stats());
    for (size_t i : order) {
      CIUIC_ASSIGN_OR_RETURN(auto f, client->Open(files[i], O_RDONLY));
      CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pread(buf.data(), kIo, 0));
      if (n != kIo)
        return Status::IoError(fmt::format("cache: short read of {}", files[i]));
      CIUIC_RETURN_IF_ERROR(f->Close());
    }
    CIUIC_ASSIGN_OR_RETURN(client::NodeCacheStats after, counters->Stats());
    if (epoch == 0)
      continue;  // the first epoch fills an empty cache: no hit either way
    const double hits = static_cast<double>(after.counters.hits - before.counters.hits);
    const double fills = static_cast<double>(after.counters.fills - before.counters.fills);
    report
        ->Add("cache", fmt::format("cache_epoch{}_hits_{}", epoch + 1, plan ? "plan" : "lru"),
              "ciuic", hits + fills > 0 ? hits / (hits + fills) : 0, "ratio", true)
        .note = fmt::format("{} files of 1 MiB read in a shuffled order, cache of half of them",
                            files.size());
  }
  fs::remove_all(cache_dir, ec);
  return Status::OK();
}

}  // namespace

Status RunCachePhase(const CacheOptions& o, Report* report) {
  if (o.size == 0 || o.size % kIo != 0)
    return Status::InvalidArgument(
        fmt::format("cache: size {} is not a multiple of 1 MiB", o.size));
  const std::string cache_dir = fmt::format("{}/node-cache-run{}", o.work_dir, o.run);
  const std::string local = fmt::format("{}/cache-local-run{}.bin", o.work_dir, o.run);
  std::error_code ec;
  fs::remove_all(cache_dir, ec);
  struct Cleanup {
    std::string a, b;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(a, e);
      fs::remove(b, e);
    }
  } cleanup{cache_dir, local};

  CIUIC_ASSIGN_OR_RETURN(auto writer, Connect(o, "none"));
  const std::string dir = "/ciuic-bench-cache";
  const std::string path = fmt::format("{}/run{}.bin", dir, o.run);
  Status ms = writer->Mkdir(dir, 0755);
  if (!ms.ok() && ms.code() != StatusCode::kAlreadyExists)
    return ms;
  writer->Unlink(path).IgnoreError();
  const uint64_t chunks = o.size / kIo;
  std::vector<uint32_t> crcs(chunks);
  o.progress(fmt::format("cache: writing {} MiB to ciuic and to the local disk", o.size >> 20));
  {
    OpenOptions oo;
    oo.size_hint = o.size;
    CIUIC_ASSIGN_OR_RETURN(auto f, writer->Open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644, oo));
    const int fd = ::open(local.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      return Status::FromErrno(errno, "cache: creating " + local);
    std::vector<char> buf(kIo);
    Status st;
    for (uint64_t i = 0; i < chunks && st.ok(); ++i) {
      Fill(i, buf.data(), buf.size());
      crcs[i] = Crc32c(buf.data(), buf.size());
      Result<size_t> n = f->Pwrite(buf.data(), buf.size(), i * kIo);
      if (!n.ok())
        st = n.status();
      else if (::pwrite(fd, buf.data(), buf.size(), static_cast<off_t>(i * kIo)) !=
               static_cast<ssize_t>(kIo))
        st = Status::FromErrno(errno, "cache: writing " + local);
    }
    if (st.ok() && ::fsync(fd) != 0)
      st = Status::FromErrno(errno, "cache: fsync " + local);
    ::close(fd);
    CIUIC_RETURN_IF_ERROR(st);
    CIUIC_RETURN_IF_ERROR(f->Fsync());
    CIUIC_RETURN_IF_ERROR(f->Close());
  }
  const double gb = static_cast<double>(o.size) / 1e9;

  // Fill, then hits, through one cache.
  CIUIC_ASSIGN_OR_RETURN(auto reader, Connect(o, cache_dir));
  for (const char* what : {"cache_fill", "cache_hit_seq"}) {
    o.drop_caches();
    const auto t0 = Clock::now();
    CIUIC_ASSIGN_OR_RETURN(auto f, reader->Open(path, O_RDONLY));
    CIUIC_RETURN_IF_ERROR(ReadSeq(f.get(), o, crcs));
    CIUIC_RETURN_IF_ERROR(f->Close());
    report->Add("cache", what, "ciuic", gb / Seconds(t0, Clock::now()), "GB/s", true);
  }
  o.drop_caches();
  {
    const int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return Status::FromErrno(errno, "cache: opening " + local);
    std::vector<std::vector<char>> bufs(o.readers, std::vector<char>(kIo));
    const auto t0 = Clock::now();
    Status st = ReadShares(o.readers, chunks, [&](int t, uint64_t i) -> Status {
      if (::pread(fd, bufs[t].data(), kIo, static_cast<off_t>(i * kIo)) !=
              static_cast<ssize_t>(kIo) ||
          Crc32c(bufs[t].data(), kIo) != crcs[i])
        return Status::Corruption(fmt::format("cache: local file wrong at {}", i * kIo));
      return Status::OK();
    });
    const double local_gbs = gb / Seconds(t0, Clock::now());
    ::close(fd);
    CIUIC_RETURN_IF_ERROR(st);
    report->Add("cache", "local_seq", "local", local_gbs, "GB/s", true);
    const Metric* hit = report->Find("cache_hit_seq", "ciuic");
    report->Add("cache", "cache_hit_seq_vs_local", "ciuic", hit->runs.back() / local_gbs, "ratio",
                true);
  }

  // 4 KiB random reads: cache hits against the local file.
  o.progress("cache: 4 KiB random reads, node cache hits and the local disk");
  {
    o.drop_caches();
    CIUIC_ASSIGN_OR_RETURN(auto f, reader->Open(path, O_RDONLY));
    CIUIC_ASSIGN_OR_RETURN(double cache_iops, RandIops(o, [&](char* b, uint64_t off) {
                             return f->Pread(b, kSmall, off);
                           }));
    CIUIC_RETURN_IF_ERROR(f->Close());
    o.drop_caches();
    const int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return Status::FromErrno(errno, "cache: opening " + local);
    Result<double> local_iops = RandIops(o, [&](char* b, uint64_t off) -> Result<size_t> {
      const ssize_t n = ::pread(fd, b, kSmall, static_cast<off_t>(off));
      if (n < 0)
        return Status::FromErrno(errno, "cache: local read");
      return static_cast<size_t>(n);
    });
    ::close(fd);
    CIUIC_RETURN_IF_ERROR(local_iops.status());
    report->Add("cache", "cache_hit_rand_4k", "ciuic", cache_iops, "IOPS", true).note =
        fmt::format("{} threads, one 4 KiB read each in flight", o.rand_threads);
    report->Add("cache", "local_rand_4k", "local", *local_iops, "IOPS", true);
    report->Add("cache", "cache_hit_rand_vs_local", "ciuic", cache_iops / *local_iops, "ratio",
                true);
  }
  reader.reset();

  // N clients of this machine reading the file at once (ranks loading one checkpoint).
  Result<uint64_t> probe = OstReadBytes(o.cluster_file);
  if (!probe.ok()) {
    report->Note("cache: ranks not measured: " + probe.status().message());
  } else {
    for (int n : o.ranks) {
      for (bool cached : {true, false}) {
        if (!cached && n == 1)
          continue;
        o.progress(fmt::format("cache: {} clients reading the file at once, {}", n,
                               cached ? "through an empty node cache" : "without it"));
        fs::remove_all(cache_dir, ec);
        std::vector<std::unique_ptr<Client>> clients;
        for (int i = 0; i < n; ++i) {
          CIUIC_ASSIGN_OR_RETURN(auto c, Connect(o, cached ? cache_dir : "none"));
          clients.push_back(std::move(c));
        }
        o.drop_caches();
        CIUIC_ASSIGN_OR_RETURN(uint64_t before, OstReadBytes(o.cluster_file));
        const auto t0 = Clock::now();
        std::vector<Status> results(static_cast<size_t>(n));
        std::vector<std::thread> ts;
        for (int i = 0; i < n; ++i) {
          ts.emplace_back([&, i] {
            Result<std::unique_ptr<File>> f = clients[i]->Open(path, O_RDONLY);
            results[i] = f.ok() ? ReadSeq(f->get(), o, crcs) : f.status();
            if (f.ok() && results[i].ok())
              results[i] = (*f)->Close();
          });
        }
        for (auto& t : ts)
          t.join();
        const double secs = Seconds(t0, Clock::now());
        for (const Status& s : results)
          CIUIC_RETURN_IF_ERROR(s);
        CIUIC_ASSIGN_OR_RETURN(uint64_t after, OstReadBytes(o.cluster_file));
        const std::string prefix = cached ? "cache" : "nocache";
        report->Add("cache", fmt::format("{}_ranks{}_ost_bytes", prefix, n), "ciuic",
                    static_cast<double>(after - before) / static_cast<double>(o.size), "x file",
                    false);
        report->Add("cache", fmt::format("{}_ranks{}_time", prefix, n), "ciuic", secs, "s", false);
      }
      // The same readers over the local file with every byte in the page cache (read once
      // before): what copying and checking N loads costs this machine without any storage.
      const int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        return Status::FromErrno(errno, "cache: opening " + local);
      auto read_local = [&]() -> Status {
        std::vector<std::vector<char>> bufs(o.readers, std::vector<char>(kIo));
        return ReadShares(o.readers, chunks, [&](int t, uint64_t i) -> Status {
          if (::pread(fd, bufs[t].data(), kIo, static_cast<off_t>(i * kIo)) !=
                  static_cast<ssize_t>(kIo) ||
              Crc32c(bufs[t].data(), kIo) != crcs[i])
            return Status::Corruption(fmt::format("cache: local file wrong at {}", i * kIo));
          return Status::OK();
        });
      };
      Status ls = read_local();
      const auto t0 = Clock::now();
      std::vector<Status> results(static_cast<size_t>(n));
      std::vector<std::thread> ts;
      for (int i = 0; ls.ok() && i < n; ++i)
        ts.emplace_back([&, i] { results[i] = read_local(); });
      for (auto& t : ts)
        t.join();
      const double secs = Seconds(t0, Clock::now());
      ::close(fd);
      CIUIC_RETURN_IF_ERROR(ls);
      for (const Status& s : results)
        CIUIC_RETURN_IF_ERROR(s);
      report->Add("cache", fmt::format("local_ranks{}_pagecache_time", n), "local", secs, "s",
                  false);
    }
  }
  CIUIC_RETURN_IF_ERROR(writer->Unlink(path));

  // Shuffled epochs over a data set twice the cache: least recently used against the plan.
  const size_t nfiles = std::max<size_t>(16, o.size / 4 / kIo);
  o.progress(fmt::format("cache: 3 shuffled epochs over {} files, LRU and the epoch plan", nfiles));
  std::vector<std::string> files;
  {
    std::vector<char> buf(kIo);
    for (size_t i = 0; i < nfiles; ++i) {
      files.push_back(fmt::format("{}/run{}-sample{:04}", dir, o.run, i));
      Fill(i + 1000000, buf.data(), buf.size());
      CIUIC_ASSIGN_OR_RETURN(auto f,
                             writer->Open(files.back(), O_CREAT | O_WRONLY | O_TRUNC, 0644));
      CIUIC_ASSIGN_OR_RETURN(size_t n, f->Pwrite(buf.data(), buf.size(), 0));
      (void)n;
      CIUIC_RETURN_IF_ERROR(f->Close());
    }
  }
  Status es = RunEpochs(o, files, cache_dir, false, report);
  if (es.ok())
    es = RunEpochs(o, files, cache_dir, true, report);
  for (const std::string& f : files)
    writer->Unlink(f).IgnoreError();  // removing the data set; a leftover is harmless
  CIUIC_RETURN_IF_ERROR(es);
  for (int epoch = 2; epoch <= 3; ++epoch) {
    const Metric* lru = report->Find(fmt::format("cache_epoch{}_hits_lru", epoch), "ciuic");
    const Metric* plan = report->Find(fmt::format("cache_epoch{}_hits_plan", epoch), "ciuic");
    if (lru != nullptr && plan != nullptr && lru->runs.back() > 0) {
      report->Add("cache", fmt::format("cache_epoch{}_plan_vs_lru", epoch), "ciuic",
                  plan->runs.back() / lru->runs.back(), "ratio", true);
    }
  }
  return Status::OK();
}

}  // namespace ciuic::bench
