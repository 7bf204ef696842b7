// MiniCluster: an in-process ciuic cluster for tests: one MDS and N OSS servers (each serving
// some OSTs) on 127.0.0.1 with ephemeral ports, data in a temp directory under /tmp (removed at
// destruction), a random secret and a cluster file clients connect with. Nodes can be stopped and
// restarted (a restart keeps the node's data and port).
//
// Power-loss mode (MiniClusterOptions::power_loss): every OSS runs its OSTs on a MemIoEngine of
// its own and the MDS keeps RocksDB on a PowerLossFs, so a simulated power cut drops exactly what
// no fsync made durable (ARCHITECTURE Decision 2: kill -9 keeps the page cache and proves
// nothing). The engines and the file-system wrapper belong to the MiniCluster and outlive
// restarts, as disks outlive their servers.
//
// OST numbering: OSS i serves OSTs i*osts_per_oss .. (i+1)*osts_per_oss-1; OstDir(k) is the
// directory of OST k. Thread-safety: control methods (Stop/Restart/Wait) must not race with each
// other; clients may be used from any thread meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ciuic.pb.h"
#include "ciuic/client.h"
#include "common/status.h"
#include "io/io_engine.h"

namespace rocksdb {
class Env;
}
namespace ciuic::io {
class MemIoEngine;
}
namespace ciuic::meta {
class MdsServer;
class PowerLossFs;
}  // namespace ciuic::meta
namespace ciuic::oss {
class OssServer;
}

namespace ciuic::testing {

struct MiniClusterOptions {
  int num_oss = 2;
  int osts_per_oss = 2;
  bool mds_in_memory = false;
  io::IoEngineKind io_engine = io::IoEngineKind::kAuto;
  uint32_t lease_ms = 30000;
  uint32_t heartbeat_ms = 200;   // OSS heartbeats: short so tests see OST state changes soon
  uint32_t cap_ttl_ms = 600000;  // lifetime of capabilities issued to client keys
  // OSSes on in-memory engines and the MDS on a file system that drops unsynced bytes, with
  // PowerCycle(). Not with mds_in_memory (an in-memory MDS loses everything at a restart).
  bool power_loss = false;
  // The OSSes' cold tier (HSM): an objstore URL; "" = mem://<cluster uuid>, an in-memory store
  // of this process (SharedMemObjectStore) that outlives server restarts and power cuts.
  std::string cold_tier_url = {};
  // The OSSes' restore-by-extents chunk (0: 4 MiB): smaller makes restores of small files
  // take several chunks.
  uint64_t hsm_fill_chunk = 0;
  // Copies of each object of files whose layout does not say (MDS --default-replicas).
  uint32_t default_replicas = 1;
  // Failure domain label of OSS i (host_labels[i]); missing or "": the OSS is its own domain.
  std::vector<std::string> host_labels = {};
  // Bytes per second an OSS copies to a chain member that catches up (0: unbounded).
  uint64_t resync_bytes_per_s = uint64_t{128} << 20;
  // The OSSes' scrubber: bytes per second (0: none) and the pause before each pass.
  uint64_t scrub_bytes_per_s = 0;
  uint32_t scrub_pause_ms = 1000;
};

class MiniCluster {
 public:
  // Starts the MDS and every OSS and waits until the MDS sees all OSTs up.
  static Result<std::unique_ptr<MiniCluster>> Start(MiniClusterOptions options = {});
  ~MiniCluster();
  MiniCluster(const MiniCluster&) = delete;
  MiniCluster& operator=(const MiniCluster&) = delete;

  const std::string& cluster_file() const { return cluster_file_; }
  const std::string& dir() const { return dir_; }
  const std::string& cluster_uuid() const { return cluster_uuid_; }
  // The OSSes' cold tier URL.
  const std::string& cold_tier_url() const { return cold_tier_url_; }
  int num_osts() const { return options_.num_oss * options_.osts_per_oss; }
  const MiniClusterOptions& options() const { return options_; }

  // A client connected as uid/gid (root by default).
  Result<std::unique_ptr<Client>> NewClient(uint32_t uid = 0, uint32_t gid = 0);
  // A client with `options` (cluster_file is filled in).
  Result<std::unique_ptr<Client>> NewClient(ClientOptions options);

  // Adds a client key with `rules` (name, uid map, squash, read-only, root_path) through the
  // MDS's admin RPC, as `ciuic cluster add-client` does, and writes a cluster file for it.
  // Returns the file's path; `record`, when given, gets the stored rules (its key_id).
  Result<std::string> AddClientKey(const pb::ClientKeyRecord& rules,
                                   pb::ClientKeyRecord* record = nullptr);
  // Revokes the live key of client `name` through the admin RPC.
  Status RevokeClientKey(const std::string& name);
  // The admin key (cluster secret), raw bytes: tests forge capabilities with it.
  const std::string& admin_secret() const { return secret_; }

  // Stops OSS `i` (its connections drop, its OSTs stop answering). OK if already stopped.
  Status StopOss(int i);
  // Starts OSS `i` again on the same port with the same OST directories.
  Status RestartOss(int i);
  // The running OSS `i` (null when stopped), for tests that reach into it.
  oss::OssServer* oss(int i) { return oss_[static_cast<size_t>(i)].get(); }
  // Bytes the running OSSes read from their OSTs so far (their ciuic_ost_read_bytes_total
  // counters): what tests of the node cache count fetches with.
  uint64_t OstReadBytes();
  Status StopMds();
  // Starts the MDS again on the same port with the same data (an in-memory MDS comes back empty).
  Status RestartMds();
  // Power-loss mode only (else kInvalidArgument). CutPower() cuts the power of every server at
  // one instant: from then on each one's disk refuses every read, write and sync, so nothing a
  // server does afterwards persists; the servers are stopped (their shutdown syncs fail, as they
  // would) and every byte not yet synced is dropped, on every OSS engine and in the MDS's
  // RocksDB files (a torn tail when `torn_seed` != 0). Clients see their IO fail or time out.
  // RestorePower() turns the disks on and starts every server again on its old port, then waits
  // for the OSTs. PowerCycle() is both.
  Status CutPower(uint64_t torn_seed = 0);
  Status RestorePower();
  Status PowerCycle(uint64_t torn_seed = 0);
  // Power-loss mode only: cuts the power of one server, drops its unsynced bytes and starts it
  // again (the rest of the cluster keeps running).
  Status PowerCycleOss(int i);
  Status PowerCycleMds(uint64_t torn_seed = 0);
  // Bytes in the MDS's RocksDB files that the next power cut would drop (0 outside that mode).
  uint64_t UnsyncedMdsBytes() const;

  // Waits until the MDS reports at least `n` OSTs up. kTimedOut after `timeout_ms`.
  Status WaitForOsts(int n, int timeout_ms = 10000);

  // Directory of OST `ost` (objects live under it).
  std::string OstDir(uint32_t ost) const;
  uint16_t mds_port() const { return mds_port_; }
  uint16_t oss_port(int i) const { return oss_ports_[static_cast<size_t>(i)]; }
  // Reads the running OSSes answered into clients' shared memory (since each started).
  uint64_t shm_reads() const;
  // Writes the running OSSes took from clients' shared memory (since each started).
  uint64_t shm_writes() const;
  // ReadBatch requests the running OSSes served (since each started).
  uint64_t read_batches() const;

 private:
  explicit MiniCluster(MiniClusterOptions options);
  Status Init();
  Status StartMds();
  Status StartOss(int i);
  Status CheckPowerLossMode() const;
  // A counter of every running OSS, summed.
  uint64_t SumOverOss(uint64_t (oss::OssServer::*counter)() const) const;

  MiniClusterOptions options_;
  std::string dir_;
  std::string cluster_file_;
  std::string secret_;  // raw bytes
  std::string cluster_uuid_;
  std::string cold_tier_url_;
  uint16_t mds_port_ = 0;
  std::vector<uint16_t> oss_ports_;
  std::unique_ptr<meta::MdsServer> mds_;
  std::vector<std::unique_ptr<oss::OssServer>> oss_;
  // Power-loss mode: the MDS's RocksDB file system and Env, and one engine per OSS.
  std::shared_ptr<meta::PowerLossFs> mds_fs_;
  std::unique_ptr<rocksdb::Env> mds_env_;
  std::vector<std::unique_ptr<io::MemIoEngine>> engines_;
  // Power-loss mode: each server's durability epoch, changed by each power cut of it.
  uint64_t mds_epoch_ = 0;
  std::vector<uint64_t> oss_epochs_;
};

}  // namespace ciuic::testing
