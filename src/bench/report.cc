#include "bench/report.h"

#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace ciuic::bench {
namespace fs = std::filesystem;

Metric& Report::Add(const std::string& phase,
                    const std::string& name,
                    const std::string& target,
                    double value,
                    const std::string& unit,
                    bool higher_is_better) {
  Metric* m = FindMutable(name, target);
  if (m == nullptr) {
    metrics_.push_back(Metric{phase, name, target, unit, higher_is_better, {}, false, "", {}});
    m = &metrics_.back();
  }
  m->runs.push_back(value);
  return *m;
}

const Metric* Report::Find(const std::string& name, const std::string& target) const {
  for (const auto& m : metrics_) {
    if (m.name == name && m.target == target)
      return &m;
  }
  return nullptr;
}

Metric* Report::FindMutable(const std::string& name, const std::string& target) {
  return const_cast<Metric*>(Find(name, target));
}

void Report::Skip(const std::string& phase, const std::string& target, const std::string& reason) {
  skipped_.push_back({{"phase", phase}, {"target", target}, {"reason", reason}});
}

void Report::AddSeries(const std::string& chart,
                       const std::string& label,
                       std::vector<std::pair<double, double>> points) {
  series_[chart].emplace_back(label, std::move(points));
}

nlohmann::json Report::ToJson() const {
  nlohmann::json j;
  j["schema"] = "ciuic-benchmark/1";
  j["config"] = config_;
  j["limits"] = limits_;
  j["targets"] = targets_;
  j["results"] = nlohmann::json::array();
  for (const auto& m : metrics_) {
    Summary s = Summarize(m.runs);
    nlohmann::json r = {{"phase", m.phase},
                        {"name", m.name},
                        {"target", m.target},
                        {"unit", m.unit},
                        {"higher_is_better", m.higher_is_better},
                        {"value", s.median},
                        {"min", s.min},
                        {"median", s.median},
                        {"max", s.max},
                        {"runs", m.runs},
                        {"cache_inflated", m.cache_inflated}};
    if (!m.note.empty())
      r["note"] = m.note;
    for (auto it = m.extra.begin(); it != m.extra.end(); ++it)
      r[it.key()] = it.value();
    j["results"].push_back(std::move(r));
  }
  j["skipped"] = skipped_;
  j["notes"] = notes_;
  nlohmann::json series = nlohmann::json::object();
  for (const auto& [chart, lines] : series_) {
    for (const auto& [label, pts] : lines)
      series[chart][label] = pts;
  }
  j["series"] = series;
  return j;
}

namespace {

std::string Fmt(double v, const std::string& unit) {
  if (unit == "GB/s")
    return fmt::format("{:.3f}", v);
  if (unit == "ratio")
    return fmt::format("{:.0f}%", v * 100);
  if (unit == "us")
    return v < 100 ? fmt::format("{:.1f}", v) : fmt::format("{:.0f}", v);
  return v < 100 ? fmt::format("{:.3g}", v) : fmt::format("{:.0f}", v);  // small values keep digits
}

}  // namespace

void Report::PrintTable(std::FILE* out) const {
  fmt::print(out, "\n{:<12} {:<28} {:>12} {:>12} {:>12} {:>8}\n", "phase", "metric / target",
             "median", "min", "max", "unit");
  for (const auto& m : metrics_) {
    Summary s = Summarize(m.runs);
    fmt::print(out, "{:<12} {:<28} {:>12} {:>12} {:>12} {:>8}{}\n", m.phase,
               fmt::format("{} / {}", m.name, m.target), Fmt(s.median, m.unit), Fmt(s.min, m.unit),
               Fmt(s.max, m.unit), m.unit, m.cache_inflated ? "  CACHE-INFLATED" : "");
  }
  // The seed-shaped comparison: one row per target.
  struct Col {
    const char* head;
    const char* metric;
  };
  const Col cols[] = {{"seq read GB/s", "seq_read_fpp"},     {"seq write GB/s", "seq_write_fpp"},
                      {"4K rand IOPS", "rand_read_4k"},      {"4K read p50 us", "lat_read_4k_p50"},
                      {"4K read p99 us", "lat_read_4k_p99"}, {"stat p99 us", "lat_stat_p99"},
                      {"meta ops/s", "meta_all_shared"},     {"scaling eff", "scaling_eff_max"}};
  fmt::print(out, "\n{:<22}", "target");
  for (const auto& c : cols)
    fmt::print(out, " {:>15}", c.head);
  fmt::print(out, "\n");
  for (const auto& t : targets_) {
    fmt::print(out, "{:<22}", t.size() > 22 ? t.substr(0, 19) + "..." : t);
    for (const auto& c : cols) {
      const Metric* m = Find(c.metric, t);
      std::string cell = "-";
      if (m != nullptr && !m->runs.empty()) {
        cell = Fmt(Summarize(m->runs).median, m->unit) + (m->cache_inflated ? "*" : "");
      }
      fmt::print(out, " {:>15}", cell);
    }
    fmt::print(out, "\n");
  }
  bool any_inflated = std::any_of(metrics_.begin(), metrics_.end(),
                                  [](const Metric& m) { return m.cache_inflated; });
  if (any_inflated) {
    fmt::print(out,
               "* and CACHE-INFLATED: above the physical limit measured in this run (the "
               "table shows one metric per column; see the lines above for the others)\n");
  }
  for (const auto& s : skipped_) {
    fmt::print(
        out, "skipped: {}{}: {}\n", s["phase"].get<std::string>(),
        s["target"].get<std::string>().empty() ? "" : " on " + s["target"].get<std::string>(),
        s["reason"].get<std::string>());
  }
  for (const auto& n : notes_)
    fmt::print(out, "note: {}\n", n);
}

Result<std::vector<std::string>> Report::WriteCharts(const std::string& dir) const {
  std::vector<std::string> written;
  if (series_.empty())
    return written;
  if (::access("/usr/bin/gnuplot", X_OK) != 0)
    return Status::Unavailable("gnuplot not installed (apt-get install gnuplot-nox)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::IoError(fmt::format("cannot create {}: {}", dir, ec.message()));
  struct Chart {
    const char* series;
    const char* file;
    const char* title;
    const char* xlabel;
    const char* ylabel;
    bool logy;
  };
  const Chart charts[] = {
      {"scaling_read", "throughput_vs_oss.png", "sequential read vs OSS count (shaped links)",
       "OSS hosts", "GB/s", false},
      {"scaling_clients", "throughput_vs_clients.png", "sequential read vs client count", "clients",
       "GB/s", false},
      {"lat_read_4k", "latency_read_4k.png", "4 KiB read latency distribution", "percentile",
       "latency (us)", true},
      {"lat_stat", "latency_stat.png", "stat latency distribution", "percentile", "latency (us)",
       true},
  };
  for (const auto& c : charts) {
    auto it = series_.find(c.series);
    if (it == series_.end() || it->second.empty())
      continue;
    std::string script = fmt::format(
        "set terminal pngcairo size 900,560 noenhanced\nset output '{}/{}'\nset title '{}'\n"
        "set xlabel '{}'\nset ylabel '{}'\nset grid\nset key left top\n{}",
        dir, c.file, c.title, c.xlabel, c.ylabel, c.logy ? "set logscale y\n" : "");
    if (!c.logy && !it->second.empty()) {  // counts on x: one tic per measured count
      std::vector<std::string> tics;
      for (const auto& [x, y] : it->second[0].second)
        tics.push_back(fmt::format("{}", x));
      script += fmt::format("set xtics ({})\n", fmt::join(tics, ", "));
    }
    std::string plot = "plot ";
    std::string data;
    for (size_t i = 0; i < it->second.size(); ++i) {
      const auto& [label, pts] = it->second[i];
      plot += fmt::format("{}'-' using 1:2 with linespoints title '{}'", i ? ", " : "", label);
      for (const auto& [x, y] : pts)
        data += fmt::format("{} {}\n", x, y);
      data += "e\n";
    }
    script += plot + "\n" + data;
    std::string script_path = fmt::format("{}/{}.gp", dir, c.file);
    {
      std::ofstream f(script_path);
      f << script;
      if (!f)
        return Status::IoError("cannot write " + script_path);
    }
    std::string cmd = fmt::format("/usr/bin/gnuplot '{}' 2>&1", script_path);
    int rc = std::system(cmd.c_str());
    if (rc != 0 || !fs::exists(fmt::format("{}/{}", dir, c.file))) {
      return Status::IoError(fmt::format("gnuplot failed on {} (exit {})", script_path, rc));
    }
    fs::remove(script_path, ec);  // the PNG is the product
    written.push_back(fmt::format("{}/{}", dir, c.file));
  }
  return written;
}

Status ValidateReportJson(const nlohmann::json& j) {
  if (!j.is_object() || j.value("schema", "") != "ciuic-benchmark/1")
    return Status::InvalidArgument("not a ciuic-benchmark/1 report (schema field)");
  for (const char* key : {"config", "limits", "targets", "results", "skipped", "notes"}) {
    if (!j.contains(key))
      return Status::InvalidArgument(fmt::format("report has no '{}'", key));
  }
  if (!j["results"].is_array())
    return Status::InvalidArgument("'results' is not an array");
  size_t i = 0;
  for (const auto& r : j["results"]) {
    for (const char* key : {"phase", "name", "target", "unit"}) {
      if (!r.contains(key) || !r[key].is_string() || r[key].get<std::string>().empty())
        return Status::InvalidArgument(
            fmt::format("result {}: '{}' missing or not a string", i, key));
    }
    if (!r.contains("higher_is_better") || !r["higher_is_better"].is_boolean())
      return Status::InvalidArgument(fmt::format("result {}: 'higher_is_better' missing", i));
    for (const char* key : {"value", "min", "median", "max"}) {
      if (!r.contains(key) || !r[key].is_number())
        return Status::InvalidArgument(fmt::format("result {} ({}): '{}' missing or not a number",
                                                   i, r["name"].get<std::string>(), key));
    }
    if (!r.contains("runs") || !r["runs"].is_array() || r["runs"].empty())
      return Status::InvalidArgument(fmt::format("result {}: 'runs' missing or empty", i));
    ++i;
  }
  return Status::OK();
}

}  // namespace ciuic::bench
