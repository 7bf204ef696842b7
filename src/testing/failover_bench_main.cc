// ciuic-failover-bench: sequential throughput of a replicated cluster through an OSS failure and
// the resync that follows (docs/design.md "Replication", issue 15's benchmark).
//
// Usage: ciuic-failover-bench [--mode read|write] [--oss N] [--replicas R] [--size BYTES]
//                             [--down-s S] [--resync-mbps M] [--idle-resync] [--trace]
//                             [--bin-dir DIR] [--dir DIR]
//
// Starts `ciuic cluster up DIR --oss N --osts-per-oss 1 --replicas R`, writes one file of
// --size, then reads it (or overwrites it) sequentially in 1 MiB requests without pause while:
// 2 s pass ("before"); OSS 1 is killed with SIGKILL and stays down --down-s seconds, and in the
// write mode until the file was rewritten once after the new chains ("failure");
// it is started again and its copies catch up ("resync", until every chain serves); 2 s more
// ("after"). Prints the throughput of each phase (mean, and the slowest 250 ms window), the time
// from the kill to the chains without the dead OSS, and from its return to every chain serving,
// and the copy rate of the resync itself (from the OSS logs: the first head's start to the last
// head's end). --idle-resync stops the load before the OSS returns, so the resync runs alone;
// --resync-mbps is the OSSes' bound on it (`cluster up --resync-mbps`; 0 = none); --trace
// prints every 250 ms window.
// Exits 1 when any request failed: with copies, a failure must cost the application nothing.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ciuic/client.h"

namespace {

namespace fs = std::filesystem;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Args {
  std::string mode = "read";
  int oss = 3;
  int replicas = 2;
  uint64_t size = 512ull << 20;
  int down_s = 8;
  int resync_mbps = -1;  // -1: the cluster's default
  bool idle_resync = false;
  bool trace = false;  // print every 250 ms window
  std::string bin_dir;
  std::string dir;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "ciuic-failover-bench: %s\nusage: ciuic-failover-bench [--mode read|write] "
               "[--oss N] [--replicas R] [--size BYTES] [--down-s S] [--resync-mbps M] "
               "[--idle-resync] [--trace] [--bin-dir DIR] [--dir DIR]\n",
               why.c_str());
  std::exit(2);
}

uint64_t Number(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  uint64_t n = std::strtoull(v.c_str(), &end, 10);
  uint64_t mult = 1;
  if (end != nullptr && *end != '\0') {
    const std::string suffix = end;
    if (suffix == "K")
      mult = 1ull << 10;
    else if (suffix == "M")
      mult = 1ull << 20;
    else if (suffix == "G")
      mult = 1ull << 30;
    else
      Usage(fmt::format("{} wants a number, not '{}'", flag, v));
  }
  n *= mult;
  if (errno != 0 || v.empty() || n < lo || n > hi)
    Usage(fmt::format("{} wants {}..{}, not '{}'", flag, lo, hi, v));
  return n;
}

// Runs `ciuic ARGS` quietly; its exit code.
int Ciuic(const Args& a, const std::string& args) {
  const std::string cmd =
      fmt::format("'{}/ciuic' {} >>'{}/failover-bench.log' 2>&1", a.bin_dir, args, a.dir);
  return std::system(cmd.c_str());
}

// Sequential 1 MiB requests over the file, round and round, counting bytes and failures.
struct Load {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<bool> stop{false};
  std::string first_error;
  std::mutex mu;
};

void RunLoad(ciuic::Client* c, const Args& a, Load* load) {
  auto f = c->Open("/bench/f", a.mode == "read" ? O_RDONLY : O_WRONLY);
  if (!f.ok()) {
    load->failures++;
    std::lock_guard<std::mutex> lock(load->mu);
    load->first_error = f.status().ToString();
    return;
  }
  std::string buf(1 << 20, 'w');
  uint64_t off = 0, requests = 0;
  while (!load->stop.load()) {
    ciuic::Result<size_t> n = a.mode == "read" ? (*f)->Pread(buf.data(), buf.size(), off)
                                               : (*f)->Pwrite(buf.data(), buf.size(), off);
    if (!n.ok()) {
      load->failures++;
      std::lock_guard<std::mutex> lock(load->mu);
      if (load->first_error.empty())
        load->first_error = n.status().ToString();
      continue;
    }
    load->bytes += *n;
    off += buf.size();
    if (off >= a.size)
      off = 0;
    // Every request writes bytes of its own (a resync then has something to copy).
    const uint64_t seq = ++requests;
    std::memcpy(buf.data(), &seq, sizeof(seq));
  }
  (*f)->Close().IgnoreError();  // the figures are taken; a failed close changes none
}

// Members not serving, over every chain; -1 when the table cannot be read.
int NotServing(ciuic::Client* c) {
  auto chains = c->Chains();
  if (!chains.ok())
    return -1;
  int n = 0;
  for (const auto& ch : *chains) {
    for (const auto& m : ch.members)
      n += m.state == "serving" ? 0 : 1;
  }
  return n;
}

// Bytes the chains' heads copied to OSS 1's members, summed from the MDS log's "caught up"
// lines written after `skip` bytes of it.
uint64_t ResyncBytes(const Args& a, std::streamoff skip) {
  std::ifstream in(a.dir + "/logs/mds.log");
  in.seekg(skip);
  std::string line;
  uint64_t total = 0;
  while (std::getline(in, line)) {
    const auto at = line.find("caught up in chain");
    const auto end = line.find(" bytes copied)");
    if (at == std::string::npos || end == std::string::npos)
      continue;
    const auto start = line.rfind(' ', end - 1);
    total += std::strtoull(line.c_str() + start + 1, nullptr, 10);
  }
  return total;
}

std::streamoff LogSize(const Args& a, const std::string& name = "mds.log") {
  std::error_code ec;
  const auto n = fs::file_size(a.dir + "/logs/" + name, ec);
  return ec ? 0 : static_cast<std::streamoff>(n);
}

// Seconds since the epoch of a log line's "YYYY-MM-DDTHH:MM:SS.ffffff" stamp; -1 when none.
double LineTime(const std::string& line) {
  std::tm tm{};
  int us = 0;
  if (std::sscanf(line.c_str(), "%d-%d-%dT%d:%d:%d.%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &us) != 7)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  return static_cast<double>(std::mktime(&tm)) + us / 1e6;
}

// The machine's CPU time so far from /proc/stat's "cpu" line: {busy, all} in ticks (idle and
// iowait are not busy).
std::pair<uint64_t, uint64_t> CpuTicks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  in >> cpu;
  for (uint64_t& x : v)
    in >> x;
  uint64_t all = 0;
  for (uint64_t x : v)
    all += x;
  return {all - v[3] - v[4], all};
}

struct CopyWindow {
  uint64_t bytes = 0;
  double seconds = 0;
};

// The resync's copying, from the OSS logs written after `marks`: from the first head's
// "comparing" line to the last head's "done" line, and the bytes those report.
CopyWindow ResyncCopies(const Args& a, const std::vector<std::streamoff>& marks) {
  double first = -1, last = -1;
  CopyWindow w;
  for (size_t i = 0; i < marks.size(); ++i) {
    std::ifstream in(fmt::format("{}/logs/oss{}.log", a.dir, i));
    in.seekg(marks[i]);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("oss: resync of OST") == std::string::npos)
        continue;
      const double t = LineTime(line);
      if (line.find(": comparing ") != std::string::npos && t >= 0 && (first < 0 || t < first)) {
        first = t;
      }
      const auto end = line.find(" bytes copied");
      if (line.find(" done: ") != std::string::npos && end != std::string::npos) {
        const auto start = line.rfind(' ', end - 1);
        w.bytes += std::strtoull(line.c_str() + start + 1, nullptr, 10);
        last = std::max(last, t);
      }
    }
  }
  if (first >= 0 && last >= first)
    w.seconds = last - first;
  return w;
}

// The disk's sequential write throughput where the cluster lives: 512 MiB in 1 MiB O_DIRECT
// writes, then fsync; MB/s (0 when it cannot be measured).
double DiskWriteMbps(const Args& a) {
  const std::string path = a.dir + "/disk-probe";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0)
    return 0;
  void* buf = nullptr;
  if (::posix_memalign(&buf, 4096, 1 << 20) != 0) {
    ::close(fd);
    return 0;
  }
  std::memset(buf, 'd', 1 << 20);
  const int64_t t0 = NowMs();
  uint64_t done = 0;
  for (int i = 0; i < 512; ++i) {
    if (::pwrite(fd, buf, 1 << 20, static_cast<off_t>(done)) != (1 << 20))
      break;
    done += 1 << 20;
  }
  ::fsync(fd);
  const int64_t ms = std::max<int64_t>(1, NowMs() - t0);
  ::close(fd);
  ::unlink(path.c_str());
  std::free(buf);
  return static_cast<double>(done) / 1e6 * 1000.0 / static_cast<double>(ms);
}

// The disk's own copy throughput where the cluster lives: a 512 MiB file copied to another
// on the same disk in 1 MiB O_DIRECT requests, a reader and a writer thread overlapped through 8
// buffers, then fsync; MB/s (0 when it cannot be measured). A resync reads and writes every byte
// on the disks of its copies; where they share one disk, this is the most it can do.
double DiskCopyMbps(const Args& a) {
  constexpr int kBlocks = 512, kBufs = 8;
  constexpr size_t kBlock = 1 << 20;
  const std::string src = a.dir + "/disk-copy-src", dst = a.dir + "/disk-copy-dst";
  const int in = ::open(src.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  const int out = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  std::vector<void*> bufs(kBufs, nullptr);
  bool ok = in >= 0 && out >= 0;
  for (void*& b : bufs) {
    ok = ok && ::posix_memalign(&b, 4096, kBlock) == 0;
    if (b != nullptr)
      std::memset(b, 'c', kBlock);
  }
  for (int i = 0; ok && i < kBlocks; ++i)
    ok = ::pwrite(in, bufs[0], kBlock, static_cast<off_t>(i * kBlock)) == kBlock;
  ok = ok && ::fsync(in) == 0;
  double mbps = 0;
  if (ok) {
    std::mutex mu;
    std::condition_variable cv;
    int read_done = 0, written = 0;  // blocks
    std::atomic<bool> failed{false};
    const int64_t t0 = NowMs();
    std::thread reader([&] {
      for (int i = 0; i < kBlocks && !failed; ++i) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return i - written < kBufs || failed; });
        }
        if (::pread(in, bufs[i % kBufs], kBlock, static_cast<off_t>(i * kBlock)) != kBlock)
          failed = true;
        std::lock_guard<std::mutex> lock(mu);
        read_done = i + 1;
        cv.notify_all();
      }
    });
    for (int i = 0; i < kBlocks && !failed; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return read_done > i || failed; });
      }
      if (failed ||
          ::pwrite(out, bufs[i % kBufs], kBlock, static_cast<off_t>(i * kBlock)) != kBlock) {
        failed = true;
      }
      std::lock_guard<std::mutex> lock(mu);
      written = i + 1;
      cv.notify_all();
    }
    reader.join();
    if (!failed && ::fsync(out) == 0) {
      const int64_t ms = std::max<int64_t>(1, NowMs() - t0);
      mbps = static_cast<double>(kBlocks * kBlock) / 1e6 * 1000.0 / static_cast<double>(ms);
    }
  }
  for (void* b : bufs)
    std::free(b);
  if (in >= 0)
    ::close(in);
  if (out >= 0)
    ::close(out);
  ::unlink(src.c_str());
  ::unlink(dst.c_str());
  return mbps;
}

struct Window {
  int64_t t_ms;
  double mbps;
  int phase;
};

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        Usage(f + " needs a value");
      return argv[++i];
    };
    if (f == "--mode") {
      a.mode = value();
      if (a.mode != "read" && a.mode != "write")
        Usage("--mode wants read or write");
    } else if (f == "--oss") {
      a.oss = static_cast<int>(Number(f, value(), 2, 64));
    } else if (f == "--replicas") {
      a.replicas = static_cast<int>(Number(f, value(), 2, 8));
    } else if (f == "--size") {
      a.size = Number(f, value(), 1ull << 20, 1ull << 40);
    } else if (f == "--down-s") {
      a.down_s = static_cast<int>(Number(f, value(), 1, 3600));
    } else if (f == "--resync-mbps") {
      a.resync_mbps = static_cast<int>(Number(f, value(), 0, 1 << 20));
    } else if (f == "--idle-resync") {
      a.idle_resync = true;
    } else if (f == "--trace") {
      a.trace = true;
    } else if (f == "--bin-dir") {
      a.bin_dir = value();
    } else if (f == "--dir") {
      a.dir = value();
    } else if (f == "--help" || f == "-h") {
      Usage("a replicated cluster's throughput through an OSS failure and resync");
    } else {
      Usage(fmt::format("unknown option '{}'", f));
    }
  }
  if (a.replicas > a.oss)
    Usage("--replicas needs at least that many OSSes (--oss)");
  if (a.bin_dir.empty()) {
    std::error_code ec;
    a.bin_dir = fs::read_symlink("/proc/self/exe", ec).parent_path().string();
    if (!fs::exists(a.bin_dir + "/ciuic") && fs::exists(a.bin_dir + "/../../apps/ciuic"))
      a.bin_dir += "/../../apps";
  }
  bool remove_dir = false;
  if (a.dir.empty()) {
    char tmpl[] = "/tmp/ciuic-failover-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
      Usage("cannot make a temporary directory");
    a.dir = tmpl;
    remove_dir = true;
  } else {
    std::error_code ec;
    fs::create_directories(a.dir, ec);
  }
  if (Ciuic(a, fmt::format("cluster up '{}' --oss {} --osts-per-oss 1 --replicas {} "
                           "--timeout 60{}",
                           a.dir, a.oss, a.replicas,
                           a.resync_mbps < 0 ? std::string()
                                             : fmt::format(" --resync-mbps {}", a.resync_mbps))) !=
      0) {
    std::fprintf(stderr, "ciuic-failover-bench: cluster up failed (see %s/failover-bench.log)\n",
                 a.dir.c_str());
    return 1;
  }
  int rc = 0;
  {
    ciuic::ClientOptions co;
    co.cluster_file = a.dir + "/cluster.conf";
    auto c = ciuic::Client::Connect(co);
    auto watch = ciuic::Client::Connect(co);
    if (!c.ok() || !watch.ok()) {
      std::fprintf(stderr, "ciuic-failover-bench: cannot connect\n");
      return 1;
    }
    // The file, written once (the read mode's data; the write mode's first pass).
    (*c)->Mkdir("/bench", 0755).IgnoreError();  // there from an earlier run is fine
    {
      auto f = (*c)->Open("/bench/f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
      std::string buf(1 << 20, 'a');
      for (uint64_t off = 0; f.ok() && off < a.size; off += buf.size()) {
        if (!(*f)->Pwrite(buf.data(), buf.size(), off).ok())
          break;
      }
      if (!f.ok() || !(*f)->Fsync().ok() || !(*f)->Close().ok()) {
        std::fprintf(stderr, "ciuic-failover-bench: writing the file failed\n");
        return 1;
      }
    }
    Load load;
    std::vector<Window> windows;
    std::atomic<int> phase{0};
    std::atomic<bool> sampling{true};
    std::thread io([&] { RunLoad(c->get(), a, &load); });
    std::thread sampler([&] {
      uint64_t last = load.bytes.load();
      int64_t t = NowMs();
      const int64_t t0 = t;
      while (sampling.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        const int64_t now = NowMs();
        const uint64_t b = load.bytes.load();
        windows.push_back(Window{
            now - t0, static_cast<double>(b - last) / 1e6 * 1000.0 / static_cast<double>(now - t),
            phase.load()});
        last = b;
        t = now;
      }
    });
    std::this_thread::sleep_for(std::chrono::seconds(2));
    // Failure: kill -9 of OSS 1.
    long pid = 0;
    std::ifstream(a.dir + "/run/oss1.pid") >> pid;
    const int64_t t_kill = NowMs();
    phase = 1;
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), SIGKILL) != 0) {
      std::fprintf(stderr, "ciuic-failover-bench: cannot kill oss1\n");
      rc = 1;
    }
    int64_t t_chains = -1;
    // Writes keep the OSS down until they have rewritten the whole file once after the new
    // chains (so it misses --size bytes of writes on each chain it is in), at most 300 s.
    uint64_t bytes_at_chains = 0;
    auto missed_enough = [&] {
      return a.mode != "write" ||
             (t_chains >= 0 && load.bytes.load() - bytes_at_chains >= a.size) ||
             NowMs() - t_kill > 300000;
    };
    while (NowMs() - t_kill < int64_t{a.down_s} * 1000 || !missed_enough()) {
      if (t_chains < 0 && NotServing(watch->get()) > 0) {
        t_chains = NowMs();
        bytes_at_chains = load.bytes.load();
      }
      if (t_chains < 0 && NotServing(watch->get()) > 0)
        t_chains = NowMs();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Return: `cluster up` starts what is not running; its copies catch up.
    if (a.idle_resync) {
      load.stop = true;
      io.join();
    }
    const std::streamoff log_mark = LogSize(a);
    std::vector<std::streamoff> oss_marks;
    for (int i = 0; i < a.oss; ++i)
      oss_marks.push_back(LogSize(a, fmt::format("oss{}.log", i)));
    const int64_t t_back = NowMs();
    const auto cpu_back = CpuTicks();
    phase = 2;
    if (Ciuic(a, fmt::format("cluster up '{}' --timeout 60", a.dir)) != 0)
      rc = 1;
    int64_t t_synced = -1;
    std::pair<uint64_t, uint64_t> cpu_synced;
    while (NowMs() - t_back < 300000) {
      if (NotServing(watch->get()) == 0) {
        t_synced = NowMs();
        cpu_synced = CpuTicks();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    phase = 3;
    std::this_thread::sleep_for(std::chrono::seconds(2));
    if (!a.idle_resync) {
      load.stop = true;
      io.join();
    }
    sampling = false;
    sampler.join();

    const char* names[] = {"before", "failure", "resync", "after"};
    if (a.trace) {
      for (const Window& w : windows)
        fmt::print("{:>8.2f} s {:<8} {:>6.0f} MB/s\n", w.t_ms / 1000.0, names[w.phase], w.mbps);
    }
    fmt::print("ciuic-failover-bench: {} of a {} MiB file, {} OSSes, {} copies{}\n", a.mode,
               a.size >> 20, a.oss, a.replicas, a.idle_resync ? "; no load during the resync" : "");
    fmt::print("{:<8} {:>8} {:>10} {:>16}\n", "phase", "seconds", "MB/s", "slowest 250 ms");
    for (int p = 0; p < 4; ++p) {
      double sum = 0, slowest = -1;
      int n = 0;
      for (const Window& w : windows) {
        if (w.phase != p)
          continue;
        sum += w.mbps;
        slowest = slowest < 0 ? w.mbps : std::min(slowest, w.mbps);
        ++n;
      }
      fmt::print("{:<8} {:>8.1f} {:>10.0f} {:>16.0f}\n", names[p], n * 0.25, n ? sum / n : 0.0,
                 slowest < 0 ? 0.0 : slowest);
    }
    if (t_chains >= 0) {
      fmt::print("kill -9 of oss1 to chains without it: {:.2f} s\n",
                 static_cast<double>(t_chains - t_kill) / 1000.0);
    } else {
      fmt::print("kill -9 of oss1 to chains without it: not within {} s\n", a.down_s);
    }
    if (t_synced >= 0) {
      const double s = static_cast<double>(t_synced - t_back) / 1000.0;
      const uint64_t copied = ResyncBytes(a, log_mark);
      fmt::print(
          "oss1 back to every chain serving: {:.2f} s; {} MiB copied to it ({:.0f} MB/s "
          "over that time)\n",
          s, copied >> 20, static_cast<double>(copied) / 1e6 / std::max(s, 0.001));
      const uint64_t all = cpu_synced.second - cpu_back.second;
      if (all > 0) {
        fmt::print("CPU busy over that time (all {} cores, every process): {:.0f}%\n",
                   std::thread::hardware_concurrency(),
                   100.0 * static_cast<double>(cpu_synced.first - cpu_back.first) /
                       static_cast<double>(all));
      }
      const CopyWindow cw = ResyncCopies(a, oss_marks);
      if (cw.bytes > 0 && cw.seconds > 0) {
        fmt::print("resync copies: {} MiB in {:.2f} s, first start to last end ({:.0f} MB/s)\n",
                   cw.bytes >> 20, cw.seconds, static_cast<double>(cw.bytes) / 1e6 / cw.seconds);
      }
      const double rate = cw.seconds > 0 ? static_cast<double>(cw.bytes) / 1e6 / cw.seconds : 0;
      const double disk = DiskWriteMbps(a);
      if (disk > 0) {
        fmt::print("the disk's sequential write (512 MiB, O_DIRECT): {:.0f} MB/s", disk);
        if (rate > 0)
          fmt::print("; resync copies at {:.0f}% of it", 100.0 * rate / disk);
        fmt::print("\n");
      }
      const double copy = DiskCopyMbps(a);
      if (copy > 0) {
        fmt::print("the disk's own copy (512 MiB to another file on it, O_DIRECT): {:.0f} MB/s",
                   copy);
        if (rate > 0)
          fmt::print("; resync copies at {:.0f}% of it", 100.0 * rate / copy);
        fmt::print("\n");
      }
    } else {
      fmt::print("oss1 back to every chain serving: not within 300 s\n");
      rc = 1;
    }
    fmt::print("failed requests: {}{}\n", load.failures.load(),
               load.first_error.empty() ? "" : " (first: " + load.first_error + ")");
    if (load.failures.load() != 0)
      rc = 1;
  }
  Ciuic(a, fmt::format("cluster down '{}'", a.dir));
  if (remove_dir && rc == 0) {
    std::error_code ec;
    fs::remove_all(a.dir, ec);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  return Main(argc, argv);
}
