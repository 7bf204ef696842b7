// Targets: the same file operations on ciuic (native client) and on any POSIX directory (a local
// disk, a FUSE mount, a peer file system), so every phase measures each target the same way.
// Thread-safety: a Target and its BFiles may be used from several threads at once, as the
// underlying client or kernel allows; Fork() gives an independent client for multi-client phases.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic::bench {

// An open file of a target.
class BFile {
 public:
  virtual ~BFile() = default;
  virtual Status Pwrite(const void* buf, size_t len, uint64_t off) = 0;
  virtual Result<size_t> Pread(void* buf, size_t len, uint64_t off) = 0;
  virtual Status Fsync() = 0;
  virtual Status Close() = 0;
  // Runs 4 KiB random reads over [0, size) with `qd` in flight, submitted `batch` at a time,
  // for `seconds`; returns the reads completed. Path targets use io_uring, ciuic its async API.
  virtual Result<uint64_t> RandomReads(
      uint64_t size, int qd, int batch, double seconds, uint64_t seed) = 0;
  // The same through a ring over shared memory (include/ciuic/ring.h): ciuic only, kNotSupported
  // elsewhere.
  virtual Result<uint64_t> RingRandomReads(
      uint64_t /*size*/, int /*qd*/, int /*batch*/, double /*seconds*/, uint64_t /*seed*/) {
    return Status::NotSupported("rings are ciuic's");
  }
  // Writes (write) or reads [0, size) in `block` IOs with `depth` in flight through a ring
  // (ciuic only, kNotSupported elsewhere); writes are not synced. `shared`: the ring's memory is
  // shared with the OSSes (else ordinary memory: the same IOs over TCP, the plain API's path).
  virtual Status RingSequential(
      bool /*write*/, uint64_t /*size*/, size_t /*block*/, int /*depth*/, bool /*shared*/) {
    return Status::NotSupported("rings are ciuic's");
  }
};

class Target {
 public:
  virtual ~Target() = default;
  // Name in tables and JSON ("local", "ciuic", "fuse", "moosefs", "path:/mnt/x").
  virtual const std::string& name() const = 0;
  // Opens `path` (from Path()) for reading and writing; `create` truncates. `size_hint` helps
  // ciuic's layout policy.
  virtual Result<std::unique_ptr<BFile>> Open(const std::string& path,
                                              bool create,
                                              uint64_t size_hint) = 0;
  virtual Status Mkdir(const std::string& path) = 0;
  virtual Status CreateEmpty(const std::string& path) = 0;
  virtual Status Stat(const std::string& path) = 0;
  // Lists `path`; returns the number of entries (without "." and "..").
  virtual Result<size_t> ReadDir(const std::string& path) = 0;
  virtual Status Unlink(const std::string& path) = 0;
  virtual Status Rmdir(const std::string& path) = 0;
  // Removes a directory tree (best effort cleanup between runs).
  virtual Status RemoveAll(const std::string& path) = 0;
  // The target's path of `rel` (relative to its working directory).
  virtual std::string Path(const std::string& rel) const = 0;
  // Another client of the same target (ciuic: its own connection and session).
  virtual Result<std::unique_ptr<Target>> Fork() = 0;
  // True when reads bypass the client-side page cache (O_DIRECT on path targets).
  virtual bool direct_io() const = 0;
  // The target's own figures measured against physical limits: "disk" or "network".
  virtual bool over_network() const = 0;
  // ciuic: the cluster file (its servers' counters are read beside it); others: empty.
  virtual std::string cluster_file() const { return ""; }
};

// A POSIX directory (created if missing). Files are opened with O_DIRECT where the file system
// accepts it and `allow_direct`, else buffered (direct_io() tells which; FUSE mounts often
// refuse O_DIRECT).
Result<std::unique_ptr<Target>> NewPosixTarget(const std::string& name,
                                               const std::string& dir,
                                               bool over_network,
                                               bool allow_direct = true);

// ciuic through the native client: connects with `cluster_file` and works under `dir`. With
// `replicas` > 0 its files get explicit layouts with that many copies of each object (the
// stripe counts the adaptive policy would choose); the target is then named "ciuic-rN".
Result<std::unique_ptr<Target>> NewCiuicTarget(const std::string& cluster_file,
                                               const std::string& dir,
                                               uint32_t replicas = 0);

}  // namespace ciuic::bench
