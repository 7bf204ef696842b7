// CPU time and context switches spent on a measured section, so the meta and rand phases
// report what each operation costs the machine and not only how many ran per second.
//
// Machine-wide figures come from /proc/stat (every process and the kernel: the client, the
// servers, a FUSE daemon, a peer's daemons, kernel threads); this process's from getrusage (the
// benchmark is the client: for a native target the ciuic client library, for a path target the
// application side of its syscalls). "Other" is the difference: servers, daemons and kernel
// threads. /proc/stat counts in clock ticks (10 ms), so sections of a second or more are needed
// for figures that mean something; other work on the machine adds to the machine's share.
#pragma once

#include <cstdint>
#include <string>

#include "bench/report.h"
#include "ciuic/status.h"

namespace ciuic::bench {

struct CpuUse {
  double machine_s = 0;     // busy CPU time of every CPU: user, nice, system, irq, softirq
  uint64_t machine_cs = 0;  // context switches of the machine
  double self_s = 0;        // this process: user + system
  uint64_t self_cs = 0;     // this process: voluntary + involuntary context switches
};

// A snapshot; machine figures are 0 where /proc/stat cannot be read.
CpuUse ReadCpuUse();
CpuUse operator-(const CpuUse& a, const CpuUse& b);

// Parses /proc/stat's text (the aggregate "cpu" line and "ctxt"); for tests.
Status ParseProcStat(const std::string& text, long ticks_per_s, CpuUse* out);

// Adds `<name>_cpu_us` (machine CPU microseconds per operation), `<name>_client_cpu_us` (this
// process's), `<name>_other_cpu_us` (the rest) and `<name>_ctxsw` (machine context switches per
// operation) to `report`, all lower-is-better.
void ReportCpuPerOp(Report* report,
                    const std::string& phase,
                    const std::string& name,
                    const std::string& target,
                    const CpuUse& used,
                    double ops);

}  // namespace ciuic::bench
