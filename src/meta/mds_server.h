// MdsServer: the metadata server process's core: a MetaService (namespace over RocksDB, or
// MemKvStore for tests) served on a net::RpcServer.
//
// Every MDS message type has a handler. Reads are answered inline on the network thread;
// mutations are queued to the MetaService writer thread (bounded: a full queue answers
// kUnavailable) and answered from it. RegisterOss and Heartbeat are for the OSS role only; the
// namespace is for clients and admin tools; GetOstMap for anyone.
//
// Tenants (docs/design.md "Tenants and capabilities"): a connection's identity is its key. The
// admin key (the cluster secret) is trusted as before. For a client key every request's ReqCtx
// is rewritten from the key's rules before the MetaService sees it (uid map, root squash,
// read-only, subtree root), a read-only key's mutations and every request of a revoked key are
// refused, and each layout returned carries a capability the OSSes check.
//
// Thread-safety: Start, port and Stop may be called from any thread (not from a handler).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace ciuic::net {
class RpcServer;
class HttpServer;
}  // namespace ciuic::net

namespace ciuic::metrics {
class Registry;
}  // namespace ciuic::metrics

namespace ciuic::meta {

class MetaService;
struct Tenancy;

class MdsServer {
 public:
  struct Options {
    std::string data_dir;    // RocksDB lives here (created if missing); ignored when in_memory
    bool in_memory = false;  // MemKvStore, for tests
    std::string host = "127.0.0.1";
    uint16_t port = 0;   // 0 = ephemeral
    std::string secret;  // raw key bytes
    uint32_t key_id = 1;
    std::string cluster_uuid;
    uint32_t lease_ms = 30000;
    uint32_t heartbeat_ms = 1000;
    uint32_t default_replicas = 1;  // MetaOptions::default_replicas
    // Tests: the RocksDB Env (not owned; null: the default), e.g. one over a PowerLossFs.
    rocksdb::Env* env = nullptr;
    // Durability epoch handed to clients (MetaOptions::durability_epoch); 0: the machine's
    // (MachineDurabilityEpoch). Tests that simulate power loss give each power cycle its own.
    uint64_t durability_epoch = 0;
    // Lifetime of the capabilities issued to client keys (clients refresh them when an OSS
    // refuses an expired one); bounds how long a revoked key's data access outlives it.
    uint32_t cap_ttl_ms = 600000;
    // Serve Prometheus metrics over HTTP (GET /metrics) on this port of `host`: -1 off, 0 any
    // free port (docs/design.md, "Observability").
    int metrics_port = -1;
    // Caps on per-client state (MetaOptions has the meaning of each; kNoSpace when hit).
    uint32_t max_sessions_per_key = 16384;
    uint32_t max_opens_per_session = 65536;
    uint32_t max_locks_per_file = 4096;
    uint32_t max_locks_per_session = 65536;
    uint32_t session_end_batch = 1024;
    // Per-file heat (MetaOptions::heat_half_life_ms).
    int64_t heat_half_life_ms = 3600 * 1000;
  };
  explicit MdsServer(Options options);
  ~MdsServer();  // Stop()
  MdsServer(const MdsServer&) = delete;
  MdsServer& operator=(const MdsServer&) = delete;

  // Opens the store, binds and serves. kBusy if another MDS holds data_dir, kIoError or
  // kPermissionDenied (with the OS reason) if it cannot be opened, kUnavailable if the address
  // cannot be bound. Call once.
  Status Start();
  // The bound port (after Start).
  uint16_t port() const;
  // Stops serving, finishes queued mutations and closes the store. Idempotent; a new
  // MdsServer may then Start on the same data_dir.
  void Stop();

  // The bound metrics port (after Start; 0 when metrics are off).
  uint16_t metrics_port() const;
  // The server's metrics (RPC, sessions, store); rendered by GET /metrics.
  metrics::Registry* metrics() { return metrics_.get(); }

  // The service behind the server (tests).
  MetaService* TEST_meta() { return meta_.get(); }
  // The RPC server, for requests made in-process (RpcServer::TEST_Dispatch; fuzzing).
  net::RpcServer* TEST_rpc() { return rpc_.get(); }

 private:
  void RegisterHandlers();
  void RegisterMetrics();

  Options options_;
  std::mutex mu_;
  bool started_ = false;
  std::unique_ptr<MetaService> meta_;
  std::unique_ptr<net::RpcServer> rpc_;
  std::unique_ptr<Tenancy> tenancy_;
  std::unique_ptr<metrics::Registry> metrics_;
  std::unique_ptr<net::HttpServer> http_;
  // The service the metrics callbacks read; cleared by Stop before meta_ goes.
  std::mutex stats_mu_;
  MetaService* stats_meta_ = nullptr;  // guarded by stats_mu_
};

}  // namespace ciuic::meta
