// `ciuic hsm policy DIR never|archive-after DURATION|release-at-watermark` and `ciuic hsm sweep`:
// the HSM policy (docs/design.md "HSM policy"). A directory's policy is the xattr
// user.ciuic.hsm_policy on it; the nearest directory with one decides, else the cluster default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/client.h"

namespace ciuic::cli {

// Kinds of policy, as stored (value of the xattr): "never", "archive-after=SECONDS",
// "release-at-watermark".
struct HsmPolicy {
  enum Kind { kNever, kArchiveAfter, kReleaseAtWatermark } kind = kReleaseAtWatermark;
  int64_t archive_after_s = 0;  // kArchiveAfter only
};

inline constexpr const char* kHsmPolicyXattr = "user.ciuic.hsm_policy";

// "30s", "10m", "2h", "7d" or plain seconds; kInvalidArgument otherwise.
Result<int64_t> ParseDuration(const std::string& s);
// The stored form and back.
std::string PolicyValue(const HsmPolicy& p);
Result<HsmPolicy> ParsePolicyValue(const std::string& v);

// Sets (args: "never" | "archive-after" DURATION | "release-at-watermark") or, with no args,
// prints the policy of `dir`. Returns the exit code.
int CmdHsmPolicy(Client& c, const std::string& dir, const std::vector<std::string>& args);

struct SweepOptions {
  std::string root = "/";
  double high_pct = 90;  // release when the OSTs' used share passes this...
  double low_pct = 80;   // ...until it is under this
  HsmPolicy default_policy;
  int every_s = 0;  // > 0: repeat every this many seconds until killed
  // With every_s: read the OST map this often between passes and run a release pass at once
  // when use is above high_pct (0: only the periodic passes).
  int watch_ms = 1000;
};

// One pass of the policy engine: archives the files of archive-after directories that nobody
// touched (atime and mtime) for that long, then, when the OSTs' used share is above
// high_pct, releases archived, current, closed files, coldest first (heat on the MDS, then
// atime), until the bytes released bring it under low_pct. Prints what it did; returns the
// exit code. With every_s, repeats forever (a failed pass is printed and the next one tried),
// and between passes watches the OST map every watch_ms, starting a release pass (no archive)
// as soon as use is above high_pct.
int CmdHsmSweep(Client& c, const SweepOptions& o);

}  // namespace ciuic::cli
