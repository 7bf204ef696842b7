// ciuic-mds: the metadata server of a ciuic cluster.
//
//   ciuic-mds --data DIR [--listen HOST:PORT] [--cluster-file FILE] [--log FILE]
//             [--port-file FILE] [--lease-ms 30000] [--heartbeat-ms 1000]
//             [--metrics-port -1|0|N] [--metrics-port-file FILE]
//             [--max-sessions-per-key 16384] [--max-opens-per-session 65536]
//             [--max-locks-per-file 4096] [--max-locks-per-session 65536]
//             [--session-end-batch 1024]
//
// Serves until SIGINT or SIGTERM, then stops cleanly (queued mutations are committed, the
// store is closed). Every failure is one line on stderr and exit status 1.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "ciuic/layout.h"
#include "common/config.h"
#include "common/logging.h"
#include "meta/mds_server.h"

namespace {

int Fail(const std::string& msg) {
  fmt::print(stderr, "ciuic-mds: {}\n", msg);
  return 1;
}

// Parses "HOST:PORT" where PORT may be 0 (any free port).
ciuic::Status ParseListen(const std::string& s, std::string* host, uint16_t* port) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return ciuic::Status::InvalidArgument(fmt::format("--listen '{}': want HOST:PORT", s));
  }
  const std::string p = s.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(p) > 65535) {
    return ciuic::Status::InvalidArgument(fmt::format("--listen '{}': bad port", s));
  }
  *host = s.substr(0, colon);
  *port = static_cast<uint16_t>(std::stoul(p));
  return ciuic::Status::OK();
}

// Writes the port to `path` through a temporary file and a rename, so a reader never sees a
// partial file.
ciuic::Status WritePortFile(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << '\n';
    out.flush();
    if (!out)
      return ciuic::Status::IoError(fmt::format("cannot write port file {}", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return ciuic::Status::IoError(fmt::format("cannot write port file {}: {}", path, ec.message()));
  }
  return ciuic::Status::OK();
}

int Run(int argc, char** argv) {
  CLI::App app{"ciuic-mds: the metadata server of a ciuic cluster"};
  std::string data_dir;
  std::string listen = "127.0.0.1:0";
  std::string cluster_file;
  std::string log_file;
  std::string port_file;
  int metrics_port = -1;
  std::string metrics_port_file;
  uint32_t lease_ms = 30000;
  uint32_t heartbeat_ms = 1000;
  app.add_option("--data", data_dir, "directory of the metadata store (created if missing)")
      ->required();
  app.add_option("--listen", listen, "HOST:PORT to serve on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--cluster-file", cluster_file,
                 "cluster file with the secret, key id and cluster uuid; default $CIUIC_CLUSTER "
                 "or ~/ciuic/cluster.conf");
  app.add_option("--log", log_file, "append logs to FILE instead of stderr");
  app.add_option("--port-file", port_file, "write the bound port to FILE once serving");
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics at http://HOST:N/metrics (HOST of --listen; 0: any "
                 "free port; -1: off)")
      ->capture_default_str();
  app.add_option("--metrics-port-file", metrics_port_file,
                 "write the bound metrics port to FILE once serving (before --port-file)");
  app.add_option("--lease-ms", lease_ms, "client session lease")->capture_default_str();
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat interval asked of OSSes")
      ->capture_default_str();
  ciuic::meta::MdsServer::Options o;
  app.add_option("--max-sessions-per-key", o.max_sessions_per_key,
                 "sessions open at once per client key (the admin key too)")
      ->capture_default_str();
  app.add_option("--max-opens-per-session", o.max_opens_per_session,
                 "files one client session may hold open")
      ->capture_default_str();
  app.add_option("--max-locks-per-file", o.max_locks_per_file,
                 "lock ranges held on one file, all clients together")
      ->capture_default_str();
  app.add_option("--max-locks-per-session", o.max_locks_per_session,
                 "lock ranges one client session may hold")
      ->capture_default_str();
  app.add_option("--session-end-batch", o.session_end_batch,
                 "opens released per commit when a session ends")
      ->capture_default_str();
  app.add_option("--default-replicas", o.default_replicas,
                 "copies of each object of files whose layout does not say (1 to 8; more than 1 "
                 "needs that many OSSes or host labels)")
      ->capture_default_str();
  double heat_half_life_s = 3600;
  app.add_option("--heat-half-life", heat_half_life_s,
                 "seconds after which a file's access count (its heat, for the HSM policy) "
                 "counts half")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    return Fail(e.what());
  }
  if (lease_ms < 100)
    return Fail("--lease-ms must be at least 100");
  if (heartbeat_ms == 0)
    return Fail("--heartbeat-ms must be positive");
  if (o.max_sessions_per_key == 0 || o.max_opens_per_session == 0 || o.max_locks_per_file == 0 ||
      o.max_locks_per_session == 0 || o.session_end_batch == 0) {
    return Fail("--max-* caps and --session-end-batch must be positive");
  }
  if (o.default_replicas == 0 || o.default_replicas > ciuic::kMaxReplicas)
    return Fail(fmt::format("--default-replicas must be 1 to {}", ciuic::kMaxReplicas));
  if (!(heat_half_life_s >= 0.001 && heat_half_life_s <= 1e9))
    return Fail("--heat-half-life must be between 0.001 and 1e9 seconds");
  o.heat_half_life_ms = static_cast<int64_t>(heat_half_life_s * 1000);

  o.data_dir = data_dir;
  o.lease_ms = lease_ms;
  o.heartbeat_ms = heartbeat_ms;
  if (ciuic::Status st = ParseListen(listen, &o.host, &o.port); !st.ok()) {
    return Fail(st.message());
  }
  auto path = ciuic::FindClusterFile(cluster_file);
  if (!path.ok())
    return Fail(path.status().message());
  auto cf = ciuic::ClusterFile::Load(*path);
  if (!cf.ok())
    return Fail(fmt::format("cluster file {}: {}", *path, cf.status().message()));
  o.secret = cf->SecretBytes();
  o.key_id = cf->key_id;
  o.cluster_uuid = cf->cluster_uuid;

  if (!log_file.empty()) {
    try {
      ciuic::log::SetFile(log_file);
    } catch (const std::exception& e) {
      return Fail(fmt::format("cannot open log file {}: {}", log_file, e.what()));
    }
    if (std::getenv("CIUIC_LOG_LEVEL") == nullptr)
      ciuic::log::SetLevel(ciuic::log::Level::kInfo);
  }
  ciuic::log::SetName("mds");

  // The stop signals are blocked in every thread (the server's threads inherit the mask) and
  // taken here with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (metrics_port < -1 || metrics_port > 65535)
    return Fail("--metrics-port must be -1 (off), 0 (any free port) or a port");
  o.metrics_port = metrics_port;
  ciuic::meta::MdsServer server(o);
  if (ciuic::Status st = server.Start(); !st.ok())
    return Fail(st.message());
  if (!metrics_port_file.empty() && server.metrics_port() != 0) {
    if (ciuic::Status st = WritePortFile(metrics_port_file, server.metrics_port()); !st.ok()) {
      server.Stop();
      return Fail(st.message());
    }
  }
  if (!port_file.empty()) {
    if (ciuic::Status st = WritePortFile(port_file, server.port()); !st.ok()) {
      server.Stop();
      return Fail(st.message());
    }
  }
  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  LOG_INFO("signal {}: stopping", sig);
  server.Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
}
