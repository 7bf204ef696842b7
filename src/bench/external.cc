#include "bench/external.h"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "bench/proc.h"

namespace ciuic::bench {

Status AddExternalResults(const std::string& phase, const nlohmann::json& j, Report* report) {
  if (!j.is_object() || !j.contains("results") || !j["results"].is_array())
    return Status::InvalidArgument(phase + ": JSON has no 'results' array");
  size_t i = 0;
  for (const auto& r : j["results"]) {
    for (const char* key : {"name", "target", "unit"}) {
      if (!r.contains(key) || !r[key].is_string() || r[key].get<std::string>().empty())
        return Status::InvalidArgument(
            fmt::format("{}: result {} has no string '{}'", phase, i, key));
    }
    if (!r.contains("value") || !r["value"].is_number() || !std::isfinite(r["value"].get<double>()))
      return Status::InvalidArgument(fmt::format("{}: result {} has no numeric 'value'", phase, i));
    bool hib = r.contains("higher_is_better") && r["higher_is_better"].is_boolean()
                   ? r["higher_is_better"].get<bool>()
                   : true;
    report->Add(phase, r["name"].get<std::string>(), r["target"].get<std::string>(),
                r["value"].get<double>(), r["unit"].get<std::string>(), hib);
    ++i;
  }
  if (j.contains("notes") && j["notes"].is_array()) {
    for (const auto& n : j["notes"]) {
      if (n.is_string())
        report->Note(phase + ": " + n.get<std::string>());
    }
  } else if (j.contains("notes") && j["notes"].is_string()) {
    report->Note(phase + ": " + j["notes"].get<std::string>());
  }
  if (j.contains("skipped") && j["skipped"].is_array()) {
    for (const auto& s : j["skipped"]) {
      if (s.is_object() && s.contains("reason") && s["reason"].is_string())
        report->Skip(
            phase,
            s.contains("target") && s["target"].is_string() ? s["target"].get<std::string>() : "",
            s["reason"].get<std::string>());
    }
  }
  return Status::OK();
}

Status RunExternalPhase(const ExternalPhase& p, Report* report) {
  if (::access(p.script.c_str(), R_OK) != 0) {
    report->Skip(p.phase, "", fmt::format("{} does not exist yet", p.script));
    return Status::OK();
  }
  ::unlink(p.json_out.c_str());
  std::vector<std::string> argv = {"/usr/bin/python3", p.script,    "--cluster", p.cluster_file,
                                   "--local-dir",      p.local_dir, "--json",    p.json_out};
  if (p.quick)
    argv.push_back("--quick");
  argv.insert(argv.end(), p.extra_args.begin(), p.extra_args.end());
  CIUIC_ASSIGN_OR_RETURN(
      int rc, RunCommand(argv, p.log_path, p.timeout_s, {"PYTHONPATH=" + p.python_path}));
  if (rc != 0) {
    return Status::IoError(
        fmt::format("{} exited with {}: {}", p.script, rc, LastLines(p.log_path, 3)));
  }
  std::ifstream in(p.json_out);
  if (!in)
    return Status::InvalidArgument(fmt::format("{} wrote no JSON to {}", p.script, p.json_out));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded())
    return Status::InvalidArgument(fmt::format("{}: {} is not valid JSON", p.script, p.json_out));
  return AddExternalResults(p.phase, j, report);
}

}  // namespace ciuic::bench
