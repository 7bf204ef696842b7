// The MDS's layout policy (ARCHITECTURE "Layouts and striping", Decision 8). Pure functions;
// thread-safe.
//
// - An explicit layout (CreateReq.layout, SetLayout, a directory's default) always wins.
// - With a size hint: < 64 MiB -> 1 stripe; >= 64 MiB -> min(4, hint / 256 MiB), at least 1,
//   for sequential access (the default) or min(16, hint / 64 MiB) when the opener says random
//   access (kOpenFlagRandomAccess in CreateReq.open_flags).
// - Without a hint: the PFL template [0, 64 MiB) -> 1 stripe, [64 MiB, 1 GiB) -> 4,
//   [1 GiB, EOF) -> min(16, live OSTs); stripe size 1 MiB.
// Stripe counts are capped at the live OSTs (at least 1); component ends stay multiples of the
// stripe size.
#pragma once

#include <cstdint>

#include "common/layout.h"

namespace ciuic::meta {

// Bit of CreateReq.open_flags / OpenReq.flags, unused by Linux O_* flags: the opener will read
// or write at random offsets (wider striping for large files).
inline constexpr uint32_t kOpenFlagRandomAccess = 0x40000000;

inline constexpr uint64_t kSmallFileLimit = 64ull << 20;

// Returns the (uninstantiated) adaptive layout for a new regular file. `size_hint` 0 means
// unknown.
FileLayout AdaptiveLayout(uint64_t size_hint, bool random_access, uint32_t live_osts);

// Most components an explicit layout may have (a PFL layout needs a handful).
inline constexpr size_t kMaxComponents = 32;

// Checks an explicit layout from a client: FileLayout::Validate() and at most kMaxComponents
// components. kInvalidArgument otherwise.
Status ValidateExplicitLayout(const FileLayout& l);

// Returns `l` with OST choices removed and every count capped at max(live, 1): a directory's
// default applied to a new file.
FileLayout FromTemplate(const FileLayout& l, uint32_t live_osts);

// Returns `l` as a directory default template: OSTs removed, pattern explicit.
FileLayout AsTemplate(const FileLayout& l);

}  // namespace ciuic::meta
