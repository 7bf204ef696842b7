// Rendering and parsing of the Prometheus text exposition format (version 0.0.4).
#include "common/metrics.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

namespace ciuic::metrics {
namespace {

bool ValidName(std::string_view n, bool colon) {
  if (n.empty())
    return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok)
      return false;
  }
  return true;
}

void CheckNames(const std::string& name, const std::vector<std::string>& labels) {
  bool ok = ValidName(name, true);
  for (const auto& l : labels)
    ok = ok && ValidName(l, false) && l != "le";
  if (!ok) {
    // A programmer error: names are literals in our code.
    std::fprintf(stderr, "metrics: invalid metric or label name '%s'\n", name.c_str());
    std::abort();
  }
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// Formats a sample value: integers exactly, others with enough digits to round-trip.
std::string FormatValue(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

void AppendLabels(std::string* out,
                  const std::vector<std::string>& names,
                  const std::vector<std::string>& values,
                  std::string_view extra_name = {},
                  std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty())
    return;
  *out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (!first)
      *out += ',';
    first = false;
    *out += names[i];
    *out += "=\"";
    *out += EscapeLabelValue(values[i]);
    *out += '"';
  }
  if (!extra_name.empty()) {
    if (!first)
      *out += ',';
    *out += extra_name;
    *out += "=\"";
    *out += extra_value;
    *out += '"';
  }
  *out += '}';
}

void AppendHeader(std::string* out, const std::string& name, const std::string& help, Type t) {
  const char* type = t == Type::kCounter ? "counter" : t == Type::kGauge ? "gauge" : "histogram";
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(help), name, type);
}

void AppendSample(std::string* out,
                  const std::string& name,
                  const std::vector<std::string>& names,
                  const std::vector<std::string>& values,
                  double v) {
  *out += name;
  AppendLabels(out, names, values);
  *out += ' ';
  *out += FormatValue(v);
  *out += '\n';
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Histogram

int Histogram::BucketOf(uint64_t v) const {
  if (v <= shape_.first_bound)
    return 0;
  int i = std::bit_width((v - 1) / shape_.first_bound);
  return i < kBuckets ? i : kBuckets;
}

double Histogram::Bound(int i) const {
  return static_cast<double>(shape_.first_bound) * static_cast<double>(uint64_t{1} << i) *
         shape_.scale;
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_)
    n += c.load(std::memory_order_relaxed);
  return n;
}

std::array<uint64_t, Histogram::kBuckets + 1> Histogram::Snapshot() const {
  std::array<uint64_t, kBuckets + 1> out{};
  for (int i = 0; i <= kBuckets; ++i)
    out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Family

template <typename T>
T* Family<T>::WithLabels(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(values);
  if (it != series_.end())
    return it->second.get();
  if (values.size() != labels_.size()) {
    std::fprintf(stderr, "metrics: %s takes %zu labels, got %zu\n", name_.c_str(), labels_.size(),
                 values.size());
    std::abort();
  }
  auto [pos, inserted] = series_.emplace(values, make_());
  return pos->second.get();
}

template <>
void Family<Counter>::Render(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, c] : series_)
    AppendSample(out, name_, labels_, values, static_cast<double>(c->value()));
}

template <>
void Family<Gauge>::Render(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, g] : series_)
    AppendSample(out, name_, labels_, values, static_cast<double>(g->value()));
}

template <>
void Family<Histogram>::Render(std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, h] : series_) {
    // Read the buckets once: _count is their total, so the rendering is self-consistent even
    // while observations race with it (the sum may be a little ahead).
    auto counts = h->Snapshot();
    uint64_t sum = h->sum();
    uint64_t cum = 0;
    for (int i = 0; i <= Histogram::kBuckets; ++i) {
      cum += counts[i];
      *out += name_;
      *out += "_bucket";
      AppendLabels(out, labels_, values, "le",
                   i < Histogram::kBuckets ? FormatValue(h->Bound(i)) : "+Inf");
      *out += fmt::format(" {}\n", cum);
    }
    AppendSample(out, name_ + "_sum", labels_, values, static_cast<double>(sum) * h->shape().scale);
    AppendSample(out, name_ + "_count", labels_, values, static_cast<double>(cum));
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---------------------------------------------------------------------------------------------
// Registry

Registry::Entry* Registry::Find(const std::string& name, Type type) {
  for (auto& e : entries_) {
    if (e.name == name) {
      if (e.type != type) {
        std::fprintf(stderr, "metrics: %s registered twice with different types\n", name.c_str());
        std::abort();
      }
      return &e;
    }
  }
  return nullptr;
}

Family<Counter>* Registry::AddCounter(const std::string& name,
                                      const std::string& help,
                                      std::vector<std::string> labels) {
  CheckNames(name, labels);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kCounter); e != nullptr && e->counter)
    return e->counter.get();
  Entry& e = entries_.emplace_back();
  e.name = name;
  e.type = Type::kCounter;
  e.counter.reset(new Family<Counter>(name, help, std::move(labels),
                                      [] { return std::make_unique<Counter>(); }));
  return e.counter.get();
}

Family<Gauge>* Registry::AddGauge(const std::string& name,
                                  const std::string& help,
                                  std::vector<std::string> labels) {
  CheckNames(name, labels);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kGauge); e != nullptr && e->gauge)
    return e->gauge.get();
  Entry& e = entries_.emplace_back();
  e.name = name;
  e.type = Type::kGauge;
  e.gauge.reset(
      new Family<Gauge>(name, help, std::move(labels), [] { return std::make_unique<Gauge>(); }));
  return e.gauge.get();
}

Family<Histogram>* Registry::AddHistogram(const std::string& name,
                                          const std::string& help,
                                          Histogram::Shape shape,
                                          std::vector<std::string> labels) {
  CheckNames(name, labels);
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = Find(name, Type::kHistogram); e != nullptr && e->histogram)
    return e->histogram.get();
  Entry& e = entries_.emplace_back();
  e.name = name;
  e.type = Type::kHistogram;
  e.histogram.reset(new Family<Histogram>(name, help, std::move(labels),
                                          [shape] { return std::make_unique<Histogram>(shape); }));
  return e.histogram.get();
}

void Registry::AddCallback(const std::string& name,
                           const std::string& help,
                           Type type,
                           std::vector<std::string> labels,
                           std::function<void(Emitter&)> fn) {
  CheckNames(name, labels);
  std::lock_guard<std::mutex> lock(mu_);
  if (type == Type::kHistogram) {
    std::fprintf(stderr, "metrics: callback %s cannot be a histogram\n", name.c_str());
    std::abort();
  }
  if (Entry* old = Find(name, type); old != nullptr) {
    if (!old->fn) {
      std::fprintf(stderr, "metrics: %s is not a callback metric\n", name.c_str());
      std::abort();
    }
    // A restarted owner (an in-process server started again) replaces its callback.
    old->help = help;
    old->labels = std::move(labels);
    old->fn = std::move(fn);
    return;
  }
  Entry& e = entries_.emplace_back();
  e.name = name;
  e.type = type;
  e.help = help;
  e.labels = std::move(labels);
  e.fn = std::move(fn);
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& e : entries_) {
    if (e.counter) {
      AppendHeader(&out, e.name, e.counter->help_, e.type);
      e.counter->Render(&out);
    } else if (e.gauge) {
      AppendHeader(&out, e.name, e.gauge->help_, e.type);
      e.gauge->Render(&out);
    } else if (e.histogram) {
      AppendHeader(&out, e.name, e.histogram->help_, e.type);
      e.histogram->Render(&out);
    } else {
      Emitter em;
      e.fn(em);
      AppendHeader(&out, e.name, e.help, e.type);
      // Two samples with the same labels would be invalid: the first wins.
      std::set<std::vector<std::string>> seen;
      for (const auto& s : em.samples_) {
        if (s.values.size() == e.labels.size() && seen.insert(s.values).second)
          AppendSample(&out, e.name, e.labels, s.values, s.v);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Parsing

namespace {

bool ParseDouble(std::string_view s, double* out) {
  if (s == "+Inf" || s == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *out = NAN;
    return true;
  }
  if (s.empty())
    return false;
  std::string tmp(s);
  char* end = nullptr;
  *out = std::strtod(tmp.c_str(), &end);
  return end == tmp.c_str() + tmp.size();
}

// Parses `name{labels} value [ts]`; returns an error message or "".
std::string ParseSampleLine(std::string_view line, Sample* s) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ')
    ++i;
  s->name = std::string(line.substr(0, i));
  if (!ValidName(s->name, true))
    return "bad metric name";
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      size_t start = i;
      while (i < line.size() && line[i] != '=')
        ++i;
      std::string lname(line.substr(start, i - start));
      if (!ValidName(lname, false) || i + 1 >= line.size() || line[i + 1] != '"')
        return "bad label";
      i += 2;
      std::string value;
      for (;;) {
        if (i >= line.size())
          return "unterminated label value";
        char c = line[i++];
        if (c == '"')
          break;
        if (c == '\\') {
          if (i >= line.size())
            return "bad escape";
          char n = line[i++];
          if (n == 'n')
            value += '\n';
          else if (n == '\\' || n == '"')
            value += n;
          else
            return "bad escape";
        } else if (c == '\n') {
          return "newline in label value";
        } else {
          value += c;
        }
      }
      if (!s->labels.emplace(lname, value).second)
        return "duplicate label";
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      return "expected , or } after a label";
    }
  }
  if (i >= line.size() || line[i] != ' ')
    return "expected a space before the value";
  std::string_view rest = line.substr(i + 1);
  size_t sp = rest.find(' ');
  if (!ParseDouble(rest.substr(0, sp), &s->value))
    return "bad value";
  if (sp != std::string_view::npos) {
    double ts;
    if (!ParseDouble(rest.substr(sp + 1), &ts))
      return "bad timestamp";
  }
  return "";
}

std::string BaseName(const std::string& n, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    std::string_view sv(n);
    std::string_view suf(suffix);
    if (sv.size() > suf.size() && sv.substr(sv.size() - suf.size()) == suf) {
      std::string base(sv.substr(0, sv.size() - suf.size()));
      if (auto it = types.find(base); it != types.end() && it->second == "histogram")
        return base;
    }
  }
  return n;
}

}  // namespace

double Exposition::Sum(const std::string& name,
                       const std::map<std::string, std::string>& match) const {
  double total = 0;
  for (const auto& s : samples) {
    if (s.name != name)
      continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok)
      total += s.value;
  }
  return total;
}

Result<Exposition> ParseExposition(std::string_view text) {
  Exposition ex;
  size_t lineno = 0;
  while (!text.empty()) {
    ++lineno;
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    auto fail = [&](const std::string& why) {
      return Status::Corruption(fmt::format("metrics line {}: {}: '{}'", lineno, why, line));
    };
    if (line.empty())
      continue;
    if (line[0] == '#') {
      if (line.starts_with("# TYPE ") || line.starts_with("# HELP ")) {
        std::string_view rest = line.substr(7);
        size_t sp = rest.find(' ');
        std::string name(rest.substr(0, sp));
        if (!ValidName(name, true) || sp == std::string_view::npos)
          return fail("bad comment");
        std::string value(rest.substr(sp + 1));
        if (line[2] == 'T') {
          static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                       "untyped"};
          if (kTypes.count(value) == 0 || !ex.types.emplace(name, value).second)
            return fail("bad or repeated TYPE");
        } else {
          ex.helps[name] = value;
        }
      }
      continue;
    }
    Sample s;
    if (std::string err = ParseSampleLine(line, &s); !err.empty())
      return fail(err);
    ex.samples.push_back(std::move(s));
  }
  // Histograms: per series (labels without le), buckets non-decreasing in le, +Inf == _count.
  std::map<std::pair<std::string, std::map<std::string, std::string>>,
           std::vector<std::pair<double, double>>>
      buckets;
  std::map<std::pair<std::string, std::map<std::string, std::string>>, double> counts;
  for (const auto& s : ex.samples) {
    std::string base = BaseName(s.name, ex.types);
    if (base == s.name)
      continue;
    auto labels = s.labels;
    if (s.name == base + "_bucket") {
      auto le = labels.find("le");
      double bound;
      if (le == labels.end() || !ParseDouble(le->second, &bound))
        return Status::Corruption(fmt::format("metrics: {} bucket without a valid le", base));
      labels.erase(le);
      buckets[{base, labels}].emplace_back(bound, s.value);
    } else if (s.name == base + "_count") {
      counts[{base, labels}] = s.value;
    }
  }
  for (const auto& [key, bs] : buckets) {
    for (size_t i = 1; i < bs.size(); ++i) {
      if (!(bs[i].first > bs[i - 1].first) || bs[i].second < bs[i - 1].second)
        return Status::Corruption(
            fmt::format("metrics: histogram {} buckets are not cumulative", key.first));
    }
    if (bs.empty() || !std::isinf(bs.back().first))
      return Status::Corruption(fmt::format("metrics: histogram {} lacks +Inf", key.first));
    auto c = counts.find(key);
    if (c == counts.end() || c->second != bs.back().second)
      return Status::Corruption(
          fmt::format("metrics: histogram {} _count differs from its +Inf bucket", key.first));
  }
  return ex;
}

}  // namespace ciuic::metrics
