// ciuic-oss: serves OSTs (object storage targets) of a ciuic cluster.
//
//   ciuic-oss --ost 0:/data/ost0 --ost 1:/data/ost1 --cluster-file cluster.conf
//             [--listen 127.0.0.1:0] [--io-engine auto|io_uring|posix] [--log FILE]
//             [--port-file FILE] [--heartbeat-ms 1000] [--metrics-port -1|0|N]
//             [--metrics-port-file FILE]
//
// Runs until SIGINT or SIGTERM, then stops cleanly (syncs, writes each OST's clean-shutdown
// marker). Every failure is one line on stderr and exit status 1.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/config.h"
#include "common/logging.h"
#include "io/io_engine.h"
#include "oss/oss_server.h"

namespace {

int Fail(const std::string& msg) {
  fmt::print(stderr, "ciuic-oss: {}\n", msg);
  return 1;
}

// Parses "INDEX:DIR".
ciuic::Result<std::pair<uint32_t, std::string>> ParseOst(const std::string& spec) {
  size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    return ciuic::Status::InvalidArgument(fmt::format("--ost '{}': want INDEX:DIR", spec));
  }
  std::string index = spec.substr(0, colon);
  if (index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos) {
    return ciuic::Status::InvalidArgument(fmt::format("--ost '{}': bad OST index", spec));
  }
  return std::make_pair(static_cast<uint32_t>(std::stoul(index)), spec.substr(colon + 1));
}

// Writes `port` to `path` atomically (temp file + rename) so readers never see half a file.
ciuic::Status WritePortFile(const std::string& path, uint16_t port) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    out.flush();
    if (!out)
      return ciuic::Status::IoError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return ciuic::Status::IoError(fmt::format("rename {} -> {}: {}", tmp, path, ec.message()));
  return ciuic::Status::OK();
}

int Run(int argc, char** argv) {
  CLI::App app{"ciuic-oss: serves OSTs of a ciuic cluster"};
  std::vector<std::string> ost_specs;
  std::string listen = "127.0.0.1:0";
  std::string cluster_file;
  std::string io_engine = "auto";
  std::string log_file;
  std::string port_file;
  int metrics_port = -1;
  std::string metrics_port_file;
  uint32_t heartbeat_ms = 1000;
  size_t max_open_objects = ciuic::oss::OssServer::Options{}.max_open_objects_per_ost;
  uint32_t writeback_idle_ms = ciuic::oss::OssServer::Options{}.writeback_idle_ms;
  uint32_t tombstone_grace_ms = ciuic::oss::OssServer::Options{}.tombstone_grace_ms;
  size_t read_pool_mib = ciuic::oss::OssServer::Options{}.read_pool_bytes >> 20;
  size_t write_pool_mib = ciuic::oss::OssServer::Options{}.write_pool_bytes >> 20;
  app.add_option("--ost", ost_specs, "an OST to serve, INDEX:DIR (repeatable)")->required();
  app.add_option("--listen", listen, "HOST:PORT to serve on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--cluster-file", cluster_file,
                 "cluster file (secret, key id, uuid, MDS address); default $CIUIC_CLUSTER or "
                 "~/ciuic/cluster.conf");
  app.add_option("--io-engine", io_engine, "disk IO engine: auto, io_uring or posix")
      ->capture_default_str();
  app.add_option("--log", log_file, "append logs to FILE instead of stderr");
  app.add_option("--port-file", port_file, "write the bound port to FILE once serving");
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics at http://HOST:N/metrics (HOST of --listen; 0: any "
                 "free port; -1: off)")
      ->capture_default_str();
  app.add_option("--metrics-port-file", metrics_port_file,
                 "write the bound metrics port to FILE once serving (before --port-file)");
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat interval to the MDS")
      ->capture_default_str();
  app.add_option("--max-open-objects", max_open_objects,
                 "objects kept open per OST (two descriptors each; idle ones beyond it are synced "
                 "and closed)")
      ->capture_default_str();
  app.add_option("--read-pool-mib", read_pool_mib,
                 "MiB of idle read buffers kept for reuse, for the whole OSS (0: none)")
      ->capture_default_str();
  app.add_option("--write-pool-mib", write_pool_mib,
                 "MiB of idle receive buffers kept for reuse, for the whole OSS (0: none)")
      ->capture_default_str();
  app.add_option("--writeback-idle-ms", writeback_idle_ms,
                 "sync objects in the background once not written for this long (0: only on "
                 "fsync or eviction)")
      ->capture_default_str();
  app.add_option("--tombstone-grace-ms", tombstone_grace_ms,
                 "delete tombstones of destroyed objects this long after the destroy (longer "
                 "than client lease + client OST retry window + request time)")
      ->capture_default_str();
  std::string cold_tier;
  app.add_option("--cold-tier", cold_tier,
                 "the cold tier HSM archives to: file:///DIR, s3://BUCKET[/PREFIX] (no HSM "
                 "without it)");
  std::string host_label;
  app.add_option("--host-label", host_label,
                 "failure domain of this OSS: OSSes with one label never hold two copies of an "
                 "object (default: this OSS alone)");
  uint64_t resync_mbps = 128;
  app.add_option("--resync-mbps", resync_mbps,
                 "MiB/s this OSS copies to a chain member that catches up or is rebuilt (0: no "
                 "bound)")
      ->capture_default_str();
  uint64_t scrub_mbps = 16;
  app.add_option("--scrub-mbps", scrub_mbps,
                 "MiB/s the scrubber re-reads and verifies, over all OSTs (0: no scrubber)")
      ->capture_default_str();
  uint32_t scrub_pause_s = 3600;
  app.add_option("--scrub-pause-s", scrub_pause_s,
                 "seconds the scrubber waits before each whole pass over the OSTs")
      ->capture_default_str();
  bool no_shm_reads = false;
  app.add_flag("--no-shm-reads", no_shm_reads,
               "do not serve reads into the shared memory of clients on this host (they read "
               "over TCP then)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return Fail(e.what());
  }

  ciuic::oss::OssServer::Options o;
  for (const std::string& spec : ost_specs) {
    auto ost = ParseOst(spec);
    if (!ost.ok())
      return Fail(ost.status().message());
    o.osts.push_back(*ost);
  }
  // HostPort::Parse wants a real port; ":0" (any free port) is valid here.
  bool any_port = listen.size() > 2 && listen.compare(listen.size() - 2, 2, ":0") == 0;
  auto hp = ciuic::HostPort::Parse(any_port ? listen.substr(0, listen.size() - 1) + "1" : listen);
  if (!hp.ok())
    return Fail(fmt::format("--listen: {}", hp.status().message()));
  o.host = hp->host;
  o.port = any_port ? 0 : hp->port;
  auto kind = ciuic::io::ParseIoEngineKind(io_engine);
  if (!kind.ok())
    return Fail(kind.status().message());
  o.io_engine = *kind;
  if (heartbeat_ms == 0)
    return Fail("--heartbeat-ms must be positive");
  o.heartbeat_ms = heartbeat_ms;
  if (max_open_objects == 0)
    return Fail("--max-open-objects must be positive");
  o.max_open_objects_per_ost = max_open_objects;
  o.writeback_idle_ms = writeback_idle_ms;
  if (read_pool_mib > (size_t{1} << 20) || write_pool_mib > (size_t{1} << 20))
    return Fail("--read-pool-mib and --write-pool-mib must be at most 1048576");
  o.read_pool_bytes = read_pool_mib << 20;
  o.write_pool_bytes = write_pool_mib << 20;
  o.tombstone_grace_ms = tombstone_grace_ms;
  o.shm_reads = !no_shm_reads;
  o.cold_tier_url = cold_tier;
  if (host_label.size() > 256)
    return Fail("--host-label is longer than 256 bytes");
  o.host_label = host_label;
  o.busy_wait_ms = 10000;  // a killed predecessor may still be exiting (`cluster up` restarts)
  if (resync_mbps > (uint64_t{1} << 40))
    return Fail("--resync-mbps is out of range");
  o.resync_bytes_per_s = resync_mbps << 20;
  if (scrub_mbps > (uint64_t{1} << 40))
    return Fail("--scrub-mbps is out of range");
  if (scrub_pause_s > 365u * 24 * 3600)
    return Fail("--scrub-pause-s is more than a year");
  o.scrub_bytes_per_s = scrub_mbps << 20;
  o.scrub_pause_ms = scrub_pause_s * 1000;
  auto path = ciuic::FindClusterFile(cluster_file);
  if (!path.ok())
    return Fail(path.status().message());
  auto cf = ciuic::ClusterFile::Load(*path);
  if (!cf.ok())
    return Fail(fmt::format("cluster file {}: {}", *path, cf.status().message()));
  o.secret = cf->SecretBytes();
  o.key_id = cf->key_id;
  o.cluster_uuid = cf->cluster_uuid;
  o.mds = cf->mds;

  if (!log_file.empty())
    ciuic::log::SetFile(log_file);
  ciuic::log::SetName("oss");
  if (!log_file.empty() && std::getenv("CIUIC_LOG_LEVEL") == nullptr) {
    // With a file to write to, the server's life cycle (info) is worth keeping.
    ciuic::log::SetLevel(ciuic::log::Level::kInfo);
  }

  // Block the stop signals in every thread (the server's threads inherit the mask) and wait for
  // them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (metrics_port < -1 || metrics_port > 65535)
    return Fail("--metrics-port must be -1 (off), 0 (any free port) or a port");
  o.metrics_port = metrics_port;
  ciuic::oss::OssServer server(o);
  ciuic::Status st = server.Start();
  if (!st.ok())
    return Fail(st.message());
  if (!metrics_port_file.empty() && server.metrics_port() != 0) {
    st = WritePortFile(metrics_port_file, server.metrics_port());
    if (!st.ok())
      return Fail(st.message());
  }
  if (!port_file.empty()) {
    st = WritePortFile(port_file, server.port());
    if (!st.ok())
      return Fail(st.message());
  }
  LOG_INFO("ciuic-oss serving {} OST(s) on {}:{}", o.osts.size(), o.host, server.port());
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  LOG_INFO("signal {}: stopping", sig);
  server.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Keep up to 64 MiB of freed heap instead of trimming it: loading an object allocates its
  // checksum pages and evicting one frees them, and with glibc's dynamic trim threshold the
  // pages went back to the kernel and were faulted in again by the next loads (a VM pays a
  // trap per page: 7% of the OSS's time in an epoch over one file per sample, measured).
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr)
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
}
