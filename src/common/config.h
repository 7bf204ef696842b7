// ClusterFile: the file that names a cluster's MDS and holds its secret; every client and tool
// reads it. Format: "key = value" lines, '#' comments (docs/formats/cluster-file.md).
// Also size-string parsing shared by the CLI and the benchmark.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ciuic {

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const;
  // Parses "host:port" (IPv4 or a name). Returns kInvalidArgument when malformed.
  static Result<HostPort> Parse(const std::string& s);
};

struct ClusterFile {
  std::string cluster_uuid;
  HostPort mds;
  std::string secret_hex;  // 32 random bytes, hex
  uint32_t key_id = 1;
  // The node cache of clients on this machine (docs/design.md "Node cache"): a directory, or
  // empty for none, and its size cap in bytes (0: the default). Written by `cluster up
  // --node-cache`; ClientOptions and $CIUIC_NODE_CACHE override it.
  std::string node_cache;
  uint64_t node_cache_bytes = 0;
  // The share of the cache device always left free, in percent; negative: the default (10).
  double node_cache_min_free_pct = -1;

  // Reads and validates `path`. kNotFound if missing, kInvalidArgument if malformed.
  static Result<ClusterFile> Load(const std::string& path);
  // Parses and validates the text of a cluster file (`name` for messages). kInvalidArgument
  // naming the line if malformed.
  static Result<ClusterFile> Parse(std::string_view text, const std::string& name);
  // Writes atomically (temp + rename) with mode 0600.
  Status Save(const std::string& path) const;
  // Returns the secret as raw bytes.
  std::string SecretBytes() const;
};

// Finds the cluster file: `explicit_path` if non-empty, else $CIUIC_CLUSTER, else
// ~/ciuic/cluster.conf. Returns kNotFound with a hint when none exists.
Result<std::string> FindClusterFile(const std::string& explicit_path);

// Parses "4096", "64K", "64KiB", "1.5G", "4GiB", "2T" (binary units). kInvalidArgument otherwise.
Result<uint64_t> ParseSize(const std::string& s);
// Formats bytes as "1.5 GiB".
std::string FormatSize(uint64_t bytes);

// Returns `n` random bytes from the OS CSPRNG.
std::string RandomBytes(size_t n);
std::string HexEncode(const std::string& bytes);
Result<std::string> HexDecode(const std::string& hex);
// A random RFC 4122 version-4 UUID string.
std::string NewUuid();

// The durability epoch of this machine: a non-zero number that stays the same while the kernel
// keeps running and changes when it boots again (from /proc/sys/kernel/random/boot_id). Bytes a
// server wrote and did not sync survive its own crash or kill -9 in the page cache; they are lost
// only with the machine. Servers hand this epoch to clients with each acknowledgement of an
// unsynced change, so a later sync under another epoch reports the possible loss instead of
// claiming durability. Without a readable boot_id it is random per process (every restart then
// counts as a possible loss).
uint64_t MachineDurabilityEpoch();

}  // namespace ciuic
