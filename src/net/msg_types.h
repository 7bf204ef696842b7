// Message type numbers of the wire protocol (docs/formats/wire.md). Never renumber.
#pragma once

#include <cstdint>

namespace ciuic::net {

enum class MsgType : uint16_t {
  // Handshake, 1-9.
  kHello = 1,
  kChallenge = 2,
  kProof = 3,
  kWelcome = 4,
  kPing = 5,  // empty body both ways

  // MDS sessions and namespace, 100-199.
  kOpenSession = 100,
  kRenewSession = 101,
  kCloseSession = 102,
  kLookup = 110,
  kResolvePath = 111,
  kGetAttr = 112,
  kSetAttr = 113,
  kCreate = 114,
  kMkdir = 115,
  kUnlink = 116,
  kRename = 117,
  kSymlink = 118,
  kReadlink = 119,
  kLink = 120,
  kReadDir = 121,
  kOpen = 122,
  kClose = 123,
  kUpdateSize = 124,
  kInstantiate = 125,
  kSetLayout = 126,
  kFallocate = 127,
  kStatfs = 128,
  kFsyncDir = 129,
  kSetXattr = 130,
  kGetXattr = 131,
  kListXattr = 132,
  kRemoveXattr = 133,
  kTruncateDone = 134,
  kLock = 135,
  // Admin only (the admin key): client keys (docs/formats/wire.md, "Client keys").
  kAddClient = 140,
  kRevokeClient = 141,
  kListClients = 142,
  // HSM (docs/design.md "HSM").
  kHsmState = 150,
  kHsmBegin = 151,
  kHsmEnd = 152,
  kHsmImport = 153,  // create a released file backed by a data repository object (admin key)
  kRepoQueue = 154,  // export on close: switch, list and drain the queue (admin key)

  // MDS: OST map and OSS registration, 200-219.
  kRegisterOss = 200,
  kHeartbeat = 201,
  kGetOstMap = 202,

  // OSS data, 300-399.
  kWrite = 300,
  kRead = 301,
  kSync = 302,
  kPunch = 303,
  kDestroy = 304,
  kObjStat = 305,
  kOstStatfs = 306,
  kReadBatch = 307,    // several reads in one frame (ReadBatchReq / ReadBatchResp)
  kHsmObj = 310,       // HSM copy of one stripe object between its OST and the cold tier
  kResyncCheck = 311,  // OSS to OSS: which objects of a chain differ at a syncing member
  kResyncPut = 312,    // OSS to OSS: one piece of an object for a syncing member
  kRepair = 313,       // OSS to OSS: a member's copy failed its checksums; the head repairs it
  kRepairPush = 314,   // OSS to OSS: the head asks a good copy's OSS to send it
};

// Roles proven in the handshake.
enum class Role : uint32_t {
  kClient = 1,
  kOss = 2,
  kAdmin = 3,
};

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kMinProtocolVersion = 1;

}  // namespace ciuic::net
