#include "meta/keys.h"

namespace ciuic::meta {

void AppendU32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 3; i >= 0; --i) {
    b[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  out->append(b, 4);
}

void AppendU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 7; i >= 0; --i) {
    b[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  out->append(b, 8);
}

uint32_t ReadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint64_t ReadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void AppendFid(std::string* out, const Fid& fid) {
  AppendU64(out, fid.seq);
  AppendU32(out, fid.mds);
  AppendU32(out, fid.ver);
}

Fid ReadFid(const char* p) {
  return Fid{ReadU64(p), ReadU32(p + 8), ReadU32(p + 12)};
}

std::string InodeKey(const Fid& fid) {
  std::string k;
  k.reserve(kFidKeyLen);
  AppendFid(&k, fid);
  return k;
}

std::string DentryKey(const Fid& parent, uint64_t hash, std::string_view name) {
  std::string k;
  k.reserve(kFidKeyLen + 8 + name.size());
  AppendFid(&k, parent);
  AppendU64(&k, hash);
  k.append(name);
  return k;
}

std::string DentrySeekKey(const Fid& parent, uint64_t hash) {
  std::string k;
  k.reserve(kFidKeyLen + 8);
  AppendFid(&k, parent);
  AppendU64(&k, hash);
  return k;
}

std::string DentryEnd(const Fid& parent) {
  return PrefixEnd(InodeKey(parent));
}

bool ParseDentryKey(std::string_view key, Fid* parent, uint64_t* hash, std::string_view* name) {
  if (key.size() <= kFidKeyLen + 8)
    return false;
  *parent = ReadFid(key.data());
  *hash = ReadU64(key.data() + kFidKeyLen);
  *name = key.substr(kFidKeyLen + 8);
  return true;
}

std::string XattrKey(const Fid& fid, std::string_view name) {
  std::string k = InodeKey(fid);
  k.append(name);
  return k;
}

std::string XattrPrefix(const Fid& fid) {
  return InodeKey(fid);
}

std::string SessionKey(uint64_t session_id) {
  std::string k("S");
  AppendU64(&k, session_id);
  return k;
}

std::string OpenPrefix(uint64_t session_id) {
  std::string k("O");
  AppendU64(&k, session_id);
  return k;
}

std::string OpenKey(uint64_t session_id, uint64_t open_id) {
  std::string k = OpenPrefix(session_id);
  AppendU64(&k, open_id);
  return k;
}

std::string TaskKey(uint64_t task_id) {
  std::string k;
  AppendU64(&k, task_id);
  return k;
}

std::string OrphanKey(const Fid& fid) {
  std::string k(kOrphanPrefix);
  AppendFid(&k, fid);
  return k;
}

std::string HsmKey(const Fid& fid) {
  std::string k(kHsmPrefix);
  AppendFid(&k, fid);
  return k;
}

std::string RepoExportKey(const Fid& dir) {
  std::string k(kRepoExportPrefix);
  AppendFid(&k, dir);
  return k;
}

std::string RepoLinkKey(const Fid& dir) {
  std::string k(kRepoLinkPrefix);
  AppendFid(&k, dir);
  return k;
}

std::string ExportQueuePrefix(const Fid& dir) {
  std::string k(kExportQueuePrefix);
  AppendFid(&k, dir);
  return k;
}

std::string ExportQueueKey(const Fid& dir, const Fid& file) {
  std::string k = ExportQueuePrefix(dir);
  AppendFid(&k, file);
  return k;
}

std::string ClientKeyKey(uint32_t key_id) {
  std::string k(kClientKeyPrefix);
  AppendU32(&k, key_id);
  return k;
}

std::string OstKey(uint32_t index) {
  std::string k(kOstPrefix);
  AppendU32(&k, index);
  return k;
}

std::string ChainKey(uint32_t id) {
  std::string k(kChainPrefix);
  AppendU32(&k, id);
  return k;
}

std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(prefix.back());
    if (c != 0xff) {
      ++c;
      return prefix;
    }
    prefix.pop_back();
  }
  return prefix;
}

uint64_t NameHasher::operator()(std::string_view name) const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  // splitmix64 finalizer: spreads FNV's weak high bits.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  if (test_mask_ != 0)
    return kFirstHashCookie + (h & test_mask_);
  h >>= 1;
  return h < kFirstHashCookie ? h + kFirstHashCookie : h;
}

}  // namespace ciuic::meta
