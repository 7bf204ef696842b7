#include "meta/perm.h"

#include <sys/stat.h>

#include <fmt/format.h>

namespace ciuic::meta {

bool IsRoot(const pb::ReqCtx& ctx) {
  return ctx.uid() == 0;
}

bool InGroup(const pb::ReqCtx& ctx, uint32_t gid) {
  if (ctx.gid() == gid)
    return true;
  for (uint32_t g : ctx.groups()) {
    if (g == gid)
      return true;
  }
  return false;
}

bool IsOwnerOrRoot(const pb::Attr& a, const pb::ReqCtx& ctx) {
  return IsRoot(ctx) || ctx.uid() == a.uid();
}

Status CheckAccess(const pb::Attr& a, const pb::ReqCtx& ctx, int mask, std::string_view what) {
  if (IsRoot(ctx))
    return Status::OK();
  uint32_t bits;
  if (ctx.uid() == a.uid()) {
    bits = (a.mode() >> 6) & 7;
  } else if (InGroup(ctx, a.gid())) {
    bits = (a.mode() >> 3) & 7;
  } else {
    bits = a.mode() & 7;
  }
  if ((bits & static_cast<uint32_t>(mask)) == static_cast<uint32_t>(mask))
    return Status::OK();
  const char* need = mask == kMayExec ? "search" : (mask & kMayWrite) ? "write" : "read";
  return Status::PermissionDenied(
      fmt::format("{} permission denied on {} for uid {}", need, what, ctx.uid()));
}

Status CheckSticky(const pb::Attr& dir, const pb::Attr& child, const pb::ReqCtx& ctx) {
  if ((dir.mode() & S_ISVTX) == 0 || IsRoot(ctx))
    return Status::OK();
  if (ctx.uid() == child.uid() || ctx.uid() == dir.uid())
    return Status::OK();
  return Status::NotPermitted(
      fmt::format("sticky directory: uid {} owns neither the entry nor the directory", ctx.uid()));
}

Status ValidateName(std::string_view name) {
  if (name.empty())
    return Status::InvalidArgument("empty file name");
  if (name == "." || name == "..") {
    return Status::InvalidArgument(fmt::format("file name '{}' is reserved", name));
  }
  if (name.size() > kNameMax) {
    return Status::NameTooLong(
        fmt::format("file name of {} bytes is longer than {}", name.size(), kNameMax));
  }
  if (name.find('/') != std::string_view::npos) {
    return Status::InvalidArgument("file name contains '/'");
  }
  if (name.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("file name contains a NUL byte");
  }
  return Status::OK();
}

}  // namespace ciuic::meta
