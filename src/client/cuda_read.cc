// ReadToDevice (include/ciuic/cuda.h): CUDA's runtime through dlopen, pinned staging buffers in
// memory shared with the OSSes, and two streams so the copy of one chunk overlaps the read of
// the next.
#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "ciuic/cuda.h"

namespace ciuic::cuda {
namespace {

// The few runtime entry points used, with CUDA's C types reduced to what the ABI needs:
// cudaError_t is an int enum, a stream a pointer, cudaMemcpyKind an int enum.
using CudaError = int;
using CudaStream = void*;
constexpr int kMemcpyHostToDevice = 1;
constexpr unsigned kHostRegisterDefault = 0;

struct Runtime {
  void* handle = nullptr;
  std::string where;  // what was tried, for the error
  CudaError (*host_register)(void*, size_t, unsigned) = nullptr;
  CudaError (*host_unregister)(void*) = nullptr;
  CudaError (*stream_create)(CudaStream*) = nullptr;
  CudaError (*stream_destroy)(CudaStream) = nullptr;
  CudaError (*memcpy_async)(void*, const void*, size_t, int, CudaStream) = nullptr;
  CudaError (*stream_synchronize)(CudaStream) = nullptr;
  const char* (*error_string)(CudaError) = nullptr;

  Status Check(CudaError e, const char* what) const {
    if (e == 0)
      return Status::OK();
    return Status::IoError(fmt::format("CUDA {}: {} ({})", what,
                                       error_string != nullptr ? error_string(e) : "error", e));
  }
};

// Loaded once per process; *error says why not.
const Runtime* LoadRuntime(std::string* error) {
  static std::once_flag once;
  static Runtime rt;
  static std::string load_error;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char* env = std::getenv("CIUIC_CUDART"); env != nullptr && *env != '\0') {
      names.emplace_back(env);
    } else {
      names = {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"};
    }
    std::string tried;
    for (const std::string& n : names) {
      rt.handle = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (rt.handle != nullptr) {
        rt.where = n;
        break;
      }
      const char* e = dlerror();
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", n, e != nullptr ? e : "?");
    }
    if (rt.handle == nullptr) {
      load_error = "no CUDA runtime (set $CIUIC_CUDART to libcudart's path): " + tried;
      return;
    }
    auto sym = [&](const char* name, auto** fn) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(rt.handle, name));
      if (*fn == nullptr && load_error.empty())
        load_error = fmt::format("{} has no {}", rt.where, name);
    };
    sym("cudaHostRegister", &rt.host_register);
    sym("cudaHostUnregister", &rt.host_unregister);
    sym("cudaStreamCreate", &rt.stream_create);
    sym("cudaStreamDestroy", &rt.stream_destroy);
    sym("cudaMemcpyAsync", &rt.memcpy_async);
    sym("cudaStreamSynchronize", &rt.stream_synchronize);
    sym("cudaGetErrorString", &rt.error_string);
  });
  if (!load_error.empty()) {
    if (error != nullptr)
      *error = load_error;
    return nullptr;
  }
  return &rt;
}

// The staging memory of the last client used: two chunks of shared memory, pinned, and two
// streams. One call at a time uses it.
struct Staging {
  std::mutex mu;  // held for a whole ReadToDevice
  Client* client = nullptr;
  std::shared_ptr<SharedMemory> mem;
  size_t chunk = 0;
  CudaStream streams[2] = {nullptr, nullptr};

  void Release(const Runtime& rt) {
    if (mem != nullptr)
      rt.host_unregister(mem->data());
    for (CudaStream& s : streams) {
      if (s != nullptr)
        rt.stream_destroy(s);
      s = nullptr;
    }
    mem.reset();
    client = nullptr;
  }

  Status Prepare(const Runtime& rt, Client& c, size_t chunk_bytes) {
    if (client == &c && chunk == chunk_bytes && mem != nullptr)
      return Status::OK();
    Release(rt);
    CIUIC_ASSIGN_OR_RETURN(mem, c.NewSharedMemory(2 * chunk_bytes));
    if (Status s = rt.Check(rt.host_register(mem->data(), mem->size(), kHostRegisterDefault),
                            "cudaHostRegister of the staging memory");
        !s.ok()) {
      mem.reset();
      return s;
    }
    for (CudaStream& s : streams) {
      if (Status st = rt.Check(rt.stream_create(&s), "cudaStreamCreate"); !st.ok()) {
        Release(rt);
        return st;
      }
    }
    client = &c;
    chunk = chunk_bytes;
    return Status::OK();
  }
};

Staging& TheStaging() {
  static Staging* s = new Staging;  // never destroyed: CUDA may be gone at exit
  return *s;
}

}  // namespace

bool Available(std::string* why) {
  return LoadRuntime(why) != nullptr;
}

Result<size_t> ReadToDevice(Client& client,
                            File& file,
                            uint64_t offset,
                            size_t len,
                            void* device_ptr,
                            const DeviceReadOptions& options) {
  std::string why;
  const Runtime* rt = LoadRuntime(&why);
  if (rt == nullptr)
    return Status::NotSupported(why);
  const size_t chunk = options.chunk_bytes;
  if (chunk == 0 || chunk % 4096 != 0 || chunk > (64u << 20)) {
    return Status::InvalidArgument(
        fmt::format("device read: chunk of {} bytes (a multiple of 4 KiB up to 64 MiB)", chunk));
  }
  if (device_ptr == nullptr && len > 0)
    return Status::InvalidArgument("device read: no device pointer");
  Staging& st = TheStaging();
  std::lock_guard<std::mutex> lock(st.mu);
  CIUIC_RETURN_IF_ERROR(st.Prepare(*rt, client, chunk));
  uint8_t* staging[2] = {st.mem->data(), st.mem->data() + chunk};
  bool copying[2] = {false, false};  // a copy out of staging[k] may still run on stream k
  auto read_chunk = [&](int k, uint64_t at, size_t n) {
    auto p = std::make_shared<std::promise<Result<size_t>>>();
    std::future<Result<size_t>> f = p->get_future();
    file.PreadAsync(staging[k], n, at, [p](Result<size_t> r) { p->set_value(std::move(r)); });
    return f;
  };
  Status err;
  size_t done = 0;
  std::future<Result<size_t>> pending[2];
  int k = 0;
  size_t next = 0;  // bytes whose read has been started
  auto start_read = [&](int slot) -> Status {
    if (next >= len)
      return Status::OK();
    if (copying[slot]) {
      // The staging buffer is reused only after its copy to the device finished.
      CIUIC_RETURN_IF_ERROR(
          rt->Check(rt->stream_synchronize(st.streams[slot]), "cudaStreamSynchronize"));
      copying[slot] = false;
    }
    const size_t n = std::min(chunk, len - next);
    pending[slot] = read_chunk(slot, offset + next, n);
    next += n;
    return Status::OK();
  };
  err = start_read(0);
  if (err.ok())
    err = start_read(1);
  bool eof = false;
  while (err.ok() && pending[k].valid()) {
    Result<size_t> r = pending[k].get();
    if (!r.ok()) {
      err = r.status();
      break;
    }
    const size_t want = std::min(chunk, len - done);
    const size_t got = std::min(*r, want);
    if (got > 0 && !eof) {
      err = rt->Check(rt->memcpy_async(static_cast<uint8_t*>(device_ptr) + done, staging[k], got,
                                       kMemcpyHostToDevice, st.streams[k]),
                      "cudaMemcpyAsync");
      copying[k] = err.ok();
      done += got;
    }
    if (got < want)
      eof = true;  // the file ended: nothing more is copied
    if (err.ok() && !eof)
      err = start_read(k);
    k ^= 1;
  }
  // Every read started is waited for (its buffer is ours), every copy finished.
  for (auto& p : pending) {
    if (p.valid())
      p.wait();
  }
  for (int s = 0; s < 2; ++s) {
    if (copying[s]) {
      Status sync = rt->Check(rt->stream_synchronize(st.streams[s]), "cudaStreamSynchronize");
      if (err.ok())
        err = sync;
    }
  }
  if (!err.ok())
    return err;
  return done;
}

struct DeviceCopier::Impl {
  const Runtime* rt = nullptr;
  size_t chunk = 0;
  uint8_t* mem = nullptr;  // 2 * chunk, mmap'd and pinned
  bool registered = false;
  CudaStream streams[2] = {nullptr, nullptr};
  bool busy[2] = {false, false};  // a copy out of slot k may still run on stream k
  int next = 0;

  ~Impl() {
    for (int k = 0; k < 2; ++k) {
      if (busy[k])
        rt->stream_synchronize(streams[k]);
      if (streams[k] != nullptr)
        rt->stream_destroy(streams[k]);
    }
    if (registered)
      rt->host_unregister(mem);
    if (mem != nullptr)
      munmap(mem, 2 * chunk);
  }

  Status Sync(int k) {
    if (!busy[k])
      return Status::OK();
    busy[k] = false;
    return rt->Check(rt->stream_synchronize(streams[k]), "cudaStreamSynchronize");
  }
};

DeviceCopier::DeviceCopier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceCopier::~DeviceCopier() = default;

Result<std::unique_ptr<DeviceCopier>> DeviceCopier::Create(size_t chunk_bytes) {
  std::string why;
  const Runtime* rt = LoadRuntime(&why);
  if (rt == nullptr)
    return Status::NotSupported(why);
  if (chunk_bytes == 0 || chunk_bytes % 4096 != 0 || chunk_bytes > (64u << 20)) {
    return Status::InvalidArgument(fmt::format(
        "device copy: chunk of {} bytes (a multiple of 4 KiB up to 64 MiB)", chunk_bytes));
  }
  auto impl = std::make_unique<Impl>();
  impl->rt = rt;
  impl->chunk = chunk_bytes;
  void* m =
      mmap(nullptr, 2 * chunk_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return Status::NoSpace(
        fmt::format("device copy: no memory for {} bytes of staging", 2 * chunk_bytes));
  impl->mem = static_cast<uint8_t*>(m);
  CIUIC_RETURN_IF_ERROR(rt->Check(rt->host_register(m, 2 * chunk_bytes, kHostRegisterDefault),
                                  "cudaHostRegister of the staging memory"));
  impl->registered = true;
  for (CudaStream& s : impl->streams)
    CIUIC_RETURN_IF_ERROR(rt->Check(rt->stream_create(&s), "cudaStreamCreate"));
  return std::unique_ptr<DeviceCopier>(new DeviceCopier(std::move(impl)));
}

Status DeviceCopier::Copy(void* dst, const void* src, size_t n) {
  Impl& d = *impl_;
  const auto* from = static_cast<const uint8_t*>(src);
  auto* to = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const int k = d.next;
    d.next ^= 1;
    // The slot is reused only after its last copy to the device finished.
    CIUIC_RETURN_IF_ERROR(d.Sync(k));
    const size_t piece = std::min(n, d.chunk);
    uint8_t* slot = d.mem + static_cast<size_t>(k) * d.chunk;
    std::memcpy(slot, from, piece);
    CIUIC_RETURN_IF_ERROR(d.rt->Check(
        d.rt->memcpy_async(to, slot, piece, kMemcpyHostToDevice, d.streams[k]), "cudaMemcpyAsync"));
    d.busy[k] = true;
    bytes_ += piece;
    from += piece;
    to += piece;
    n -= piece;
  }
  return Status::OK();
}

Status DeviceCopier::Finish() {
  Status first;
  for (int k = 0; k < 2; ++k) {
    Status s = impl_->Sync(k);
    if (first.ok())
      first = s;
  }
  return first;
}

}  // namespace ciuic::cuda
