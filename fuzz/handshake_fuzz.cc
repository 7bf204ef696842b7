// Fuzz target: the server side of the handshake (net::ServerHandshake, as RpcServer runs it) fed
// arbitrary client bytes. The input is the byte stream a client sends: a Hello frame, then a
// Proof frame, read with the connection's frame checks. The first input byte picks helpers that
// let the fuzzer get past what it cannot forge: bit 0 fixes each frame's CRC, bit 1 replaces the
// Proof by one with the right MAC (the server nonce is fixed here), so the success path and the
// key lookup (admin key, client keys, a revoked one) are reached as well as every refusal.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ciuic.pb.h"
#include "common/crc32c.h"
#include "fuzz/fuzz_util.h"
#include "net/capability.h"
#include "net/frame.h"
#include "net/handshake.h"
#include "net/msg_types.h"

namespace ciuic::fuzz {
namespace {

const std::string kSecret(32, 'k');
constexpr uint32_t kAdminKey = 1;
constexpr uint32_t kRevokedKey = 107;

const net::ServerHandshake::Config& Config() {
  static const net::ServerHandshake::Config config{
      .secret = kSecret,
      .key_id = kAdminKey,
      .cluster_uuid = "fuzz-cluster",
      // As the MDS decides (mds_server.cc): the admin key any role, client keys the client role.
      .key_lookup = [](uint32_t key_id, net::Role role) -> Result<std::string> {
        if (key_id == kAdminKey)
          return kSecret;
        if (key_id < net::kFirstClientKeyId || key_id == kRevokedKey)
          return Status::PermissionDenied("unknown or revoked key");
        if (role != net::Role::kClient)
          return Status::PermissionDenied("client keys act as clients only");
        return net::DeriveClientKey(kSecret, key_id);
      }};
  return config;
}

// Reads one frame as Connection::ReadFrame does; false when the connection would be closed.
bool ReadFrame(FuzzReader* in, bool fix_crc, net::FrameHeader* h, std::string* body) {
  std::string header(in->Bytes(net::kFrameHeaderSize));
  if (header.size() < net::kFrameHeaderSize)
    return false;
  auto* raw = reinterpret_cast<uint8_t*>(header.data());
  const net::FrameLimits limits;
  if (!net::DecodeFrameHeader(raw, limits, h).ok())
    return false;
  *body = std::string(in->Bytes(h->body_len));
  if (body->size() < h->body_len)
    return false;
  if (fix_crc) {
    h->crc = Crc32cExtend(Crc32c(raw, 28), body->data(), body->size());
  }
  return net::VerifyFrameCrc(raw, *h, *body).ok();
}

bool IsRequest(const net::FrameHeader& h, net::MsgType type) {
  return h.type == static_cast<uint16_t>(type) && (h.flags & net::kFlagResponse) == 0 &&
         h.data_len == 0;
}

}  // namespace
}  // namespace ciuic::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ciuic;  // NOLINT(google-build-using-namespace): a fuzz entry point
  fuzz::FuzzReader in(data, size);
  const uint8_t mode = in.U8();
  const bool fix_crc = (mode & 1) != 0;
  const bool right_mac = (mode & 2) != 0;

  net::ServerHandshake hs(&fuzz::Config());
  net::FrameHeader h;
  std::string body;
  if (!fuzz::ReadFrame(&in, fix_crc, &h, &body) || !fuzz::IsRequest(h, net::MsgType::kHello))
    return 0;
  Result<std::string> challenge = hs.OnHello(body, std::string(net::kNonceSize, 'n'));
  if (!challenge.ok())
    return 0;
  pb::Challenge c;
  if (!c.ParseFromString(*challenge) || c.version() != hs.version() ||
      c.nonce().size() != net::kNonceSize || c.mac().size() != net::kMacSize)
    std::abort();  // the server's own answer must be well formed

  if (!fuzz::ReadFrame(&in, fix_crc, &h, &body) || !fuzz::IsRequest(h, net::MsgType::kProof))
    return 0;
  if (right_mac) {
    pb::Proof proof;
    proof.set_mac(hs.TEST_ExpectedClientMac());
    body = proof.SerializeAsString();
  }
  Result<std::string> welcome = hs.OnProof(body);
  if (right_mac && !welcome.ok())
    std::abort();  // the right MAC must be accepted
  if (welcome.ok() && (!hs.done() || hs.session_key().size() != net::kMacSize))
    std::abort();
  // A second Proof is out of order.
  if (hs.OnProof(body).ok())
    std::abort();
  return 0;
}
