// Cluster path validation and splitting. Paths are absolute ("/a/b"); the root is "/".
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ciuic::client {

inline constexpr size_t kMaxNameLen = 255;
inline constexpr size_t kMaxPathLen = 4096;

// Checks that `path` is absolute, has no empty component ("/a//b"), no NUL byte, no component
// longer than 255 bytes and is at most 4096 bytes. A single trailing '/' is allowed ("/a/").
// "." and ".." components are rejected (the cluster has no cwd to resolve them against).
// Returns kInvalidArgument or kNameTooLong with the path in the message.
Status ValidatePath(std::string_view path);

// Returns `path` without a trailing '/' (except the root). Assumes ValidatePath passed.
std::string NormalizePath(std::string_view path);

// Splits a validated, normalized non-root path into its parent ("/" for "/a") and last name.
// kInvalidArgument for the root.
Status SplitPath(std::string_view path, std::string* parent, std::string* name);

// The components of a validated path ("/a/b" -> {"a", "b"}; "/" -> {}).
std::vector<std::string> PathComponents(std::string_view path);

}  // namespace ciuic::client
