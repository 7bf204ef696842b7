// Load side: reads straight into the caller's buffers, many reads in flight, every stored
// chunk's CRC32C verified; slices along dimension 0 and fp16/bf16 -> fp32 upcast on request.
// Device destinations: each chunk is verified (and upcast) on the host, then one thread hands
// it to a cuda::DeviceCopier while the reads go on.
#include <fcntl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "checkpoint/manifest.h"
#include "ciuic/cuda.h"
#include "common/crc32c.h"
#include "common/prefault.h"

namespace ciuic::checkpoint {
namespace {

// One read: a stored chunk (or its part) of one shard.
struct ChunkRead {
  const TensorInfo* tensor = nullptr;
  File* file = nullptr;
  const ShardInfo* shard = nullptr;
  uint64_t chunk = 0;       // index into shard->crc32c
  uint64_t chunk_len = 0;   // bytes of the stored chunk
  uint64_t want_begin = 0;  // wanted stored bytes within the chunk [begin, end)
  uint64_t want_end = 0;
  char* dst = nullptr;  // where the wanted bytes (or their upcast) go
  bool device = false;  // dst is device memory
  bool upcast = false;
  HalfKind kind = HalfKind::kFloat16;
};

Status Verify(const ChunkRead& c, const void* data, size_t got) {
  if (got != c.chunk_len)
    return Status::Corruption(fmt::format("tensor '{}': {} is short (chunk {} has {} of {} bytes)",
                                          c.tensor->name, c.shard->file, c.chunk, got,
                                          c.chunk_len));
  if (Crc32c(data, got) != c.shard->crc32c[c.chunk])
    return Status::Corruption(fmt::format("tensor '{}': checksum mismatch in {} (chunk {} at {})",
                                          c.tensor->name, c.shard->file, c.chunk,
                                          c.shard->offset + c.chunk * c.chunk_len));
  return Status::OK();
}

void Deliver(const ChunkRead& c, const char* chunk_data, int threads, char* dst) {
  const char* from = chunk_data + c.want_begin;
  const size_t len = c.want_end - c.want_begin;
  if (c.upcast) {
    WidenToFloat32(reinterpret_cast<const uint16_t*>(from), reinterpret_cast<float*>(dst), len / 2,
                   c.kind, threads);
  } else {
    std::memcpy(dst, from, len);
  }
}

// Verified chunks bound for device memory, copied there by one thread (a copy may block on a
// stream: never on a network thread). Each job holds its read's in-flight slot until copied.
class DeviceQueue {
 public:
  DeviceQueue(cuda::DeviceCopier* copier, Inflight* inflight)
      : copier_(copier), inflight_(inflight), thread_([this] { Run(); }) {}
  ~DeviceQueue() { Stop().IgnoreError(); }  // Load reports Stop's status on its way out

  struct Job {
    char* dst = nullptr;
    const char* src = nullptr;
    size_t len = 0;
    std::shared_ptr<void> keep;  // the host bytes' owner
    std::string tensor;
  };

  void Push(Job j) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(j));
    }
    cv_.notify_one();
  }

  // Waits for the thread to drain the queue, then for the copies; the first error.
  Status Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable())
      thread_.join();
    return copier_->Finish();
  }

 private:
  void Run() {
    for (;;) {
      Job j;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty())
          return;
        j = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Status st;
      if (!inflight_->failed()) {
        st = copier_->Copy(j.dst, j.src, j.len);
        if (!st.ok())
          st = st.WithContext(fmt::format("tensor '{}'", j.tensor));
      }
      j.keep.reset();
      inflight_->Release(st);
    }
  }

  cuda::DeviceCopier* copier_;
  Inflight* inflight_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // CIUIC_GUARDED_BY(mu_)
  bool stop_ = false;     // CIUIC_GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace

Status Load(Client& client,
            const Manifest& m,
            const std::vector<TensorToLoad>& requests,
            const LoadOptions& o) {
  std::map<std::string, std::unique_ptr<File>> files;
  std::vector<ChunkRead> reads;
  std::unique_ptr<cuda::DeviceCopier> copier;
  for (const TensorToLoad& r : requests) {
    if (r.dst_on_device && copier == nullptr) {
      // Before any read: a machine without CUDA fails at once, naming why.
      Result<std::unique_ptr<cuda::DeviceCopier>> c =
          cuda::DeviceCopier::Create(o.device_chunk_bytes);
      if (!c.ok())
        return c.status().WithContext(fmt::format("tensor '{}' to the device", r.name));
      copier = std::move(*c);
    }
    const TensorInfo* t = m.Find(r.name);
    if (t == nullptr)
      return Status::NotFound(fmt::format("{}: no tensor '{}'", m.dir, r.name));
    const size_t ssize = DTypeSize(t->stored_dtype);
    const bool half = t->stored_dtype == "float16" || t->stored_dtype == "bfloat16";
    if (r.upcast_fp32 && !half && t->stored_dtype != "float32")
      return Status::InvalidArgument(fmt::format(
          "tensor '{}': stored as {}, cannot upcast to float32", r.name, t->stored_dtype));
    const bool upcast = r.upcast_fp32 && half;
    const size_t osize = upcast ? 4 : ssize;
    const int64_t rows = t->shape.empty() ? 1 : t->shape[0];
    const int64_t row_elems =
        t->shape.empty() ? 1
                         : NumElements(std::vector<int64_t>(t->shape.begin() + 1, t->shape.end()));
    const int64_t b = r.row_begin;
    const int64_t e = r.row_end < 0 ? rows : r.row_end;
    if (b < 0 || b > e || e > rows)
      return Status::InvalidArgument(
          fmt::format("tensor '{}': rows [{}, {}) outside [0, {})", r.name, b, e, rows));
    const uint64_t want_bytes =
        static_cast<uint64_t>(e - b) * static_cast<uint64_t>(row_elems) * osize;
    if (r.dst_len != want_bytes || (want_bytes > 0 && r.dst == nullptr))
      return Status::InvalidArgument(
          fmt::format("tensor '{}': buffer of {} bytes, need {}", r.name, r.dst_len, want_bytes));
    const uint64_t srow = static_cast<uint64_t>(row_elems) * ssize;  // stored bytes per row
    const uint64_t orow = static_cast<uint64_t>(row_elems) * osize;
    for (const ShardInfo& s : t->shards) {
      for (size_t d = 1; d < s.shape.size(); ++d) {
        if (s.offsets[d] != 0 || s.shape[d] != t->shape[d])
          return Status::NotSupported(fmt::format(
              "tensor '{}': shard split along dimension {} (only dimension 0 is supported)", r.name,
              d));
      }
      const int64_t s0 = s.shape.empty() ? 0 : s.offsets[0];
      const int64_t s1 = s.shape.empty() ? 1 : s.offsets[0] + s.shape[0];
      const int64_t lo = std::max(s0, b);
      const int64_t hi = std::min(s1, e);
      if (lo >= hi || srow == 0)
        continue;
      auto it = files.find(s.file);
      if (it == files.end()) {
        OpenOptions oo;
        oo.random_access = true;
        Result<std::unique_ptr<File>> f = client.Open(m.dir + "/" + s.file, O_RDONLY, 0, oo);
        if (!f.ok())
          return f.status().WithContext(fmt::format("tensor '{}'", r.name));
        it = files.emplace(s.file, std::move(f).value()).first;
      }
      const uint64_t want0 = static_cast<uint64_t>(lo - s0) * srow;  // stored bytes in the shard
      const uint64_t want1 = static_cast<uint64_t>(hi - s0) * srow;
      char* out = static_cast<char*>(r.dst) + static_cast<uint64_t>(lo - b) * orow;
      for (uint64_t c = want0 / m.chunk_bytes; c * m.chunk_bytes < want1; ++c) {
        ChunkRead cr;
        cr.tensor = t;
        cr.file = it->second.get();
        cr.shard = &s;
        cr.chunk = c;
        const uint64_t cstart = c * m.chunk_bytes;
        cr.chunk_len = std::min<uint64_t>(m.chunk_bytes, s.length - cstart);
        cr.want_begin = std::max(want0, cstart) - cstart;
        cr.want_end = std::min(want1, cstart + cr.chunk_len) - cstart;
        cr.dst = out + (cstart + cr.want_begin - want0) / ssize * osize;
        cr.device = r.dst_on_device;
        cr.upcast = upcast;
        cr.kind = t->stored_dtype == "float16" ? HalfKind::kFloat16 : HalfKind::kBFloat16;
        reads.push_back(cr);
      }
    }
  }

  // Whole chunks landing in the caller's buffer unchanged are read in place; the others go
  // through a staging buffer (one per read in flight).
  Inflight inflight(o.max_inflight);
  std::mutex pool_mu;
  std::vector<std::unique_ptr<char[]>> pool;
  // Declared after the pool: its thread ends (and drops its staging buffers) first.
  std::unique_ptr<DeviceQueue> device;
  if (copier != nullptr)
    device = std::make_unique<DeviceQueue>(copier.get(), &inflight);
  for (const ChunkRead& c : reads) {
    if (inflight.failed())
      break;
    inflight.Acquire();
    const bool direct = !c.device && !c.upcast && c.want_begin == 0 && c.want_end == c.chunk_len;
    // Fresh destination memory (a new tensor) is mapped here in one call rather than a fault
    // per page as the bytes arrive: in a VM that is the difference between ~0.4 and ~8 GiB/s.
    const uint64_t stored = c.want_end - c.want_begin;
    if (!c.device)
      PrefaultForWrite(c.dst, c.upcast ? stored / 2 * 4 : stored);
    char* buf;
    std::shared_ptr<char[]> staging;
    if (direct) {
      buf = c.dst;
    } else {
      std::unique_ptr<char[]> b;
      {
        std::lock_guard<std::mutex> lock(pool_mu);
        if (!pool.empty()) {
          b = std::move(pool.back());
          pool.pop_back();
        }
      }
      if (!b) {
        b = std::make_unique_for_overwrite<char[]>(m.chunk_bytes);
        PrefaultForWrite(b.get(), m.chunk_bytes);
      }
      staging = std::shared_ptr<char[]>(b.release(), [&pool_mu, &pool](char* p) {
        std::lock_guard<std::mutex> lock(pool_mu);
        pool.emplace_back(p);
      });
      buf = staging.get();
    }
    const int threads = o.convert_threads;
    DeviceQueue* dq = device.get();
    c.file->PreadAsync(buf, c.chunk_len, c.shard->offset + c.chunk * m.chunk_bytes,
                       [&inflight, c, buf, staging, direct, threads, dq](Result<size_t> r) mutable {
                         Status st = r.ok() ? Verify(c, buf, *r) : r.status();
                         if (!r.ok())
                           st = st.WithContext(fmt::format("tensor '{}'", c.tensor->name));
                         if (st.ok() && c.device) {
                           // On the host first: verified, widened if asked, then to the device.
                           DeviceQueue::Job j;
                           j.dst = c.dst;
                           j.len = c.want_end - c.want_begin;
                           j.tensor = c.tensor->name;
                           if (c.upcast) {
                             std::shared_ptr<char[]> wide(new char[j.len * 2]);
                             Deliver(c, buf, threads, wide.get());
                             j.len *= 2;
                             j.src = wide.get();
                             j.keep = std::shared_ptr<void>(wide, wide.get());
                           } else {
                             j.src = buf + c.want_begin;
                             j.keep = std::shared_ptr<void>(staging, staging.get());
                           }
                           staging.reset();
                           dq->Push(std::move(j));  // releases the slot once copied
                           return;
                         }
                         if (st.ok() && !direct)
                           Deliver(c, buf, threads, c.dst);
                         staging.reset();
                         inflight.Release(st);
                       });
  }
  Status st = inflight.Wait();
  if (device != nullptr) {
    Status ds = device->Stop();
    if (st.ok())
      st = ds.WithContext("copying to the device");
  }
  for (auto& [name, f] : files)
    f->Close().IgnoreError();  // read-only: nothing to lose
  return st;
}

}  // namespace ciuic::checkpoint
