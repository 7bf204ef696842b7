// The C API (include/ciuic/ciuic.h) over the C++ client: handles own C++ objects, results are
// counts or -errno, and the message of the last failure is kept per thread.
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/ciuic.h"
#include "ciuic/client.h"
#include "ciuic/cuda.h"
#include "ciuic/ring.h"

struct ciuic_client {
  std::unique_ptr<ciuic::Client> client;
};
struct ciuic_file {
  std::shared_ptr<ciuic::File> file;  // shared with rings that registered it
};
struct ciuic_region {
  std::shared_ptr<ciuic::SharedMemory> mem;
};
struct ciuic_ring {
  std::unique_ptr<ciuic::Ring> ring;
};

namespace {

thread_local std::string last_error;

int Fail(const ciuic::Status& s) {
  last_error = s.ToString();
  const int e = s.ToErrno();
  return e > 0 ? -e : -EIO;
}

int Fail(int err, std::string msg) {
  last_error = std::move(msg);
  return -err;
}

}  // namespace

extern "C" {

uint32_t ciuic_abi_version(void) {
  return CIUIC_ABI_VERSION;
}

const char* ciuic_last_error(void) {
  return last_error.c_str();
}

int ciuic_connect(const char* cluster_file, ciuic_client** out) {
  if (out == nullptr)
    return Fail(EINVAL, "ciuic_connect: no place for the client");
  *out = nullptr;
  ciuic::ClientOptions o;
  if (cluster_file != nullptr)
    o.cluster_file = cluster_file;
  auto c = ciuic::Client::Connect(o);
  if (!c.ok())
    return Fail(c.status());
  *out = new ciuic_client{std::move(*c)};
  return 0;
}

void ciuic_disconnect(ciuic_client* client) {
  delete client;
}

int ciuic_open(ciuic_client* client, const char* path, int flags, uint32_t mode, ciuic_file** out) {
  if (client == nullptr || path == nullptr || out == nullptr)
    return Fail(EINVAL, "ciuic_open: a null argument");
  *out = nullptr;
  auto f = client->client->Open(path, flags, mode);
  if (!f.ok())
    return Fail(f.status());
  *out = new ciuic_file{std::shared_ptr<ciuic::File>(std::move(*f))};
  return 0;
}

int ciuic_close(ciuic_file* file) {
  if (file == nullptr)
    return Fail(EINVAL, "ciuic_close: no file");
  std::unique_ptr<ciuic_file> own(file);
  if (own->file.use_count() > 1)
    return 0;  // a ring holds it: closed when the ring lets it go
  ciuic::Status s = own->file->Close();
  return s.ok() ? 0 : Fail(s);
}

int64_t ciuic_pread(ciuic_file* file, void* buf, size_t len, uint64_t offset) {
  if (file == nullptr || (buf == nullptr && len > 0))
    return Fail(EINVAL, "ciuic_pread: a null argument");
  auto n = file->file->Pread(buf, len, offset);
  return n.ok() ? static_cast<int64_t>(*n) : Fail(n.status());
}

int64_t ciuic_pwrite(ciuic_file* file, const void* buf, size_t len, uint64_t offset) {
  if (file == nullptr || (buf == nullptr && len > 0))
    return Fail(EINVAL, "ciuic_pwrite: a null argument");
  auto n = file->file->Pwrite(buf, len, offset);
  return n.ok() ? static_cast<int64_t>(*n) : Fail(n.status());
}

int ciuic_fsync(ciuic_file* file) {
  if (file == nullptr)
    return Fail(EINVAL, "ciuic_fsync: no file");
  ciuic::Status s = file->file->Fsync();
  return s.ok() ? 0 : Fail(s);
}

int ciuic_region_create(ciuic_client* client, size_t bytes, ciuic_region** out) {
  if (client == nullptr || out == nullptr)
    return Fail(EINVAL, "ciuic_region_create: a null argument");
  *out = nullptr;
  auto m = client->client->NewSharedMemory(bytes);
  if (!m.ok())
    return Fail(m.status());
  *out = new ciuic_region{std::move(*m)};
  return 0;
}

int ciuic_region_import(ciuic_client* client, int memfd, ciuic_region** out) {
  if (client == nullptr || out == nullptr)
    return Fail(EINVAL, "ciuic_region_import: a null argument");
  *out = nullptr;
  auto m = client->client->ImportSharedMemory(memfd);
  if (!m.ok())
    return Fail(m.status());
  *out = new ciuic_region{std::move(*m)};
  return 0;
}

void* ciuic_region_data(const ciuic_region* region) {
  return region == nullptr ? nullptr : region->mem->data();
}

size_t ciuic_region_size(const ciuic_region* region) {
  return region == nullptr ? 0 : region->mem->size();
}

void ciuic_region_free(ciuic_region* region) {
  delete region;
}

int ciuic_ring_create(ciuic_region* region, uint32_t entries, ciuic_ring** out) {
  if (region == nullptr || out == nullptr)
    return Fail(EINVAL, "ciuic_ring_create: a null argument");
  *out = nullptr;
  auto r = ciuic::Ring::Create(region->mem, entries);
  if (!r.ok())
    return Fail(r.status());
  *out = new ciuic_ring{std::move(*r)};
  return 0;
}

void ciuic_ring_free(ciuic_ring* ring) {
  delete ring;
}

int ciuic_ring_register_file(ciuic_ring* ring, ciuic_file* file) {
  if (ring == nullptr || file == nullptr)
    return Fail(EINVAL, "ciuic_ring_register_file: a null argument");
  auto i = ring->ring->RegisterFile(file->file);
  return i.ok() ? *i : Fail(i.status());
}

int ciuic_ring_unregister_file(ciuic_ring* ring, int index) {
  if (ring == nullptr)
    return Fail(EINVAL, "ciuic_ring_unregister_file: no ring");
  ciuic::Status s = ring->ring->UnregisterFile(index);
  return s.ok() ? 0 : Fail(s);
}

int ciuic_ring_prep(ciuic_ring* ring,
                    int op,
                    ciuic_file* file,
                    int fixed_file,
                    uint64_t offset,
                    uint64_t len,
                    uint64_t region_offset,
                    uint64_t user_data) {
  if (ring == nullptr)
    return Fail(EINVAL, "ciuic_ring_prep: no ring");
  if (op != CIUIC_OP_READ && op != CIUIC_OP_WRITE)
    return Fail(EINVAL, "ciuic_ring_prep: op is neither CIUIC_OP_READ nor CIUIC_OP_WRITE");
  ciuic::RingIo io;
  io.file = file != nullptr ? file->file.get() : nullptr;
  io.fixed_file = file != nullptr ? -1 : fixed_file;
  io.write = op == CIUIC_OP_WRITE;
  io.offset = offset;
  io.len = len;
  io.region_offset = region_offset;
  io.user_data = user_data;
  ciuic::Status s = ring->ring->Prepare(io);
  return s.ok() ? 0 : Fail(s);
}

int ciuic_ring_submit(ciuic_ring* ring) {
  if (ring == nullptr)
    return Fail(EINVAL, "ciuic_ring_submit: no ring");
  auto n = ring->ring->Submit();
  return n.ok() ? static_cast<int>(*n) : Fail(n.status());
}

int ciuic_ring_wait(
    ciuic_ring* ring, ciuic_completion* out, size_t max, size_t min_complete, int timeout_ms) {
  if (ring == nullptr || (out == nullptr && max > 0))
    return Fail(EINVAL, "ciuic_ring_wait: a null argument");
  static_assert(sizeof(ciuic_completion) == sizeof(ciuic::RingCompletion));
  std::vector<ciuic::RingCompletion> got(max);
  auto n = ring->ring->Wait(got, min_complete, timeout_ms);
  if (!n.ok())
    return Fail(n.status());
  for (size_t i = 0; i < *n; ++i) {
    out[i].user_data = got[i].user_data;
    out[i].result = got[i].result;
  }
  return static_cast<int>(*n);
}

int64_t ciuic_read_to_device(
    ciuic_client* client, ciuic_file* file, uint64_t offset, size_t len, void* device_ptr) {
  if (client == nullptr || file == nullptr)
    return Fail(EINVAL, "ciuic_read_to_device: a null argument");
  auto n = ciuic::cuda::ReadToDevice(*client->client, *file->file, offset, len, device_ptr);
  return n.ok() ? static_cast<int64_t>(*n) : Fail(n.status());
}

}  // extern "C"
