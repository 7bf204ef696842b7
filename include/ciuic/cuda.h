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

}  // namespace ciuic::cuda
