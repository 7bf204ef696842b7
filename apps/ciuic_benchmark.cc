// ciuic-benchmark: measures ciuic side by side with a local directory, in one invocation, with
// the same method on both sides (direct IO, block size, threads, queue depth, file size).
//
// Phases: seq (sequential write+read, file-per-process and shared file), rand (4 KiB random reads
// at a queue depth), meta (create + stat + unlink of N files in one directory). Each phase runs
// `--runs` times, targets interleaved, and the median is reported with min and max; caches are
// dropped before every phase where the OS allows it (and the output says when it cannot).
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ciuic/client.h"
#include "common/config.h"

namespace ciuic::bench {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string cluster_file;
  std::string local_dir = "/tmp/ciuic-bench-local";
  std::string remote_dir = "/ciuic-bench";
  std::vector<std::string> phases = {"seq", "rand", "meta"};
  std::string size_s = "4G";
  std::string block_s = "1M";
  uint64_t size = 4ull << 30;
  size_t block = 1u << 20;
  int threads = 2;
  int qd = 32;
  double rand_seconds = 10;
  int meta_files = 10000;
  int meta_threads = 4;
  int runs = 3;
  bool quick = false;
  bool no_local = false;
  bool no_ciuic = false;
  std::string json_path;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f)
    return false;
  f << "3\n";
  f.flush();
  return static_cast<bool>(f);
}

// ------------------------------------------------------------------------------------------
// Targets: the same operations on a local directory and on ciuic.

class BFile {
 public:
  virtual ~BFile() = default;
  virtual Status Pwrite(const void* buf, size_t len, uint64_t off) = 0;
  virtual Result<size_t> Pread(void* buf, size_t len, uint64_t off) = 0;
  virtual Status Fsync() = 0;
  virtual Status Close() = 0;
  // Runs 4 KiB random reads over [0, size) with `qd` in flight for `seconds`; returns ops done.
  virtual Result<uint64_t> RandomReads(uint64_t size, int qd, double seconds, uint64_t seed) = 0;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  virtual Result<std::unique_ptr<BFile>> Open(const std::string& path,
                                              bool create,
                                              uint64_t size_hint) = 0;
  virtual Status Mkdir(const std::string& path) = 0;
  virtual Status CreateEmpty(const std::string& path) = 0;
  virtual Status Stat(const std::string& path) = 0;
  virtual Status Unlink(const std::string& path) = 0;
  virtual Status Rmdir(const std::string& path) = 0;
  virtual std::string Path(const std::string& rel) const = 0;
};

class LocalFile : public BFile {
 public:
  LocalFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~LocalFile() override {
    if (fd_ >= 0)
      ::close(fd_);
  }
  Status Pwrite(const void* buf, size_t len, uint64_t off) override {
    size_t done = 0;
    while (done < len) {
      ssize_t r = ::pwrite(fd_, static_cast<const char*>(buf) + done, len - done,
                           static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR)
          continue;
        return Status::FromErrno(errno, path_);
      }
      done += static_cast<size_t>(r);
    }
    return Status::OK();
  }
  Result<size_t> Pread(void* buf, size_t len, uint64_t off) override {
    ssize_t r = ::pread(fd_, buf, len, static_cast<off_t>(off));
    if (r < 0)
      return Status::FromErrno(errno, path_);
    return static_cast<size_t>(r);
  }
  Status Fsync() override {
    return ::fsync(fd_) == 0 ? Status::OK() : Status::FromErrno(errno, path_);
  }
  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? Status::OK() : Status::FromErrno(errno, path_);
  }
  Result<uint64_t> RandomReads(uint64_t size, int qd, double seconds, uint64_t seed) override {
    struct io_uring ring;
    int rc = io_uring_queue_init(static_cast<unsigned>(qd * 2), &ring, 0);
    if (rc < 0)
      return Status::FromErrno(-rc, "io_uring_queue_init");
    std::vector<char*> bufs(static_cast<size_t>(qd));
    for (auto& b : bufs)
      b = static_cast<char*>(std::aligned_alloc(4096, 4096));
    std::mt19937_64 rng(seed);
    const uint64_t blocks = size / 4096;
    auto submit = [&](int slot) {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_read(sqe, fd_, bufs[static_cast<size_t>(slot)], 4096, (rng() % blocks) * 4096);
      io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    };
    for (int i = 0; i < qd; ++i)
      submit(i);
    io_uring_submit(&ring);
    uint64_t ops = 0;
    auto start = Clock::now();
    auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    Status err;
    int inflight = qd;
    bool stop = false;
    while (inflight > 0) {
      struct io_uring_cqe* cqe;
      rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc < 0) {
        err = Status::FromErrno(-rc, "io_uring_wait_cqe");
        break;
      }
      int slot = static_cast<int>(io_uring_cqe_get_data64(cqe));
      if (cqe->res < 0 && err.ok())
        err = Status::FromErrno(-cqe->res, path_);
      io_uring_cqe_seen(&ring, cqe);
      --inflight;
      ++ops;
      if (!stop && (ops & 63) == 0 && Clock::now() >= deadline)
        stop = true;
      if (!stop && err.ok()) {
        submit(slot);
        io_uring_submit(&ring);
        ++inflight;
      }
    }
    io_uring_queue_exit(&ring);
    for (auto* b : bufs)
      std::free(b);
    if (!err.ok())
      return err;
    return ops;
  }

 private:
  int fd_;
  std::string path_;
};

class LocalTarget : public Target {
 public:
  explicit LocalTarget(std::string dir) : dir_(std::move(dir)) {}
  std::string name() const override { return "local"; }
  std::string Path(const std::string& rel) const override { return dir_ + "/" + rel; }
  Result<std::unique_ptr<BFile>> Open(const std::string& path, bool create, uint64_t) override {
    int flags = O_RDWR | O_DIRECT | (create ? O_CREAT | O_TRUNC : 0);
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0)
      return Status::FromErrno(errno, path);
    return std::unique_ptr<BFile>(new LocalFile(fd, path));
  }
  Status Mkdir(const std::string& path) override {
    std::error_code ec;
    fs::create_directories(path, ec);
    return ec ? Status::IoError(path + ": " + ec.message()) : Status::OK();
  }
  Status CreateEmpty(const std::string& path) override {
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0)
      return Status::FromErrno(errno, path);
    ::close(fd);
    return Status::OK();
  }
  Status Stat(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }
  Status Unlink(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }
  Status Rmdir(const std::string& path) override {
    return ::rmdir(path.c_str()) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }

 private:
  std::string dir_;
};

class CiuicFile : public BFile {
 public:
  explicit CiuicFile(std::unique_ptr<File> f) : f_(std::move(f)) {}
  Status Pwrite(const void* buf, size_t len, uint64_t off) override {
    auto r = f_->Pwrite(buf, len, off);
    return r.ok() ? Status::OK() : r.status();
  }
  Result<size_t> Pread(void* buf, size_t len, uint64_t off) override {
    return f_->Pread(buf, len, off);
  }
  Status Fsync() override { return f_->Fsync(); }
  Status Close() override { return f_->Close(); }
  Result<uint64_t> RandomReads(uint64_t size, int qd, double seconds, uint64_t seed) override {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<char*> bufs(static_cast<size_t>(qd));
    for (auto& b : bufs)
      b = static_cast<char*>(std::aligned_alloc(4096, 4096));
    std::mt19937_64 rng(seed);
    const uint64_t blocks = size / 4096;
    std::atomic<uint64_t> ops{0};
    int inflight = 0;
    Status err;
    bool stop = false;
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(seconds));
    std::vector<int> free_slots;
    for (int i = 0; i < qd; ++i)
      free_slots.push_back(i);
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      while (!stop && !free_slots.empty()) {
        int slot = free_slots.back();
        free_slots.pop_back();
        uint64_t off = (rng() % blocks) * 4096;
        ++inflight;
        lock.unlock();
        f_->PreadAsync(bufs[static_cast<size_t>(slot)], 4096, off, [&, slot](Result<size_t> r) {
          std::lock_guard<std::mutex> g(mu);
          if (!r.ok() && err.ok())
            err = r.status();
          ops.fetch_add(1, std::memory_order_relaxed);
          --inflight;
          free_slots.push_back(slot);
          cv.notify_one();
        });
        lock.lock();
      }
      if (stop && inflight == 0)
        break;
      if (stop) {
        cv.wait(lock, [&] { return inflight == 0; });
        continue;
      }
      cv.wait(lock, [&] { return !free_slots.empty(); });
      if (Clock::now() >= deadline || !err.ok())
        stop = true;
    }
    lock.unlock();
    for (auto* b : bufs)
      std::free(b);
    if (!err.ok())
      return err;
    return ops.load();
  }

 private:
  std::unique_ptr<File> f_;
};

class CiuicTarget : public Target {
 public:
  CiuicTarget(std::unique_ptr<Client> c, std::string dir)
      : c_(std::move(c)), dir_(std::move(dir)) {}
  std::string name() const override { return "ciuic"; }
  std::string Path(const std::string& rel) const override { return dir_ + "/" + rel; }
  Result<std::unique_ptr<BFile>> Open(const std::string& path,
                                      bool create,
                                      uint64_t size_hint) override {
    OpenOptions oo;
    oo.size_hint = size_hint;
    auto f = c_->Open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0644, oo);
    if (!f.ok())
      return f.status();
    return std::unique_ptr<BFile>(new CiuicFile(std::move(*f)));
  }
  Status Mkdir(const std::string& path) override { return c_->MkdirAll(path, 0755); }
  Status CreateEmpty(const std::string& path) override {
    auto f = c_->Open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (!f.ok())
      return f.status();
    return (*f)->Close();
  }
  Status Stat(const std::string& path) override { return c_->Stat(path).status(); }
  Status Unlink(const std::string& path) override { return c_->Unlink(path); }
  Status Rmdir(const std::string& path) override { return c_->Rmdir(path); }

 private:
  std::unique_ptr<Client> c_;
  std::string dir_;
};

// ------------------------------------------------------------------------------------------
// Phases.

struct Sample {
  double value = 0;  // MiB/s, IOPS or ops/s
  double seconds = 0;
};

// Runs `threads` workers; worker i gets (i). Returns the first error.
Status RunWorkers(int threads, const std::function<Status(int)>& fn) {
  std::vector<std::thread> ts;
  std::mutex mu;
  Status first;
  for (int i = 0; i < threads; ++i) {
    ts.emplace_back([&, i] {
      Status s = fn(i);
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

char* FillBuffer(size_t len, uint64_t seed) {
  char* buf = static_cast<char*>(std::aligned_alloc(4096, len));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= len; i += 8) {
    uint64_t v = rng();
    std::memcpy(buf + i, &v, 8);
  }
  return buf;
}

// Sequential write of `files` files (file-per-process: one per thread) or one shared file.
Result<Sample> SeqWrite(Target& t, const Config& c, bool shared, std::vector<std::string>* paths) {
  paths->clear();
  const int n = c.threads;
  const uint64_t per = c.size / static_cast<uint64_t>(n) / c.block * c.block;
  std::vector<std::unique_ptr<BFile>> files;
  if (shared) {
    paths->push_back(t.Path("shared.dat"));
    CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(paths->back(), true, per * static_cast<uint64_t>(n)));
    files.push_back(std::move(f));
  } else {
    for (int i = 0; i < n; ++i) {
      paths->push_back(t.Path(fmt::format("fpp-{}.dat", i)));
      CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(paths->back(), true, per));
      files.push_back(std::move(f));
    }
  }
  auto start = Clock::now();
  Status s = RunWorkers(n, [&](int i) -> Status {
    BFile& f = shared ? *files[0] : *files[static_cast<size_t>(i)];
    uint64_t base = shared ? per * static_cast<uint64_t>(i) : 0;
    std::unique_ptr<char, decltype(&std::free)> buf(
        FillBuffer(c.block, static_cast<uint64_t>(i) + 1), &std::free);
    for (uint64_t off = 0; off < per; off += c.block) {
      CIUIC_RETURN_IF_ERROR(f.Pwrite(buf.get(), c.block, base + off));
    }
    return shared ? Status::OK() : f.Fsync();
  });
  if (s.ok() && shared)
    s = files[0]->Fsync();
  for (auto& f : files) {
    Status cs = f->Close();
    if (s.ok())
      s = cs;
  }
  auto end = Clock::now();
  CIUIC_RETURN_IF_ERROR(s);
  double secs = Seconds(start, end);
  return Sample{static_cast<double>(per * static_cast<uint64_t>(n)) / secs / (1 << 20), secs};
}

Result<Sample> SeqRead(Target& t,
                       const Config& c,
                       bool shared,
                       const std::vector<std::string>& paths) {
  const int n = c.threads;
  const uint64_t per = c.size / static_cast<uint64_t>(n) / c.block * c.block;
  std::vector<std::unique_ptr<BFile>> files;
  for (const auto& p : paths) {
    CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(p, false, 0));
    files.push_back(std::move(f));
  }
  auto start = Clock::now();
  Status s = RunWorkers(n, [&](int i) -> Status {
    BFile& f = shared ? *files[0] : *files[static_cast<size_t>(i)];
    uint64_t base = shared ? per * static_cast<uint64_t>(i) : 0;
    std::unique_ptr<char, decltype(&std::free)> buf(
        static_cast<char*>(std::aligned_alloc(4096, c.block)), &std::free);
    for (uint64_t off = 0; off < per; off += c.block) {
      CIUIC_ASSIGN_OR_RETURN(size_t got, f.Pread(buf.get(), c.block, base + off));
      if (got != c.block)
        return Status::IoError(fmt::format("short read at {}", base + off));
    }
    return Status::OK();
  });
  for (auto& f : files)
    (void)f->Close().ok();  // read-only: nothing to lose
  auto end = Clock::now();
  CIUIC_RETURN_IF_ERROR(s);
  double secs = Seconds(start, end);
  return Sample{static_cast<double>(per * static_cast<uint64_t>(n)) / secs / (1 << 20), secs};
}

Result<Sample> RandRead(
    Target& t, const Config& c, const std::string& path, uint64_t size, uint64_t seed) {
  CIUIC_ASSIGN_OR_RETURN(auto f, t.Open(path, false, 0));
  auto start = Clock::now();
  auto ops = f->RandomReads(size, c.qd, c.rand_seconds, seed);
  auto end = Clock::now();
  (void)f->Close().ok();  // read-only
  if (!ops.ok())
    return ops.status();
  double secs = Seconds(start, end);
  return Sample{static_cast<double>(*ops) / secs, secs};
}

struct MetaSample {
  Sample all, create, stat, unlink;
};

Result<MetaSample> Meta(Target& t, const Config& c, int run) {
  std::string dir = t.Path(fmt::format("meta-{}", run));
  CIUIC_RETURN_IF_ERROR(t.Mkdir(dir));
  const int n = c.meta_files;
  const int th = c.meta_threads;
  auto name = [&](int k) { return fmt::format("{}/f{:07d}", dir, k); };
  auto phase = [&](const std::function<Status(const std::string&)>& op) -> Result<double> {
    auto start = Clock::now();
    Status s = RunWorkers(th, [&](int w) -> Status {
      for (int k = w; k < n; k += th)
        CIUIC_RETURN_IF_ERROR(op(name(k)));
      return Status::OK();
    });
    CIUIC_RETURN_IF_ERROR(s);
    return Seconds(start, Clock::now());
  };
  MetaSample m;
  CIUIC_ASSIGN_OR_RETURN(double tc, phase([&](const std::string& p) { return t.CreateEmpty(p); }));
  CIUIC_ASSIGN_OR_RETURN(double ts, phase([&](const std::string& p) { return t.Stat(p); }));
  CIUIC_ASSIGN_OR_RETURN(double tu, phase([&](const std::string& p) { return t.Unlink(p); }));
  CIUIC_RETURN_IF_ERROR(t.Rmdir(dir));
  m.create = {n / tc, tc};
  m.stat = {n / ts, ts};
  m.unlink = {n / tu, tu};
  m.all = {3.0 * n / (tc + ts + tu), tc + ts + tu};
  return m;
}

// ------------------------------------------------------------------------------------------

struct Stats {
  double min = 0, median = 0, max = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

int Main(int argc, char** argv) {
  Config c;
  CLI::App app{
      "ciuic-benchmark: ciuic side by side with a local directory, same method on both sides.\n"
      "Example: ciuic-benchmark --cluster ~/ciuic/cluster.conf --size 4G --runs 3 --json out.json"};
  app.add_option("--cluster", c.cluster_file,
                 "cluster file (default $CIUIC_CLUSTER, ~/ciuic/cluster.conf)");
  app.add_option("--local-dir", c.local_dir, "baseline directory on the local disk");
  app.add_option("--remote-dir", c.remote_dir, "working directory inside ciuic");
  app.add_option("--phases", c.phases, "phases: seq, rand, meta")
      ->delimiter(',')
      ->check(CLI::IsMember({"seq", "rand", "meta"}));
  app.add_option("--size", c.size_s, "bytes written per seq phase (e.g. 4G)");
  app.add_option("--block", c.block_s, "IO size of the seq phases (e.g. 1M)");
  app.add_option("--threads", c.threads, "threads of the seq phases")->check(CLI::Range(1, 64));
  app.add_option("--qd", c.qd, "queue depth of the rand phase")->check(CLI::Range(1, 1024));
  app.add_option("--rand-seconds", c.rand_seconds, "duration of one rand run")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--meta-files", c.meta_files, "files of the meta phase")
      ->check(CLI::Range(1, 10000000));
  app.add_option("--meta-threads", c.meta_threads, "threads of the meta phase")
      ->check(CLI::Range(1, 64));
  app.add_option("--runs", c.runs, "runs per phase (median reported)")->check(CLI::Range(1, 100));
  app.add_flag("--quick", c.quick, "small sizes, one run: a smoke run in well under a minute");
  app.add_flag("--no-local", c.no_local, "skip the local-directory baseline");
  app.add_flag("--no-ciuic", c.no_ciuic, "skip ciuic (baseline only)");
  app.add_option("--json", c.json_path, "write results as JSON here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0)
      return app.exit(e);
    fmt::print(stderr, "ciuic-benchmark: {} (see --help)\n", e.what());
    return 2;
  }
  if (c.quick) {
    c.size_s = "512M";
    c.runs = 1;
    c.rand_seconds = 3;
    c.meta_files = 2000;
  }
  auto size = ParseSize(c.size_s);
  auto block = ParseSize(c.block_s);
  if (!size.ok() || !block.ok()) {
    fmt::print(stderr, "ciuic-benchmark: {}\n",
               (!size.ok() ? size.status() : block.status()).message());
    return 2;
  }
  c.size = *size;
  c.block = static_cast<size_t>(*block);
  if (c.block < 4096 || c.block % 4096 != 0 || c.block > (64u << 20)) {
    fmt::print(stderr, "ciuic-benchmark: --block must be a multiple of 4 KiB up to 64 MiB\n");
    return 2;
  }
  if (c.size < c.block * static_cast<uint64_t>(c.threads)) {
    fmt::print(stderr, "ciuic-benchmark: --size must hold at least one block per thread\n");
    return 2;
  }

  std::vector<std::unique_ptr<Target>> targets;
  if (!c.no_local) {
    std::error_code ec;
    fs::create_directories(c.local_dir, ec);
    if (ec) {
      fmt::print(stderr, "ciuic-benchmark: cannot create {}: {}\n", c.local_dir, ec.message());
      return 1;
    }
    targets.push_back(std::make_unique<LocalTarget>(c.local_dir));
  }
  if (!c.no_ciuic) {
    auto path = FindClusterFile(c.cluster_file);
    if (!path.ok()) {
      fmt::print(stderr, "ciuic-benchmark: {}\n", path.status().message());
      return 1;
    }
    ClientOptions o;
    o.cluster_file = *path;
    auto client = Client::Connect(o);
    if (!client.ok()) {
      fmt::print(stderr, "ciuic-benchmark: cannot connect to the cluster in {}: {}\n", *path,
                 client.status().ToString());
      return 1;
    }
    Status s = (*client)->MkdirAll(c.remote_dir, 0755);
    if (!s.ok()) {
      fmt::print(stderr, "ciuic-benchmark: {}\n", s.ToString());
      return 1;
    }
    targets.push_back(std::make_unique<CiuicTarget>(std::move(*client), c.remote_dir));
  }
  if (targets.empty()) {
    fmt::print(stderr, "ciuic-benchmark: nothing to measure (--no-local and --no-ciuic)\n");
    return 2;
  }

  bool dropped_all = true;
  auto drop = [&] { dropped_all = DropCaches() && dropped_all; };
  auto want = [&](const std::string& p) {
    return std::find(c.phases.begin(), c.phases.end(), p) != c.phases.end();
  };

  // results[metric][target] = samples
  std::map<std::string, std::map<std::string, std::vector<double>>> results;
  std::vector<std::string> metric_order;
  auto record = [&](const std::string& metric, const std::string& target, double v) {
    if (std::find(metric_order.begin(), metric_order.end(), metric) == metric_order.end()) {
      metric_order.push_back(metric);
    }
    results[metric][target].push_back(v);
  };
  fmt::print(
      "ciuic-benchmark: phases {} | seq {} in {} blocks, {} threads | rand 4 KiB QD {} for {} s | "
      "meta {} files, {} threads | {} run(s)\n",
      fmt::join(c.phases, ","), FormatSize(c.size), FormatSize(c.block), c.threads, c.qd,
      c.rand_seconds, c.meta_files, c.meta_threads, c.runs);
  int rc = 0;
  for (int run = 0; run < c.runs && rc == 0; ++run) {
    for (auto& t : targets) {
      const std::string tn = t->name();
      auto fail = [&](const std::string& what, const Status& s) {
        fmt::print(stderr, "ciuic-benchmark: {} on {} failed: {}\n", what, tn, s.ToString());
        rc = 1;
      };
      if (want("seq") || want("rand")) {
        for (bool shared : {false, true}) {
          if (!want("seq") && shared)
            break;
          std::vector<std::string> paths;
          std::string kind = shared ? "shared" : "fpp";
          drop();
          auto w = SeqWrite(*t, c, shared, &paths);
          if (!w.ok()) {
            fail("seq write", w.status());
            break;
          }
          if (want("seq")) {
            record(fmt::format("seq_write_{}_MiBps", kind), tn, w->value);
            drop();
            auto r = SeqRead(*t, c, shared, paths);
            if (!r.ok()) {
              fail("seq read", r.status());
              break;
            }
            record(fmt::format("seq_read_{}_MiBps", kind), tn, r->value);
            fmt::print("  run {} {:<6} seq {:<6} write {:8.1f} MiB/s  read {:8.1f} MiB/s\n",
                       run + 1, tn, kind, w->value, r->value);
          }
          if (want("rand") && !shared) {
            drop();
            uint64_t fsize = c.size / static_cast<uint64_t>(c.threads) / c.block * c.block;
            auto rr = RandRead(*t, c, paths[0], fsize, 1234 + static_cast<uint64_t>(run));
            if (!rr.ok()) {
              fail("rand read", rr.status());
              break;
            }
            record("rand_read_4k_iops", tn, rr->value);
            fmt::print("  run {} {:<6} rand 4 KiB QD{}  {:10.0f} IOPS\n", run + 1, tn, c.qd,
                       rr->value);
          }
          for (const auto& p : paths)
            (void)t->Unlink(p).ok();  // cleanup
        }
      }
      if (rc == 0 && want("meta")) {
        drop();
        auto m = Meta(*t, c, run);
        if (!m.ok()) {
          fail("meta", m.status());
        } else {
          record("meta_ops_per_s", tn, m->all.value);
          record("meta_create_per_s", tn, m->create.value);
          record("meta_stat_per_s", tn, m->stat.value);
          record("meta_unlink_per_s", tn, m->unlink.value);
          fmt::print(
              "  run {} {:<6} meta {:9.0f} ops/s (create {:.0f}, stat {:.0f}, unlink {:.0f})\n",
              run + 1, tn, m->all.value, m->create.value, m->stat.value, m->unlink.value);
        }
      }
    }
  }

  nlohmann::json j;
  j["config"] = {{"size", c.size},
                 {"block", c.block},
                 {"threads", c.threads},
                 {"qd", c.qd},
                 {"rand_seconds", c.rand_seconds},
                 {"meta_files", c.meta_files},
                 {"meta_threads", c.meta_threads},
                 {"runs", c.runs},
                 {"phases", c.phases}};
  j["caches_dropped"] = dropped_all;
  j["fsync"] = true;
  j["direct_io"] = true;
  fmt::print("\n{:<24} {:>14} {:>14} {:>8}   (median of {} run(s); min..max in JSON)\n", "metric",
             "local", "ciuic", "ratio", c.runs);
  for (const auto& metric : metric_order) {
    auto& per = results[metric];
    nlohmann::json jm;
    for (auto& [target, samples] : per) {
      Stats s = Summarize(samples);
      jm[target] = {{"runs", samples}, {"median", s.median}, {"min", s.min}, {"max", s.max}};
    }
    double l = per.count("local") ? Summarize(per["local"]).median : 0;
    double ci = per.count("ciuic") ? Summarize(per["ciuic"]).median : 0;
    std::string ratio = (l > 0 && ci > 0) ? fmt::format("{:.2f}", ci / l) : "-";
    if (l > 0 && ci > 0)
      jm["ratio_ciuic_over_local"] = ci / l;
    j["results"][metric] = jm;
    fmt::print("{:<24} {:>14} {:>14} {:>8}\n", metric, l > 0 ? fmt::format("{:.1f}", l) : "-",
               ci > 0 ? fmt::format("{:.1f}", ci) : "-", ratio);
  }
  fmt::print("{}\n",
             dropped_all
                 ? "page cache dropped before every phase; every write phase fsynced; direct IO on "
                   "the local side"
                 : "NOTE: caches could NOT be dropped (need root: /proc/sys/vm/drop_caches); "
                   "local read figures may be cache-inflated");
  if (!c.json_path.empty()) {
    std::ofstream out(c.json_path);
    out << j.dump(2) << "\n";
    if (!out) {
      fmt::print(stderr, "ciuic-benchmark: cannot write {}\n", c.json_path);
      return 1;
    }
  }
  return rc;
}

}  // namespace ciuic::bench

int main(int argc, char** argv) {
  try {
    return ciuic::bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ciuic-benchmark: internal error: %s\n", e.what());
    return 1;
  }
}
