// Statistics of the benchmark: percentiles, min/median/max over runs, scaling efficiency, and
// the cache-inflation check. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ciuic::bench {

struct Summary {
  double min = 0;
  double median = 0;
  double max = 0;
  size_t count = 0;
};

// Returns min, median (mean of the middle two for an even count) and max of `v`; all zero when
// `v` is empty.
Summary Summarize(std::vector<double> v);

// Returns the `p`-th percentile (0 <= p <= 100) of `v` by the nearest-rank method: the smallest
// value with at least p% of the samples at or below it (p = 0 gives the minimum). 0 when empty.
double Percentile(std::vector<double> v, double p);

// Percentiles of latencies in one pass (sorts once).
struct LatencyStats {
  double p50 = 0;
  double p99 = 0;
  double p999 = 0;
  double mean = 0;
  double max = 0;
  size_t count = 0;
};
LatencyStats ComputeLatency(std::vector<double> samples_us);

// Returns the scaling efficiency T(n) / (n * T(1)); 0 when n or t1 is not positive.
double ScalingEfficiency(double t1, double tn, int n);

// True when `value` exceeds `limit` by more than `slack` (a fraction: 0.1 = 10 %): the result
// cannot have come from the device or link it claims to measure. False when limit <= 0 (unknown).
bool ExceedsLimit(double value, double limit, double slack = 0.1);

}  // namespace ciuic::bench
