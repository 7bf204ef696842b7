// Maps a local path inside a ciuic FUSE mount to the cluster path it names, so commands such as
// `ciuic setstripe` and `ciuic getstripe` accept paths inside a mount as well as cluster paths.
#pragma once

#include <optional>
#include <string>

namespace ciuic::cli {

struct MountedPath {
  std::string mountpoint;    // where the ciuic mount is, e.g. /mnt/ciuic
  std::string cluster_path;  // the same object as a cluster path, e.g. /data/a.bin
};

// If `local` (absolute or relative, existing or not: a missing last component is allowed) lies
// inside a mount of file system type fuse.ciuic listed in `mountinfo_file`, returns its mount
// point and cluster path; otherwise nullopt. The mount is assumed to show the cluster's root.
std::optional<MountedPath> ResolveMountedPath(
    const std::string& local, const std::string& mountinfo_file = "/proc/self/mountinfo");

// Undoes the octal escapes (\040 for a space, \011, \012, \134) of a /proc/self/mountinfo field.
std::string UnescapeMountField(const std::string& field);

}  // namespace ciuic::cli
