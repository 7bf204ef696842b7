#include "client/path.h"

#include <fmt/format.h>

namespace ciuic::client {

Status ValidatePath(std::string_view path) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("{}: {}", path, why));
  };
  if (path.empty())
    return Status::InvalidArgument("empty path");
  if (path.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("{}: path contains a NUL byte", path.substr(0, path.find('\0'))));
  }
  if (path.front() != '/')
    return bad("path must be absolute (start with '/')");
  if (path.size() > kMaxPathLen) {
    return Status::NameTooLong(
        fmt::format("{}...: path longer than {} bytes", path.substr(0, 64), kMaxPathLen));
  }
  size_t pos = 1;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    size_t end = slash == std::string_view::npos ? path.size() : slash;
    std::string_view comp = path.substr(pos, end - pos);
    if (comp.empty()) {
      // Only a single trailing slash may end the path.
      return bad("empty path component ('//')");
    }
    if (comp.size() > kMaxNameLen) {
      return Status::NameTooLong(fmt::format("{}: component '{}...' is longer than {} bytes", path,
                                             comp.substr(0, 32), kMaxNameLen));
    }
    if (comp == "." || comp == "..")
      return bad("'.' and '..' components are not allowed");
    if (slash == std::string_view::npos)
      break;
    pos = slash + 1;
  }
  return Status::OK();
}

std::string NormalizePath(std::string_view path) {
  if (path.size() > 1 && path.back() == '/')
    path.remove_suffix(1);
  return std::string(path);
}

Status SplitPath(std::string_view path, std::string* parent, std::string* name) {
  if (path.size() <= 1)
    return Status::InvalidArgument(fmt::format("{}: is the root", path));
  size_t slash = path.rfind('/');
  *parent = slash == 0 ? "/" : std::string(path.substr(0, slash));
  *name = std::string(path.substr(slash + 1));
  return Status::OK();
}

std::vector<std::string> PathComponents(std::string_view path) {
  std::vector<std::string> out;
  size_t pos = 1;
  while (pos < path.size()) {
    size_t slash = path.find('/', pos);
    size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end > pos)
      out.emplace_back(path.substr(pos, end - pos));
    if (slash == std::string_view::npos)
      break;
    pos = slash + 1;
  }
  return out;
}

}  // namespace ciuic::client
