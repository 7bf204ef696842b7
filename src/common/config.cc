#include "common/config.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace ciuic {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string HostPort::ToString() const {
  return fmt::format("{}:{}", host, port);
}

Result<HostPort> HostPort::Parse(const std::string& s) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    return Status::InvalidArgument(fmt::format("bad address '{}': expected host:port", s));
  }
  HostPort hp;
  hp.host = s.substr(0, colon);
  std::string port = s.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(port.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v <= 0 || v > 65535) {
    return Status::InvalidArgument(fmt::format("bad port in address '{}'", s));
  }
  hp.port = static_cast<uint16_t>(v);
  return hp;
}

Result<ClusterFile> ClusterFile::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Status::FromErrno(errno, fmt::format("cannot read cluster file {}", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad())
    return Status::IoError(fmt::format("cannot read cluster file {}", path));
  return Parse(text.str(), path);
}

Result<ClusterFile> ClusterFile::Parse(std::string_view text, const std::string& name) {
  ClusterFile cf;
  int lineno = 0;
  bool have_mds = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string line(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++lineno;
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#')
      continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(fmt::format("{}:{}: expected key = value", name, lineno));
    }
    std::string key = Trim(t.substr(0, eq));
    std::string val = Trim(t.substr(eq + 1));
    if (key == "cluster_uuid") {
      cf.cluster_uuid = val;
    } else if (key == "mds") {
      CIUIC_ASSIGN_OR_RETURN(cf.mds, HostPort::Parse(val));
      have_mds = true;
    } else if (key == "key_id") {
      // Digits only: strtoul alone took "-1" as 4294967295 and "x" as 0, and cut 2^32 + 1 to 1.
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(val.c_str(), &end, 10);
      if (val.empty() || val.find_first_not_of("0123456789") != std::string::npos || errno != 0 ||
          *end != '\0' || v == 0 || v > UINT32_MAX) {
        return Status::InvalidArgument(fmt::format("{}:{}: bad key_id '{}'", name, lineno, val));
      }
      cf.key_id = static_cast<uint32_t>(v);
    } else if (key == "secret") {
      cf.secret_hex = val;
    } else if (key == "node_cache") {
      cf.node_cache = val;
    } else if (key == "node_cache_bytes") {
      Result<uint64_t> n = ParseSize(val);
      if (!n.ok()) {
        return Status::InvalidArgument(
            fmt::format("{}:{}: bad node_cache_bytes '{}'", name, lineno, val));
      }
      cf.node_cache_bytes = *n;
    } else if (key == "node_cache_min_free") {
      char* end = nullptr;
      const double v = std::strtod(val.c_str(), &end);
      if (val.empty() || end == nullptr || *end != '\0' || !(v >= 0 && v < 100)) {
        return Status::InvalidArgument(
            fmt::format("{}:{}: bad node_cache_min_free '{}': want a percentage in [0, 100)", name,
                        lineno, val));
      }
      cf.node_cache_min_free_pct = v;
    }
    // Unknown keys are ignored so newer files stay readable.
  }
  if (!have_mds)
    return Status::InvalidArgument(fmt::format("{}: no 'mds' line", name));
  auto secret = HexDecode(cf.secret_hex);
  if (!secret.ok() || secret->size() < 16) {
    return Status::InvalidArgument(fmt::format("{}: 'secret' must be at least 16 hex bytes", name));
  }
  return cf;
}

Status ClusterFile::Save(const std::string& path) const {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out)
      return Status::FromErrno(errno, fmt::format("cannot write {}", tmp));
    out << "# ciuic cluster file: clients and tools read it to reach the cluster.\n"
        << "# Keep it private: it holds the cluster secret.\n"
        << "cluster_uuid = " << cluster_uuid << "\n"
        << "mds = " << mds.ToString() << "\n"
        << "key_id = " << key_id << "\n"
        << "secret = " << secret_hex << "\n";
    if (!node_cache.empty()) {
      out << "node_cache = " << node_cache << "\n"
          << "node_cache_bytes = " << node_cache_bytes << "\n";
      if (node_cache_min_free_pct >= 0)
        out << "node_cache_min_free = " << node_cache_min_free_pct << "\n";
    }
    if (!out.flush())
      return Status::IoError(fmt::format("cannot write {}", tmp));
  }
  ::chmod(tmp.c_str(), 0600);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::FromErrno(errno, fmt::format("cannot rename {}", tmp));
  }
  return Status::OK();
}

std::string ClusterFile::SecretBytes() const {
  return HexDecode(secret_hex).value_or("");
}

Result<std::string> FindClusterFile(const std::string& explicit_path) {
  if (!explicit_path.empty())
    return explicit_path;
  if (const char* env = std::getenv("CIUIC_CLUSTER"); env != nullptr && *env != '\0') {
    return std::string(env);
  }
  const char* home = std::getenv("HOME");
  std::string def = fmt::format("{}/ciuic/cluster.conf", home ? home : ".");
  struct stat st;
  if (::stat(def.c_str(), &st) == 0)
    return def;
  return Status::NotFound(
      "no cluster file: start one with `ciuic cluster up DIR`, then set CIUIC_CLUSTER or pass "
      "--cluster");
}

Result<uint64_t> ParseSize(const std::string& s) {
  std::string t = Trim(s);
  if (t.empty())
    return Status::InvalidArgument("bad size '': empty");
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end == t.c_str() || v < 0 || !std::isfinite(v)) {
    return Status::InvalidArgument(
        fmt::format("bad size '{}': expected e.g. 4096, 64K, 1MiB, 4G", s));
  }
  std::string unit = Trim(std::string(end));
  for (auto& c : unit)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    mult = 1024.0;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    mult = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return Status::InvalidArgument(fmt::format("bad size '{}': unknown unit '{}'", s, unit));
  }
  double bytes = v * mult;
  if (bytes > 9.2e18)
    return Status::InvalidArgument(fmt::format("bad size '{}': too large", s));
  if (unit.empty() && bytes != std::floor(bytes)) {
    return Status::InvalidArgument(fmt::format("bad size '{}': fractional bytes", s));
  }
  return static_cast<uint64_t>(bytes);
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0)
    return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      std::abort();  // no entropy source: nothing safe to do
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string HexEncode(const std::string& bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

Result<std::string> HexDecode(const std::string& hex) {
  if (hex.size() % 2 != 0)
    return Status::InvalidArgument("odd-length hex string");
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return Status::InvalidArgument("bad hex digit");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

std::string NewUuid() {
  std::string b = RandomBytes(16);
  b[6] = static_cast<char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<char>((b[8] & 0x3f) | 0x80);
  std::string h = HexEncode(b);
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4),
                     h.substr(16, 4), h.substr(20, 12));
}

uint64_t MachineDurabilityEpoch() {
  static const uint64_t epoch = [] {
    std::string id;
    if (std::ifstream f("/proc/sys/kernel/random/boot_id"); f)
      std::getline(f, id);
    if (id.empty())
      id = RandomBytes(16);
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : id)
      h = (h ^ c) * 0x100000001b3ull;
    return h == 0 ? 1 : h;
  }();
  return epoch;
}

}  // namespace ciuic
