// Rings: batches of reads and writes between files and one shared-memory region, with their
// completions collected in one place (the shape of 3FS's USRBIO and of io_uring, over ciuic's
// client). The C form is include/ciuic/ciuic.h.
//
//   auto region = client->NewSharedMemory(64 << 20).value();   // sealed memfd
//   auto ring = ciuic::Ring::Create(region, 256).value();
//   auto f = client->Open("/data/a.bin", O_RDONLY).value();
//   ring->Prepare({.file = f.get(), .offset = 0, .len = 1 << 20, .region_offset = 0,
//                  .user_data = 7});
//   ring->Submit();
//   ciuic::RingCompletion c[16];
//   size_t n = ring->Wait(c, 1, -1).value();   // c[0].user_data == 7, c[0].result == bytes
//
// Where the bytes go (docs/design.md "Rings"):
//   - reads from an OSS on this host are placed in the region by the OSS, from its disk (whole
//     4 KiB blocks at 4 KiB-aligned file and region offsets; no byte crosses a socket);
//   - reads from an OSS on another host arrive over TCP straight into the region;
//   - writes to an OSS on this host are taken from the region by the OSS (whole aligned blocks
//     go to its disk straight from the region; no socket copy);
//   - writes to an OSS on another host go out over TCP, gathered from the region.
// IO of a replicated file always uses TCP (the chain forwards the bytes itself).
//
// Semantics:
//   - IOs start in Submit order but complete in any order; each completes exactly once.
//   - A read that reaches the end of the file completes with fewer bytes (0 at or past it) and
//     may write zeros to the region past them, up to the next 4 KiB of the file, never past its
//     own range. A write completes with `len`.
//   - An IO that fails completes with -errno (its own error only: the others go on).
//   - The region's bytes of a write must not change, and those of a read must not be used,
//     until the IO completes. Files must stay open until their IOs complete.
//   - A ring belongs to the process that made it: after fork() the child's calls fail with
//     kNotSupported ("made in process P"), and its IOs stay the parent's; the child makes its
//     own client and ring (a Client does not survive fork either).
// Thread-safety: every method may be called from any thread, concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic {

// One IO to prepare.
struct RingIo {
  File* file = nullptr;     // or a file registered with the ring:
  int32_t fixed_file = -1;  // its index (RegisterFile), used when >= 0
  bool write = false;
  uint64_t offset = 0;         // in the file
  uint64_t len = 0;            // 1 byte to 64 MiB
  uint64_t region_offset = 0;  // [region_offset, region_offset + len) inside the region
  uint64_t user_data = 0;      // returned with its completion
};

struct RingCompletion {
  uint64_t user_data = 0;
  int64_t result = 0;  // bytes read or written (>= 0), or -errno
};

class Ring {
 public:
  // A ring over `region` (a SharedMemory from Client::NewSharedMemory or ImportSharedMemory;
  // any other SharedMemory works too, over TCP) holding at most `entries` IOs at a time:
  // prepared, in flight, or completed and not yet taken by Wait. kInvalidArgument when `region`
  // is null or `entries` is 0 or more than 65,536.
  static Result<std::unique_ptr<Ring>> Create(std::shared_ptr<SharedMemory> region,
                                              uint32_t entries);
  // Waits for the IOs in flight, then drops what is left.
  virtual ~Ring() = default;

  // Registers a file for RingIo::fixed_file; returns its index. The ring holds it (and keeps
  // it open) until UnregisterFile or the ring's end.
  virtual Result<int32_t> RegisterFile(std::shared_ptr<File> file) = 0;
  // Drops a registered file: IOs in flight keep it, and the ring's last reference goes at the
  // next Wait after they completed (or the ring's end). kInvalidArgument: not registered.
  virtual Status UnregisterFile(int32_t index) = 0;

  // Queues one IO for the next Submit. kInvalidArgument: no file (or an unregistered index),
  // len 0 or over 64 MiB, or the range not inside the region (nothing is queued); kBusy: the
  // ring holds `entries` IOs already (Wait for some).
  virtual Status Prepare(const RingIo& io) = 0;
  // Starts every prepared IO; returns how many it started.
  virtual Result<size_t> Submit() = 0;
  // Takes between `min_complete` and out.size() completions (in the order they completed),
  // waiting up to `timeout_ms` (< 0: no limit; 0: do not wait) for `min_complete` of them.
  // kTimedOut when fewer than `min_complete` completed in time (they stay for the next Wait);
  // kInvalidArgument when `min_complete` exceeds out.size() or the IOs in flight and completed.
  virtual Result<size_t> Wait(std::span<RingCompletion> out,
                              size_t min_complete,
                              int timeout_ms) = 0;

  virtual SharedMemory& region() const = 0;
  virtual uint32_t entries() const = 0;
  // IOs prepared and not submitted; submitted and not complete; complete and not taken.
  virtual size_t prepared() const = 0;
  virtual size_t in_flight() const = 0;
  virtual size_t ready() const = 0;
};

}  // namespace ciuic
