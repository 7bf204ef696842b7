#include "net/frame.h"

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "common/crc32c.h"

namespace ciuic::net {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

uint32_t FrameCrc(const uint8_t* header_bytes, std::string_view body) {
  uint32_t crc = Crc32c(header_bytes, 28);
  return Crc32cExtend(crc, body.data(), body.size());
}

}  // namespace

std::string Serialize(const google::protobuf::MessageLite& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

Status Parse(std::string_view body, google::protobuf::MessageLite* m, const char* what) {
  if (body.size() > static_cast<size_t>(INT32_MAX) ||
      !m->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Status::Corruption(fmt::format("malformed {}", what));
  }
  return Status::OK();
}

void EncodeFrameHeader(const FrameHeader& h, std::string_view body, uint8_t* out) {
  Put32(out + 0, kFrameMagic);
  Put16(out + 4, h.version);
  Put16(out + 6, h.type);
  Put16(out + 8, h.flags);
  Put16(out + 10, 0);
  Put64(out + 12, h.request_id);
  Put32(out + 20, static_cast<uint32_t>(body.size()));
  Put32(out + 24, h.data_len);
  Put32(out + 28, FrameCrc(out, body));
}

Status DecodeFrameHeader(const uint8_t* in, const FrameLimits& limits, FrameHeader* out) {
  uint32_t magic = Get32(in);
  if (magic != kFrameMagic) {
    return Status::Corruption(fmt::format("bad frame magic {:#010x}", magic));
  }
  out->version = Get16(in + 4);
  if (out->version != kFrameVersion) {
    return Status::Corruption(fmt::format("unsupported frame version {}", out->version));
  }
  out->type = Get16(in + 6);
  out->flags = Get16(in + 8);
  if ((out->flags & ~kKnownFlags) != 0) {
    return Status::Corruption(fmt::format("unknown frame flags {:#06x}", out->flags));
  }
  if ((out->flags & kFlagError) != 0 && (out->flags & kFlagResponse) == 0) {
    return Status::Corruption("error flag on a request frame");
  }
  uint16_t reserved = Get16(in + 10);
  if (reserved != 0) {
    return Status::Corruption(fmt::format("reserved header field is {:#06x}", reserved));
  }
  out->request_id = Get64(in + 12);
  out->body_len = Get32(in + 20);
  out->data_len = Get32(in + 24);
  out->crc = Get32(in + 28);
  if (out->body_len > limits.max_body) {
    return Status::Corruption(
        fmt::format("body_len {} exceeds the limit {}", out->body_len, limits.max_body));
  }
  if (out->data_len > limits.max_data) {
    return Status::Corruption(
        fmt::format("data_len {} exceeds the limit {}", out->data_len, limits.max_data));
  }
  return Status::OK();
}

Status VerifyFrameCrc(const uint8_t* header_bytes, const FrameHeader& h, std::string_view body) {
  uint32_t crc = FrameCrc(header_bytes, body);
  if (crc != h.crc) {
    return Status::Corruption(
        fmt::format("frame CRC mismatch: header says {:#010x}, computed {:#010x}", h.crc, crc));
  }
  return Status::OK();
}

std::string MsgTypeName(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello:
      return "Hello";
    case MsgType::kChallenge:
      return "Challenge";
    case MsgType::kProof:
      return "Proof";
    case MsgType::kWelcome:
      return "Welcome";
    case MsgType::kPing:
      return "Ping";
    case MsgType::kOpenSession:
      return "OpenSession";
    case MsgType::kRenewSession:
      return "RenewSession";
    case MsgType::kCloseSession:
      return "CloseSession";
    case MsgType::kLookup:
      return "Lookup";
    case MsgType::kResolvePath:
      return "ResolvePath";
    case MsgType::kGetAttr:
      return "GetAttr";
    case MsgType::kSetAttr:
      return "SetAttr";
    case MsgType::kCreate:
      return "Create";
    case MsgType::kMkdir:
      return "Mkdir";
    case MsgType::kUnlink:
      return "Unlink";
    case MsgType::kRename:
      return "Rename";
    case MsgType::kSymlink:
      return "Symlink";
    case MsgType::kReadlink:
      return "Readlink";
    case MsgType::kLink:
      return "Link";
    case MsgType::kReadDir:
      return "ReadDir";
    case MsgType::kOpen:
      return "Open";
    case MsgType::kClose:
      return "Close";
    case MsgType::kUpdateSize:
      return "UpdateSize";
    case MsgType::kInstantiate:
      return "Instantiate";
    case MsgType::kSetLayout:
      return "SetLayout";
    case MsgType::kFallocate:
      return "Fallocate";
    case MsgType::kStatfs:
      return "Statfs";
    case MsgType::kFsyncDir:
      return "FsyncDir";
    case MsgType::kSetXattr:
      return "SetXattr";
    case MsgType::kGetXattr:
      return "GetXattr";
    case MsgType::kListXattr:
      return "ListXattr";
    case MsgType::kRemoveXattr:
      return "RemoveXattr";
    case MsgType::kTruncateDone:
      return "TruncateDone";
    case MsgType::kLock:
      return "Lock";
    case MsgType::kAddClient:
      return "AddClient";
    case MsgType::kRevokeClient:
      return "RevokeClient";
    case MsgType::kListClients:
      return "ListClients";
    case MsgType::kHsmState:
      return "HsmState";
    case MsgType::kHsmBegin:
      return "HsmBegin";
    case MsgType::kHsmEnd:
      return "HsmEnd";
    case MsgType::kHsmImport:
      return "HsmImport";
    case MsgType::kRepoQueue:
      return "RepoQueue";
    case MsgType::kRegisterOss:
      return "RegisterOss";
    case MsgType::kHeartbeat:
      return "Heartbeat";
    case MsgType::kGetOstMap:
      return "GetOstMap";
    case MsgType::kWrite:
      return "Write";
    case MsgType::kRead:
      return "Read";
    case MsgType::kSync:
      return "Sync";
    case MsgType::kPunch:
      return "Punch";
    case MsgType::kDestroy:
      return "Destroy";
    case MsgType::kObjStat:
      return "ObjStat";
    case MsgType::kOstStatfs:
      return "OstStatfs";
    case MsgType::kReadBatch:
      return "ReadBatch";
    case MsgType::kHsmObj:
      return "HsmObj";
    case MsgType::kResyncCheck:
      return "ResyncCheck";
    case MsgType::kResyncPut:
      return "ResyncPut";
    case MsgType::kRepair:
      return "Repair";
    case MsgType::kRepairPush:
      return "RepairPush";
  }
  return std::to_string(type);
}

}  // namespace ciuic::net
