// OstStore: collection of tombstones (docs/formats/ost-disk.md, "Tombstones"). A tombstone
// refuses writes to a destroyed object; it is needed only while such a write can still arrive,
// so it is deleted once it is older than Options::tombstone_grace.
#include <fmt/format.h>

#include "common/logging.h"
#include "oss/ost_format.h"
#include "oss/ost_store.h"
#include "oss/ost_store_internal.h"

namespace ciuic::oss {

void OstStore::NoteTombstone(std::string name) {
  std::lock_guard<std::mutex> lock(tomb_mu_);
  tombstones_.emplace_back(Now() + options_.tombstone_grace, std::move(name));
}

Status OstStore::LoadTombstones() {
  // Their age is unknown (the file holds nothing), so each gets a whole grace period from now:
  // a restart only ever keeps a tombstone longer.
  CIUIC_ASSIGN_OR_RETURN(std::vector<std::string> names, engine_->ListDir(objects_dir_));
  size_t n = 0;
  for (std::string& name : names) {
    if (name.size() > kTombstoneSuffix.size() &&
        std::string_view(name).substr(name.size() - kTombstoneSuffix.size()) == kTombstoneSuffix) {
      NoteTombstone(std::move(name));
      ++n;
    }
  }
  if (n > 0)
    LOG_INFO("OST {}: {} tombstone(s) to collect after {} ms", options_.index, n,
             options_.tombstone_grace.count());
  return Status::OK();
}

Result<size_t> OstStore::CollectTombstones(size_t max) {
  if (!BeginOp())
    return size_t{0};
  std::vector<std::string> due;
  {
    std::lock_guard<std::mutex> lock(tomb_mu_);
    const auto now = Now();
    while (!tombstones_.empty() && due.size() < max && tombstones_.front().first <= now) {
      due.push_back(std::move(tombstones_.front().second));
      tombstones_.pop_front();
    }
  }
  size_t removed = 0;
  Status first_error;
  for (const std::string& name : due) {
    // Not synced: a removal lost to a crash leaves a tombstone that is found at the next start
    // and collected a grace period later; it refuses writes meanwhile, which is the safe side.
    Status st = engine_->Unlink(objects_dir_ + "/" + name);
    if (st.ok()) {
      ++removed;
    } else if (st.code() != StatusCode::kNotFound && first_error.ok()) {
      first_error = OstError(st, nullptr, fmt::format("remove tombstone {}", name));
      NoteTombstone(name);  // try again after another grace period
    }
  }
  EndOp();
  if (!first_error.ok())
    return first_error;
  return removed;
}

size_t OstStore::tombstones_pending() {
  std::lock_guard<std::mutex> lock(tomb_mu_);
  return tombstones_.size();
}

}  // namespace ciuic::oss
