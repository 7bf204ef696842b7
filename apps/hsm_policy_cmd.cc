#include "hsm_policy_cmd.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include <fmt/format.h>

namespace ciuic::cli {
namespace {

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

struct Candidate {
  std::string path;
  uint64_t size = 0;
  int64_t last_use_s = 0;  // max(atime, mtime)
  HsmPolicy policy;
};

// The policy set on `dir`, or `inherited` when it has none.
Result<HsmPolicy> DirPolicy(Client& c, const std::string& dir, const HsmPolicy& inherited) {
  Result<std::string> v = c.GetXattr(dir, kHsmPolicyXattr);
  if (!v.ok()) {
    if (v.status().code() == StatusCode::kNotFound)
      return inherited;
    return v.status();
  }
  Result<HsmPolicy> p = ParsePolicyValue(*v);
  if (!p.ok())
    return Status::InvalidArgument(fmt::format("{}: {}", dir, p.status().message()));
  return p;
}

Status Walk(Client& c,
            const std::string& dir,
            const HsmPolicy& inherited,
            std::vector<Candidate>* out) {
  CIUIC_ASSIGN_OR_RETURN(HsmPolicy here, DirPolicy(c, dir, inherited));
  CIUIC_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, c.ReadDir(dir));
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  for (const DirEntry& e : entries) {
    if (e.name == "." || e.name == "..")
      continue;
    const std::string child = JoinPath(dir, e.name);
    if ((e.type & S_IFMT) == S_IFDIR) {
      CIUIC_RETURN_IF_ERROR(Walk(c, child, here, out));
    } else if ((e.type & S_IFMT) == S_IFREG && here.kind != HsmPolicy::kNever) {
      Result<FileStat> st = c.Stat(child);
      if (!st.ok()) {
        if (st.status().code() == StatusCode::kNotFound)
          continue;  // removed meanwhile
        return st.status();
      }
      out->push_back({child, st->size, std::max(st->atime_sec, st->mtime_sec), here});
    }
  }
  return Status::OK();
}

// Used and total bytes over every OST that is up.
Status OstUsage(Client& c, uint64_t* used, uint64_t* total) {
  CIUIC_ASSIGN_OR_RETURN(std::vector<OstStatus> osts, c.OstMap());
  *used = 0;
  *total = 0;
  for (const OstStatus& o : osts) {
    *total += o.capacity;
    *used += o.capacity > o.free ? o.capacity - o.free : 0;
  }
  return Status::OK();
}

}  // namespace

Result<int64_t> ParseDuration(const std::string& s) {
  if (s.empty())
    return Status::InvalidArgument("empty duration");
  size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9')
    ++n;
  if (n == 0 || n > 12 || s.size() - n > 1)
    return Status::InvalidArgument(
        fmt::format("bad duration '{}': a number of seconds, or with s, m, h or d", s));
  const int64_t v = std::stoll(s.substr(0, n));
  const char unit = n < s.size() ? s[n] : 's';
  switch (unit) {
    case 's':
      return v;
    case 'm':
      return v * 60;
    case 'h':
      return v * 3600;
    case 'd':
      return v * 86400;
    default:
      return Status::InvalidArgument(
          fmt::format("bad duration '{}': a number of seconds, or with s, m, h or d", s));
  }
}

std::string PolicyValue(const HsmPolicy& p) {
  switch (p.kind) {
    case HsmPolicy::kNever:
      return "never";
    case HsmPolicy::kArchiveAfter:
      return fmt::format("archive-after={}", p.archive_after_s);
    case HsmPolicy::kReleaseAtWatermark:
      break;
  }
  return "release-at-watermark";
}

Result<HsmPolicy> ParsePolicyValue(const std::string& v) {
  HsmPolicy p;
  if (v == "never") {
    p.kind = HsmPolicy::kNever;
  } else if (v == "release-at-watermark") {
    p.kind = HsmPolicy::kReleaseAtWatermark;
  } else if (v.rfind("archive-after=", 0) == 0) {
    p.kind = HsmPolicy::kArchiveAfter;
    CIUIC_ASSIGN_OR_RETURN(p.archive_after_s, ParseDuration(v.substr(14)));
  } else {
    return Status::InvalidArgument(fmt::format("bad HSM policy '{}'", v));
  }
  return p;
}

int CmdHsmPolicy(Client& c, const std::string& dir, const std::vector<std::string>& args) {
  auto fail = [&](const std::string& m) {
    fmt::print(stderr, "ciuic: hsm policy: {}\n", m);
    return 1;
  };
  Result<FileStat> st = c.Stat(dir);
  if (!st.ok())
    return fail(st.status().message());
  if (!st->is_dir())
    return fail(fmt::format("{}: not a directory", dir));
  if (args.empty()) {
    Result<std::string> v = c.GetXattr(dir, kHsmPolicyXattr);
    if (!v.ok() && v.status().code() == StatusCode::kNotFound) {
      fmt::print("{}: (inherited)\n", dir);
      return 0;
    }
    if (!v.ok())
      return fail(v.status().message());
    Result<HsmPolicy> p = ParsePolicyValue(*v);
    if (!p.ok())
      return fail(fmt::format("{}: {}", dir, p.status().message()));
    fmt::print("{}: {}\n", dir,
               p->kind == HsmPolicy::kArchiveAfter
                   ? fmt::format("archive-after {}s", p->archive_after_s)
                   : PolicyValue(*p));
    return 0;
  }
  HsmPolicy p;
  if (args[0] == "never" && args.size() == 1) {
    p.kind = HsmPolicy::kNever;
  } else if (args[0] == "release-at-watermark" && args.size() == 1) {
    p.kind = HsmPolicy::kReleaseAtWatermark;
  } else if (args[0] == "archive-after" && args.size() == 2) {
    Result<int64_t> d = ParseDuration(args[1]);
    if (!d.ok())
      return fail(d.status().message());
    p.kind = HsmPolicy::kArchiveAfter;
    p.archive_after_s = *d;
  } else {
    return fail("expected: never | archive-after DURATION | release-at-watermark");
  }
  Status s = c.SetXattr(dir, kHsmPolicyXattr, PolicyValue(p));
  if (!s.ok())
    return fail(s.message());
  return 0;
}

namespace {

auto Fail(const std::string& m) {
  fmt::print(stderr, "ciuic: hsm sweep: {}\n", m);
  return 1;
}

bool AboveHigh(uint64_t used, uint64_t total, double high_pct) {
  return total != 0 && static_cast<double>(used) * 100 > high_pct * static_cast<double>(total);
}

// Releases archived, current files, coldest first, until the OSTs' use is under the low
// watermark. `used` and `total` are the use the caller read.
int ReleasePass(Client& c,
                const SweepOptions& o,
                const std::vector<Candidate>& files,
                uint64_t used,
                uint64_t total) {
  // Coldest first: heat on the MDS (decayed opens and OSS-reported reads), then atime. A file
  // with no heat (nothing touched it since the MDS started, or it was dropped as cold) counts
  // as 0, so after an MDS restart the order is least recently used first, as before heat.
  struct Ranked {
    const Candidate* f;
    double heat;
  };
  std::vector<Ranked> ranked;
  for (const Candidate& f : files) {
    Result<HsmStatus> hs = c.HsmGetState(f.path);
    // Only current archived copies: never release without a verified copy of this version.
    if (!hs.ok() || hs->state != HsmState::kArchived)
      continue;
    ranked.push_back({&f, hs->has_heat ? hs->heat : 0.0});
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.heat != b.heat)
      return a.heat < b.heat;
    return a.f->last_use_s < b.f->last_use_s;
  });
  const double low_bytes = o.low_pct * static_cast<double>(total) / 100;
  uint64_t freed = 0;
  int rc = 0;
  for (const Ranked& r : ranked) {
    const Candidate& f = *r.f;
    if (static_cast<double>(used - std::min(used, freed)) <= low_bytes)
      break;
    Status st = c.HsmRelease(f.path);
    if (st.ok()) {
      freed += f.size;
      fmt::print("released {} (heat {:.2f})\n", f.path, r.heat);
    } else if (st.code() != StatusCode::kBusy && st.code() != StatusCode::kInvalidArgument &&
               st.code() != StatusCode::kNotFound) {
      // Busy: open or changed meanwhile; InvalidArgument: written since archived. Skipped.
      fmt::print(stderr, "ciuic: hsm sweep: release {}: {}\n", f.path, st.message());
      rc = 1;
    }
  }
  return rc;
}

int SweepOnce(Client& c, const SweepOptions& o, bool archive) {
  if (!(o.low_pct >= 0 && o.low_pct <= o.high_pct && o.high_pct <= 100))
    return Fail("watermarks must satisfy 0 <= low <= high <= 100");
  std::vector<Candidate> files;
  Status s = Walk(c, o.root, o.default_policy, &files);
  if (!s.ok())
    return Fail(s.message());
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  int rc = 0;
  // Archive: cold files of archive-after directories. Archiving a current copy is a no-op.
  for (const Candidate& f : files) {
    if (!archive || f.policy.kind != HsmPolicy::kArchiveAfter ||
        now - f.last_use_s < f.policy.archive_after_s)
      continue;
    Result<HsmStatus> hs = c.HsmGetState(f.path);
    if (!hs.ok() || hs->state == HsmState::kArchived || hs->state == HsmState::kReleased)
      continue;
    Status a = c.HsmArchive(f.path);
    if (a.ok()) {
      fmt::print("archived {}\n", f.path);
    } else if (a.code() != StatusCode::kBusy && a.code() != StatusCode::kNotFound) {
      fmt::print(stderr, "ciuic: hsm sweep: archive {}: {}\n", f.path, a.message());
      rc = 1;
    }
  }
  uint64_t used = 0, total = 0;
  s = OstUsage(c, &used, &total);
  if (!s.ok())
    return Fail(s.message());
  if (!AboveHigh(used, total, o.high_pct))
    return rc;
  return std::max(rc, ReleasePass(c, o, files, used, total));
}

}  // namespace

int CmdHsmSweep(Client& c, const SweepOptions& o) {
  if (o.every_s <= 0)
    return SweepOnce(c, o, true);
  using Clock = std::chrono::steady_clock;
  const auto period = std::chrono::seconds(o.every_s);
  const auto watch = std::chrono::milliseconds(std::max(o.watch_ms, 1));
  auto next_full = Clock::now();
  for (;;) {
    if (Clock::now() >= next_full) {
      SweepOnce(c, o, true);
      next_full = Clock::now() + period;
    } else if (o.watch_ms > 0) {
      // Between passes, one OST map read: a writer filling the OSTs faster than one period
      // meets a release pass at once, not at the next period.
      uint64_t used = 0, total = 0;
      if (OstUsage(c, &used, &total).ok() && AboveHigh(used, total, o.high_pct)) {
        fmt::print("OST use {:.1f} % is above {} %: release pass\n",
                   100.0 * static_cast<double>(used) / static_cast<double>(total), o.high_pct);
        SweepOnce(c, o, false);
      }
    }
    std::fflush(stdout);
    const auto wake = o.watch_ms > 0 ? std::min(next_full, Clock::now() + watch) : next_full;
    std::this_thread::sleep_until(wake);
  }
}

}  // namespace ciuic::cli
