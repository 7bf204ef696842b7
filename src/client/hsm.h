// HSM steps the client library drives (hsm.cc; docs/design.md "HSM"). Internal to ciuic_client.
#pragma once

#include <cstdint>
#include <string>

#include "client/client_core.h"
#include "common/fid.h"
#include "common/status.h"

namespace ciuic::client {

// HsmBeginReq.op values.
inline constexpr uint32_t kHsmOpArchive = 1;
inline constexpr uint32_t kHsmOpRelease = 2;
inline constexpr uint32_t kHsmOpRestore = 3;
inline constexpr uint32_t kHsmOpRemove = 4;

// Runs HSM operation `op` on file `fid` (`name` names it in errors): HsmBegin on the MDS, one
// kHsmObj per stripe object on the OSSes at once, HsmEnd. OK when there is nothing to do.
// A restore that finds the archived copy corrupt or missing returns kIoError naming `name`.
// `background` (restore only): restore by extents. Returns once every OSS has started (or
// joined) its objects' restores, so that reads wait for their own chunks; the rest follows and
// HsmEnd is sent when the OSSes report the end (from a network thread; nobody ends it if this
// client goes away first: the MDS's busy mark expires and later readers join the restore).
// Without it a restore returns when the whole file is back, also when it joined another's.
// Blocking: never call from a network thread.
Status HsmRunFid(ClientCore* core,
                 const Fid& fid,
                 const std::string& name,
                 uint32_t op,
                 bool background = false);

// Asks the MDS whether `fid` is released and, if so, restores it (*restored = true; by extents
// when `background`, see HsmRunFid). For reads that skip the MDS (OpenResolved): their missing
// object may mean "released". OK with *restored = false when the file is not released, is gone,
// or the MDS cannot be asked; the restore's error otherwise. Blocking.
Status RestoreIfReleased(ClientCore* core,
                         const Fid& fid,
                         const std::string& name,
                         bool* restored,
                         bool background = false);

}  // namespace ciuic::client
