// OssServer end to end over real TCP: a client channel for the data path and a small MDS
// stand-in (a real RpcServer) that takes registrations and heartbeats and hands out tasks.
#include "oss/oss_server.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ciuic.pb.h"
#include "common/crc32c.h"
#include "common/metrics.h"
#include "net/http_server.h"
#include "net/pb_convert.h"
#include "net/rpc.h"
#include "net/shm.h"
#include "oss/shm_registry.h"

namespace ciuic::oss {
namespace {

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";
constexpr char kUuid[] = "8c4e1f60-2d7e-4c5e-9a3b-1f2e3d4c5b6a";

bool WaitFor(const std::function<bool()>& pred,
             std::chrono::seconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v)
    b = static_cast<uint8_t>(rng());
  return v;
}

// What the MDS side of registration needs: records registrations, heartbeats and acknowledged
// tasks, and hands out queued tasks.
class FakeMds {
 public:
  explicit FakeMds(uint16_t port = 0) {
    net::RpcServer::Options o;
    o.port = port;
    o.secret = kSecret;
    o.cluster_uuid = kUuid;
    o.name = "fake-mds";
    server_ = std::make_unique<net::RpcServer>(o);
    server_->Register(net::MsgType::kRegisterOss,
                      [this](net::ServerCall c) {
                        pb::RegisterOssReq req;
                        ASSERT_TRUE(c.ParseBody(&req).ok());
                        std::lock_guard<std::mutex> lock(mu_);
                        registrations_.push_back(req);
                        pb::RegisterOssResp resp;
                        resp.set_heartbeat_ms(20);
                        c.Reply(resp);
                      },
                      {net::Role::kOss});
    server_->Register(net::MsgType::kHeartbeat,
                      [this](net::ServerCall c) {
                        pb::HeartbeatReq req;
                        ASSERT_TRUE(c.ParseBody(&req).ok());
                        pb::HeartbeatResp resp;
                        std::lock_guard<std::mutex> lock(mu_);
                        ++heartbeats_;
                        last_heartbeat_ = req;
                        for (uint64_t id : req.done_task_ids())
                          done_.insert(id);
                        for (const auto& t : tasks_) {
                          if (done_.count(t.id()) == 0)
                            *resp.add_tasks() = t;
                        }
                        c.Reply(resp);
                      },
                      {net::Role::kOss});
  }
  Status Start() { return server_->Start(); }
  uint16_t port() const { return server_->port(); }
  void AddTask(const pb::OstTask& t) {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(t);
  }
  bool Done(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return done_.count(id) != 0;
  }
  size_t registrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_.size();
  }
  pb::RegisterOssReq last_registration() {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_.back();
  }
  uint64_t heartbeats() {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_;
  }

 private:
  std::unique_ptr<net::RpcServer> server_;
  std::mutex mu_;
  std::vector<pb::RegisterOssReq> registrations_;
  pb::HeartbeatReq last_heartbeat_;
  uint64_t heartbeats_ = 0;
  std::vector<pb::OstTask> tasks_;
  std::set<uint64_t> done_;
};

class OssServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ciuic-oss-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    mds_ = std::make_unique<FakeMds>();
    ASSERT_TRUE(mds_->Start().ok());
    mds_port_ = mds_->port();
  }
  void TearDown() override {
    channel_.reset();
    server_.reset();
    mds_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  OssServer::Options ServerOptions() {
    OssServer::Options o;
    o.osts = {{0, dir_ + "/ost0"}, {5, dir_ + "/ost5"}};
    o.mds = HostPort{"127.0.0.1", mds_port_};
    o.secret = kSecret;
    o.cluster_uuid = kUuid;
    o.heartbeat_ms = 20;
    return o;
  }
  void StartServer() { StartServer(ServerOptions()); }
  void StartServer(OssServer::Options options) {
    server_ = std::make_unique<OssServer>(std::move(options));
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    net::ChannelOptions co;
    co.secret = kSecret;
    auto ch = net::RpcChannel::Connect(&loop_, HostPort{"127.0.0.1", server_->port()}, co);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    channel_ = *ch;
  }
  Result<uint64_t> Write(uint32_t ost,
                         const ObjectId& id,
                         uint64_t off,
                         const std::vector<uint8_t>& data,
                         bool sync = false) {
    pb::WriteReq req;
    req.set_ost(ost);
    net::ToPb(id, req.mutable_obj());
    req.set_offset(off);
    req.set_sync(sync);
    auto r = channel_->Call(net::MsgType::kWrite, req, {net::ConstSpan{data.data(), data.size()}});
    if (!r.ok())
      return r.status();
    pb::WriteResp resp;
    EXPECT_TRUE(net::Parse(r->body, &resp, "WriteResp").ok());
    return resp.object_length();
  }
  // Reads and verifies every block against its two slot checksums, as a client would.
  Result<std::vector<uint8_t>> Read(
      uint32_t ost, const ObjectId& id, uint64_t off, uint64_t len, pb::ReadResp* out = nullptr) {
    pb::ReadReq req;
    req.set_ost(ost);
    net::ToPb(id, req.mutable_obj());
    req.set_offset(off);
    req.set_length(len);
    auto r = channel_->Call(net::MsgType::kRead, req);
    if (!r.ok())
      return r.status();
    pb::ReadResp resp;
    EXPECT_TRUE(net::Parse(r->body, &resp, "ReadResp").ok());
    EXPECT_FALSE(r->data_in_dest);
    const uint8_t* data = r->data.data();
    size_t blocks = r->data_len / 4096;
    EXPECT_EQ(r->data_len % 4096, 0u);
    EXPECT_EQ(static_cast<size_t>(resp.block_crcs_size()), blocks * 2);
    for (size_t b = 0; b < blocks && static_cast<size_t>(resp.block_crcs_size()) == blocks * 2;
         ++b) {
      uint32_t c = Crc32c(data + b * 4096, 4096);
      EXPECT_TRUE(c == resp.block_crcs(2 * b) || c == resp.block_crcs(2 * b + 1)) << "block " << b;
    }
    if (out != nullptr)
      *out = resp;
    size_t skip = off - resp.aligned_offset();
    return std::vector<uint8_t>(data + skip, data + skip + len);
  }
  template <typename Req, typename Resp>
  Status Call(net::MsgType type, const Req& req, Resp* resp) {
    return channel_->CallMsg(type, req, resp);
  }

  std::string dir_;
  std::unique_ptr<FakeMds> mds_;
  uint16_t mds_port_ = 0;
  net::EventLoop loop_{1};
  std::unique_ptr<OssServer> server_;
  std::shared_ptr<net::RpcChannel> channel_;
};

ObjectId Obj(uint64_t seq) {
  return ObjectId{Fid{seq, 0, 1}, 2, 3};
}

// Descriptors of this process open on files under `prefix` (sockets of the heartbeat and test
// connections, which come and go with timing, are not counted).
size_t CountOpenFdsUnder(const std::string& prefix) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind(prefix, 0) == 0)
      ++n;
  }
  return n;
}

// Objects written without a sync and read back over the wire: the server keeps at most its
// per-OST cap of objects (two fds each) open, plus the few it is syncing to close them.
TEST_F(OssServerTest, UnsyncedObjectsDoNotPileUpOpenFiles) {
  OssServer::Options o = ServerOptions();
  o.max_open_objects_per_ost = 8;
  StartServer(std::move(o));
  const std::string ost_dir = dir_ + "/ost5/";
  const size_t limit = CountOpenFdsUnder(ost_dir) + 2 * 8 + 4;
  size_t peak = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    auto len = Write(5, Obj(100 + i), 0, Bytes(300, static_cast<uint32_t>(i)));
    ASSERT_TRUE(len.ok()) << len.status().ToString();
    peak = std::max(peak, CountOpenFdsUnder(ost_dir));
  }
  for (uint64_t i = 0; i < 200; ++i) {
    auto got = Read(5, Obj(100 + i), 0, 300);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(*got, Bytes(300, static_cast<uint32_t>(i))) << i;
    peak = std::max(peak, CountOpenFdsUnder(ost_dir));
  }
  EXPECT_LE(peak, limit);
  EXPECT_GE(peak, 8u);  // it did keep objects open (the count sees them)
}

TEST_F(OssServerTest, WriteReadStatSyncOverTheWire) {
  StartServer();
  auto a = Bytes(1 << 20, 1);
  auto len = Write(5, Obj(1), 0, a);
  ASSERT_TRUE(len.ok()) << len.status().ToString();
  EXPECT_EQ(*len, a.size());
  auto b = Bytes(5000, 2);
  len = Write(5, Obj(1), 1000, b, /*sync=*/true);
  ASSERT_TRUE(len.ok());
  std::memcpy(a.data() + 1000, b.data(), b.size());
  pb::ReadResp resp;
  auto got = Read(5, Obj(1), 0, a.size(), &resp);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, a);
  EXPECT_TRUE(resp.exists());
  EXPECT_EQ(resp.object_length(), a.size());
  got = Read(5, Obj(1), 4000, 300);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::vector<uint8_t>(a.begin() + 4000, a.begin() + 4300));

  pb::ObjStatReq sreq;
  sreq.set_ost(5);
  net::ToPb(Obj(1), sreq.mutable_obj());
  pb::ObjStatResp sresp;
  ASSERT_TRUE(Call(net::MsgType::kObjStat, sreq, &sresp).ok());
  EXPECT_TRUE(sresp.exists());
  EXPECT_EQ(sresp.length(), a.size());

  pb::SyncReq yreq;
  yreq.set_ost(5);
  net::ToPb(Obj(1), yreq.add_objs());
  pb::SyncResp yresp;
  EXPECT_TRUE(Call(net::MsgType::kSync, yreq, &yresp).ok());

  // Never-written objects read as zeros.
  got = Read(0, Obj(2), 0, 8192, &resp);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(resp.exists());
  EXPECT_EQ(*got, std::vector<uint8_t>(8192, 0));

  pb::OstStatfsReq freq;
  freq.set_ost(0);
  pb::OstStatfsResp fresp;
  ASSERT_TRUE(Call(net::MsgType::kOstStatfs, freq, &fresp).ok());
  EXPECT_EQ(fresp.info().index(), 0u);
  EXPECT_GT(fresp.info().capacity(), 0u);
}

TEST_F(OssServerTest, MetricsCountPerOstOpsBytesAndSpaceOverHttp) {
  OssServer::Options o = ServerOptions();
  o.metrics_port = 0;
  StartServer(std::move(o));
  ASSERT_NE(server_->metrics_port(), 0);
  ASSERT_TRUE(Write(5, Obj(1), 0, Bytes(10000, 1)).ok());
  ASSERT_TRUE(Write(5, Obj(2), 0, Bytes(5000, 2)).ok());
  ASSERT_TRUE(Read(5, Obj(1), 100, 8000).ok());
  ASSERT_TRUE(Read(5, Obj(1), 9000, 4096).ok());         // 1000 bytes before the end
  EXPECT_FALSE(Write(7, Obj(1), 0, Bytes(10, 3)).ok());  // no such OST
  auto r = net::HttpGet({"127.0.0.1", server_->metrics_port()}, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->status, 200);
  auto ex = metrics::ParseExposition(r->body);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->Sum("ciuic_ost_write_bytes_total", {{"ost", "5"}}), 15000);
  EXPECT_EQ(ex->Sum("ciuic_ost_read_bytes_total", {{"ost", "5"}}), 9000);
  EXPECT_EQ(ex->Sum("ciuic_ost_ops_total", {{"ost", "5"}, {"op", "write"}}), 2);
  EXPECT_EQ(ex->Sum("ciuic_ost_ops_total", {{"ost", "5"}, {"op", "read"}}), 2);
  EXPECT_EQ(ex->Sum("ciuic_ost_ops_total", {{"ost", "0"}}), 0);
  EXPECT_EQ(ex->Sum("ciuic_ost_errors_total"), 0);
  EXPECT_EQ(ex->Sum("ciuic_rpc_errors_total", {{"op", "Write"}, {"code", "NotFound"}}), 1);
  EXPECT_EQ(ex->Sum("ciuic_rpc_requests_total", {{"op", "Write"}}), 3);
  EXPECT_GT(ex->Sum("ciuic_ost_capacity_bytes", {{"ost", "0"}}), 0);
  EXPECT_GT(ex->Sum("ciuic_ost_capacity_bytes", {{"ost", "5"}}), 0);
  EXPECT_EQ(ex->Sum("ciuic_oss_io_queue_depth"), 0);
  EXPECT_EQ(ex->Sum("ciuic_oss_inflight_bytes"), 0);
  // The test channel sent no job id.
  EXPECT_EQ(ex->Sum("ciuic_job_write_bytes_total", {{"job", ""}}), 15000);
  // Whole 4 KiB blocks go out (the client checks their CRCs): at least the bytes asked.
  EXPECT_GE(ex->Sum("ciuic_job_read_bytes_total", {{"job", ""}}), 9000);
}

TEST_F(OssServerTest, PunchDestroyAndUnknownOst) {
  StartServer();
  auto a = Bytes(20000, 3);
  ASSERT_TRUE(Write(0, Obj(3), 0, a).ok());
  pb::PunchReq preq;
  preq.set_ost(0);
  net::ToPb(Obj(3), preq.mutable_obj());
  preq.set_length(6000);
  pb::PunchResp presp;
  ASSERT_TRUE(Call(net::MsgType::kPunch, preq, &presp).ok());
  pb::ReadResp resp;
  auto got = Read(0, Obj(3), 0, 8192, &resp);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(resp.object_length(), 6000u);
  EXPECT_TRUE(std::equal(got->begin(), got->begin() + 6000, a.begin()));
  EXPECT_TRUE(std::all_of(got->begin() + 6000, got->end(), [](uint8_t c) { return c == 0; }));

  pb::DestroyReq dreq;
  dreq.set_ost(0);
  net::ToPb(Obj(3), dreq.mutable_obj());
  pb::DestroyResp dresp;
  ASSERT_TRUE(Call(net::MsgType::kDestroy, dreq, &dresp).ok());
  EXPECT_EQ(Write(0, Obj(3), 0, a).status().code(), StatusCode::kStale);

  EXPECT_EQ(Write(9, Obj(4), 0, a).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Read(9, Obj(4), 0, 10).status().code(), StatusCode::kNotFound);
}

TEST_F(OssServerTest, ManyConcurrentWritesAndReads) {
  StartServer();
  constexpr int kOps = 64;
  constexpr size_t kSize = 256 << 10;
  std::vector<std::vector<uint8_t>> data;
  for (int i = 0; i < kOps; ++i)
    data.push_back(Bytes(kSize, 100 + i));
  std::mutex mu;
  int remaining = kOps;
  int failures = 0;
  for (int i = 0; i < kOps; ++i) {
    pb::WriteReq req;
    req.set_ost(i % 2 == 0 ? 0 : 5);
    net::ToPb(Obj(10 + i % 4), req.mutable_obj());
    req.set_offset(uint64_t(i / 4) * kSize);
    channel_->CallAsync(net::MsgType::kWrite, req, {net::ConstSpan{data[i].data(), kSize}}, {},
                        [&](Result<net::Reply> r) {
                          std::lock_guard<std::mutex> lock(mu);
                          if (!r.ok())
                            ++failures;
                          --remaining;
                        });
  }
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(mu);
    return remaining == 0;
  }));
  EXPECT_EQ(failures, 0);
  for (int i = 0; i < kOps; ++i) {
    auto got = Read(i % 2 == 0 ? 0 : 5, Obj(10 + i % 4), uint64_t(i / 4) * kSize, kSize);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, data[i]) << i;
  }
}

TEST_F(OssServerTest, RegistersHeartbeatsAndRunsTasks) {
  StartServer();
  ASSERT_TRUE(WaitFor([&] { return mds_->registrations() >= 1 && mds_->heartbeats() >= 2; }));
  pb::RegisterOssReq reg = mds_->last_registration();
  EXPECT_EQ(reg.cluster_uuid(), kUuid);
  EXPECT_EQ(reg.oss_addr(), "127.0.0.1:" + std::to_string(server_->port()));
  ASSERT_EQ(reg.osts_size(), 2);
  EXPECT_EQ(reg.osts(0).index(), 0u);
  EXPECT_EQ(reg.osts(1).index(), 5u);
  EXPECT_GT(reg.osts(0).capacity(), 0u);
  EXPECT_EQ(reg.osts(0).device_id(), reg.osts(1).device_id());

  auto a = Bytes(10000, 4);
  ASSERT_TRUE(Write(5, Obj(20), 0, a).ok());
  ASSERT_TRUE(Write(5, Obj(21), 0, a).ok());
  pb::OstTask destroy;
  destroy.set_id(7);
  destroy.set_ost(5);
  net::ToPb(Obj(20), destroy.mutable_obj());
  destroy.set_kind(1);
  pb::OstTask punch;
  punch.set_id(8);
  punch.set_ost(5);
  net::ToPb(Obj(21), punch.mutable_obj());
  punch.set_kind(2);
  punch.set_length(100);
  mds_->AddTask(destroy);
  mds_->AddTask(punch);
  ASSERT_TRUE(WaitFor([&] { return mds_->Done(7) && mds_->Done(8); }));
  EXPECT_EQ(Write(5, Obj(20), 0, a).status().code(), StatusCode::kStale);
  pb::ReadResp resp;
  ASSERT_TRUE(Read(5, Obj(21), 0, 100, &resp).ok());
  EXPECT_EQ(resp.object_length(), 100u);
}

TEST_F(OssServerTest, ReregistersWhenTheMdsRestarts) {
  StartServer();
  ASSERT_TRUE(WaitFor([&] { return server_->registered(); }));
  uint16_t port = mds_->port();
  mds_.reset();
  ASSERT_TRUE(WaitFor([&] { return !server_->registered(); }));
  mds_ = std::make_unique<FakeMds>(port);
  ASSERT_TRUE(mds_->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return mds_->registrations() >= 1 && mds_->heartbeats() >= 1; }));
  EXPECT_TRUE(server_->registered());
}

TEST_F(OssServerTest, StartsWhileTheMdsIsDown) {
  uint16_t port = mds_->port();
  mds_.reset();
  StartServer();
  ASSERT_TRUE(Write(0, Obj(30), 0, Bytes(100, 5)).ok());  // serves data meanwhile
  mds_ = std::make_unique<FakeMds>(port);
  ASSERT_TRUE(mds_->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return server_->registered(); }));
}

TEST_F(OssServerTest, StartFailsClearlyOnABusyOrForeignOst) {
  StartServer();
  OssServer second(ServerOptions());
  Status st = second.Start();
  ASSERT_EQ(st.code(), StatusCode::kBusy) << st.ToString();
  EXPECT_NE(st.message().find("in use by another process"), std::string::npos);
  server_.reset();
  OssServer::Options o = ServerOptions();
  o.cluster_uuid = "00000000-0000-4000-8000-000000000000";
  OssServer foreign(o);
  st = foreign.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("belongs to another cluster"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace ciuic::oss

namespace ciuic::oss {
namespace {

// Sends a register message by hand: `fd` (or none when < 0) and a magic that may be wrong.
// Returns the reply's error (0: accepted), or -1 when no reply came.
int RawShmRegister(const std::string& addr, int fd, bool good_magic) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  socklen_t len;
  sockaddr_un a = net::ShmSocketAddr(addr, &len).value();
  if (connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    close(s);
    return -1;
  }
  net::ShmRegisterMsg msg{};
  std::memcpy(msg.magic, good_magic ? "CIUICSHM" : "NOTCIUIC", 8);
  msg.version = net::kShmVersion;
  int error = -1;
  net::ShmRegisterReply rep{};
  if (net::SendWithFd(s, &msg, sizeof(msg), fd) == static_cast<ssize_t>(sizeof(msg)) &&
      recv(s, &rep, sizeof(rep), 0) == static_cast<ssize_t>(sizeof(rep))) {
    error = rep.error;
  }
  close(s);
  return error;
}

// A registration with flags set was accepted, so an OSS could not refuse a flag it does not know
// (reported by fuzzing; its input: fuzz/corpus/shm_register/regress-unknown-flags).
TEST(ShmRegistryTest, RefusesUnknownFlags) {
  ShmRegistry registry;
  auto admit = [&](uint32_t flags) {
    auto region = net::ShmRegion::Create(4096);
    EXPECT_TRUE(region.ok());
    net::ShmRegisterMsg msg{};
    std::memcpy(msg.magic, net::kShmMagic, sizeof(msg.magic));
    msg.version = net::kShmVersion;
    msg.flags = flags;
    return registry.Admit(std::string_view(reinterpret_cast<const char*>(&msg), sizeof(msg)), 0,
                          {dup((*region)->fd())});
  };
  ShmRegistry::Admission a = admit(0);
  EXPECT_EQ(a.error, 0);
  EXPECT_NE(registry.Find(a.token), nullptr);
  registry.Forget(a.token);
  EXPECT_EQ(registry.Find(a.token), nullptr);
  EXPECT_EQ(admit(1).error, EINVAL);
  EXPECT_EQ(admit(0x80000000u).error, EINVAL);
  EXPECT_EQ(registry.regions(), 0u);
}

TEST_F(OssServerTest, ReadsIntoTheSharedMemoryOfAColocatedClient) {
  StartServer();
  const ObjectId id{Fid{1, 77, 0}, 1, 0};
  auto data = Bytes(10000, 9);
  ASSERT_TRUE(Write(0, id, 0, data).ok());
  const std::string addr = fmt::format("127.0.0.1:{}", server_->port());
  auto region = net::ShmRegion::Create(1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  auto reg = net::RegisterShm(addr, **region);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  uint8_t* base = (*region)->data();
  std::memset(base, 0xee, (*region)->size());

  auto shm_read = [&](uint64_t token, uint64_t shm_offset, uint64_t off, uint64_t len,
                      pb::ReadResp* resp) -> Status {
    pb::ReadReq req;
    req.set_ost(0);
    net::ToPb(id, req.mutable_obj());
    req.set_offset(off);
    req.set_length(len);
    req.set_shm_token(token);
    req.set_shm_offset(shm_offset);
    auto r = channel_->Call(net::MsgType::kRead, req);
    if (!r.ok())
      return r.status();
    EXPECT_EQ(r->data_len, 0u);  // nothing crossed the socket
    return net::Parse(r->body, resp, "ReadResp");
  };
  pb::ReadResp resp;
  ASSERT_TRUE(shm_read((*reg)->token(), 8192, 0, 12288, &resp).ok());
  EXPECT_TRUE(resp.in_shm());
  ASSERT_EQ(resp.shm_len(), 12288u);
  EXPECT_EQ(std::memcmp(base + 8192, data.data(), data.size()), 0);
  for (size_t i = 10000; i < 12288; ++i)
    ASSERT_EQ(base[8192 + i], 0) << i;  // past the object's end: zeros
  ASSERT_EQ(resp.block_crcs_size(), 6);
  for (int b = 0; b < 3; ++b) {
    const uint32_t c = Crc32c(base + 8192 + b * 4096, 4096);
    EXPECT_TRUE(c == resp.block_crcs(2 * b) || c == resp.block_crcs(2 * b + 1)) << b;
  }
  EXPECT_EQ(base[8191], 0xee);  // nothing outside the requested blocks
  EXPECT_EQ(base[8192 + 12288], 0xee);
  EXPECT_EQ(server_->shm_reads(), 1u);

  // Bad requests: a token nobody registered, a misaligned or out-of-region destination.
  Status st = shm_read((*reg)->token() ^ 1, 0, 0, 4096, &resp);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  st = shm_read((*reg)->token(), 100, 0, 4096, &resp);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = shm_read((*reg)->token(), (1 << 20) - 4096, 0, 8192, &resp);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = shm_read((*reg)->token(), UINT64_MAX - 4095, 0, 8192, &resp);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(server_->shm_reads(), 1u);

  // Closing the registration unregisters the region.
  const uint64_t token = (*reg)->token();
  reg->reset();
  EXPECT_TRUE(
      WaitFor([&] { return shm_read(token, 0, 0, 4096, &resp).code() == StatusCode::kNotFound; }));
}

// A ReadBatch answers each entry as its own Read would have been answered, in order: bytes over
// TCP one entry after the other in the data segment, bytes placed in shared memory, and an
// entry that fails (an unknown OST, an unknown region) failing alone. A batch that is empty,
// too long or too large fails as a whole.
TEST_F(OssServerTest, ReadBatchAnswersEveryEntryAsItsOwnRead) {
  StartServer();
  const ObjectId a{Fid{1, 81, 0}, 1, 0};
  const ObjectId b{Fid{1, 82, 0}, 1, 0};
  auto da = Bytes(10000, 3);
  auto db = Bytes(70001, 4);
  ASSERT_TRUE(Write(0, a, 0, da).ok());
  ASSERT_TRUE(Write(5, b, 0, db).ok());
  const std::string addr = fmt::format("127.0.0.1:{}", server_->port());
  auto region = net::ShmRegion::Create(1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  auto reg = net::RegisterShm(addr, **region);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  uint8_t* base = (*region)->data();
  std::memset(base, 0xee, (*region)->size());

  pb::ReadBatchReq req;
  auto add = [&](uint32_t ost, const ObjectId& id, uint64_t off, uint64_t len, uint64_t token,
                 uint64_t shm_off) {
    pb::ReadReq* r = req.add_reads();
    r->set_ost(ost);
    net::ToPb(id, r->mutable_obj());
    r->set_offset(off);
    r->set_length(len);
    r->set_shm_token(token);
    r->set_shm_offset(shm_off);
  };
  add(0, a, 0, 12288, 0, 0);                   // 0: over TCP, three blocks
  add(5, b, 0, 73728, (*reg)->token(), 4096);  // 1: into shared memory
  add(9, a, 0, 4096, 0, 0);                    // 2: no such OST
  add(5, b, 65536, 8192, 0, 0);                // 3: over TCP, the tail of b
  add(0, a, 0, 4096, (*reg)->token() ^ 1, 0);  // 4: a region nobody registered
  auto r = channel_->Call(net::MsgType::kReadBatch, req);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  pb::ReadBatchResp resp;
  ASSERT_TRUE(net::Parse(r->body, &resp, "ReadBatchResp").ok());
  ASSERT_EQ(resp.reads_size(), 5);
  EXPECT_EQ(r->data_len, 12288u + 8192u);

  pb::ReadResp e0;
  ASSERT_FALSE(resp.reads(0).has_error());
  ASSERT_TRUE(e0.ParseFromString(resp.reads(0).resp()));
  EXPECT_EQ(resp.reads(0).data_len(), 12288u);
  EXPECT_EQ(e0.object_length(), da.size());
  EXPECT_EQ(std::memcmp(r->data.data(), da.data(), da.size()), 0);
  for (int k = 0; k < 3; ++k) {
    const uint32_t c = Crc32c(r->data.data() + k * 4096, 4096);
    EXPECT_TRUE(c == e0.block_crcs(2 * k) || c == e0.block_crcs(2 * k + 1)) << k;
  }

  pb::ReadResp e1;
  ASSERT_FALSE(resp.reads(1).has_error()) << resp.reads(1).error().message();
  ASSERT_TRUE(e1.ParseFromString(resp.reads(1).resp()));
  EXPECT_TRUE(e1.in_shm());
  EXPECT_EQ(resp.reads(1).data_len(), 0u);
  EXPECT_EQ(std::memcmp(base + 4096, db.data(), db.size()), 0);
  EXPECT_EQ(base[4095], 0xee);

  ASSERT_TRUE(resp.reads(2).has_error());
  EXPECT_EQ(net::FromPb(resp.reads(2).error()).code(), StatusCode::kNotFound);

  pb::ReadResp e3;
  ASSERT_FALSE(resp.reads(3).has_error());
  ASSERT_TRUE(e3.ParseFromString(resp.reads(3).resp()));
  EXPECT_EQ(resp.reads(3).data_len(), 8192u);
  EXPECT_EQ(e3.aligned_offset(), 65536u);
  EXPECT_EQ(std::memcmp(r->data.data() + 12288, db.data() + 65536, db.size() - 65536), 0);

  ASSERT_TRUE(resp.reads(4).has_error());
  EXPECT_EQ(net::FromPb(resp.reads(4).error()).code(), StatusCode::kNotFound);
  EXPECT_EQ(server_->shm_reads(), 1u);

  // Whole-batch refusals: no entries, more than 64, more than one Read's bytes over TCP.
  pb::ReadBatchReq empty;
  EXPECT_EQ(channel_->Call(net::MsgType::kReadBatch, empty).status().code(),
            StatusCode::kInvalidArgument);
  pb::ReadBatchReq many;
  for (int i = 0; i < 65; ++i)
    *many.add_reads() = req.reads(0);
  EXPECT_EQ(channel_->Call(net::MsgType::kReadBatch, many).status().code(),
            StatusCode::kInvalidArgument);
  pb::ReadBatchReq large;
  for (int i = 0; i < 3; ++i) {
    *large.add_reads() = req.reads(0);
    large.mutable_reads(i)->set_length(uint64_t{30} << 20);
  }
  EXPECT_EQ(channel_->Call(net::MsgType::kReadBatch, large).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(OssServerTest, RefusesSharedMemoryItCannotTrust) {
  StartServer();
  const std::string addr = fmt::format("127.0.0.1:{}", server_->port());
  // A memfd that may still shrink (the OSS would fault on the pages taken away).
  int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, 1 << 20), 0);
  EXPECT_EQ(RawShmRegister(addr, unsealed, true), EPERM);
  // An ordinary file.
  int plain = open((dir_ + "/plain").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(plain, 0);
  ASSERT_EQ(ftruncate(plain, 1 << 20), 0);
  EXPECT_EQ(RawShmRegister(addr, plain, true), EPERM);
  // No fd, a wrong magic.
  auto region = net::ShmRegion::Create(1 << 20);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(RawShmRegister(addr, -1, true), EINVAL);
  EXPECT_EQ(RawShmRegister(addr, (*region)->fd(), false), EINVAL);
  close(unsealed);
  close(plain);
  // Still serving: a good region registers.
  auto reg = net::RegisterShm(addr, **region);
  EXPECT_TRUE(reg.ok()) << reg.status().ToString();
  // No endpoint at an address nobody serves: kUnavailable (the client reads over TCP).
  auto none = net::RegisterShm("127.0.0.1:1", **region);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable) << none.status().ToString();
}

}  // namespace
}  // namespace ciuic::oss
