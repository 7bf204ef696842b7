// POSIX permission checks and name rules for MetaService. Pure functions; thread-safe.
//
// The caller's identity is the request's ReqCtx (uid, gid, groups), which the authenticated
// client vouches for. uid 0 bypasses permission bits. Errors: kPermissionDenied (EACCES) when
// mode bits refuse, kNotPermitted (EPERM) when ownership rules refuse.
#pragma once

#include <cstdint>
#include <string_view>

#include "ciuic.pb.h"
#include "common/status.h"

namespace ciuic::meta {

inline constexpr int kMayRead = 4;
inline constexpr int kMayWrite = 2;
inline constexpr int kMayExec = 1;
inline constexpr size_t kNameMax = 255;
inline constexpr size_t kPathMax = 4096;

bool IsRoot(const pb::ReqCtx& ctx);
bool InGroup(const pb::ReqCtx& ctx, uint32_t gid);
bool IsOwnerOrRoot(const pb::Attr& a, const pb::ReqCtx& ctx);

// Checks that `ctx` may access `a` for `mask` (kMay* bits). kPermissionDenied names `what`.
Status CheckAccess(const pb::Attr& a, const pb::ReqCtx& ctx, int mask, std::string_view what);

// The sticky-directory rule: in a directory with S_ISVTX only the owner of the entry, the owner
// of the directory or root may remove or rename the entry. kNotPermitted otherwise.
Status CheckSticky(const pb::Attr& dir, const pb::Attr& child, const pb::ReqCtx& ctx);

// Checks a name for a new or removed directory entry: kInvalidArgument when empty, "." or
// "..", or containing '/' or NUL; kNameTooLong past 255 bytes. Messages name the problem.
Status ValidateName(std::string_view name);

}  // namespace ciuic::meta
