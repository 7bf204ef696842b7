#include "oss/ost_format.h"

#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "common/crc32c.h"

namespace ciuic::oss {
namespace {

constexpr char kStampMagic[] = "ciuic-ost-stamp";
constexpr char kCrcMagic[8] = {'C', 'I', 'U', 'I', 'C', 'S', 'U', 'M'};
constexpr size_t kCrcHeaderCovered = 28;  // bytes covered by the header CRC

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos)
    return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

Result<uint32_t> ParseU32(const std::string& v, const char* what) {
  if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != std::string::npos) {
    return Status::Corruption(fmt::format("stamp: bad {} '{}'", what, v));
  }
  uint64_t n = std::stoull(v);
  if (n > UINT32_MAX)
    return Status::Corruption(fmt::format("stamp: bad {} '{}'", what, v));
  return static_cast<uint32_t>(n);
}

}  // namespace

std::string OstStamp::Encode() const {
  std::string s = fmt::format("{}\nformat_version = {}\ncluster_uuid = {}\nost_index = {}\n",
                              kStampMagic, format_version, cluster_uuid, ost_index);
  if (incarnation != 0)
    s += fmt::format("incarnation = {:016x}\n", incarnation);
  return s;
}

Result<OstStamp> OstStamp::Parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  if (!std::getline(in, line) || Trim(line) != kStampMagic) {
    return Status::Corruption("not an OST stamp file (bad first line)");
  }
  OstStamp s;
  bool have_version = false, have_uuid = false, have_index = false;
  while (std::getline(in, line)) {
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#')
      continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos)
      return Status::Corruption("stamp: malformed line '" + t + "'");
    std::string key = Trim(std::string_view(t).substr(0, eq));
    std::string value = Trim(std::string_view(t).substr(eq + 1));
    if (key == "format_version") {
      CIUIC_ASSIGN_OR_RETURN(s.format_version, ParseU32(value, "format_version"));
      have_version = true;
    } else if (key == "cluster_uuid") {
      s.cluster_uuid = value;
      have_uuid = !value.empty();
    } else if (key == "ost_index") {
      CIUIC_ASSIGN_OR_RETURN(s.ost_index, ParseU32(value, "ost_index"));
      have_index = true;
    } else if (key == "incarnation") {
      if (value.empty() || value.size() > 16 ||
          value.find_first_not_of("0123456789abcdef") != std::string::npos) {
        return Status::Corruption(fmt::format("stamp: bad incarnation '{}'", value));
      }
      s.incarnation = std::stoull(value, nullptr, 16);
    }  // unknown keys are ignored: later versions may add some
  }
  if (!have_version || !have_uuid || !have_index) {
    return Status::Corruption("stamp: missing format_version, cluster_uuid or ost_index");
  }
  return s;
}

void CrcHeader::Encode(uint8_t* page) const {
  std::memset(page, 0, kCrcHeaderSize);
  std::memcpy(page, kCrcMagic, 8);
  uint32_t version = kOstFormatVersion;
  uint32_t block = kBlockSize;
  std::memcpy(page + 8, &version, 4);
  std::memcpy(page + 12, &block, 4);
  std::memcpy(page + 16, &length, 8);
  std::memcpy(page + 24, &chain, 4);  // zero in files written before chains existed
  uint32_t crc = Crc32c(page, kCrcHeaderCovered);
  std::memcpy(page + kCrcHeaderCovered, &crc, 4);
}

Result<CrcHeader> CrcHeader::Decode(const uint8_t* page, size_t len) {
  if (len < kCrcHeaderCovered + 4)
    return Status::Corruption("checksum file header is truncated");
  if (std::memcmp(page, kCrcMagic, 8) != 0)
    return Status::Corruption("checksum file: bad magic");
  uint32_t crc;
  std::memcpy(&crc, page + kCrcHeaderCovered, 4);
  if (crc != Crc32c(page, kCrcHeaderCovered)) {
    return Status::Corruption("checksum file: header checksum mismatch");
  }
  uint32_t version, block;
  std::memcpy(&version, page + 8, 4);
  std::memcpy(&block, page + 12, 4);
  if (version != kOstFormatVersion || block != kBlockSize) {
    return Status::Corruption(
        fmt::format("checksum file: unsupported version {} / block size {}", version, block));
  }
  CrcHeader h;
  std::memcpy(&h.length, page + 16, 8);
  std::memcpy(&h.chain, page + 24, 4);
  if (h.length > kMaxObjectSize)
    return Status::Corruption("checksum file: length out of range");
  return h;
}

bool ParseObjectFileName(std::string_view name, ObjectId* out) {
  // "<mds>-<seq>-<ver>.<comp>.<stripe>", lower-case hex.
  uint64_t v[5];
  const char seps[5] = {'-', '-', '.', '.', '\0'};
  size_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    uint64_t x = 0;
    size_t digits = 0;
    while (pos < name.size()) {
      const char ch = name[pos];
      int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
      if (d < 0)
        break;
      if (++digits > 16)
        return false;
      x = x << 4 | static_cast<uint64_t>(d);
      ++pos;
    }
    if (digits == 0)
      return false;
    v[i] = x;
    if (i < 4) {
      if (pos >= name.size() || name[pos] != seps[i])
        return false;
      ++pos;
    } else if (pos != name.size()) {
      return false;
    }
  }
  if (v[0] > UINT32_MAX || v[2] > UINT32_MAX || v[3] > UINT32_MAX || v[4] > UINT32_MAX)
    return false;
  out->fid.mds = static_cast<uint32_t>(v[0]);
  out->fid.seq = v[1];
  out->fid.ver = static_cast<uint32_t>(v[2]);
  out->comp = static_cast<uint32_t>(v[3]);
  out->stripe = static_cast<uint32_t>(v[4]);
  return true;
}

}  // namespace ciuic::oss
