#include "testing/mini_cluster.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include "ciuic.pb.h"
#include "common/config.h"
#include "common/metrics.h"
#include "common/time_util.h"
#include "io/mem_io_engine.h"
#include "meta/mds_server.h"
#include "meta/power_loss_fs.h"
#include "net/rpc.h"
#include "oss/oss_server.h"

namespace ciuic::testing {

MiniCluster::MiniCluster(MiniClusterOptions options) : options_(std::move(options)) {}

uint64_t MiniCluster::OstReadBytes() {
  uint64_t total = 0;
  for (auto& o : oss_) {
    if (!o)
      continue;
    const std::string text = o->metrics()->Render();
    for (size_t at = 0;
         (at = text.find("\nciuic_ost_read_bytes_total{", at)) != std::string::npos;) {
      const size_t sp = text.find("} ", at);
      total += std::stoull(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
      at = sp;
    }
  }
  return total;
}

Result<std::unique_ptr<MiniCluster>> MiniCluster::Start(MiniClusterOptions options) {
  if (options.num_oss < 1 || options.osts_per_oss < 1) {
    return Status::InvalidArgument("a MiniCluster needs at least one OSS with one OST");
  }
  if (options.power_loss && options.mds_in_memory)
    return Status::InvalidArgument("power-loss mode needs the MDS on RocksDB, not in memory");
  std::unique_ptr<MiniCluster> c(new MiniCluster(std::move(options)));
  CIUIC_RETURN_IF_ERROR(c->Init());
  return c;
}

Status MiniCluster::Init() {
  char tmpl[] = "/tmp/ciuic-mini-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return Status::FromErrno(errno, "mkdtemp");
  dir_ = tmpl;
  secret_ = RandomBytes(32);
  cluster_uuid_ = NewUuid();
  cold_tier_url_ =
      options_.cold_tier_url.empty() ? "mem://" + cluster_uuid_ : options_.cold_tier_url;
  oss_ports_.assign(static_cast<size_t>(options_.num_oss), 0);
  oss_.resize(static_cast<size_t>(options_.num_oss));
  if (options_.power_loss) {
    mds_fs_ = std::make_shared<meta::PowerLossFs>(rocksdb::FileSystem::Default());
    mds_env_ = rocksdb::NewCompositeEnv(mds_fs_);
    for (int i = 0; i < options_.num_oss; ++i)
      engines_.push_back(std::make_unique<io::MemIoEngine>());
    // Epochs of simulated machines: distinct per server and per power cycle.
    uint64_t base = 0;
    std::memcpy(&base, RandomBytes(sizeof(base)).data(), sizeof(base));
    base |= 1;
    mds_epoch_ = base;
    for (int i = 0; i < options_.num_oss; ++i)
      oss_epochs_.push_back(base + (uint64_t{static_cast<uint32_t>(i) + 1} << 32));
  }
  for (int i = 0; i < options_.num_oss; ++i) {
    for (int k = 0; k < options_.osts_per_oss; ++k) {
      std::error_code ec;
      std::filesystem::create_directories(OstDir(i * options_.osts_per_oss + k), ec);
      if (ec)
        return Status::IoError(fmt::format("mkdir {}: {}", OstDir(0), ec.message()));
    }
  }
  CIUIC_RETURN_IF_ERROR(StartMds());
  ClusterFile cf;
  cf.cluster_uuid = cluster_uuid_;
  cf.mds = HostPort{"127.0.0.1", mds_port_};
  cf.secret_hex = HexEncode(secret_);
  cf.key_id = 1;
  cluster_file_ = dir_ + "/cluster.conf";
  CIUIC_RETURN_IF_ERROR(cf.Save(cluster_file_));
  for (int i = 0; i < options_.num_oss; ++i)
    CIUIC_RETURN_IF_ERROR(StartOss(i));
  return WaitForOsts(num_osts(), 20000);
}

MiniCluster::~MiniCluster() {
  for (auto& o : oss_) {
    if (o)
      o->Stop();
    o.reset();
  }
  if (mds_)
    mds_->Stop();
  mds_.reset();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // best effort: a leftover temp dir is harmless
  }
}

std::string MiniCluster::OstDir(uint32_t ost) const {
  return fmt::format("{}/oss{}/ost{}", dir_, ost / static_cast<uint32_t>(options_.osts_per_oss),
                     ost);
}

Status MiniCluster::StartMds() {
  meta::MdsServer::Options o;
  o.data_dir = dir_ + "/mds";
  o.in_memory = options_.mds_in_memory;
  o.host = "127.0.0.1";
  o.port = mds_port_;
  o.secret = secret_;
  o.key_id = 1;
  o.cluster_uuid = cluster_uuid_;
  o.lease_ms = options_.lease_ms;
  o.heartbeat_ms = options_.heartbeat_ms;
  o.env = mds_env_.get();
  o.durability_epoch = mds_epoch_;
  o.cap_ttl_ms = options_.cap_ttl_ms;
  o.default_replicas = options_.default_replicas;
  auto mds = std::make_unique<meta::MdsServer>(o);
  Status st = mds->Start();
  if (!st.ok())
    return st.WithContext("starting the MDS");
  mds_port_ = mds->port();
  mds_ = std::move(mds);
  return Status::OK();
}

Status MiniCluster::StartOss(int i) {
  oss::OssServer::Options o;
  for (int k = 0; k < options_.osts_per_oss; ++k) {
    const uint32_t ost = static_cast<uint32_t>(i * options_.osts_per_oss + k);
    o.osts.emplace_back(ost, OstDir(ost));
  }
  o.mds = HostPort{"127.0.0.1", mds_port_};
  o.host = "127.0.0.1";
  o.port = oss_ports_[static_cast<size_t>(i)];
  o.secret = secret_;
  o.key_id = 1;
  o.cluster_uuid = cluster_uuid_;
  o.io_engine = options_.io_engine;
  o.heartbeat_ms = options_.heartbeat_ms;
  o.cold_tier_url = cold_tier_url_;
  o.hsm_fill_chunk = options_.hsm_fill_chunk;
  o.resync_bytes_per_s = options_.resync_bytes_per_s;
  o.scrub_bytes_per_s = options_.scrub_bytes_per_s;
  o.scrub_pause_ms = options_.scrub_pause_ms;
  if (static_cast<size_t>(i) < options_.host_labels.size())
    o.host_label = options_.host_labels[static_cast<size_t>(i)];
  if (!engines_.empty()) {
    o.test_engine = engines_[static_cast<size_t>(i)].get();
    o.durability_epoch = oss_epochs_[static_cast<size_t>(i)];
  }
  auto server = std::make_unique<oss::OssServer>(o);
  Status st = server->Start();
  if (!st.ok())
    return st.WithContext(fmt::format("starting OSS {}", i));
  oss_ports_[static_cast<size_t>(i)] = server->port();
  oss_[static_cast<size_t>(i)] = std::move(server);
  return Status::OK();
}

namespace {

// Runs one admin request on the MDS over a fresh admin connection.
Status AdminCall(const std::string& secret,
                 uint16_t port,
                 net::MsgType type,
                 const google::protobuf::MessageLite& req,
                 google::protobuf::MessageLite* resp) {
  net::EventLoop loop(1);
  net::ChannelOptions co;
  co.secret = secret;
  co.key_id = 1;
  co.role = net::Role::kAdmin;
  CIUIC_ASSIGN_OR_RETURN(auto ch, net::RpcChannel::Connect(&loop, HostPort{"127.0.0.1", port}, co));
  Status st = ch->CallMsg(type, req, resp);
  ch->Close();
  loop.Stop();
  return st;
}

}  // namespace

Result<std::string> MiniCluster::AddClientKey(const pb::ClientKeyRecord& rules,
                                              pb::ClientKeyRecord* record) {
  pb::AddClientReq req;
  *req.mutable_rules() = rules;
  pb::AddClientResp resp;
  CIUIC_RETURN_IF_ERROR(AdminCall(secret_, mds_port_, net::MsgType::kAddClient, req, &resp));
  ClusterFile cf;
  cf.cluster_uuid = cluster_uuid_;
  cf.mds = HostPort{"127.0.0.1", mds_port_};
  cf.secret_hex = HexEncode(resp.key());
  cf.key_id = resp.record().key_id();
  const std::string path = fmt::format("{}/client-{}.conf", dir_, rules.name());
  CIUIC_RETURN_IF_ERROR(cf.Save(path));
  if (record != nullptr)
    *record = resp.record();
  return path;
}

Status MiniCluster::RevokeClientKey(const std::string& name) {
  pb::RevokeClientReq req;
  req.set_name(name);
  pb::RevokeClientResp resp;
  return AdminCall(secret_, mds_port_, net::MsgType::kRevokeClient, req, &resp);
}

Result<std::unique_ptr<Client>> MiniCluster::NewClient(uint32_t uid, uint32_t gid) {
  ClientOptions o;
  o.uid = uid;
  o.gid = gid;
  return NewClient(std::move(o));
}

Result<std::unique_ptr<Client>> MiniCluster::NewClient(ClientOptions options) {
  if (options.cluster_file.empty())
    options.cluster_file = cluster_file_;
  return Client::Connect(options);
}

uint64_t MiniCluster::SumOverOss(uint64_t (oss::OssServer::*counter)() const) const {
  uint64_t n = 0;
  for (const auto& o : oss_) {
    if (o)
      n += ((*o).*counter)();
  }
  return n;
}

uint64_t MiniCluster::shm_reads() const {
  return SumOverOss(&oss::OssServer::shm_reads);
}

uint64_t MiniCluster::shm_writes() const {
  return SumOverOss(&oss::OssServer::shm_writes);
}

uint64_t MiniCluster::read_batches() const {
  return SumOverOss(&oss::OssServer::read_batches);
}

Status MiniCluster::StopOss(int i) {
  if (i < 0 || i >= options_.num_oss)
    return Status::InvalidArgument("no such OSS");
  auto& o = oss_[static_cast<size_t>(i)];
  if (o)
    o->Stop();
  o.reset();
  return Status::OK();
}

Status MiniCluster::RestartOss(int i) {
  CIUIC_RETURN_IF_ERROR(StopOss(i));
  return StartOss(i);
}

Status MiniCluster::StopMds() {
  if (mds_)
    mds_->Stop();
  mds_.reset();
  return Status::OK();
}

Status MiniCluster::RestartMds() {
  CIUIC_RETURN_IF_ERROR(StopMds());
  return StartMds();
}

Status MiniCluster::CheckPowerLossMode() const {
  if (!options_.power_loss)
    return Status::InvalidArgument("the MiniCluster was not started with power_loss = true");
  return Status::OK();
}

Status MiniCluster::CutPower(uint64_t torn_seed) {
  CIUIC_RETURN_IF_ERROR(CheckPowerLossMode());
  // One instant for every disk: nothing a server writes after this persists.
  mds_fs_->SetActive(false);
  for (auto& e : engines_)
    e->SetPowered(false);
  for (int i = 0; i < options_.num_oss; ++i)
    CIUIC_RETURN_IF_ERROR(StopOss(i));
  CIUIC_RETURN_IF_ERROR(StopMds());
  auto dropped = mds_fs_->DropUnsyncedData(torn_seed);
  if (!dropped.ok())
    return dropped.status().WithContext("dropping the MDS's unsynced bytes");
  for (auto& e : engines_)
    e->SimulatePowerLoss();
  ++mds_epoch_;
  for (auto& epoch : oss_epochs_)
    ++epoch;
  return Status::OK();
}

Status MiniCluster::RestorePower() {
  CIUIC_RETURN_IF_ERROR(CheckPowerLossMode());
  mds_fs_->SetActive(true);
  for (auto& e : engines_)
    e->SetPowered(true);
  CIUIC_RETURN_IF_ERROR(StartMds());
  for (int i = 0; i < options_.num_oss; ++i)
    CIUIC_RETURN_IF_ERROR(StartOss(i));
  return WaitForOsts(num_osts(), 20000);
}

Status MiniCluster::PowerCycle(uint64_t torn_seed) {
  CIUIC_RETURN_IF_ERROR(CutPower(torn_seed));
  return RestorePower();
}

Status MiniCluster::PowerCycleOss(int i) {
  CIUIC_RETURN_IF_ERROR(CheckPowerLossMode());
  if (i < 0 || i >= options_.num_oss)
    return Status::InvalidArgument("no such OSS");
  io::MemIoEngine* e = engines_[static_cast<size_t>(i)].get();
  e->SetPowered(false);
  CIUIC_RETURN_IF_ERROR(StopOss(i));
  e->SimulatePowerLoss();
  ++oss_epochs_[static_cast<size_t>(i)];
  e->SetPowered(true);
  return StartOss(i);
}

Status MiniCluster::PowerCycleMds(uint64_t torn_seed) {
  CIUIC_RETURN_IF_ERROR(CheckPowerLossMode());
  mds_fs_->SetActive(false);
  CIUIC_RETURN_IF_ERROR(StopMds());
  auto dropped = mds_fs_->DropUnsyncedData(torn_seed);
  ++mds_epoch_;
  mds_fs_->SetActive(true);
  if (!dropped.ok())
    return dropped.status().WithContext("dropping the MDS's unsynced bytes");
  return StartMds();
}

uint64_t MiniCluster::UnsyncedMdsBytes() const {
  return mds_fs_ ? mds_fs_->UnsyncedBytes() : 0;
}

Status MiniCluster::WaitForOsts(int n, int timeout_ms) {
  const int64_t deadline = MonoMillis() + timeout_ms;
  net::EventLoop loop(1);
  net::ChannelOptions co;
  co.secret = secret_;
  co.key_id = 1;
  co.connect_timeout_ms = 2000;
  std::shared_ptr<net::RpcChannel> ch;
  int up = 0;
  Status last;
  while (MonoMillis() < deadline) {
    if (!ch || !ch->connected()) {
      auto r = net::RpcChannel::Connect(&loop, HostPort{"127.0.0.1", mds_port_}, co);
      if (r.ok()) {
        ch = *r;
      } else {
        last = r.status();
      }
    }
    if (ch && ch->connected()) {
      pb::GetOstMapReq req;
      pb::GetOstMapResp resp;
      last = ch->CallMsg(net::MsgType::kGetOstMap, req, &resp, 2000);
      if (last.ok()) {
        up = 0;
        for (const auto& o : resp.osts())
          up += o.state() == 0 ? 1 : 0;
        if (up >= n)
          return Status::OK();
      }
    }
    // Polling the MDS until the condition holds (bounded by the deadline), not a fixed sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::TimedOut(fmt::format("MDS sees {} of {} OSTs up after {} ms (last: {})", up, n,
                                      timeout_ms, last.ToString()));
}

}  // namespace ciuic::testing
