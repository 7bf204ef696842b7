/* ciuic.h: the C API of the ciuic client (libciuic.so), with a stable ABI.
 *
 * Opaque handles, plain integer results: a call returns 0 (or a count) on success and a negative
 * errno on failure; ciuic_last_error() then holds a one-line message for the calling thread.
 * Nothing here is a C++ type, and structs are never passed by value except ciuic_completion,
 * whose layout is fixed (16 bytes). CIUIC_ABI_VERSION changes only when a published function
 * changes; new functions may be added.
 *
 * Rings (see include/ciuic/ring.h for the full semantics): register a shared-memory region,
 * make a ring over it, prepare reads and writes between files and the region, submit, and wait
 * for completions. Reads from OSSes on this host are placed in the region by the OSS and writes
 * are taken from it by the OSS (no byte crosses a socket); other OSSes are reached over TCP
 * straight into and out of the region.
 *
 *   ciuic_client* c; ciuic_region* r; ciuic_ring* ring; ciuic_file* f;
 *   ciuic_connect(NULL, &c);                        // $CIUIC_CLUSTER, ~/ciuic/cluster.conf
 *   ciuic_region_create(c, 64 << 20, &r);
 *   ciuic_ring_create(r, 256, &ring);
 *   ciuic_open(c, "/data/a.bin", O_RDONLY, 0, &f);
 *   ciuic_ring_prep(ring, CIUIC_OP_READ, f, -1, 0, 1 << 20, 0, 42);
 *   ciuic_ring_submit(ring);
 *   ciuic_completion done[8];
 *   int n = ciuic_ring_wait(ring, done, 8, 1, -1);  // done[0].user_data == 42
 *
 * Thread-safety: every function may be called from any thread; a handle must not be freed
 * while another thread uses it. */
#ifndef CIUIC_CIUIC_H_
#define CIUIC_CIUIC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CIUIC_ABI_VERSION 1

#if defined(__GNUC__)
#define CIUIC_API __attribute__((visibility("default")))
#else
#define CIUIC_API
#endif

typedef struct ciuic_client ciuic_client;
typedef struct ciuic_file ciuic_file;
typedef struct ciuic_region ciuic_region;
typedef struct ciuic_ring ciuic_ring;

typedef struct ciuic_completion {
  uint64_t user_data;
  int64_t result; /* bytes read or written (>= 0), or -errno */
} ciuic_completion;

enum { CIUIC_OP_READ = 0, CIUIC_OP_WRITE = 1 };

/* The ABI version this library implements (CIUIC_ABI_VERSION of its build). */
CIUIC_API uint32_t ciuic_abi_version(void);
/* The message of the last failed call on this thread ("" when none). Valid until the next
 * call on this thread. */
CIUIC_API const char* ciuic_last_error(void);

/* Connects with the cluster file `cluster_file` (NULL or "": $CIUIC_CLUSTER, then
 * ~/ciuic/cluster.conf). */
CIUIC_API int ciuic_connect(const char* cluster_file, ciuic_client** out);
/* Closes the session. Files, regions and rings made from it must be freed first. */
CIUIC_API void ciuic_disconnect(ciuic_client* client);

/* open(2) flags and mode. */
CIUIC_API int ciuic_open(
    ciuic_client* client, const char* path, int flags, uint32_t mode, ciuic_file** out);
/* Closes the file and frees the handle; returns the close's result (a write's late error).
 * A ring that registered the file keeps it open until it lets it go. */
CIUIC_API int ciuic_close(ciuic_file* file);
CIUIC_API int64_t ciuic_pread(ciuic_file* file, void* buf, size_t len, uint64_t offset);
CIUIC_API int64_t ciuic_pwrite(ciuic_file* file, const void* buf, size_t len, uint64_t offset);
CIUIC_API int ciuic_fsync(ciuic_file* file);

/* A region of at least `bytes` (rounded up to 4 KiB) shared with the OSSes on this host. */
CIUIC_API int ciuic_region_create(ciuic_client* client, size_t bytes, ciuic_region** out);
/* A region over the caller's memfd (mapped again here; the caller may close `memfd`). It must
 * be sealed with F_SEAL_SHRINK | F_SEAL_GROW: -EINVAL otherwise. */
CIUIC_API int ciuic_region_import(ciuic_client* client, int memfd, ciuic_region** out);
CIUIC_API void* ciuic_region_data(const ciuic_region* region);
CIUIC_API size_t ciuic_region_size(const ciuic_region* region);
/* Frees the handle; the memory stays while rings over it live. */
CIUIC_API void ciuic_region_free(ciuic_region* region);

/* A ring over `region` holding at most `entries` IOs (1 to 65,536). */
CIUIC_API int ciuic_ring_create(ciuic_region* region, uint32_t entries, ciuic_ring** out);
/* Waits for the IOs in flight, then frees the ring. */
CIUIC_API void ciuic_ring_free(ciuic_ring* ring);
/* Registers `file` with the ring; returns its index (>= 0) for ciuic_ring_prep. */
CIUIC_API int ciuic_ring_register_file(ciuic_ring* ring, ciuic_file* file);
CIUIC_API int ciuic_ring_unregister_file(ciuic_ring* ring, int index);
/* Prepares one IO: `op` CIUIC_OP_READ or CIUIC_OP_WRITE, on `file`, or on the registered file
 * `fixed_file` when `file` is NULL; [offset, offset + len) of the file and
 * [region_offset, region_offset + len) of the region. -EINVAL: refused (outside the region,
 * len 0 or over 64 MiB, no file); -EBUSY: the ring holds `entries` IOs already. */
CIUIC_API int ciuic_ring_prep(ciuic_ring* ring,
                              int op,
                              ciuic_file* file,
                              int fixed_file,
                              uint64_t offset,
                              uint64_t len,
                              uint64_t region_offset,
                              uint64_t user_data);
/* Starts the prepared IOs; returns how many. */
CIUIC_API int ciuic_ring_submit(ciuic_ring* ring);
/* Takes between `min_complete` and `max` completions into `out`, waiting up to `timeout_ms`
 * (< 0: no limit) for `min_complete`; returns how many, or -ETIMEDOUT (nothing taken), or
 * -EINVAL (min_complete over max or over the IOs in flight and completed). */
CIUIC_API int ciuic_ring_wait(
    ciuic_ring* ring, ciuic_completion* out, size_t max, size_t min_complete, int timeout_ms);

/* Reads [offset, offset + len) of `file` into GPU memory at `device_ptr` through CUDA's
 * runtime, loaded at run time ($CIUIC_CUDART, else libcudart.so): pinned staging in memory
 * shared with the OSSes, copies on two streams overlapped with the reads. Returns the bytes
 * read, or -ENOTSUP when no CUDA runtime loads (ciuic_last_error says where it looked). */
CIUIC_API int64_t ciuic_read_to_device(
    ciuic_client* client, ciuic_file* file, uint64_t offset, size_t len, void* device_ptr);

#ifdef __cplusplus
}
#endif

#endif /* CIUIC_CIUIC_H_ */
