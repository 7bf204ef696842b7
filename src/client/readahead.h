// ReadaheadPolicy: detects sequential reading of one open file and says which chunks to have in
// flight ahead of the reader. Only the decisions live here (pure, unit-tested); FileImpl owns the
// chunk buffers. Not thread-safe: the owner serializes calls.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ciuic::client {

class ReadaheadPolicy {
 public:
  // `window_bytes`: how far ahead of the reader to fetch (0 disables readahead). `chunk_bytes`:
  // unit of fetching and of caching (a power of two). Reads of at least `direct_min_bytes` are
  // never served through readahead: they go straight to the caller's buffer.
  ReadaheadPolicy(uint64_t window_bytes, uint64_t chunk_bytes, uint64_t direct_min_bytes);

  struct Decision {
    bool use_readahead = false;
    // When use_readahead: chunk indexes [first_chunk, end_chunk) should be cached or in flight;
    // chunks before first_chunk may be dropped.
    uint64_t first_chunk = 0;
    uint64_t end_chunk = 0;
  };

  // Records a read of [offset, offset+len) and decides how to serve it. `file_size` clips the
  // window. A read that does not continue the previous one turns readahead off until two
  // sequential reads in a row turn it back on.
  Decision OnRead(uint64_t offset, uint64_t len, uint64_t file_size);
  // Turns readahead off for good (random access declared).
  void Disable() { disabled_ = true; }
  bool sequential() const { return seq_run_ >= kSeqRunToStart; }
  uint64_t chunk_bytes() const { return chunk_; }

 private:
  static constexpr int kSeqRunToStart = 2;
  uint64_t window_;
  uint64_t chunk_;
  uint64_t direct_min_;
  bool disabled_ = false;
  uint64_t next_expected_ = 0;
  // Length of the current run of sequential reads; starts at 1 so that a first read at offset 0
  // already counts as the second of a run (whole-file readers read from the start).
  int seq_run_ = 1;
};

}  // namespace ciuic::client
