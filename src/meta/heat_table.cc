#include "meta/heat_table.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ciuic::meta {

HeatTable::HeatTable(int64_t half_life_ms, size_t max_files)
    : half_life_ms_(std::max<int64_t>(half_life_ms, 1)),
      max_files_(std::max<size_t>(max_files, 1)) {}

double HeatTable::Decay(double value, int64_t from_ms, int64_t to_ms, int64_t half_life_ms) {
  if (to_ms <= from_ms || half_life_ms <= 0)
    return value;
  return value *
         std::exp2(-static_cast<double>(to_ms - from_ms) / static_cast<double>(half_life_ms));
}

void HeatTable::Add(const Fid& fid, double count, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = heat_.try_emplace(fid);
  Entry& e = it->second;
  e.value = Decay(e.value, e.at_ms, now_ms, half_life_ms_) + count;
  e.at_ms = std::max(e.at_ms, now_ms);
  if (added && heat_.size() > max_files_)
    EvictLocked(now_ms);
}

std::optional<double> HeatTable::Get(const Fid& fid, int64_t now_ms) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = heat_.find(fid);
  if (it == heat_.end())
    return std::nullopt;
  return Decay(it->second.value, it->second.at_ms, now_ms, half_life_ms_);
}

void HeatTable::Erase(const Fid& fid) {
  std::lock_guard<std::mutex> lock(mu_);
  heat_.erase(fid);
}

size_t HeatTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return heat_.size();
}

void HeatTable::EvictLocked(int64_t now_ms) {
  const size_t keep = max_files_ - max_files_ / 8;
  std::vector<std::pair<double, Fid>> all;
  all.reserve(heat_.size());
  for (const auto& [fid, e] : heat_)
    all.emplace_back(Decay(e.value, e.at_ms, now_ms, half_life_ms_), fid);
  const size_t drop = all.size() - std::min(all.size(), keep);
  std::nth_element(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(drop), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < drop; ++i)
    heat_.erase(all[i].second);
}

}  // namespace ciuic::meta
