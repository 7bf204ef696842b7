#include "net/handshake.h"

#include <algorithm>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ciuic.pb.h"

namespace ciuic::net {
namespace {

void AppendU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    s->push_back(static_cast<char>(v >> (8 * i)));
}

std::string Hmac(std::string_view key, std::string_view a, std::string_view b) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  std::string msg;
  msg.reserve(a.size() + b.size());
  msg.append(a).append(b);
  // An empty key is legal for HMAC; OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const void* key_ptr = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
           &out_len) == nullptr) {
    // Cannot happen with SHA-256; an empty MAC never verifies, so this fails closed.
    return {};
  }
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

}  // namespace

std::string HmacSha256(std::string_view key, std::string_view data) {
  return Hmac(key, data, {});
}

std::string HandshakeTranscript(std::string_view hello_bytes,
                                uint32_t version,
                                std::string_view server_nonce,
                                uint32_t role,
                                uint32_t key_id) {
  std::string t;
  t.reserve(hello_bytes.size() + server_nonce.size() + 12);
  t.append(hello_bytes);
  AppendU32(&t, version);
  t.append(server_nonce);
  AppendU32(&t, role);
  AppendU32(&t, key_id);
  return t;
}

std::string ServerMac(std::string_view key, std::string_view transcript) {
  return Hmac(key, transcript, "server");
}

std::string ClientMac(std::string_view key, std::string_view transcript) {
  return Hmac(key, transcript, "client");
}

std::string SessionKey(std::string_view key, std::string_view transcript) {
  return Hmac(key, "session", transcript);
}

bool MacEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty())
    return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

uint32_t PickVersion(uint32_t client_min,
                     uint32_t client_max,
                     uint32_t server_min,
                     uint32_t server_max) {
  uint32_t lo = std::max(client_min, server_min);
  uint32_t hi = std::min(client_max, server_max);
  return lo <= hi ? hi : 0;
}

Result<std::string> ServerHandshake::OnHello(std::string_view hello_body,
                                             std::string server_nonce) {
  if (hello_done_)
    return Status::Corruption("second Hello");
  pb::Hello hello;
  if (hello_body.size() > static_cast<size_t>(INT32_MAX) ||
      !hello.ParseFromArray(hello_body.data(), static_cast<int>(hello_body.size()))) {
    return Status::Corruption("malformed Hello");
  }
  if (hello.nonce().size() != kNonceSize || hello.role() < 1 || hello.role() > 3) {
    return Status::Corruption(
        fmt::format("bad Hello: nonce of {} bytes, role {}", hello.nonce().size(), hello.role()));
  }
  const Config& o = *config_;
  const uint32_t version =
      PickVersion(hello.min_version(), hello.max_version(), o.min_version, o.max_version);
  if (version == 0) {
    return Status::NotSupported(
        fmt::format("no common protocol version: client speaks [{}, {}], server [{}, {}]",
                    hello.min_version(), hello.max_version(), o.min_version, o.max_version));
  }
  // The key decides who the peer is: the admin key may claim any role, a client key only the
  // client role (docs/formats/wire.md, "Client keys").
  std::string key;
  if (o.key_lookup) {
    Result<std::string> k = o.key_lookup(hello.key_id(), static_cast<Role>(hello.role()));
    if (!k.ok()) {
      return Status::PermissionDenied(
          fmt::format("authentication failed: {}", k.status().message()));
    }
    key = std::move(*k);
  } else if (hello.key_id() == o.key_id) {
    key = o.secret;
  } else {
    return Status::PermissionDenied(
        fmt::format("authentication failed: unknown key id {}", hello.key_id()));
  }
  hello_done_ = true;
  version_ = version;
  role_ = static_cast<Role>(hello.role());
  key_id_ = hello.key_id();
  job_id_ = hello.job_id();
  key_ = std::move(key);
  transcript_ = HandshakeTranscript(hello_body, version, server_nonce, hello.role(), key_id_);
  pb::Challenge challenge;
  challenge.set_version(version);
  challenge.set_nonce(std::move(server_nonce));
  challenge.set_mac(ServerMac(key_, transcript_));
  return challenge.SerializeAsString();
}

Result<std::string> ServerHandshake::OnProof(std::string_view proof_body) {
  if (!hello_done_ || done_)
    return Status::Corruption("Proof out of order");
  pb::Proof proof;
  if (proof_body.size() > static_cast<size_t>(INT32_MAX) ||
      !proof.ParseFromArray(proof_body.data(), static_cast<int>(proof_body.size()))) {
    return Status::Corruption("malformed Proof");
  }
  if (!MacEqual(proof.mac(), ClientMac(key_, transcript_)))
    return Status::PermissionDenied("authentication failed: wrong cluster secret");
  done_ = true;
  session_key_ = SessionKey(key_, transcript_);
  pb::Welcome welcome;
  welcome.set_cluster_uuid(config_->cluster_uuid);
  return welcome.SerializeAsString();
}

std::string ServerHandshake::TEST_ExpectedClientMac() const {
  return hello_done_ ? ClientMac(key_, transcript_) : std::string();
}

}  // namespace ciuic::net
