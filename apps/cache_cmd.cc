#include "cache_cmd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/config.h"
#include "hsm_cmd.h"
#include "progress.h"

namespace ciuic::cli {
namespace {

constexpr size_t kWarmParallel = 4;
constexpr size_t kWarmChunk = size_t{8} << 20;

Result<std::unique_ptr<client::NodeCache>> OpenCache(const client::NodeCacheOptions& o) {
  if (o.dir.empty()) {
    return Status::InvalidArgument(
        "no node cache is configured: `ciuic cluster up DIR --node-cache CACHE_DIR`, or "
        "CIUIC_NODE_CACHE=CACHE_DIR");
  }
  return client::NodeCache::Open(o);
}

}  // namespace

int CmdCacheStatus(const client::NodeCacheOptions& o) {
  auto nc = OpenCache(o);
  if (!nc.ok()) {
    fmt::print(stderr, "ciuic: cache status: {}\n", nc.status().message());
    return 1;
  }
  auto st = (*nc)->Stats();
  if (!st.ok()) {
    fmt::print(stderr, "ciuic: cache status: {}\n", st.status().message());
    return 1;
  }
  fmt::print("node cache: {}\n", o.dir);
  fmt::print("cached: {} in {} blocks of at most {} (cap {})\n", FormatSize(st->bytes), st->blocks,
             FormatSize(client::kNodeCacheBlock), FormatSize(st->max_bytes));
  const client::NodeCacheCounters& k = st->counters;
  const uint64_t reads = k.hits + k.fills;
  fmt::print(
      "since it was made, all processes: {} hits ({}), {} blocks fetched from the OSTs ({}){}, "
      "{} blocks written through ({}), {} corrupt blocks removed, {} evicted, {} failed "
      "stores\n",
      k.hits, FormatSize(k.hit_bytes), k.fills, FormatSize(k.fill_bytes),
      reads == 0 ? std::string()
                 : fmt::format("; hit ratio {:.1f}%",
                               100.0 * static_cast<double>(k.hits) / static_cast<double>(reads)),
      k.written, FormatSize(k.written_bytes), k.corrupt, FormatSize(k.evicted_bytes),
      k.put_failures);
  if (st->device_total > 0) {
    fmt::print("device: {} free of {} ({:.0f}% free; at least {:.0f}% is kept free)\n",
               FormatSize(st->device_free), FormatSize(st->device_total),
               100.0 * static_cast<double>(st->device_free) / static_cast<double>(st->device_total),
               100.0 * o.min_free_ratio);
  }
  return 0;
}

int CmdCacheDrop(const client::NodeCacheOptions& o,
                 Client* c,
                 const std::vector<std::string>& paths,
                 bool recursive) {
  auto nc = OpenCache(o);
  if (!nc.ok()) {
    fmt::print(stderr, "ciuic: cache drop: {}\n", nc.status().message());
    return 1;
  }
  if (paths.empty()) {
    auto n = (*nc)->Drop();
    if (!n.ok()) {
      fmt::print(stderr, "ciuic: cache drop: {}\n", n.status().message());
      return 1;
    }
    fmt::print("dropped {} from the node cache\n", FormatSize(*n));
    return 0;
  }
  int rc = 0;
  uint64_t total = 0;
  for (const std::string& p : paths) {
    std::vector<std::string> files;
    std::vector<uint64_t> sizes;
    Status st = CollectFiles(*c, p, recursive, &files, &sizes);
    for (const std::string& f : files) {
      Result<FileStat> s = c->Stat(f);
      Result<uint64_t> n =
          s.ok() ? (*nc)->Drop(Fid{s->ino, s->fid_mds, s->fid_ver}) : Result<uint64_t>(s.status());
      if (n.ok())
        total += *n;
      else if (st.ok())
        st = n.status();
    }
    if (!st.ok()) {
      fmt::print(stderr, "ciuic: cache drop: {}\n", st.message());
      rc = 1;
    }
  }
  fmt::print("dropped {} from the node cache\n", FormatSize(total));
  return rc;
}

int CmdCacheWarm(Client& c, const std::vector<std::string>& paths, bool recursive) {
  int rc = 0;
  std::vector<std::string> files;
  std::vector<uint64_t> sizes;
  for (const std::string& p : paths) {
    Status st = CollectFiles(c, p, recursive, &files, &sizes);
    if (!st.ok()) {
      fmt::print(stderr, "ciuic: cache warm: {}\n", st.message());
      rc = 1;
    }
  }
  uint64_t total = 0;
  for (uint64_t n : sizes)
    total += n;
  Progress progress("cache warm", total, files.size());
  std::vector<Status> results(files.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    std::unique_ptr<char[]> buf(new char[kWarmChunk]);
    for (size_t i = next++; i < files.size(); i = next++) {
      auto f = c.Open(files[i], O_RDONLY);
      if (!f.ok()) {
        results[i] = f.status();
        continue;
      }
      for (uint64_t off = 0;;) {
        Result<size_t> n = (*f)->Pread(buf.get(), kWarmChunk, off);
        if (!n.ok()) {
          results[i] = n.status();
          break;
        }
        if (*n == 0)
          break;
        off += *n;
        progress.Add(*n);
      }
      Status cl = (*f)->Close();
      if (results[i].ok())
        results[i] = cl;
      progress.AddItem();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < std::min(kWarmParallel, files.size()); ++i)
    threads.emplace_back(worker);
  for (auto& t : threads)
    t.join();
  progress.Finish();
  size_t ok = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (results[i].ok()) {
      ++ok;
    } else {
      const std::string& m = results[i].message();
      fmt::print(stderr, "ciuic: cache warm: {}\n",
                 m.find(files[i]) == std::string::npos ? files[i] + ": " + m : m);
      rc = 1;
    }
  }
  fmt::print("warmed {} of {} files ({}) in {:.1f} s\n", ok, files.size(),
             FormatSize(progress.bytes()), progress.Seconds());
  return rc;
}

namespace {

// Sets the opt-out of `path` and (with `recursive`) of everything below it; counts the entries.
Status ExcludeTree(Client& c, const std::string& path, bool recursive, bool excluded, size_t* n) {
  CIUIC_RETURN_IF_ERROR(c.SetNodeCacheExcluded(path, excluded));
  ++*n;
  if (!recursive)
    return Status::OK();
  CIUIC_ASSIGN_OR_RETURN(FileStat st, c.Stat(path));
  if (!st.is_dir())
    return Status::OK();
  CIUIC_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, c.ReadDir(path));
  for (const DirEntry& e : entries) {
    const uint32_t type = e.type & S_IFMT;
    if (e.name == "." || e.name == ".." || (type != S_IFDIR && type != S_IFREG))
      continue;
    const std::string child = path == "/" ? "/" + e.name : path + "/" + e.name;
    CIUIC_RETURN_IF_ERROR(ExcludeTree(c, child, true, excluded, n));
  }
  return Status::OK();
}

}  // namespace

int CmdCacheExclude(Client& c,
                    const std::vector<std::string>& paths,
                    bool recursive,
                    bool excluded) {
  int rc = 0;
  size_t n = 0;
  const char* verb = excluded ? "exclude" : "include";
  for (const std::string& p : paths) {
    Status st = ExcludeTree(c, p, recursive, excluded, &n);
    if (!st.ok()) {
      fmt::print(stderr, "ciuic: cache {}: {}\n", verb, st.message());
      rc = 1;
    }
  }
  fmt::print("{} {} entr{} {} the node cache\n", excluded ? "excluded" : "included", n,
             n == 1 ? "y" : "ies", excluded ? "from" : "in");
  return rc;
}

}  // namespace ciuic::cli
