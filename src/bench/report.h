// Results of one benchmark invocation and their output: the seed-shaped table per target, JSON
// (docs/benchmark.md has the schema) and PNG charts. Thread-safety: Report is not thread-safe;
// phases add to it from the driving thread.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "ciuic/status.h"

namespace ciuic::bench {

// One measured quantity of one target; one value per run.
struct Metric {
  std::string phase;
  std::string name;  // "seq_read_fpp", "rand_read_4k", "lat_read_4k_p99", ...
  std::string target;
  std::string unit;  // "GB/s", "IOPS", "us", "ops/s", "ratio"
  bool higher_is_better = true;
  std::vector<double> runs;
  bool cache_inflated = false;  // above the physical limit measured in the same run
  std::string note;
  nlohmann::json extra = nlohmann::json::object();  // first/last done, per-client figures, ...
};

class Report {
 public:
  // Adds one run's value of (name, target); creates the metric on first use.
  Metric& Add(const std::string& phase,
              const std::string& name,
              const std::string& target,
              double value,
              const std::string& unit,
              bool higher_is_better);
  // The metric or nullptr.
  const Metric* Find(const std::string& name, const std::string& target) const;
  Metric* FindMutable(const std::string& name, const std::string& target);
  void Skip(const std::string& phase, const std::string& target, const std::string& reason);
  void Note(const std::string& note) { notes_.push_back(note); }
  // A series for a chart: latency CDFs ("lat_read_4k" of a target: (percentile, us) points) and
  // scaling curves ("scaling_read" of a target: (oss count, GB/s)).
  void AddSeries(const std::string& chart,
                 const std::string& label,
                 std::vector<std::pair<double, double>> points);
  void SetConfig(nlohmann::json config) { config_ = std::move(config); }
  void SetLimits(nlohmann::json limits) { limits_ = std::move(limits); }
  void SetTargets(std::vector<std::string> t) { targets_ = std::move(t); }

  const std::vector<Metric>& metrics() const { return metrics_; }
  const std::vector<nlohmann::json>& skipped() const { return skipped_; }

  // The JSON document (schema "ciuic-benchmark/1").
  nlohmann::json ToJson() const;
  // Prints every metric (median, min..max) and then the seed-shaped table, one row per target.
  void PrintTable(std::FILE* out) const;
  // Writes throughput_vs_oss.png and latency_cdf.png (whichever has data) into `dir` with
  // gnuplot; returns the files written. kUnavailable when gnuplot is missing.
  Result<std::vector<std::string>> WriteCharts(const std::string& dir) const;

 private:
  std::vector<Metric> metrics_;
  std::vector<nlohmann::json> skipped_;
  std::vector<std::string> notes_;
  std::vector<std::string> targets_;
  std::map<std::string, std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>>
      series_;
  nlohmann::json config_ = nlohmann::json::object();
  nlohmann::json limits_ = nlohmann::json::object();
};

// Checks that `j` has the report schema: every result has phase, name, target, unit,
// higher_is_better and numeric value/min/median/max/runs. kInvalidArgument naming the first
// problem.
Status ValidateReportJson(const nlohmann::json& j);

}  // namespace ciuic::bench
