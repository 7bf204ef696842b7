// Metrics: counters, gauges and histograms with labels, rendered in the Prometheus text
// exposition format (version 0.0.4), and a strict parser of that format for tools and tests.
//
// The hot path is a relaxed atomic add: a caller looks a labelled series up once (WithLabels,
// which takes a mutex) and keeps the pointer, which stays valid as long as the registry.
// Histograms have fixed log-scale buckets (powers of two times a first bound) over integer
// observations, so Observe is a bit_width and two atomic adds.
//
// Thread-safety: everything may be called from any thread. Render() takes each family's mutex
// briefly and runs the callbacks on the calling thread (they must not block for long).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ciuic::metrics {

class Counter {
 public:
  void Inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void Add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// Buckets: upper bounds first_bound * 2^i for i in [0, kBuckets), then +Inf. Observations are
// integers in the histogram's unit (for example microseconds); `scale` converts the unit to the
// exported one (1e-6 for seconds) when rendering bounds and the sum.
class Histogram {
 public:
  static constexpr int kBuckets = 24;
  struct Shape {
    uint64_t first_bound = 1;
    double scale = 1.0;
  };
  explicit Histogram(Shape shape) : shape_(shape) {}

  void Observe(uint64_t v) {
    counts_[BucketOf(v)].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }
  // The bucket index of `v`: 0 for v <= first_bound, kBuckets for beyond the last bound.
  int BucketOf(uint64_t v) const;
  // The upper bound of bucket `i` < kBuckets, in the exported unit.
  double Bound(int i) const;
  uint64_t count() const;
  uint64_t sum() const { return sum_.load(std::memory_order_relaxed); }
  const Shape& shape() const { return shape_; }
  // Non-cumulative counts of buckets 0..kBuckets (the last is +Inf).
  std::array<uint64_t, kBuckets + 1> Snapshot() const;

 private:
  Shape shape_;
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_{0};
};

// Shapes used across ciuic.
inline constexpr Histogram::Shape kLatencyMicros{.first_bound = 8, .scale = 1e-6};  // 8 us .. 67 s
inline constexpr Histogram::Shape kSizeBytes{.first_bound = 512, .scale = 1.0};  // 512 B .. 4 GiB

enum class Type { kCounter, kGauge, kHistogram };

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view v);

// One family: a metric name with fixed label names and one series per label-value tuple.
template <typename T>
class Family {
 public:
  // Returns the series for `values` (one per label name), creating it. The pointer stays valid
  // for the registry's life. Takes a mutex: look up once, keep the pointer.
  T* WithLabels(const std::vector<std::string>& values);
  // Convenience for families without labels.
  T* Get() { return WithLabels({}); }

 private:
  friend class Registry;
  Family(std::string name,
         std::string help,
         std::vector<std::string> labels,
         std::function<std::unique_ptr<T>()> make)
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(labels)),
        make_(std::move(make)) {}
  void Render(std::string* out) const;

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> labels_;
  const std::function<std::unique_ptr<T>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_;  // guarded by mu_
};

// Where a callback metric puts its samples at scrape time.
class Emitter {
 public:
  // Adds one sample with label values in the order of the callback's label names.
  void Add(const std::vector<std::string>& values, double v) { samples_.push_back({values, v}); }

 private:
  friend class Registry;
  struct Sample {
    std::vector<std::string> values;
    double v;
  };
  std::vector<Sample> samples_;
};

// Owns metric families and renders them in registration order. Names must match
// [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]*; a bad name is a programmer
// error (CHECK). Registering a name twice returns the first family when the kind matches.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>* AddCounter(const std::string& name,
                              const std::string& help,
                              std::vector<std::string> labels = {});
  Family<Gauge>* AddGauge(const std::string& name,
                          const std::string& help,
                          std::vector<std::string> labels = {});
  Family<Histogram>* AddHistogram(const std::string& name,
                                  const std::string& help,
                                  Histogram::Shape shape,
                                  std::vector<std::string> labels = {});
  // A counter or gauge whose samples `fn` computes at scrape time (space figures, queue depths
  // read from their owners, bounded per-job tables). Registering a name again replaces the
  // callback (a restarted server). `fn` runs under the registry's mutex: it must not call it.
  void AddCallback(const std::string& name,
                   const std::string& help,
                   Type type,
                   std::vector<std::string> labels,
                   std::function<void(Emitter&)> fn);

  // Returns the exposition text of every family.
  std::string Render() const;

 private:
  struct Entry {
    std::string name;
    Type type;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
    std::string help;
    std::vector<std::string> labels;
    std::function<void(Emitter&)> fn;
  };
  Entry* Find(const std::string& name, Type type);

  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // guarded by mu_; a deque keeps entries in place
};

// ---------------------------------------------------------------------------------------------
// Parsing (tools, tests).

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;  // family name -> counter, gauge, histogram, ...
  std::map<std::string, std::string> helps;

  // The sum of the samples named `name` whose labels include all of `match`.
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
};

// Parses exposition text strictly: every line must be empty, a # HELP / # TYPE / other comment,
// or a sample `name{label="value",...} value [timestamp]`. Returns kCorruption naming the line
// otherwise, or when a histogram's buckets are not cumulative (non-decreasing in le, ending in
// +Inf equal to _count).
Result<Exposition> ParseExposition(std::string_view text);

}  // namespace ciuic::metrics
