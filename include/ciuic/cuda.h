// Reads from ciuic straight to GPU memory, through CUDA's runtime loaded at run time (dlopen of
// libcudart; nothing here needs CUDA to build, and everything but these calls works without it).
//
// The file's bytes are read into pinned staging buffers carved from memory shared with the
// OSSes (so an OSS on this machine places them there from its disk), and each chunk is copied
// to the device with cudaMemcpyAsync on one of two streams while the next chunk is read
// (double buffering). The staging memory is registered with cudaHostRegister once per client.
//
// The runtime is found as $CIUIC_CUDART (a path), else libcudart.so, libcudart.so.12,
// libcudart.so.11.0. Tests point $CIUIC_CUDART at a fake runtime (tests/cuda/fake_cudart.c).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic::cuda {

// Whether a CUDA runtime can be loaded; *why (if not null) gets the reason when not.
bool Available(std::string* why = nullptr);

struct DeviceReadOptions {
  size_t chunk_bytes = 8u << 20;  // bytes per staging buffer (two of them), a multiple of 4 KiB
};

// Reads [offset, offset + len) of `file` (opened for reading, from `client`) into device memory
// at `device_ptr`; returns the bytes read (fewer only at the end of the file; the rest of the
// device range is left as it was). Returns after every copy finished. Errors: kNotSupported
// when no CUDA runtime loads (naming where it looked), kIoError with CUDA's message when a CUDA
// call fails, and the read's own errors. Thread-safe (calls share the client's staging memory
// one at a time).
Result<size_t> ReadToDevice(Client& client,
                            File& file,
                            uint64_t offset,
                            size_t len,
                            void* device_ptr,
                            const DeviceReadOptions& options = {});

// Copies host memory to device memory through two pinned staging buffers of its own and two
// streams: the copy of one piece overlaps the staging of the next. For bytes that are on the
// host already and must be checked or converted before they go to the device (a checkpoint
// load verifies every chunk's checksum and may widen fp16 to fp32). Each byte is copied once
// on the host (into pinned memory) and once over the bus. One thread drives a copier.
class DeviceCopier {
 public:
  // kNotSupported when no CUDA runtime loads; kIoError when pinning or a stream fails.
  static Result<std::unique_ptr<DeviceCopier>> Create(size_t chunk_bytes = 8u << 20);
  ~DeviceCopier();  // waits for the copies in flight
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  // Copies `n` bytes from `src` (host) to `dst` (device). Returns once `src` may be reused; the
  // last pieces may still be on their way to the device: Finish waits for them.
  Status Copy(void* dst, const void* src, size_t n);
  // Waits for every copy; returns the first error of a stream.
  Status Finish();
  uint64_t bytes() const { return bytes_; }

 private:
  struct Impl;
  explicit DeviceCopier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  uint64_t bytes_ = 0;
};

}  // namespace ciuic::cuda
