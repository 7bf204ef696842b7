#include "net/capability.h"

#include <chrono>

#include <fmt/format.h>

#include "net/handshake.h"
#include "net/pb_convert.h"

namespace ciuic::net {
namespace {

void AppendLe(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s->push_back(static_cast<char>(v >> (8 * i)));
}

}  // namespace

std::string DeriveClientKey(std::string_view admin_secret, uint32_t key_id) {
  std::string msg = "ciuic client key";
  AppendLe(&msg, key_id, 4);
  return HmacSha256(admin_secret, msg);
}

std::string DeriveCapabilityKey(std::string_view admin_secret) {
  return HmacSha256(admin_secret, "ciuic capability key");
}

std::string CapabilityBytes(const pb::Capability& cap) {
  std::string b = "ciuic-cap-1";
  AppendLe(&b, cap.fid().seq(), 8);
  AppendLe(&b, cap.fid().mds(), 4);
  AppendLe(&b, cap.fid().ver(), 4);
  AppendLe(&b, cap.rights(), 4);
  AppendLe(&b, static_cast<uint64_t>(cap.expires_ms()), 8);
  AppendLe(&b, cap.key_id(), 4);
  if (!cap.source().empty()) {
    // Appended only when set, so capabilities without a source keep their bytes.
    b += "src";
    b += cap.source();
  }
  return b;
}

void SignCapability(std::string_view cap_key, pb::Capability* cap) {
  cap->set_mac(HmacSha256(cap_key, CapabilityBytes(*cap)));
}

Status VerifyCapability(std::string_view cap_key,
                        const pb::Capability& cap,
                        const Fid& fid,
                        uint32_t rights,
                        uint32_t key_id,
                        int64_t now_ms) {
  if (cap.mac().empty())
    return Status::PermissionDenied(fmt::format("no capability for file {}", fid.ToString()));
  // The MAC first: nothing else in an unauthenticated capability means anything.
  if (!MacEqual(cap.mac(), HmacSha256(cap_key, CapabilityBytes(cap))))
    return Status::PermissionDenied("capability is forged (its MAC does not verify)");
  if (FromPb(cap.fid()) != fid) {
    return Status::PermissionDenied(fmt::format("capability for file {} used for file {}",
                                                FromPb(cap.fid()).ToString(), fid.ToString()));
  }
  if (cap.key_id() != key_id) {
    return Status::PermissionDenied(
        fmt::format("capability for key {} used by key {}", cap.key_id(), key_id));
  }
  if (cap.expires_ms() <= now_ms) {
    return Status::PermissionDenied(fmt::format("capability for file {} expired {} ms ago",
                                                fid.ToString(), now_ms - cap.expires_ms()));
  }
  if ((cap.rights() & rights) != rights) {
    return Status::PermissionDenied(fmt::format("capability for file {} does not grant {}",
                                                fid.ToString(),
                                                (rights & kCapWrite) != 0 ? "writing" : "reading"));
  }
  return Status::OK();
}

std::string RepoSourceDigest(std::string_view url, std::string_view key, std::string_view etag) {
  std::string b(url);
  b.push_back('\0');
  b += key;
  b.push_back('\0');
  b += etag;
  return HmacSha256("ciuic repo source", b);  // a hash; the MAC of the capability is the proof
}

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ciuic::net
