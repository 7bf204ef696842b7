#include "common/submit_batch.h"

#include <algorithm>
#include <vector>

namespace ciuic {
namespace {

thread_local int t_depth = 0;
thread_local std::vector<BatchFlusher*> t_flushers;

}  // namespace

SubmitBatch::SubmitBatch() {
  ++t_depth;
}

SubmitBatch::~SubmitBatch() {
  if (--t_depth != 0)
    return;
  // A flush may itself submit (and so Defer) more: loop until nothing is left. t_depth is 0
  // here, so those submit at once rather than joining a batch nobody will end.
  while (!t_flushers.empty()) {
    std::vector<BatchFlusher*> now;
    now.swap(t_flushers);
    for (BatchFlusher* f : now)
      f->FlushBatch();
  }
}

bool SubmitBatch::Defer(BatchFlusher* f) {
  if (t_depth == 0)
    return false;
  if (std::find(t_flushers.begin(), t_flushers.end(), f) == t_flushers.end())
    t_flushers.push_back(f);
  return true;
}

}  // namespace ciuic
