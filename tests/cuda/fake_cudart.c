/* A fake CUDA runtime for tests (loaded by ciuic's dlopen path as $CIUIC_CUDART): "device
 * memory" is host memory, and copies are deferred until their stream is synchronized, as a real
 * GPU's may be, so a caller that reuses a staging buffer before its copy finished gets the wrong
 * bytes on the "device". It checks that copies come from registered (pinned) memory and counts
 * what happened: fake_cudart_stats(). FAKE_CUDART_FAIL_COPY=N makes the Nth copy fail. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxRanges = 64, kMaxQueued = 1024 };

struct copy {
  void* dst;
  const void* src;
  size_t n;
};

struct stream {
  struct copy queue[kMaxQueued];
  int queued;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uintptr_t lo, hi; } ranges[kMaxRanges];
static int nranges;
static uint64_t registers, copies, bytes, unpinned, syncs;

static int pinned(const void* p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < nranges; ++i) {
    if (a >= ranges[i].lo && a + n <= ranges[i].hi)
      return 1;
  }
  return 0;
}

const char* cudaGetErrorString(int e) {
  switch (e) {
    case 1:
      return "invalid value (fake)";
    case 712:
      return "part or all of the requested memory range is already mapped (fake)";
    case 713:
      return "pointer does not correspond to a registered memory region (fake)";
    default:
      return "unknown error (fake)";
  }
}

int cudaHostRegister(void* p, size_t n, unsigned flags) {
  (void)flags;
  pthread_mutex_lock(&mu);
  int rc = 0;
  if (p == NULL || n == 0 || nranges == kMaxRanges) {
    rc = 1;
  } else {
    uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < nranges; ++i) {
      if (a < ranges[i].hi && a + n > ranges[i].lo)
        rc = 712;
    }
    if (rc == 0) {
      ranges[nranges].lo = a;
      ranges[nranges].hi = a + n;
      ++nranges;
      ++registers;
    }
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int cudaHostUnregister(void* p) {
  pthread_mutex_lock(&mu);
  int rc = 713;
  for (int i = 0; i < nranges; ++i) {
    if (ranges[i].lo == (uintptr_t)p) {
      ranges[i] = ranges[--nranges];
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int cudaStreamCreate(void** s) {
  *s = calloc(1, sizeof(struct stream));
  return *s == NULL ? 2 : 0;
}

int cudaStreamSynchronize(void* sp) {
  struct stream* s = sp;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < s->queued; ++i)
    memcpy(s->queue[i].dst, s->queue[i].src, s->queue[i].n);
  s->queued = 0;
  ++syncs;
  pthread_mutex_unlock(&mu);
  return 0;
}

int cudaStreamDestroy(void* sp) {
  cudaStreamSynchronize(sp);
  free(sp);
  return 0;
}

int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* sp) {
  struct stream* s = sp;
  if (kind != 1 || s == NULL)
    return 1;
  pthread_mutex_lock(&mu);
  const char* fail = getenv("FAKE_CUDART_FAIL_COPY");
  int rc = 0;
  if (fail != NULL && (uint64_t)atoll(fail) == copies + 1) {
    rc = 1;
  } else if (s->queued == kMaxQueued) {
    rc = 1;
  } else {
    if (!pinned(src, n))
      ++unpinned;
    s->queue[s->queued].dst = dst;
    s->queue[s->queued].src = src;
    s->queue[s->queued].n = n;
    ++s->queued;
    bytes += n;
  }
  ++copies;
  pthread_mutex_unlock(&mu);
  return rc;
}

/* For tests: what happened so far. */
void fake_cudart_stats(uint64_t out[5]) {
  pthread_mutex_lock(&mu);
  out[0] = registers;
  out[1] = copies;
  out[2] = bytes;
  out[3] = unpinned;
  out[4] = syncs;
  pthread_mutex_unlock(&mu);
}
