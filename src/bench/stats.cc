#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ciuic::bench {

Summary Summarize(std::vector<double> v) {
  Summary s;
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  s.count = v.size();
  s.min = v.front();
  s.max = v.back();
  size_t mid = v.size() / 2;
  s.median = v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  return s;
}

namespace {

// Nearest rank on sorted data.
double RankOf(const std::vector<double>& sorted, double p) {
  if (sorted.empty())
    return 0;
  p = std::clamp(p, 0.0, 100.0);
  if (p == 0)
    return sorted.front();
  // The epsilon keeps 99.9 % of 1000 at rank 999 despite binary rounding (999.0000000000001).
  auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size()) - 1e-9));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

}  // namespace

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return RankOf(v, p);
}

LatencyStats ComputeLatency(std::vector<double> samples_us) {
  LatencyStats s;
  if (samples_us.empty())
    return s;
  std::sort(samples_us.begin(), samples_us.end());
  s.count = samples_us.size();
  s.p50 = RankOf(samples_us, 50);
  s.p99 = RankOf(samples_us, 99);
  s.p999 = RankOf(samples_us, 99.9);
  s.max = samples_us.back();
  s.mean = std::accumulate(samples_us.begin(), samples_us.end(), 0.0) /
           static_cast<double>(samples_us.size());
  return s;
}

double ScalingEfficiency(double t1, double tn, int n) {
  if (n <= 0 || t1 <= 0)
    return 0;
  return tn / (static_cast<double>(n) * t1);
}

bool ExceedsLimit(double value, double limit, double slack) {
  if (limit <= 0)
    return false;
  return value > limit * (1.0 + slack);
}

}  // namespace ciuic::bench
