#include "loader/tar_index.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <optional>

#include <fmt/format.h>

namespace ciuic::loader {
namespace {

constexpr size_t kBlock = 512;

uint64_t RoundUp(uint64_t n) {
  return (n + kBlock - 1) / kBlock * kBlock;
}

// Numeric header field: octal text (NUL/space terminated) or GNU base-256 (high bit set).
Result<uint64_t> ParseNumber(const char* f, size_t len, uint64_t at) {
  if (static_cast<unsigned char>(f[0]) & 0x80) {
    uint64_t v = static_cast<unsigned char>(f[0]) & 0x7f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 55) {
        return Status::Corruption(fmt::format("tar header at {}: number too large", at));
      }
      v = (v << 8) | static_cast<unsigned char>(f[i]);
    }
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < len && (f[i] == ' ' || f[i] == '\0')) {
    ++i;
  }
  for (; i < len && f[i] != '\0' && f[i] != ' '; ++i) {
    if (f[i] < '0' || f[i] > '7') {
      return Status::Corruption(fmt::format("tar header at {}: bad numeric field", at));
    }
    v = v * 8 + static_cast<uint64_t>(f[i] - '0');
  }
  return v;
}

std::string Field(const char* f, size_t len) {
  return std::string(f, strnlen(f, len));
}

bool AllZero(const char* b) {
  return std::all_of(b, b + kBlock, [](char c) { return c == 0; });
}

// Values of "path" and "size" from a pax extended header body ("<len> key=value\n" records).
Status ParsePax(std::string_view body,
                uint64_t at,
                std::string* path,
                std::optional<uint64_t>* size) {
  while (!body.empty()) {
    size_t sp = body.find(' ');
    uint64_t len = 0;
    if (sp == std::string_view::npos ||
        std::from_chars(body.data(), body.data() + sp, len).ec != std::errc() || len <= sp + 1 ||
        len > body.size()) {
      return Status::Corruption(fmt::format("tar pax header at {}: bad record", at));
    }
    std::string_view rec = body.substr(sp + 1, len - sp - 2);  // drop "\n"
    size_t eq = rec.find('=');
    if (eq != std::string_view::npos) {
      std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
      if (key == "path") {
        *path = std::string(value);
      } else if (key == "size") {
        uint64_t v = 0;
        if (std::from_chars(value.data(), value.data() + value.size(), v).ec != std::errc()) {
          return Status::Corruption(fmt::format("tar pax header at {}: bad size", at));
        }
        *size = v;
      }
    }
    body.remove_prefix(len);
  }
  return Status::OK();
}

// Walks the archive with `read(offset, len, out)` filling exactly len bytes (or failing).
template <typename ReadFn>
Result<std::vector<TarMember>> Scan(uint64_t file_size, ReadFn read) {
  std::vector<TarMember> out;
  uint64_t at = 0;
  std::string long_name;
  std::string pax_path;
  std::optional<uint64_t> pax_size;
  char h[kBlock];
  while (at + kBlock <= file_size) {
    CIUIC_RETURN_IF_ERROR(read(at, kBlock, h));
    if (AllZero(h)) {
      break;  // end of archive
    }
    CIUIC_ASSIGN_OR_RETURN(uint64_t chksum, ParseNumber(h + 148, 8, at));
    uint64_t sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    if (sum != chksum) {
      return Status::Corruption(fmt::format("tar header at offset {}: bad checksum", at));
    }
    CIUIC_ASSIGN_OR_RETURN(uint64_t size, ParseNumber(h + 124, 12, at));
    char type = h[156];
    uint64_t data = at + kBlock;
    if (type == 'x' || type == 'L') {
      if (size > (uint64_t{1} << 20) || data + size > file_size) {
        return Status::Corruption(fmt::format("tar header at offset {}: bad extended header", at));
      }
      std::string body(size, '\0');
      CIUIC_RETURN_IF_ERROR(read(data, size, body.data()));
      if (type == 'L') {
        long_name = Field(body.data(), body.size());
      } else {
        CIUIC_RETURN_IF_ERROR(ParsePax(body, at, &pax_path, &pax_size));
      }
      at = data + RoundUp(size);
      continue;
    }
    if (pax_size) {
      size = *pax_size;
    }
    if (data + size > file_size) {
      return Status::Corruption(
          fmt::format("tar member at offset {}: {} bytes run past the end of the file ({} bytes)",
                      at, size, file_size));
    }
    if (type == '0' || type == '\0' || type == '7') {
      std::string name;
      if (!pax_path.empty()) {
        name = pax_path;
      } else if (!long_name.empty()) {
        name = long_name;
      } else {
        std::string prefix = std::memcmp(h + 257, "ustar", 5) == 0 ? Field(h + 345, 155) : "";
        name = Field(h, 100);
        if (!prefix.empty()) {
          name = prefix + "/" + name;
        }
      }
      out.push_back({std::move(name), data, size});
    }
    long_name.clear();
    pax_path.clear();
    pax_size.reset();
    at = data + RoundUp(size);
  }
  return out;
}

}  // namespace

Result<std::vector<TarMember>> ScanTar(File& file, uint64_t file_size) {
  return Scan(file_size, [&](uint64_t off, uint64_t len, char* out) -> Status {
    CIUIC_ASSIGN_OR_RETURN(size_t n, file.Pread(out, len, off));
    if (n != len) {
      return Status::Corruption(
          fmt::format("{}: tar file truncated at offset {}", file.path(), off));
    }
    return Status::OK();
  });
}

Result<std::vector<TarMember>> ScanTarBytes(std::string_view tar) {
  return Scan(tar.size(), [&](uint64_t off, uint64_t len, char* out) -> Status {
    std::memcpy(out, tar.data() + off, len);
    return Status::OK();
  });
}

std::string FormatIndex(const std::vector<TarMember>& members) {
  std::string s = fmt::format("ciuic-shard-index 1 {}\n", members.size());
  for (const auto& m : members) {
    s += fmt::format("{} {} {}\n", m.offset, m.size, m.name);
  }
  return s;
}

Result<std::vector<TarMember>> ParseIndex(std::string_view text) {
  auto bad = [](size_t line) {
    return Status::Corruption(fmt::format("shard index: malformed line {}", line));
  };
  size_t nl = text.find('\n');
  std::string_view head = text.substr(0, nl);
  constexpr std::string_view kMagic = "ciuic-shard-index 1 ";
  uint64_t count = 0;
  if (nl == std::string_view::npos || head.substr(0, kMagic.size()) != kMagic ||
      std::from_chars(head.data() + kMagic.size(), head.data() + head.size(), count).ec !=
          std::errc()) {
    return Status::Corruption("shard index: missing 'ciuic-shard-index 1 <count>' header");
  }
  text.remove_prefix(nl + 1);
  std::vector<TarMember> out;
  size_t line = 2;
  while (!text.empty()) {
    nl = text.find('\n');
    if (nl == std::string_view::npos) {
      return bad(line);
    }
    std::string_view l = text.substr(0, nl);
    TarMember m;
    auto r1 = std::from_chars(l.data(), l.data() + l.size(), m.offset);
    if (r1.ec != std::errc() || r1.ptr == l.data() + l.size() || *r1.ptr != ' ') {
      return bad(line);
    }
    auto r2 = std::from_chars(r1.ptr + 1, l.data() + l.size(), m.size);
    if (r2.ec != std::errc() || r2.ptr == l.data() + l.size() || *r2.ptr != ' ' ||
        r2.ptr + 1 == l.data() + l.size()) {
      return bad(line);
    }
    m.name = std::string(r2.ptr + 1, l.data() + l.size());
    out.push_back(std::move(m));
    text.remove_prefix(nl + 1);
    ++line;
  }
  if (out.size() != count) {
    return Status::Corruption(
        fmt::format("shard index: header says {} members, found {}", count, out.size()));
  }
  return out;
}

// Writes `v` as `width - 1` octal digits and a NUL (ustar numeric field); `v` must fit.
static void Octal(char* f, size_t width, uint64_t v) {
  f[width - 1] = '\0';
  for (size_t i = width - 1; i-- > 0;) {
    f[i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
}

void TarWriter::Header(std::string_view name, uint64_t size, char type, int64_t mtime_sec) {
  char h[kBlock] = {};
  std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
  Octal(h + 100, 8, 0644);
  Octal(h + 108, 8, 0);
  Octal(h + 116, 8, 0);
  Octal(h + 124, 12, size);  // < 8 GiB (checked by Add)
  Octal(h + 136, 12, std::clamp<int64_t>(mtime_sec, 0, (int64_t{1} << 33) - 1));
  h[156] = type;
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    sum += static_cast<unsigned char>(h[i]);
  }
  Octal(h + 148, 7, sum);  // six digits, NUL, then the space left by the memset
  out_.append(h, kBlock);
}

Status TarWriter::Add(const std::string& name, std::string_view data, int64_t mtime_sec) {
  if (name.empty()) {
    return Status::InvalidArgument("tar member with an empty name");
  }
  if (data.size() >= (uint64_t{1} << 33)) {
    return Status::InvalidArgument(fmt::format("{}: too large for a ustar member", name));
  }
  if (name.size() >= 100) {
    // pax record "<len> path=<name>\n" where <len> counts itself.
    std::string rec = " path=" + name + "\n";
    size_t len = rec.size() + 1;
    while (std::to_string(len).size() + rec.size() != len) {
      ++len;
    }
    std::string body = std::to_string(len) + rec;
    Header("././@PaxHeader", body.size(), 'x', mtime_sec);
    out_ += body;
    out_.append(RoundUp(body.size()) - body.size(), '\0');
  }
  Header(name, data.size(), '0', mtime_sec);
  members_.push_back({name, out_.size(), data.size()});
  out_.append(data);
  out_.append(RoundUp(data.size()) - data.size(), '\0');
  return Status::OK();
}

std::string TarWriter::Finish() {
  out_.append(2 * kBlock, '\0');
  std::string s = std::move(out_);
  Reset();
  return s;
}

void TarWriter::Reset() {
  out_.clear();
  members_.clear();
}

}  // namespace ciuic::loader
