/* A C program (C11, no C++) over libciuic.so's ring API, run by tests/capi/test_capi.py on a
 * local cluster: writes a file through a ring, reads it back through another, checks the bytes
 * and the per-IO results, and checks that bad calls fail with -errno and a message.
 * Usage: capi_ring CLUSTER_FILE PATH. Exit 0 when every check passed; one line per failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ciuic/ciuic.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "capi_ring: line %d: %s failed (%s)\n", __LINE__, #cond, \
              ciuic_last_error());                                             \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

enum { kBlocks = 64, kBlock = 65536 };

static int wait_all(ciuic_ring* ring, int n, int64_t* results) {
  ciuic_completion done[16];
  int got = 0;
  while (got < n) {
    int k = ciuic_ring_wait(ring, done, 16, 1, -1);
    if (k < 0)
      return k;
    for (int i = 0; i < k; ++i)
      results[done[i].user_data] = done[i].result;
    got += k;
  }
  return got;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: capi_ring CLUSTER_FILE PATH\n");
    return 2;
  }
  CHECK(ciuic_abi_version() == CIUIC_ABI_VERSION);
  ciuic_client* c = NULL;
  int rc = ciuic_connect(argv[1], &c);
  if (rc != 0) {
    fprintf(stderr, "capi_ring: connect: %s\n", ciuic_last_error());
    return 1;
  }
  ciuic_region* region = NULL;
  CHECK(ciuic_region_create(c, 2 * kBlocks * kBlock, &region) == 0);
  unsigned char* mem = ciuic_region_data(region);
  CHECK(ciuic_region_size(region) >= 2 * kBlocks * kBlock);
  for (size_t i = 0; i < (size_t)kBlocks * kBlock; ++i)
    mem[i] = (unsigned char)(i * 7 + i / 4099);

  ciuic_ring* ring = NULL;
  CHECK(ciuic_ring_create(region, 128, &ring) == 0);
  ciuic_file* w = NULL;
  CHECK(ciuic_open(c, argv[2], O_CREAT | O_TRUNC | O_RDWR, 0644, &w) == 0);
  int64_t results[kBlocks + 1];
  /* Writes in a shuffled order, on the file as registered. */
  int idx = ciuic_ring_register_file(ring, w);
  CHECK(idx >= 0);
  for (int i = 0; i < kBlocks; ++i) {
    int b = (i * 37) % kBlocks;
    CHECK(ciuic_ring_prep(ring, CIUIC_OP_WRITE, NULL, idx, (uint64_t)b * kBlock, kBlock,
                          (uint64_t)b * kBlock, (uint64_t)b) == 0);
  }
  CHECK(ciuic_ring_submit(ring) == kBlocks);
  CHECK(wait_all(ring, kBlocks, results) == kBlocks);
  for (int b = 0; b < kBlocks; ++b)
    CHECK(results[b] == kBlock);
  CHECK(ciuic_fsync(w) == 0);
  CHECK(ciuic_ring_unregister_file(ring, idx) == 0);
  CHECK(ciuic_close(w) == 0);

  /* Read back into the second half, one IO reaching past the end of the file. */
  ciuic_file* r = NULL;
  CHECK(ciuic_open(c, argv[2], O_RDONLY, 0, &r) == 0);
  memset(mem + (size_t)kBlocks * kBlock, 0xee, (size_t)kBlocks * kBlock);
  for (int b = 0; b < kBlocks - 1; ++b) {
    CHECK(ciuic_ring_prep(ring, CIUIC_OP_READ, r, -1, (uint64_t)b * kBlock, kBlock,
                          (uint64_t)(kBlocks + b) * kBlock, (uint64_t)b) == 0);
  }
  CHECK(ciuic_ring_prep(ring, CIUIC_OP_READ, r, -1, (uint64_t)(kBlocks - 1) * kBlock,
                        2 * kBlock - 4096, (uint64_t)(2 * kBlocks - 1) * kBlock,
                        (uint64_t)(kBlocks - 1)) == -EINVAL); /* past the region's end */
  CHECK(ciuic_ring_prep(ring, CIUIC_OP_READ, r, -1, (uint64_t)(kBlocks - 1) * kBlock, kBlock,
                        (uint64_t)(2 * kBlocks - 1) * kBlock, (uint64_t)(kBlocks - 1)) == 0);
  CHECK(ciuic_ring_prep(ring, CIUIC_OP_READ, r, -1, (uint64_t)kBlocks * kBlock, 4096, 0,
                        (uint64_t)kBlocks) == 0); /* at the end: 0 bytes */
  CHECK(ciuic_ring_submit(ring) == kBlocks + 1);
  CHECK(wait_all(ring, kBlocks + 1, results) == kBlocks + 1);
  for (int b = 0; b < kBlocks; ++b)
    CHECK(results[b] == kBlock);
  CHECK(results[kBlocks] == 0);
  CHECK(memcmp(mem, mem + (size_t)kBlocks * kBlock, (size_t)kBlocks * kBlock) == 0);
  int64_t n = ciuic_pread(r, mem + (size_t)kBlocks * kBlock, 100, 1000);
  CHECK(n == 100);

  /* To "device" memory through the CUDA runtime: the fake one when $CIUIC_CUDART names it,
   * else none (a clear -ENOTSUP). */
  unsigned char* device = malloc((size_t)kBlocks * kBlock);
  CHECK(device != NULL);
  int64_t d = ciuic_read_to_device(c, r, 4096, (size_t)kBlocks * kBlock - 4096, device);
  const char* rt = getenv("CIUIC_CUDART");
  if (rt != NULL && strstr(rt, "fake") != NULL) {
    CHECK(d == (int64_t)kBlocks * kBlock - 4096);
    CHECK(memcmp(device, mem + 4096, (size_t)kBlocks * kBlock - 4096) == 0);
  } else {
    CHECK(d == -ENOTSUP || d == -EOPNOTSUPP);
    CHECK(strstr(ciuic_last_error(), "CUDA") != NULL);
  }
  free(device);

  /* Bad calls: -errno and a message. */
  ciuic_completion one;
  CHECK(ciuic_ring_wait(ring, &one, 1, 1, 0) == -EINVAL); /* nothing in flight */
  CHECK(strlen(ciuic_last_error()) > 0);
  CHECK(ciuic_ring_prep(ring, 7, r, -1, 0, 4096, 0, 0) == -EINVAL);
  CHECK(ciuic_ring_prep(ring, CIUIC_OP_READ, NULL, 99, 0, 4096, 0, 0) == -EINVAL);
  ciuic_file* missing = NULL;
  CHECK(ciuic_open(c, "/no/such/file", O_RDONLY, 0, &missing) == -ENOENT);
  CHECK(missing == NULL);
  CHECK(strstr(ciuic_last_error(), "/no/such/file") != NULL);
  int fd = memfd_create("capi", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
  ciuic_region* unsealed = NULL;
  CHECK(ciuic_region_import(c, fd, &unsealed) == -EINVAL);
  CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
  CHECK(ciuic_region_import(c, fd, &unsealed) == 0);
  close(fd);
  ciuic_region_free(unsealed);

  CHECK(ciuic_close(r) == 0);
  ciuic_ring_free(ring);
  ciuic_region_free(region);
  ciuic_disconnect(c);
  if (failures == 0)
    printf("capi_ring: %d blocks written and read back through rings\n", kBlocks);
  return failures == 0 ? 0 : 1;
}
