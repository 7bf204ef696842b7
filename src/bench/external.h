// External phases (loader, checkpoint): Python scripts under bench/ that measure one part of
// ciuic against the local disk and write their results as JSON, read back into the Report.
#pragma once

#include <string>
#include <vector>

#include "bench/report.h"
#include "ciuic/status.h"

namespace ciuic::bench {

struct ExternalPhase {
  std::string phase;        // "loader", "checkpoint", or "tier" (bench/tier_s3.py)
  std::string script;       // bench/phase_<phase>.py
  std::string python_path;  // PYTHONPATH: the built python package
  std::string cluster_file;
  std::string local_dir;
  std::string json_out;  // where the script writes its JSON
  std::string log_path;
  bool quick = false;
  std::vector<std::string> extra_args;  // after the common ones
  int timeout_s = 900;
};

// Runs the script with /usr/bin/python3 and adds its results. A missing script is reported as
// skipped (not an error). Errors: the script failed (exit code and last log lines), its JSON is
// missing or malformed (kInvalidArgument naming the field).
Status RunExternalPhase(const ExternalPhase& p, Report* report);

// Adds the results of an external phase's JSON document: {"phase", "results": [{"name",
// "target", "value", "unit", "higher_is_better"}], "notes", "skipped": [{"target", "reason"}]}
// ("skipped" optional: parts the script could not run here). kInvalidArgument when malformed.
Status AddExternalResults(const std::string& phase, const nlohmann::json& j, Report* report);

}  // namespace ciuic::bench
