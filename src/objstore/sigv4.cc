#include "objstore/sigv4.h"

#include <time.h>

#include <algorithm>
#include <map>

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace ciuic::objstore::sigv4 {
namespace {

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

bool IsHeaderSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

// Trims the value and turns each run of white space inside it into one space ("Trimall").
std::string TrimAll(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool pending_space = false;
  for (char c : v) {
    if (IsHeaderSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) {
      out.push_back(' ');
      pending_space = false;
    }
    out.push_back(c);
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

}  // namespace

std::string UriEncode(std::string_view in, bool keep_slash) {
  static constexpr char kHexDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size() * 3);
  for (char ch : in) {
    auto c = static_cast<unsigned char>(ch);
    if (IsUnreserved(c) || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHexDigits[c >> 4]);
      out.push_back(kHexDigits[c & 0xF]);
    }
  }
  return out;
}

std::string UriDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%' && i + 2 < in.size()) {
      int hi = HexValue(in[i + 1]);
      int lo = HexValue(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

std::string NormalizePath(std::string_view path) {
  std::vector<std::string_view> segments;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) {
      slash = path.size();
    }
    std::string_view seg = path.substr(pos, slash - pos);
    if (seg == "..") {
      if (!segments.empty()) {
        segments.pop_back();
      }
    } else if (!seg.empty() && seg != ".") {
      segments.push_back(seg);
    }
    pos = slash + 1;
  }
  std::string out = "/";
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) {
      out.push_back('/');
    }
    out.append(segments[i]);
  }
  // A trailing '/' names a "directory" and is kept; "/a/.." still ends at the root.
  if (!segments.empty() && !path.empty() && path.back() == '/') {
    out.push_back('/');
  }
  return out;
}

std::string CanonicalUri(std::string_view path, const SigningOptions& opts) {
  if (path.empty()) {
    path = "/";
  }
  std::string p = opts.normalize_path ? NormalizePath(path) : std::string(path);
  return opts.double_encode_path ? UriEncode(p, true) : p;
}

std::string CanonicalQueryString(const std::vector<QueryParam>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [name, value] : query) {
    encoded.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) {
      out.push_back('&');
    }
    out.append(name).append("=").append(value);
  }
  return out;
}

std::vector<QueryParam> ParseQueryString(std::string_view raw) {
  std::vector<QueryParam> out;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t amp = raw.find('&', pos);
    if (amp == std::string_view::npos) {
      amp = raw.size();
    }
    std::string_view pair = raw.substr(pos, amp - pos);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      if (eq == std::string_view::npos) {
        out.emplace_back(UriDecode(pair), "");
      } else {
        out.emplace_back(UriDecode(pair.substr(0, eq)), UriDecode(pair.substr(eq + 1)));
      }
    }
    pos = amp + 1;
  }
  return out;
}

std::string CanonicalHeaders(const std::vector<Header>& headers, std::string* signed_headers) {
  std::map<std::string, std::string> merged;  // sorted by lower-cased name
  for (const auto& [name, value] : headers) {
    auto [it, inserted] = merged.try_emplace(TrimAll(Lower(name)), TrimAll(value));
    if (!inserted) {
      it->second.append(",").append(TrimAll(value));
    }
  }
  std::string out;
  std::string names;
  for (const auto& [name, value] : merged) {
    out.append(name).append(":").append(value).append("\n");
    if (!names.empty()) {
      names.push_back(';');
    }
    names.append(name);
  }
  if (signed_headers != nullptr) {
    *signed_headers = std::move(names);
  }
  return out;
}

std::string CanonicalRequest(const Request& req,
                             const SigningOptions& opts,
                             std::string* signed_headers) {
  std::string names;
  std::string headers = CanonicalHeaders(req.headers, &names);
  std::string out;
  out.append(req.method).append("\n");
  out.append(CanonicalUri(req.path, opts)).append("\n");
  out.append(CanonicalQueryString(req.query)).append("\n");
  out.append(headers).append("\n");
  out.append(names).append("\n");
  out.append(req.payload_hash);
  if (signed_headers != nullptr) {
    *signed_headers = std::move(names);
  }
  return out;
}

std::string CredentialScope(const Scope& scope) {
  return scope.date + "/" + scope.region + "/" + scope.service + "/aws4_request";
}

std::string StringToSign(std::string_view amz_date,
                         const Scope& scope,
                         std::string_view canonical_request) {
  std::string out(kAlgorithm);
  out.append("\n").append(amz_date).append("\n");
  out.append(CredentialScope(scope)).append("\n");
  out.append(Sha256Hex(canonical_request));
  return out;
}

std::string SigningKey(std::string_view secret_access_key, const Scope& scope) {
  std::string k_date = HmacSha256("AWS4" + std::string(secret_access_key), scope.date);
  std::string k_region = HmacSha256(k_date, scope.region);
  std::string k_service = HmacSha256(k_region, scope.service);
  return HmacSha256(k_service, "aws4_request");
}

Signature Sign(const Request& req,
               const Credentials& creds,
               std::string_view amz_date,
               std::string_view region,
               std::string_view service,
               const SigningOptions& opts) {
  Signature out;
  Scope scope{std::string(amz_date.substr(0, 8)), std::string(region), std::string(service)};
  out.canonical_request = CanonicalRequest(req, opts, &out.signed_headers);
  out.string_to_sign = StringToSign(amz_date, scope, out.canonical_request);
  out.signature = Hex(HmacSha256(SigningKey(creds.secret_access_key, scope), out.string_to_sign));
  out.authorization = std::string(kAlgorithm) + " Credential=" + creds.access_key_id + "/" +
                      CredentialScope(scope) + ", SignedHeaders=" + out.signed_headers +
                      ", Signature=" + out.signature;
  return out;
}

void AddS3Headers(Request& req, const Credentials& creds, std::string_view amz_date) {
  req.headers.emplace_back("x-amz-date", std::string(amz_date));
  req.headers.emplace_back("x-amz-content-sha256", req.payload_hash);
  if (!creds.session_token.empty()) {
    req.headers.emplace_back("x-amz-security-token", creds.session_token);
  }
}

std::string Hex(std::string_view bytes) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    auto c = static_cast<unsigned char>(ch);
    out.push_back(kHexDigits[c >> 4]);
    out.push_back(kHexDigits[c & 0xF]);
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // EVP_Digest fails only on allocation failure; an all-zero hash then fails the signature,
  // which the server reports.
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    len = 32;
    std::fill(md, md + len, 0);
  }
  return Hex(std::string_view(reinterpret_cast<const char*>(md), len));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // OpenSSL wants a non-null key pointer even for an empty key.
  static const unsigned char kEmpty = 0;
  const void* key_ptr = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len) == nullptr) {
    len = 32;
    std::fill(md, md + len, 0);
  }
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string FormatAmzDate(int64_t unix_seconds) {
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace ciuic::objstore::sigv4
