#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "net/http_server.h"
#include "net/rpc.h"
#include "net/test_util.h"

namespace ciuic::net {
namespace {

using testing::ClientOptions;
using testing::ServerOptions;

struct MetricsServer {
  explicit MetricsServer(size_t max_jobs = 64) {
    RpcServer::Options o = ServerOptions();
    o.metrics = &registry;
    o.max_jobs = max_jobs;
    server = std::make_unique<RpcServer>(o);
    // Write: echoes nothing; Read: answers 1000 bytes; GetAttr: always fails.
    server->Register(MsgType::kWrite, [](ServerCall c) { c.Reply(pb::WriteResp()); });
    server->Register(MsgType::kRead, [this](ServerCall c) {
      c.Reply(pb::ReadResp(), {ConstSpan{data.data(), data.size()}});
    });
    server->Register(MsgType::kGetAttr,
                     [](ServerCall c) { c.ReplyError(Status::NotFound("no such file")); });
    server->Register(MsgType::kGetOstMap, [](ServerCall c) { c.Reply(pb::GetOstMapResp()); },
                     {Role::kOss});
    EXPECT_TRUE(server->Start().ok());
  }
  std::shared_ptr<RpcChannel> Connect(const std::string& job) {
    ChannelOptions co = ClientOptions();
    co.job_id = job;
    auto ch = RpcChannel::Connect(&loop, HostPort{"127.0.0.1", server->port()}, co);
    EXPECT_TRUE(ch.ok()) << ch.status().ToString();
    return ch.ok() ? *ch : nullptr;
  }
  metrics::Exposition Scrape() {
    auto ex = metrics::ParseExposition(registry.Render());
    EXPECT_TRUE(ex.ok()) << ex.status().ToString();
    return ex.ok() ? *ex : metrics::Exposition();
  }

  metrics::Registry registry;
  std::vector<uint8_t> data = std::vector<uint8_t>(1000, 7);
  std::unique_ptr<RpcServer> server;
  EventLoop loop;
};

TEST(RpcMetricsTest, CountsRequestsBytesErrorsAndLatencyPerMessageType) {
  MetricsServer s;
  auto ch = s.Connect("job-a");
  std::vector<uint8_t> payload(4096, 1);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(ch->Call(MsgType::kWrite, pb::WriteReq(), {{payload.data(), payload.size()}}).ok());
  ASSERT_TRUE(ch->Call(MsgType::kRead, pb::ReadReq()).ok());
  EXPECT_EQ(ch->Call(MsgType::kGetAttr, pb::GetAttrReq()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ch->Call(MsgType::kGetOstMap, pb::GetOstMapReq()).status().code(),
            StatusCode::kPermissionDenied);
  auto ex = s.Scrape();
  EXPECT_EQ(ex.Sum("ciuic_rpc_requests_total", {{"op", "Write"}}), 3);
  EXPECT_EQ(ex.Sum("ciuic_rpc_requests_total", {{"op", "Read"}}), 1);
  EXPECT_GE(ex.Sum("ciuic_rpc_request_bytes_total", {{"op", "Write"}}), 3 * 4096);
  EXPECT_GE(ex.Sum("ciuic_rpc_reply_bytes_total", {{"op", "Read"}}), 1000);
  EXPECT_EQ(ex.Sum("ciuic_rpc_errors_total", {{"op", "GetAttr"}, {"code", "NotFound"}}), 1);
  EXPECT_EQ(ex.Sum("ciuic_rpc_errors_total", {{"op", "GetOstMap"}, {"code", "PermissionDenied"}}),
            1);
  EXPECT_EQ(ex.Sum("ciuic_rpc_latency_seconds_count", {{"op", "Write"}}), 3);
  EXPECT_GT(ex.Sum("ciuic_rpc_latency_seconds_sum", {{"op", "Write"}}), 0);
  EXPECT_EQ(ex.Sum("ciuic_rpc_connections_open"), 1);
  EXPECT_EQ(ex.Sum("ciuic_rpc_inflight_requests"), 0);
  EXPECT_EQ(ex.types.at("ciuic_rpc_latency_seconds"), "histogram");
}

TEST(RpcMetricsTest, AccountsOpsAndDataBytesPerJob) {
  MetricsServer s;
  auto a = s.Connect("job-a");
  auto b = s.Connect("");  // an old client, or none set: job=""
  std::vector<uint8_t> payload(5000, 1);
  ASSERT_TRUE(a->Call(MsgType::kWrite, pb::WriteReq(), {{payload.data(), payload.size()}}).ok());
  ASSERT_TRUE(a->Call(MsgType::kRead, pb::ReadReq()).ok());
  ASSERT_TRUE(a->Call(MsgType::kRead, pb::ReadReq()).ok());
  ASSERT_TRUE(b->Call(MsgType::kRead, pb::ReadReq()).ok());
  auto ex = s.Scrape();
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "job-a"}, {"op", "Write"}}), 1);
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "job-a"}, {"op", "Read"}}), 2);
  EXPECT_EQ(ex.Sum("ciuic_job_write_bytes_total", {{"job", "job-a"}}), 5000);
  EXPECT_EQ(ex.Sum("ciuic_job_read_bytes_total", {{"job", "job-a"}}), 2000);
  EXPECT_EQ(ex.Sum("ciuic_job_read_bytes_total", {{"job", ""}}), 1000);
}

TEST(RpcMetricsTest, JobsBeyondTheTableCountAsOther) {
  MetricsServer s(/*max_jobs=*/2);
  std::vector<std::shared_ptr<RpcChannel>> chans;
  for (std::string job : {"j1", "j2", "j3", "j4", "j1"}) {
    chans.push_back(s.Connect(job));
    ASSERT_TRUE(chans.back()->Call(MsgType::kRead, pb::ReadReq()).ok());
  }
  auto ex = s.Scrape();
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "j1"}}), 2);
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "j2"}}), 1);
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "other"}}), 2);
  EXPECT_EQ(ex.Sum("ciuic_job_ops_total", {{"job", "j3"}}), 0);
}

TEST(RpcMetricsTest, JobIdComesFromTheEnvironmentInOrder) {
  ::unsetenv("CIUIC_JOBID");
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(JobIdFromEnv(), "");
  ::setenv("TORCHELASTIC_RUN_ID", "te", 1);
  EXPECT_EQ(JobIdFromEnv(), "te");
  ::setenv("SLURM_JOB_ID", "1234", 1);
  EXPECT_EQ(JobIdFromEnv(), "1234");
  ::setenv("CIUIC_JOBID", "mine", 1);
  EXPECT_EQ(JobIdFromEnv(), "mine");
  ::setenv("CIUIC_JOBID", "", 1);
  EXPECT_EQ(JobIdFromEnv(), "1234");
  ::unsetenv("CIUIC_JOBID");
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("TORCHELASTIC_RUN_ID");
}

TEST(RpcMetricsTest, ScrapedOverHttpWhileRequestsRun) {
  MetricsServer s;
  HttpServer http({});
  http.Handle("/metrics", kPrometheusContentType, [&] { return s.registry.Render(); });
  ASSERT_TRUE(http.Start().ok());
  auto ch = s.Connect("job \"quoted\"\nnewline");
  std::atomic<bool> stop{false};
  std::thread load([&] {
    while (!stop.load())
      EXPECT_TRUE(ch->Call(MsgType::kRead, pb::ReadReq()).ok());
  });
  for (int i = 0; i < 20; ++i) {
    auto r = HttpGet({"127.0.0.1", http.port()}, "/metrics");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->status, 200);
    auto ex = metrics::ParseExposition(r->body);
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  }
  stop = true;
  load.join();
  auto ex = s.Scrape();
  EXPECT_GT(ex.Sum("ciuic_job_ops_total", {{"job", "job \"quoted\"\nnewline"}}), 0);
}

}  // namespace
}  // namespace ciuic::net
