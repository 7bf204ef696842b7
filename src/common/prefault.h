// PrefaultForWrite: maps fresh memory in one system call before it is filled.
//
// Filling new memory (a tensor just allocated, a staging copy) takes a page fault per 4 KiB page
// on first touch; in a VM each fault is a trap that costs more than the copy itself (measured on
// the dev VM: first touch 0.42 GiB/s, MADV_POPULATE_WRITE 8.5 GiB/s). MADV_POPULATE_WRITE (Linux
// 5.14) faults the whole range in inside the kernel instead. A hint: memory already mapped costs
// only a page-table walk, and older kernels (EINVAL) or odd mappings are simply not prefaulted.
// Only the whole pages inside [p, p + len) are touched. Thread-safe.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace ciuic {

inline void PrefaultForWrite(void* p, size_t len) {
#ifdef MADV_POPULATE_WRITE
  constexpr uintptr_t kPage = 4096;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + len) & ~(kPage - 1);
  if (e > b)
    (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)len;
#endif
}

}  // namespace ciuic
