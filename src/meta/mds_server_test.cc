// MdsServer end to end over real TCP with net::RpcChannel: handshake, a few operations, roles,
// errors, restart on the same data directory.
#include "meta/mds_server.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "meta/meta_test_util.h"
#include "net/http_server.h"
#include "net/msg_types.h"
#include "net/rpc.h"

namespace ciuic::meta::testing {
namespace {

using net::MsgType;
using net::Role;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

class MdsServerTest : public ::testing::Test {
 protected:
  void StartServer(bool in_memory = true) {
    MdsServer::Options o;
    o.in_memory = in_memory;
    o.data_dir = dir_.path() + "/mds";
    o.secret = kSecret;
    o.cluster_uuid = "uuid-1";
    o.metrics_port = metrics_port_;
    server_ = std::make_unique<MdsServer>(o);
    ASSERT_OK(server_->Start());
    ASSERT_NE(server_->port(), 0);
  }
  Result<std::shared_ptr<net::RpcChannel>> Connect(Role role = Role::kClient,
                                                   std::string secret = kSecret) {
    net::ChannelOptions co;
    co.secret = std::move(secret);
    co.role = role;
    return net::RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", server_->port()}, co);
  }

  metrics::Exposition Scrape() {
    auto r = net::HttpGet({"127.0.0.1", server_->metrics_port()}, "/metrics");
    EXPECT_TRUE(r.ok() && r->status == 200) << r.status().ToString();
    auto ex = metrics::ParseExposition(r.ok() ? r->body : "");
    EXPECT_TRUE(ex.ok()) << ex.status().ToString();
    return ex.ok() ? *ex : metrics::Exposition();
  }

  int metrics_port_ = -1;
  TempDir dir_;
  net::EventLoop loop_{1};
  std::unique_ptr<MdsServer> server_;
};

TEST_F(MdsServerTest, NamespaceOperationsOverTcp) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto ch = Connect();
  ASSERT_OK(ch);
  EXPECT_EQ((*ch)->cluster_uuid(), "uuid-1");
  pb::OpenSessionReq os;
  os.set_client_name("t");
  pb::OpenSessionResp session;
  ASSERT_OK((*ch)->CallMsg(MsgType::kOpenSession, os, &session));
  EXPECT_NE(session.session_id(), 0u);

  pb::MkdirReq mk;
  *mk.mutable_parent() = session.root();
  mk.set_name("data");
  mk.set_mode(0755);
  pb::MkdirResp dir;
  ASSERT_OK((*ch)->CallMsg(MsgType::kMkdir, mk, &dir));
  EXPECT_TRUE(S_ISDIR(dir.attr().mode()));
  // Errors travel with their code.
  Status again = (*ch)->CallMsg(MsgType::kMkdir, mk, &dir);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();

  pb::CreateReq cr;
  cr.mutable_ctx()->set_session_id(session.session_id());
  *cr.mutable_parent() = dir.attr().fid();
  cr.set_name("f");
  cr.set_mode(0644);
  cr.set_open(true);
  cr.set_open_flags(O_RDWR);
  pb::CreateResp created;
  ASSERT_OK((*ch)->CallMsg(MsgType::kCreate, cr, &created));
  EXPECT_NE(created.open_id(), 0u);

  pb::ResolvePathReq rp;
  rp.set_path("/data/f");
  pb::ResolvePathResp resolved;
  ASSERT_OK((*ch)->CallMsg(MsgType::kResolvePath, rp, &resolved));
  EXPECT_EQ(F(resolved.attr().fid()), F(created.attr().fid()));

  pb::ReadDirReq rd;
  *rd.mutable_dir() = dir.attr().fid();
  pb::ReadDirResp listing;
  ASSERT_OK((*ch)->CallMsg(MsgType::kReadDir, rd, &listing));
  ASSERT_EQ(listing.entries_size(), 3);
  EXPECT_EQ(listing.entries(2).name(), "f");

  pb::RenewSessionReq rn;
  rn.mutable_ctx()->set_session_id(session.session_id());
  pb::RenewSessionResp renewed;
  ASSERT_OK((*ch)->CallMsg(MsgType::kRenewSession, rn, &renewed));

  pb::GetOstMapResp map;
  ASSERT_OK((*ch)->CallMsg(MsgType::kGetOstMap, pb::GetOstMapReq(), &map));
  EXPECT_EQ(map.osts_size(), 0);
}

TEST_F(MdsServerTest, MetricsShowSessionsOpenFilesStoreAndJobs) {
  metrics_port_ = 0;
  ASSERT_NO_FATAL_FAILURE(StartServer(/*in_memory=*/false));
  ASSERT_NE(server_->metrics_port(), 0);
  net::ChannelOptions co;
  co.secret = kSecret;
  co.job_id = "train-42";
  auto ch = net::RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", server_->port()}, co);
  ASSERT_OK(ch);
  pb::OpenSessionReq os;
  os.set_client_name("t");
  pb::OpenSessionResp session;
  ASSERT_OK((*ch)->CallMsg(MsgType::kOpenSession, os, &session));
  for (const char* name : {"a", "b"}) {
    pb::CreateReq cr;
    cr.mutable_ctx()->set_session_id(session.session_id());
    *cr.mutable_parent() = session.root();
    cr.set_name(name);
    cr.set_mode(0644);
    cr.set_open(true);
    cr.set_open_flags(O_RDWR);
    pb::CreateResp created;
    ASSERT_OK((*ch)->CallMsg(MsgType::kCreate, cr, &created));
  }
  auto ex = Scrape();
  EXPECT_EQ(ex.Sum("ciuic_mds_sessions"), 1);
  EXPECT_EQ(ex.Sum("ciuic_mds_open_files"), 2);
  EXPECT_EQ(ex.Sum("ciuic_mds_writer_queue_depth"), 0);
  EXPECT_GT(ex.Sum("ciuic_mds_store", {{"property", "estimate_num_keys"}}), 0);
  EXPECT_EQ(ex.Sum("ciuic_rpc_requests_total", {{"op", "Create"}}), 2);
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "train-42"}, {"op", "Create"}}), 2);
  EXPECT_EQ(ex.Sum("ciuic_rpc_latency_seconds_count", {{"op", "Create"}}), 2);
  EXPECT_EQ(ex.Sum("ciuic_rpc_connections_open"), 1);

  pb::CloseSessionReq cs;
  cs.mutable_ctx()->set_session_id(session.session_id());
  pb::CloseSessionResp closed;
  ASSERT_OK((*ch)->CallMsg(MsgType::kCloseSession, cs, &closed));
  ex = Scrape();
  EXPECT_EQ(ex.Sum("ciuic_mds_sessions"), 0);
  EXPECT_EQ(ex.Sum("ciuic_mds_open_files"), 0);
}

TEST_F(MdsServerTest, WrongSecretIsRefused) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto ch = Connect(Role::kClient, "not-the-secret-not-the-secret-xx");
  ASSERT_FALSE(ch.ok());
  EXPECT_EQ(ch.status().code(), StatusCode::kPermissionDenied) << ch.status().ToString();
}

TEST_F(MdsServerTest, OssCallsNeedTheOssRole) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  pb::RegisterOssReq r;
  r.set_oss_addr("127.0.0.1:9");
  r.set_cluster_uuid("uuid-1");
  auto* o = r.add_osts();
  o->set_index(0);
  o->set_capacity(1ull << 40);
  o->set_free(1ull << 39);
  pb::RegisterOssResp resp;
  auto client = Connect(Role::kClient);
  ASSERT_OK(client);
  EXPECT_EQ((*client)->CallMsg(MsgType::kRegisterOss, r, &resp).code(),
            StatusCode::kPermissionDenied);
  auto oss = Connect(Role::kOss);
  ASSERT_OK(oss);
  ASSERT_OK((*oss)->CallMsg(MsgType::kRegisterOss, r, &resp));
  EXPECT_EQ(resp.heartbeat_ms(), 1000u);
  pb::HeartbeatReq hb;
  hb.set_oss_addr("127.0.0.1:9");
  pb::HeartbeatResp tasks;
  ASSERT_OK((*oss)->CallMsg(MsgType::kHeartbeat, hb, &tasks));
  pb::MkdirReq mk;
  mk.set_name("x");
  pb::MkdirResp m;
  EXPECT_EQ((*oss)->CallMsg(MsgType::kMkdir, mk, &m).code(), StatusCode::kPermissionDenied);
}

TEST_F(MdsServerTest, MalformedBodyIsAnErrorNotACrash) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto ch = Connect();
  ASSERT_OK(ch);
  // A LookupReq body sent as a Mkdir: parses or not, but must be answered.
  pb::Timespec junk;
  junk.set_sec(-1);
  junk.set_nsec(0xffffffff);
  pb::MkdirResp m;
  Status st = (*ch)->CallMsg(MsgType::kMkdir, junk, &m);
  EXPECT_FALSE(st.ok());
  pb::GetAttrResp g;
  pb::GetAttrReq q;
  q.mutable_fid()->set_seq(1);
  ASSERT_OK((*ch)->CallMsg(MsgType::kGetAttr, q, &g));
}

TEST_F(MdsServerTest, RestartOnTheSameDataDirKeepsTheNamespace) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*in_memory=*/false));
  {
    auto ch = Connect();
    ASSERT_OK(ch);
    pb::MkdirReq mk;
    mk.mutable_parent()->set_seq(1);
    mk.set_name("persist");
    mk.set_mode(0755);
    pb::MkdirResp m;
    ASSERT_OK((*ch)->CallMsg(MsgType::kMkdir, mk, &m));
  }
  // A second server on the same directory is refused while the first runs.
  MdsServer::Options o;
  o.data_dir = dir_.path() + "/mds";
  o.secret = kSecret;
  o.cluster_uuid = "uuid-1";
  MdsServer second(o);
  EXPECT_EQ(second.Start().code(), StatusCode::kBusy);
  server_->Stop();
  server_->Stop();  // idempotent
  ASSERT_NO_FATAL_FAILURE(StartServer(/*in_memory=*/false));
  auto ch = Connect();
  ASSERT_OK(ch);
  pb::LookupReq l;
  l.mutable_parent()->set_seq(1);
  l.set_name("persist");
  pb::LookupResp found;
  ASSERT_OK((*ch)->CallMsg(MsgType::kLookup, l, &found));
  EXPECT_TRUE(S_ISDIR(found.attr().mode()));
}

}  // namespace
}  // namespace ciuic::meta::testing
