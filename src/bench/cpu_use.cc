#include "bench/cpu_use.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace ciuic::bench {

Status ParseProcStat(const std::string& text, long ticks_per_s, CpuUse* out) {
  if (ticks_per_s <= 0)
    return Status::InvalidArgument("clock ticks per second unknown");
  std::istringstream in(text);
  std::string line;
  bool cpu = false, ctxt = false;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string key;
    f >> key;
    if (key == "cpu") {
      // user nice system idle iowait irq softirq steal ...: busy is all but idle, iowait, steal.
      uint64_t v[8] = {};
      int fields = 0;
      while (fields < 8 && (f >> v[fields]))
        ++fields;
      if (fields < 7)
        return Status::Corruption("/proc/stat: a short cpu line");
      const uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6];
      out->machine_s = static_cast<double>(busy) / static_cast<double>(ticks_per_s);
      cpu = true;
    } else if (key == "ctxt") {
      if (!(f >> out->machine_cs))
        return Status::Corruption("/proc/stat: a bad ctxt line");
      ctxt = true;
    }
  }
  if (!cpu || !ctxt)
    return Status::Corruption("/proc/stat: no cpu or ctxt line");
  return Status::OK();
}

CpuUse ReadCpuUse() {
  CpuUse u;
  std::ifstream f("/proc/stat");
  std::stringstream text;
  text << f.rdbuf();
  if (!ParseProcStat(text.str(), ::sysconf(_SC_CLK_TCK), &u).ok()) {
    u.machine_s = 0;
    u.machine_cs = 0;
  }
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    u.self_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    u.self_cs = static_cast<uint64_t>(ru.ru_nvcsw + ru.ru_nivcsw);
  }
  return u;
}

CpuUse operator-(const CpuUse& a, const CpuUse& b) {
  CpuUse d;
  d.machine_s = std::max(0.0, a.machine_s - b.machine_s);
  d.machine_cs = a.machine_cs >= b.machine_cs ? a.machine_cs - b.machine_cs : 0;
  d.self_s = std::max(0.0, a.self_s - b.self_s);
  d.self_cs = a.self_cs >= b.self_cs ? a.self_cs - b.self_cs : 0;
  return d;
}

void ReportCpuPerOp(Report* report,
                    const std::string& phase,
                    const std::string& name,
                    const std::string& target,
                    const CpuUse& used,
                    double ops) {
  if (ops <= 0)
    return;
  const double per = 1e6 / ops;
  // Ticks are coarse: the machine's share is never shown below this process's own.
  const double machine = std::max(used.machine_s, used.self_s);
  report->Add(phase, name + "_cpu_us", target, machine * per, "us/op", false).note =
      "CPU time of the whole machine per operation (/proc/stat)";
  report->Add(phase, name + "_client_cpu_us", target, used.self_s * per, "us/op", false);
  report->Add(phase, name + "_other_cpu_us", target, (machine - used.self_s) * per, "us/op", false)
      .note = "servers, daemons and kernel threads: the machine less this process";
  report->Add(phase, name + "_ctxsw", target, static_cast<double>(used.machine_cs) / ops,
              "switches/op", false);
}

}  // namespace ciuic::bench
