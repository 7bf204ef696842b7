// FuseServer: a ciuic cluster as a mounted directory tree, over libfuse3's low-level API.
//
// Inodes are FIDs (Decision 1): a FUSE inode number is the FID's sequence (the root is 1), and
// every operation goes to the MDS by FID through the Client's *At methods, so a rename never
// invalidates an inode. The kernel's lookup counts are kept per inode and dropped on forget.
//
// Threads: libfuse's multithreaded loop (clone_fd) receives requests. Reads and large writes are
// started there and answered from the client's async completions (client network threads), so
// slow IO never holds a libfuse worker; metadata requests (blocking MDS round trips) are handed
// to a small pool. Exactly one reply is sent per request.
//
// Thread-safety: all methods are called by libfuse's threads; the inode and handle tables are
// guarded by mutexes. Lifetime: Mount() -> Run() (returns when unmounted or on SIGINT/SIGTERM/
// SIGHUP) -> destruction unmounts if still mounted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ciuic/client.h"
#include "ciuic/status.h"

struct fuse_session;

namespace ciuic::fuse {

struct FuseOptions {
  std::string mountpoint;
  // Let other users access the mount (-o allow_other); the kernel checks permissions
  // (default_permissions) and the MDS checks them again as the calling user.
  bool allow_other = true;
  // Ask fusermount3 to unmount when the daemon dies (no hung mount after a crash).
  bool auto_unmount = true;
  double attr_timeout_s = 1.0;
  double entry_timeout_s = 1.0;
  int meta_threads = 4;              // pool for MDS requests
  int max_fuse_threads = 16;         // libfuse workers
  uint32_t max_io_bytes = 1u << 20;  // max_read and max_write
  uint32_t readahead_kb = 4096;      // kernel readahead of the mount (set when run as root)
  bool debug = false;                // libfuse request tracing to stderr
};

class FuseServer {
 public:
  // Takes ownership of a connected client.
  FuseServer(std::unique_ptr<Client> client, FuseOptions options);
  // A server without a client yet: Mount() it first, then Attach() one, then Run(). The daemon
  // mounts this way, while it has no other thread: libfuse forks fusermount3 for the mount, and a
  // fork while other threads hold allocator locks can hang the child before its exec (seen with
  // ASan's allocator, which has no fork handlers).
  explicit FuseServer(FuseOptions options);
  // Takes ownership of a connected client and starts the server's threads. Once, before Run().
  void Attach(std::unique_ptr<Client> client);
  ~FuseServer();
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  // Checks the mount point (exists, is a directory, is empty, is not mounted already) and
  // mounts. kNotFound, kNotADirectory, kNotEmpty, kBusy (already mounted), kIoError.
  Status Mount();
  // Serves requests until the file system is unmounted or a signal asks to stop, then unmounts.
  Status Run();

  // Implementation detail shared with the request handlers (fuse_server.cc).
  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Checks that `mountpoint` can be mounted on: an existing, empty directory that is not a mount
// point already. Used before mounting, and by `ciuic mount` for an early clear error.
Status CheckMountpoint(const std::string& mountpoint);
// True when `path` (resolved) is listed in /proc/self/mountinfo as a mount point.
bool IsMountpoint(const std::string& path);

}  // namespace ciuic::fuse
