#include "client/readahead.h"

#include <algorithm>

namespace ciuic::client {

ReadaheadPolicy::ReadaheadPolicy(uint64_t window_bytes,
                                 uint64_t chunk_bytes,
                                 uint64_t direct_min_bytes)
    : window_(window_bytes),
      chunk_(chunk_bytes == 0 ? 1 : chunk_bytes),
      direct_min_(direct_min_bytes) {
  if (window_ == 0)
    disabled_ = true;
}

ReadaheadPolicy::Decision ReadaheadPolicy::OnRead(uint64_t offset,
                                                  uint64_t len,
                                                  uint64_t file_size) {
  Decision d;
  if (disabled_ || len == 0)
    return d;
  // Small forward gaps (a reader skipping a header) still count as sequential.
  const bool sequential = offset >= next_expected_ && offset - next_expected_ <= chunk_ / 4;
  if (sequential) {
    if (seq_run_ < kSeqRunToStart)
      ++seq_run_;
  } else {
    seq_run_ = 0;
  }
  next_expected_ = offset + len;
  if (seq_run_ < kSeqRunToStart || len >= direct_min_ || offset >= file_size)
    return d;
  d.use_readahead = true;
  d.first_chunk = offset / chunk_;
  uint64_t want_end = std::min(file_size, offset + len + window_);
  d.end_chunk = std::max(d.first_chunk + 1, (want_end + chunk_ - 1) / chunk_);
  return d;
}

}  // namespace ciuic::client
