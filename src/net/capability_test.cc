#include "net/capability.h"

#include <gtest/gtest.h>

#include "net/pb_convert.h"

namespace ciuic::net {
namespace {

const std::string kAdmin(32, 'a');

pb::Capability Cap(const Fid& fid, uint32_t rights, int64_t expires_ms, uint32_t key_id) {
  pb::Capability c;
  ToPb(fid, c.mutable_fid());
  c.set_rights(rights);
  c.set_expires_ms(expires_ms);
  c.set_key_id(key_id);
  SignCapability(DeriveCapabilityKey(kAdmin), &c);
  return c;
}

TEST(CapabilityTest, SignedCapabilityVerifiesForItsFileKeyAndRights) {
  const Fid f{42, 0, 0};
  pb::Capability c = Cap(f, kCapRead | kCapWrite, 2000, 100);
  EXPECT_TRUE(VerifyCapability(DeriveCapabilityKey(kAdmin), c, f, kCapRead, 100, 1000).ok());
  EXPECT_TRUE(VerifyCapability(DeriveCapabilityKey(kAdmin), c, f, kCapWrite, 100, 1000).ok());
}

TEST(CapabilityTest, MissingForgedExpiredOtherFileOtherKeyAndMissingRightAreRefused) {
  const std::string key = DeriveCapabilityKey(kAdmin);
  const Fid f{42, 0, 0};
  pb::Capability good = Cap(f, kCapRead, 2000, 100);
  auto refused = [&](const pb::Capability& c, const Fid& fid, uint32_t rights, uint32_t key_id,
                     int64_t now) {
    Status st = VerifyCapability(key, c, fid, rights, key_id, now);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
    EXPECT_NE(st.message().find("capability"), std::string::npos) << st.ToString();
  };
  refused(pb::Capability(), f, kCapRead, 100, 1000);
  pb::Capability widened = good;
  widened.set_rights(kCapRead | kCapWrite);  // edited after signing
  refused(widened, f, kCapWrite, 100, 1000);
  pb::Capability other_fid = good;
  ToPb(Fid{43, 0, 0}, other_fid.mutable_fid());
  refused(other_fid, Fid{43, 0, 0}, kCapRead, 100, 1000);
  refused(good, Fid{43, 0, 0}, kCapRead, 100, 1000);  // valid, but for file 42
  refused(good, f, kCapRead, 101, 1000);              // another key's capability
  refused(good, f, kCapRead, 100, 2000);              // expired
  refused(good, f, kCapWrite, 100, 1000);             // read-only capability
  // Signed with another cluster's admin key.
  pb::Capability foreign = good;
  SignCapability(DeriveCapabilityKey(std::string(32, 'b')), &foreign);
  refused(foreign, f, kCapRead, 100, 1000);
}

TEST(CapabilityTest, ClientKeysDifferPerKeyIdAndFromTheAdminKey) {
  EXPECT_EQ(DeriveClientKey(kAdmin, 100).size(), 32u);
  EXPECT_NE(DeriveClientKey(kAdmin, 100), DeriveClientKey(kAdmin, 101));
  EXPECT_NE(DeriveClientKey(kAdmin, 100), kAdmin);
  EXPECT_NE(DeriveClientKey(kAdmin, 100), DeriveCapabilityKey(kAdmin));
  EXPECT_EQ(DeriveClientKey(kAdmin, 100), DeriveClientKey(kAdmin, 100));
}

}  // namespace
}  // namespace ciuic::net
