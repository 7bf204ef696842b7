// `ciuic top`: a live view of a cluster's IO per job and per OST, from the servers' Prometheus
// endpoints (docs/design.md, "Observability").
#pragma once

#include <string>
#include <vector>

namespace ciuic::cli {

struct TopOptions {
  std::string dir;                // cluster directory whose run/*.metrics_port name the servers
  std::vector<std::string> urls;  // or explicit endpoints: http://HOST:PORT[/metrics] or HOST:PORT
  double interval_s = 1.0;
  bool once = false;   // one snapshot (two scrapes interval_s apart), then exit
  int iterations = 0;  // stop after this many refreshes (0: until interrupted)
};

// Scrapes every endpoint each interval and prints per-job ops/s, MB/s read and written, and
// per-OST ops/s, MB/s and usage. On a terminal the screen is redrawn; otherwise each snapshot
// is printed as plain text. Returns the exit code (1, with one line, if no endpoint answers).
int Top(const TopOptions& options);

}  // namespace ciuic::cli
