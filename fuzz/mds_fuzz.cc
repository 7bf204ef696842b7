// Fuzz target: every MDS message handler (meta::MdsServer over a MemKvStore), in process: each
// request goes through RpcServer::TEST_Dispatch to the handler a connection would reach (role
// checks, tenancy rules, the MetaService and its writer thread) without a socket.
//
// Input: up to 16 requests, each `u8 type` (an index into the MDS message types), `u8 who`
// (bits 0-1: role client/oss/admin/client; bit 2: the client key made at start-up instead of
// the admin key), `u16 length` and the protobuf body. Each reply is awaited before the next.
// The server persists across inputs (one start-up: threads, no RocksDB) and is replaced every
// 20,000 inputs so the namespace stays small; a crash may so depend on earlier inputs, and
// replaying its input alone (what the regression replay does) starts from an empty namespace.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "ciuic.pb.h"
#include "common/logging.h"
#include "fuzz/fuzz_util.h"
#include "meta/mds_server.h"
#include "net/msg_types.h"

namespace ciuic::fuzz {
namespace {

using net::MsgType;

constexpr MsgType kTypes[] = {
    MsgType::kOpenSession, MsgType::kRenewSession, MsgType::kCloseSession, MsgType::kLookup,
    MsgType::kResolvePath, MsgType::kGetAttr,      MsgType::kSetAttr,      MsgType::kCreate,
    MsgType::kMkdir,       MsgType::kUnlink,       MsgType::kRename,       MsgType::kSymlink,
    MsgType::kReadlink,    MsgType::kLink,         MsgType::kReadDir,      MsgType::kOpen,
    MsgType::kClose,       MsgType::kUpdateSize,   MsgType::kInstantiate,  MsgType::kSetLayout,
    MsgType::kFallocate,   MsgType::kStatfs,       MsgType::kFsyncDir,     MsgType::kSetXattr,
    MsgType::kGetXattr,    MsgType::kListXattr,    MsgType::kRemoveXattr,  MsgType::kTruncateDone,
    MsgType::kLock,        MsgType::kAddClient,    MsgType::kRevokeClient, MsgType::kListClients,
    MsgType::kRegisterOss, MsgType::kHeartbeat,    MsgType::kGetOstMap,    MsgType::kPing,
    MsgType::kRepoQueue};
constexpr size_t kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);
constexpr uint32_t kAdminKey = 1;
constexpr uint64_t kInputsPerServer = 20000;

struct Mds {
  std::unique_ptr<meta::MdsServer> server;
  uint32_t client_key = 0;
  uint64_t inputs = 0;
};

void Start(Mds* m) {
  meta::MdsServer::Options o;
  o.in_memory = true;
  o.secret = std::string(32, 's');
  o.key_id = kAdminKey;
  o.cluster_uuid = "fuzz-cluster";
  o.durability_epoch = 7;
  m->server = std::make_unique<meta::MdsServer>(o);
  if (!m->server->Start().ok())
    std::abort();
  // A client key with rules (a uid map and root squash), so tenancy's rewriting is exercised.
  pb::AddClientReq req;
  req.mutable_rules()->set_name("fuzz");
  req.mutable_rules()->set_squash_root(true);
  req.mutable_rules()->set_squash_uid(65534);
  net::RpcServer::TestReply r =
      CallInProcess(m->server->TEST_rpc(), MsgType::kAddClient, net::Role::kAdmin, kAdminKey,
                    req.SerializeAsString());
  pb::AddClientResp resp;
  if (r.error || !resp.ParseFromString(r.body))
    std::abort();
  m->client_key = resp.record().key_id();
}

}  // namespace
}  // namespace ciuic::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ciuic::log::SetLevel(ciuic::log::Level::kError);  // refusals log warnings by the thousand
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ciuic;  // NOLINT(google-build-using-namespace): a fuzz entry point
  static fuzz::Mds mds;
  if (mds.server == nullptr || ++mds.inputs % fuzz::kInputsPerServer == 0) {
    mds.server.reset();
    fuzz::Start(&mds);
  }
  fuzz::FuzzReader in(data, size);
  for (int i = 0; i < 16 && !in.empty(); ++i) {
    const net::MsgType type = fuzz::kTypes[in.U8() % fuzz::kNumTypes];
    const uint8_t who = in.U8();
    const bool client_key = (who & 4) != 0;
    auto role = static_cast<net::Role>(client_key ? 1 : (who & 3) == 0 ? 1 : who & 3);
    const uint32_t key = client_key ? mds.client_key : fuzz::kAdminKey;
    const std::string body(in.Sized());
    net::RpcServer::TestReply r =
        fuzz::CallInProcess(mds.server->TEST_rpc(), type, role, key, body);
    if (r.error) {
      pb::ErrorInfo e;
      if (!e.ParseFromString(r.body) || e.code() == 0)
        std::abort();  // an error reply carries an error
    }
  }
  return 0;
}
