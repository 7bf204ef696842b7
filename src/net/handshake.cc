#include "net/handshake.h"

#include <algorithm>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

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

}  // namespace ciuic::net
