// Client keys and capabilities (ARCHITECTURE Decision 13, docs/formats/wire.md "Client keys"
// and "Capabilities"). Pure functions over the admin key (the cluster secret); thread-safe.
//
// A client key is derived from the admin key and its key id, so every server that holds the
// admin key (the MDS and the OSSes) can check a client's handshake without a key table; the MDS
// keeps the table of rules (and revocations) in its RocksDB. Capabilities are signed by the MDS
// with a key derived from the admin key and verified by OSSes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ciuic.pb.h"
#include "common/fid.h"
#include "common/status.h"

namespace ciuic::net {

// Key ids below this are admin keys (the cluster file's key_id, 1, and room for rotation);
// client keys are numbered from it up and never reused.
inline constexpr uint32_t kFirstClientKeyId = 100;

inline constexpr uint32_t kCapRead = 1;
inline constexpr uint32_t kCapWrite = 2;

// Returns the 32-byte key of client key `key_id`:
// HMAC-SHA256(admin_secret, "ciuic client key" || u32le(key_id)).
std::string DeriveClientKey(std::string_view admin_secret, uint32_t key_id);

// Returns the 32-byte capability-signing key: HMAC-SHA256(admin_secret, "ciuic capability key").
std::string DeriveCapabilityKey(std::string_view admin_secret);

// Returns the bytes a capability's MAC covers: "ciuic-cap-1" || fid (seq u64le, mds u32le,
// ver u32le) || u32le(rights) || i64le(expires_ms) || u32le(key_id), then "src" || source when
// the capability names a data repository source.
std::string CapabilityBytes(const pb::Capability& cap);

// Fills `cap->mac` for its other fields.
void SignCapability(std::string_view cap_key, pb::Capability* cap);

// Checks that `cap` is a capability signed with `cap_key` for file `fid`, held by `key_id`,
// granting every bit of `rights`, and not expired at `now_ms` (Unix milliseconds). Returns
// kPermissionDenied naming what is wrong ("no capability", "forged", "expired", "for another
// file", "for another key", "does not grant writing"); every message contains "capability".
Status VerifyCapability(std::string_view cap_key,
                        const pb::Capability& cap,
                        const Fid& fid,
                        uint32_t rights,
                        uint32_t key_id,
                        int64_t now_ms);

// HMAC-SHA256("ciuic repo source", url || NUL || key || NUL || etag): a data repository
// source in a capability (Capability.source).
std::string RepoSourceDigest(std::string_view url, std::string_view key, std::string_view etag);

// Unix milliseconds of the wall clock (capability expiry).
int64_t WallClockMs();

}  // namespace ciuic::net
