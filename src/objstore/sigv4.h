// AWS Signature Version 4 (header-based, "AWS4-HMAC-SHA256"), written as pure functions: each
// step of the algorithm (URI encoding, canonical query and headers, canonical request, string to
// sign, signing key, signature, Authorization header) is its own function so tests can check
// each one against published vectors. Nothing here does IO, reads a clock or holds state.
//
// The two flavors of the algorithm differ only in the canonical URI:
//   * S3 (SigningOptions::S3()): the path is signed as sent, already encoded once by the
//     caller (S3UriEncodePath), neither normalized nor encoded again;
//   * every other AWS service and the generic aws-sig-v4-test-suite (SigningOptions::Generic()):
//     the path is normalized (".", ".." and empty segments removed) and then URI-encoded again.
//
// Thread-safety: all functions are pure and may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ciuic::objstore::sigv4 {

// The hex SHA-256 of the empty string: the payload hash of a request without a body.
inline constexpr std::string_view kEmptyPayloadHash =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// The payload hash S3 accepts in place of a body's hash.
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" unless temporary credentials (x-amz-security-token)

  bool empty() const { return access_key_id.empty(); }
};

struct SigningOptions {
  // Remove "." and ".." segments and collapse empty ones before encoding the path.
  bool normalize_path = false;
  // URI-encode the (already encoded) path once more for the canonical URI.
  bool double_encode_path = false;

  static SigningOptions S3() { return {}; }
  static SigningOptions Generic() { return {.normalize_path = true, .double_encode_path = true}; }
};

using Header = std::pair<std::string, std::string>;      // name (any case), value (untrimmed)
using QueryParam = std::pair<std::string, std::string>;  // decoded name and value (raw bytes)

struct Request {
  std::string method;  // "GET", "PUT", ...
  std::string path;    // the path as sent on the wire: "/bucket/a%20b"; "" is read as "/"
  std::vector<QueryParam> query;
  // Exactly the headers to sign, "host" included; a name may repeat (values join with ',').
  std::vector<Header> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or kUnsignedPayload
};

struct Scope {
  std::string date;     // "20150830" (the first 8 characters of the x-amz-date)
  std::string region;   // "us-east-1"
  std::string service;  // "s3"
};

// Everything one signing produces, kept for tests and for debugging a SignatureDoesNotMatch.
struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-content-sha256;x-amz-date"
  std::string signature;       // lower-case hex
  std::string authorization;   // the Authorization header's value
};

// Returns `in` with every byte percent-encoded ("%2F", upper-case hex) except the unreserved
// A-Z a-z 0-9 '-' '_' '.' '~'; with keep_slash, '/' is kept as well (paths).
std::string UriEncode(std::string_view in, bool keep_slash);

// Returns the wire path of an S3 key: '/' kept, every other byte but the unreserved encoded.
inline std::string S3UriEncodePath(std::string_view path) {
  return UriEncode(path, true);
}

// Returns `in` with each "%XX" decoded (and, with plus_is_space, '+' read as ' ', as in
// application/x-www-form-urlencoded). A '%' not followed by two hex digits is kept as is.
std::string UriDecode(std::string_view in, bool plus_is_space = false);

// Returns the path with "." and ".." segments resolved and runs of '/' collapsed, keeping a
// trailing '/' (RFC 3986 section 5.2.4, as the generic signing rules ask). "" becomes "/".
std::string NormalizePath(std::string_view path);

// Returns the canonical URI of `path` (a wire path) under `opts`.
std::string CanonicalUri(std::string_view path, const SigningOptions& opts);

// Returns "a=1&b=2": each name and value URI-encoded ('/' too), sorted by encoded name, then
// encoded value; a parameter without a value is "name=".
std::string CanonicalQueryString(const std::vector<QueryParam>& query);

// Splits a raw query string ("b=2&a=%41") into decoded parameters, in order.
std::vector<QueryParam> ParseQueryString(std::string_view raw);

// Returns the canonical headers block, one "name:value\n" per distinct lower-cased name in
// sorted order; values are trimmed, runs of spaces and tabs become one space, and the values of
// a repeated name are joined with ',' in the order given. Sets *signed_headers to the
// ';'-joined names.
std::string CanonicalHeaders(const std::vector<Header>& headers, std::string* signed_headers);

// Returns the canonical request: method, canonical URI, query, headers, signed headers and the
// payload hash, one per line.
std::string CanonicalRequest(const Request& req,
                             const SigningOptions& opts,
                             std::string* signed_headers = nullptr);

// Returns "20150830/us-east-1/service/aws4_request".
std::string CredentialScope(const Scope& scope);

// Returns the string to sign: algorithm, x-amz-date, scope and the hex SHA-256 of the
// canonical request.
std::string StringToSign(std::string_view amz_date,
                         const Scope& scope,
                         std::string_view canonical_request);

// Returns the 32-byte signing key HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region),
// service), "aws4_request").
std::string SigningKey(std::string_view secret_access_key, const Scope& scope);

// Signs `req` as of `amz_date` ("20150830T123600Z") with `creds` in `region` for `service`.
// Signs exactly req.headers: callers add host, x-amz-date and the rest first (AddS3Headers).
Signature Sign(const Request& req,
               const Credentials& creds,
               std::string_view amz_date,
               std::string_view region,
               std::string_view service,
               const SigningOptions& opts);

// Adds the headers S3 wants signed to `req`: x-amz-date, x-amz-content-sha256 (req's payload
// hash) and, with temporary credentials, x-amz-security-token.
void AddS3Headers(Request& req, const Credentials& creds, std::string_view amz_date);

// Returns the lower-case hex of `bytes`.
std::string Hex(std::string_view bytes);
// Returns the hex SHA-256 of `data` (a payload hash).
std::string Sha256Hex(std::string_view data);
// Returns the raw 32-byte HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(std::string_view key, std::string_view data);

// Formats Unix seconds as an x-amz-date, "20150830T123600Z" (UTC).
std::string FormatAmzDate(int64_t unix_seconds);

}  // namespace ciuic::objstore::sigv4
