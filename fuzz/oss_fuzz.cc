// Fuzz target: every OSS message handler (oss::OssServer over OSTs on a MemIoEngine), in
// process: each request goes through RpcServer::TEST_Dispatch to the handler a connection
// would reach (capability checks, the in-flight budget, the OstStore and its engine threads)
// without a socket.
//
// Input: up to 16 requests, each `u8 type` (an index into the OSS message types), `u8 who`
// (bits 0-1: role client/oss/admin/client; bit 2: a client key, which needs capabilities),
// `u16 length` and the protobuf body, `u16 length` and the data segment. Each reply is awaited
// before the next. The server persists across inputs and is replaced, with a fresh engine,
// every 20,000 inputs (see mds_fuzz.cc for what that means for reproducing a crash).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "ciuic.pb.h"
#include "common/logging.h"
#include "fuzz/fuzz_util.h"
#include "io/mem_io_engine.h"
#include "net/capability.h"
#include "net/msg_types.h"
#include "oss/oss_server.h"

namespace ciuic::fuzz {
namespace {

using net::MsgType;

constexpr MsgType kTypes[] = {MsgType::kWrite,     MsgType::kRead,        MsgType::kSync,
                              MsgType::kPunch,     MsgType::kDestroy,     MsgType::kObjStat,
                              MsgType::kOstStatfs, MsgType::kResyncCheck, MsgType::kResyncPut,
                              MsgType::kRepair,    MsgType::kRepairPush};
constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
constexpr uint32_t kAdminKey = 1;
constexpr uint64_t kInputsPerServer = 20000;

struct Oss {
  std::unique_ptr<io::MemIoEngine> engine;
  std::unique_ptr<oss::OssServer> server;
  uint64_t inputs = 0;
};

void Start(Oss* o) {
  o->server.reset();
  o->engine = std::make_unique<io::MemIoEngine>();
  oss::OssServer::Options opt;
  opt.osts = {{0, "/fuzz/ost0"}, {3, "/fuzz/ost3"}};
  opt.mds = HostPort{"127.0.0.1", 9};  // nothing listens: registration retries in the background
  opt.secret = std::string(32, 's');
  opt.key_id = kAdminKey;
  opt.cluster_uuid = "fuzz-cluster";
  opt.test_engine = o->engine.get();
  opt.heartbeat_ms = 60000;
  opt.max_inflight_bytes = 8u << 20;
  opt.writeback_idle_ms = 0;
  opt.shm_reads = false;
  opt.durability_epoch = 7;
  opt.scrub_bytes_per_s = 0;
  o->engine->SetCapacity(64u << 20);
  o->server = std::make_unique<oss::OssServer>(opt);
  if (!o->server->Start().ok())
    std::abort();
}

}  // namespace
}  // namespace ciuic::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ciuic::log::SetLevel(ciuic::log::Level::kError);  // refusals log warnings by the thousand
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ciuic;  // NOLINT(google-build-using-namespace): a fuzz entry point
  static fuzz::Oss oss;
  if (oss.server == nullptr || ++oss.inputs % fuzz::kInputsPerServer == 0)
    fuzz::Start(&oss);
  fuzz::FuzzReader in(data, size);
  for (int i = 0; i < 16 && !in.empty(); ++i) {
    const net::MsgType type = fuzz::kTypes[in.U8() % fuzz::kNumTypes];
    const uint8_t who = in.U8();
    const bool client_key = (who & 4) != 0;
    auto role = static_cast<net::Role>(client_key ? 1 : (who & 3) == 0 ? 1 : who & 3);
    const uint32_t key = client_key ? net::kFirstClientKeyId + 1 : fuzz::kAdminKey;
    std::string body(in.Sized());
    std::string segment(in.Sized());
    net::RpcServer::TestReply r = fuzz::CallInProcess(oss.server->TEST_rpc(), type, role, key,
                                                      std::move(body), std::move(segment));
    if (r.error) {
      pb::ErrorInfo e;
      if (!e.ParseFromString(r.body) || e.code() == 0)
        std::abort();  // an error reply carries an error
    }
  }
  return 0;
}
