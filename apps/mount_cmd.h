// `ciuic mount CLUSTER_FILE MOUNTPOINT` and `ciuic umount MOUNTPOINT` (docs/fuse.md).
#pragma once

#include <string>
#include <vector>

namespace ciuic::cli {

struct MountOptions {
  std::string cluster_file;
  std::string mountpoint;
  bool foreground = false;
  bool private_mount = false;
  std::string log_file;
};

// Runs ciuic-fuse (from the directory of this binary, else $PATH), which returns once the mount
// is ready. Returns the exit code; prints one clear line on failure.
int Mount(const MountOptions& options);
// Unmounts a ciuic mount (fusermount3 -u, or umount2 as root) and waits up to `timeout_s` for
// its daemon to finish. Returns the exit code.
int Umount(const std::string& mountpoint, int timeout_s);

}  // namespace ciuic::cli
