#include "bench/target.h"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "ciuic/ring.h"

namespace ciuic::bench {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Clock::time_point Deadline(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Ordinary (not shared) aligned memory under the SharedMemory interface: a ring over it moves
// its bytes over TCP like the plain API's async IO.
class HeapMemory : public SharedMemory {
 public:
  explicit HeapMemory(size_t n)
      : size_(n),
        data_(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) & ~size_t{4095}))) {}
  ~HeapMemory() override { std::free(data_); }
  uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  size_t size_;
  uint8_t* data_;
};

// 4 KiB aligned buffers for `n` IOs, freed together.
class Buffers {
 public:
  explicit Buffers(size_t n) : bufs_(n) {
    for (auto& b : bufs_)
      b = static_cast<char*>(std::aligned_alloc(4096, 4096));
  }
  ~Buffers() {
    for (auto* b : bufs_)
      std::free(b);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  char* operator[](size_t i) { return bufs_[i]; }

 private:
  std::vector<char*> bufs_;
};

class PosixFile : public BFile {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override {
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
    for (;;) {
      ssize_t r = ::pread(fd_, buf, len, static_cast<off_t>(off));
      if (r >= 0)
        return static_cast<size_t>(r);
      if (errno != EINTR)
        return Status::FromErrno(errno, path_);
    }
  }
  Status Fsync() override {
    return ::fsync(fd_) == 0 ? Status::OK() : Status::FromErrno(errno, path_);
  }
  Status Close() override {
    int fd = fd_;
    fd_ = -1;
    if (fd < 0)
      return Status::OK();
    return ::close(fd) == 0 ? Status::OK() : Status::FromErrno(errno, path_);
  }
  Result<uint64_t> RandomReads(
      uint64_t size, int qd, int batch, double seconds, uint64_t seed) override {
    const uint64_t blocks = size / 4096;
    if (blocks == 0)
      return Status::InvalidArgument(path_ + ": file too small for 4 KiB random reads");
    struct io_uring ring;
    int rc = io_uring_queue_init(static_cast<unsigned>(qd), &ring, 0);
    if (rc < 0)
      return Status::FromErrno(-rc, "io_uring_queue_init");
    Buffers bufs(static_cast<size_t>(qd));
    std::mt19937_64 rng(seed);
    std::vector<int> free_slots;
    for (int i = qd - 1; i >= 0; --i)
      free_slots.push_back(i);
    const auto deadline = Deadline(seconds);
    uint64_t ops = 0;
    int inflight = 0;
    bool stop = false;
    Status err;
    for (;;) {
      // Refill in batches of `batch` (or whatever is free when that is fewer than batch but
      // nothing is in flight), one submit per batch.
      if (!stop && err.ok() && (free_slots.size() >= static_cast<size_t>(batch) || inflight == 0)) {
        int queued = 0;
        while (!free_slots.empty() && queued < batch) {
          int slot = free_slots.back();
          free_slots.pop_back();
          struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
          io_uring_prep_read(sqe, fd_, bufs[static_cast<size_t>(slot)], 4096,
                             (rng() % blocks) * 4096);
          io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
          ++queued;
        }
        rc = io_uring_submit(&ring);
        if (rc < 0) {
          err = Status::FromErrno(-rc, "io_uring_submit");
          break;
        }
        inflight += queued;
      }
      if (inflight == 0)
        break;
      struct io_uring_cqe* cqe;
      rc = io_uring_wait_cqe(&ring, &cqe);
      if (rc < 0) {
        if (rc == -EINTR)
          continue;
        err = Status::FromErrno(-rc, "io_uring_wait_cqe");
        break;
      }
      // Reap everything that is ready.
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        if (cqe->res < 0 && err.ok())
          err = Status::FromErrno(-cqe->res, path_);
        free_slots.push_back(static_cast<int>(io_uring_cqe_get_data64(cqe)));
        ++seen;
      }
      io_uring_cq_advance(&ring, seen);
      inflight -= static_cast<int>(seen);
      ops += seen;
      if (!stop && Clock::now() >= deadline)
        stop = true;
      if ((stop || !err.ok()) && inflight == 0)
        break;
    }
    io_uring_queue_exit(&ring);
    CIUIC_RETURN_IF_ERROR(err);
    return ops;
  }

 private:
  int fd_;
  std::string path_;
};

class PosixTarget : public Target {
 public:
  PosixTarget(std::string name, std::string dir, bool direct, bool over_network)
      : name_(std::move(name)),
        dir_(std::move(dir)),
        direct_(direct),
        over_network_(over_network) {}
  const std::string& name() const override { return name_; }
  std::string Path(const std::string& rel) const override { return dir_ + "/" + rel; }
  Result<std::unique_ptr<BFile>> Open(const std::string& path, bool create, uint64_t) override {
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0) | (direct_ ? O_DIRECT : 0);
    int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0)
      return Status::FromErrno(errno, path);
    return std::unique_ptr<BFile>(new PosixFile(fd, path));
  }
  Status Mkdir(const std::string& path) override {
    std::error_code ec;
    fs::create_directories(path, ec);
    return ec ? Status::IoError(path + ": " + ec.message()) : Status::OK();
  }
  Status CreateEmpty(const std::string& path) override {
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0)
      return Status::FromErrno(errno, path);
    return ::close(fd) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }
  Status Stat(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }
  Result<size_t> ReadDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr)
      return Status::FromErrno(errno, path);
    size_t n = 0;
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        ++n;
    }
    int err = errno;
    ::closedir(d);
    if (err != 0)
      return Status::FromErrno(err, path);
    return n;
  }
  Status Unlink(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }
  Status Rmdir(const std::string& path) override {
    return ::rmdir(path.c_str()) == 0 ? Status::OK() : Status::FromErrno(errno, path);
  }
  Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    fs::remove_all(path, ec);
    return ec ? Status::IoError(path + ": " + ec.message()) : Status::OK();
  }
  Result<std::unique_ptr<Target>> Fork() override {
    return std::unique_ptr<Target>(new PosixTarget(name_, dir_, direct_, over_network_));
  }
  bool direct_io() const override { return direct_; }
  bool over_network() const override { return over_network_; }

 private:
  std::string name_;
  std::string dir_;
  bool direct_;
  bool over_network_;
};

class CiuicFile : public BFile {
 public:
  CiuicFile(Client* c, std::unique_ptr<File> f) : c_(c), f_(std::move(f)) {}
  Status Pwrite(const void* buf, size_t len, uint64_t off) override {
    return f_->Pwrite(buf, len, off).status();
  }
  Result<size_t> Pread(void* buf, size_t len, uint64_t off) override {
    return f_->Pread(buf, len, off);
  }
  Status Fsync() override { return f_->Fsync(); }
  Status Close() override { return f_->Close(); }
  Result<uint64_t> RandomReads(
      uint64_t size, int qd, int batch, double seconds, uint64_t seed) override {
    const uint64_t blocks = size / 4096;
    if (blocks == 0)
      return Status::InvalidArgument(f_->path() + ": file too small for 4 KiB random reads");
    std::mutex mu;
    std::condition_variable cv;
    Buffers bufs(static_cast<size_t>(qd));
    std::mt19937_64 rng(seed);
    uint64_t ops = 0;
    int inflight = 0;
    Status err;
    std::vector<int> free_slots;
    for (int i = qd - 1; i >= 0; --i)
      free_slots.push_back(i);
    const auto deadline = Deadline(seconds);
    const size_t refill = static_cast<size_t>(std::min(batch, qd));
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      bool stop = Clock::now() >= deadline || !err.ok();
      if (stop) {
        cv.wait(lock, [&] { return inflight == 0; });
        break;
      }
      std::vector<std::pair<int, uint64_t>> todo;
      while (!free_slots.empty() && todo.size() < refill) {
        todo.emplace_back(free_slots.back(), (rng() % blocks) * 4096);
        free_slots.pop_back();
      }
      inflight += static_cast<int>(todo.size());
      lock.unlock();
      for (auto [slot, off] : todo) {
        f_->PreadAsync(bufs[static_cast<size_t>(slot)], 4096, off, [&, slot](Result<size_t> r) {
          std::lock_guard<std::mutex> g(mu);
          if (!r.ok() && err.ok())
            err = r.status();
          ++ops;
          --inflight;
          free_slots.push_back(slot);
          cv.notify_one();
        });
      }
      lock.lock();
      // Wait until a batch can be refilled (or everything came back), with a deadline check.
      cv.wait_until(lock, deadline,
                    [&] { return free_slots.size() >= refill || inflight == 0 || !err.ok(); });
    }
    CIUIC_RETURN_IF_ERROR(err);
    return ops;
  }

  Result<uint64_t> RingRandomReads(
      uint64_t size, int qd, int batch, double seconds, uint64_t seed) override {
    const uint64_t blocks = size / 4096;
    if (blocks == 0 || qd <= 0)
      return Status::InvalidArgument(f_->path() + ": file too small for 4 KiB random reads");
    CIUIC_ASSIGN_OR_RETURN(auto mem, c_->NewSharedMemory(static_cast<size_t>(qd) * 4096));
    CIUIC_ASSIGN_OR_RETURN(auto ring, Ring::Create(mem, static_cast<uint32_t>(qd)));
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> free_slots;
    for (int i = qd - 1; i >= 0; --i)
      free_slots.push_back(static_cast<uint64_t>(i));
    const size_t refill = static_cast<size_t>(std::clamp(batch, 1, qd));
    std::vector<RingCompletion> done(static_cast<size_t>(qd));
    const auto deadline = Deadline(seconds);
    uint64_t ops = 0;
    size_t inflight = 0;
    for (;;) {
      const bool stop = Clock::now() >= deadline;
      if (!stop && (free_slots.size() >= refill || inflight == 0)) {
        while (!free_slots.empty()) {
          const uint64_t slot = free_slots.back();
          free_slots.pop_back();
          CIUIC_RETURN_IF_ERROR(ring->Prepare({.file = f_.get(),
                                               .offset = (rng() % blocks) * 4096,
                                               .len = 4096,
                                               .region_offset = slot * 4096,
                                               .user_data = slot}));
        }
        CIUIC_ASSIGN_OR_RETURN(size_t n, ring->Submit());
        inflight += n;
      }
      if (inflight == 0)
        break;
      // As the plain loop: wake when a batch can be refilled.
      CIUIC_ASSIGN_OR_RETURN(size_t n, ring->Wait(done, std::min(refill, inflight), -1));
      for (size_t i = 0; i < n; ++i) {
        if (done[i].result != 4096) {
          return Status::IoError(
              fmt::format("{}: ring read returned {}", f_->path(), done[i].result));
        }
        free_slots.push_back(done[i].user_data);
      }
      inflight -= n;
      ops += n;
    }
    return ops;
  }

  Status RingSequential(bool write, uint64_t size, size_t block, int depth, bool shared) override {
    if (block == 0 || block % 4096 != 0 || block > (64u << 20) || depth <= 0)
      return Status::InvalidArgument("ring IO: a block of 4 KiB to 64 MiB, depth > 0");
    std::shared_ptr<SharedMemory> mem;
    if (shared) {
      CIUIC_ASSIGN_OR_RETURN(mem, c_->NewSharedMemory(static_cast<size_t>(depth) * block));
    } else {
      mem = std::make_shared<HeapMemory>(static_cast<size_t>(depth) * block);
    }
    if (write)
      std::memset(mem->data(), 42, mem->size());
    CIUIC_ASSIGN_OR_RETURN(auto ring, Ring::Create(mem, static_cast<uint32_t>(depth)));
    std::vector<uint64_t> free_slots;
    for (int i = depth - 1; i >= 0; --i)
      free_slots.push_back(static_cast<uint64_t>(i));
    std::vector<RingCompletion> done(static_cast<size_t>(depth));
    uint64_t next = 0;
    size_t inflight = 0;
    while (next < size || inflight > 0) {
      while (next < size && !free_slots.empty()) {
        const uint64_t slot = free_slots.back();
        free_slots.pop_back();
        const uint64_t len = std::min<uint64_t>(block, size - next);
        CIUIC_RETURN_IF_ERROR(ring->Prepare({.file = f_.get(),
                                             .write = write,
                                             .offset = next,
                                             .len = len,
                                             .region_offset = slot * block,
                                             .user_data = (slot << 32) | len}));
        next += len;
      }
      CIUIC_ASSIGN_OR_RETURN(size_t n, ring->Submit());
      inflight += n;
      CIUIC_ASSIGN_OR_RETURN(size_t got, ring->Wait(done, 1, -1));
      for (size_t i = 0; i < got; ++i) {
        const auto want = static_cast<int64_t>(done[i].user_data & 0xffffffffu);
        if (done[i].result != want) {
          return Status::IoError(fmt::format("{}: ring {} returned {} of {} bytes", f_->path(),
                                             write ? "write" : "read", done[i].result, want));
        }
        free_slots.push_back(done[i].user_data >> 32);
      }
      inflight -= got;
    }
    return Status::OK();
  }

 private:
  Client* c_;
  std::unique_ptr<File> f_;
};

class CiuicTarget : public Target {
 public:
  CiuicTarget(std::unique_ptr<Client> c,
              std::string cluster_file,
              std::string dir,
              uint32_t replicas = 0)
      : c_(std::move(c)),
        cluster_file_(std::move(cluster_file)),
        dir_(std::move(dir)),
        replicas_(replicas) {
    if (replicas_ > 0)
      name_ = fmt::format("ciuic-r{}", replicas_);
  }
  const std::string& name() const override { return name_; }
  std::string Path(const std::string& rel) const override { return dir_ + "/" + rel; }
  Result<std::unique_ptr<BFile>> Open(const std::string& path,
                                      bool create,
                                      uint64_t size_hint) override {
    OpenOptions oo;
    oo.size_hint = size_hint;
    FileLayout l;
    if (replicas_ > 0 && create) {
      // The adaptive policy's stripe count for the hint, with the target's replica count.
      LayoutComponent c;
      c.stripe_count = size_hint >= (64ull << 20)
                           ? static_cast<uint32_t>(std::clamp<uint64_t>(size_hint >> 28, 1, 4))
                           : 1;
      c.replicas = replicas_;
      l.components.push_back(c);
      l.pattern = 1;
      oo.layout = &l;
    }
    CIUIC_ASSIGN_OR_RETURN(auto f,
                           c_->Open(path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0644, oo));
    return std::unique_ptr<BFile>(new CiuicFile(c_.get(), std::move(f)));
  }
  Status Mkdir(const std::string& path) override { return c_->MkdirAll(path, 0755); }
  Status CreateEmpty(const std::string& path) override {
    OpenOptions oo;
    FileLayout l;
    if (replicas_ > 0) {
      LayoutComponent c;
      c.replicas = replicas_;
      l.components.push_back(c);
      l.pattern = 1;
      oo.layout = &l;
    }
    CIUIC_ASSIGN_OR_RETURN(auto f, c_->Open(path, O_CREAT | O_EXCL | O_WRONLY, 0644, oo));
    return f->Close();
  }
  Status Stat(const std::string& path) override { return c_->Stat(path).status(); }
  Result<size_t> ReadDir(const std::string& path) override {
    CIUIC_ASSIGN_OR_RETURN(auto entries, c_->ReadDir(path));
    return entries.size();
  }
  Status Unlink(const std::string& path) override { return c_->Unlink(path); }
  Status Rmdir(const std::string& path) override { return c_->Rmdir(path); }
  Status RemoveAll(const std::string& path) override {
    auto st = c_->Lstat(path);
    if (!st.ok())
      return st.status().code() == StatusCode::kNotFound ? Status::OK() : st.status();
    if (!st->is_dir())
      return c_->Unlink(path);
    CIUIC_ASSIGN_OR_RETURN(auto entries, c_->ReadDir(path));
    for (const auto& e : entries)
      CIUIC_RETURN_IF_ERROR(RemoveAll(path + "/" + e.name));
    return c_->Rmdir(path);
  }
  Result<std::unique_ptr<Target>> Fork() override {
    ClientOptions o;
    o.cluster_file = cluster_file_;
    CIUIC_ASSIGN_OR_RETURN(auto c, Client::Connect(o));
    return std::unique_ptr<Target>(new CiuicTarget(std::move(c), cluster_file_, dir_, replicas_));
  }
  bool direct_io() const override { return true; }  // the client has no page cache
  bool over_network() const override { return true; }
  std::string cluster_file() const override { return cluster_file_; }

 private:
  std::string name_ = "ciuic";
  std::unique_ptr<Client> c_;
  std::string cluster_file_;
  std::string dir_;
  uint32_t replicas_ = 0;  // 0: the cluster's layouts; else explicit ones with this count
};

}  // namespace

Result<std::unique_ptr<Target>> NewPosixTarget(const std::string& name,
                                               const std::string& dir,
                                               bool over_network,
                                               bool allow_direct) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::IoError(fmt::format("cannot create {}: {}", dir, ec.message()));
  // Probe O_DIRECT: FUSE and some network file systems refuse it, at open or (like libfuse's
  // passthrough_fh, which hands the backing file unaligned buffers) only at the first IO.
  std::string probe = fmt::format("{}/.ciuic-bench-probe-{}", dir, ::getpid());
  int fd = allow_direct ? ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644) : -1;
  bool direct = fd >= 0;
  if (fd >= 0) {
    void* block = nullptr;
    if (::posix_memalign(&block, 4096, 4096) == 0) {
      std::memset(block, 0, 4096);
      direct = ::pwrite(fd, block, 4096, 0) == 4096 && ::pread(fd, block, 4096, 0) == 4096;
      std::free(block);
    }
    ::close(fd);
  }
  if (!direct) {
    fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return Status::FromErrno(errno, fmt::format("cannot create files in {}", dir));
    ::close(fd);
  }
  ::unlink(probe.c_str());
  return std::unique_ptr<Target>(new PosixTarget(name, dir, direct, over_network));
}

Result<std::unique_ptr<Target>> NewCiuicTarget(const std::string& cluster_file,
                                               const std::string& dir,
                                               uint32_t replicas) {
  ClientOptions o;
  o.cluster_file = cluster_file;
  auto c = Client::Connect(o);
  if (!c.ok()) {
    return Status(c.status().code(), fmt::format("cannot connect to the cluster in {}: {}",
                                                 cluster_file, c.status().message()));
  }
  CIUIC_RETURN_IF_ERROR((*c)->MkdirAll(dir, 0755));
  return std::unique_ptr<Target>(new CiuicTarget(std::move(*c), cluster_file, dir, replicas));
}

}  // namespace ciuic::bench
