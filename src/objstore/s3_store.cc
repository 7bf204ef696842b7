#include "objstore/s3_store.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <optional>
#include <random>
#include <thread>

#include <openssl/evp.h>

#include "common/logging.h"
#include "objstore/object_store_internal.h"
#include "objstore/s3_xml.h"

namespace ciuic::objstore {
namespace {

constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxMetadataBytes = 2048;  // S3's limit on all x-amz-meta-* together

// Shows a key in a message: non-printable bytes as \xHH, at most 200 bytes of it.
std::string Printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\x%02X", c);
      out.append(buf);
    }
  }
  if (s.size() > 200) {
    out.append("...");
  }
  return out;
}

// Returns OK if `key` is a valid key (ValidateKey) that S3 can also hold: S3 keys are UTF-8, so
// a key that is not well-formed UTF-8 is kInvalidArgument naming it.
Status CheckS3Key(std::string_view key) {
  CIUIC_RETURN_IF_ERROR(ValidateKey(key));
  if (!internal::IsValidUtf8(key)) {
    return Status::InvalidArgument("invalid object key " + internal::QuoteKey(key) +
                                   ": S3 keys must be valid UTF-8");
  }
  return Status::OK();
}

// Calls `source` for [offset, offset + dst.size()), turning an exception into kInternal and
// naming the object (`where`) in an error.
Status ReadSource(const PutSource& source,
                  uint64_t offset,
                  std::span<char> dst,
                  std::string_view where) {
  Status s;
  try {
    s = source(offset, dst);
  } catch (const std::exception& e) {
    s = Status::Internal(std::string("put source threw: ") + e.what());
  }
  if (s.ok()) {
    return s;
  }
  return s.WithContext(std::string(where) + ": put: reading the source at offset " +
                       std::to_string(offset));
}

Status CheckMetadata(const std::map<std::string, std::string>& metadata, std::string_view where) {
  size_t total = 0;
  for (const auto& [name, value] : metadata) {
    bool name_ok = !name.empty();
    for (char c : name) {
      name_ok = name_ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
    }
    if (!name_ok) {
      return Status::InvalidArgument(std::string(where) + ": metadata name \"" + Printable(name) +
                                     "\" is not [a-z0-9-]+");
    }
    for (char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return Status::InvalidArgument(std::string(where) + ": metadata \"" + name +
                                       "\" has a value that is not printable ASCII");
      }
    }
    total += name.size() + value.size();
  }
  if (total > kMaxMetadataBytes) {
    return Status::InvalidArgument(std::string(where) + ": metadata is over 2 KiB");
  }
  return Status::OK();
}

bool IsRetryableCode(std::string_view code) {
  return code == "SlowDown" || code == "RequestTimeout" || code == "InternalError" ||
         code == "ServiceUnavailable" || code == "Throttling" || code == "ThrottlingException" ||
         code == "RequestLimitExceeded" || code == "TooManyRequests";
}

struct S3Error {
  std::string code;
  std::string message;
  std::string region;  // a PermanentRedirect's or AuthorizationHeaderMalformed's right region
};

S3Error ErrorOf(const HttpResponse& resp) {
  S3Error e;
  if (!resp.body.empty()) {
    Result<xml::Element> doc = xml::Parse(resp.body);
    if (doc.ok() && doc->name == "Error") {
      e.code = doc->ChildText("Code");
      e.message = doc->ChildText("Message");
      e.region = doc->ChildText("Region");
    }
  }
  if (e.code.empty()) {
    auto it = resp.headers.find("x-amz-error-code");
    if (it != resp.headers.end()) {
      e.code = it->second;
    }
  }
  auto it = resp.headers.find("x-amz-bucket-region");
  if (e.region.empty() && it != resp.headers.end()) {
    e.region = it->second;
  }
  return e;
}

bool IsRetryable(const HttpResponse& resp) {
  if (resp.status >= 500 || resp.status == 429) {
    return true;
  }
  // S3 answers an idle upload with 400 RequestTimeout; some servers throttle with 4xx SlowDown.
  return resp.status >= 400 && IsRetryableCode(ErrorOf(resp).code);
}

std::string StripQuotes(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

std::optional<uint64_t> ParseUint(std::string_view s) {
  if (s.empty() || s.size() > 19) {
    return std::nullopt;
  }
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// "2009-10-12T17:50:30.000Z" (ListObjectsV2) to Unix milliseconds; 0 if unreadable.
int64_t ParseIso8601Ms(const std::string& s) {
  struct tm tm {};
  const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) {
    return 0;
  }
  int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000;
  if (*rest == '.') {
    int64_t frac = 0;
    int digits = 0;
    for (++rest; *rest >= '0' && *rest <= '9'; ++rest) {
      if (digits < 3) {
        frac = frac * 10 + (*rest - '0');
        ++digits;
      }
    }
    for (; digits < 3; ++digits) {
      frac *= 10;
    }
    ms += frac;
  }
  return ms;
}

// "Wed, 12 Oct 2009 17:50:00 GMT" (Last-Modified) to Unix milliseconds; 0 if unreadable.
int64_t ParseHttpDateMs(const std::string& s) {
  struct tm tm {};
  if (strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S", &tm) == nullptr) {
    return 0;
  }
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

std::string Md5Base64(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  unsigned char b64[64];
  int n = EVP_EncodeBlock(b64, md, static_cast<int>(len));
  return std::string(reinterpret_cast<char*>(b64), static_cast<size_t>(std::max(n, 0)));
}

// "bytes 0-9/443" (or "bytes */443" on a 416); total is UINT64_MAX when "*".
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t total = UINT64_MAX;
  bool has_range = false;
};

std::optional<ContentRange> ParseContentRange(std::string_view v) {
  if (!v.starts_with("bytes ")) {
    return std::nullopt;
  }
  v.remove_prefix(6);
  size_t slash = v.find('/');
  if (slash == std::string_view::npos) {
    return std::nullopt;
  }
  ContentRange cr;
  std::string_view range = v.substr(0, slash);
  std::string_view total = v.substr(slash + 1);
  if (total != "*") {
    auto t = ParseUint(total);
    if (!t) {
      return std::nullopt;
    }
    cr.total = *t;
  }
  if (range != "*") {
    size_t dash = range.find('-');
    if (dash == std::string_view::npos) {
      return std::nullopt;
    }
    auto first = ParseUint(range.substr(0, dash));
    auto last = ParseUint(range.substr(dash + 1));
    if (!first || !last || *last < *first) {
      return std::nullopt;
    }
    cr.first = *first;
    cr.last = *last;
    cr.has_range = true;
  }
  return cr;
}

std::chrono::milliseconds Backoff(const S3Options& o, uint32_t retry) {
  // Exponential from backoff_base, capped, with "equal jitter": half fixed, half random, so
  // clients that failed together do not retry together.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int64_t cap = o.backoff_max.count();
  int64_t d = o.backoff_base.count();
  for (uint32_t i = 1; i < retry && d < cap; ++i) {
    d *= 2;
  }
  d = std::min(d, cap);
  int64_t half = d / 2;
  std::uniform_int_distribution<int64_t> jitter(0, d - half);
  return std::chrono::milliseconds(half + jitter(rng));
}

}  // namespace

struct S3Store::Call {
  std::string op;  // what it does, for messages: "PUT", "GET bytes=0-9", ...
  std::string method;
  std::string full_key;  // "" addresses the bucket
  std::vector<sigv4::QueryParam> query;
  std::vector<sigv4::Header> headers;  // beyond host and x-amz-date; all signed
  std::string_view body;
  std::span<char> sink;
  // CompleteMultipartUpload may answer 200 and then report an error in the body.
  bool error_in_200 = false;
};

struct S3Store::RangeResult {
  size_t bytes = 0;
  uint64_t total = UINT64_MAX;  // the object's size, when the answer said
  std::string etag;             // as sent (quoted), for If-Match
};

Result<std::unique_ptr<S3Store>> S3Store::Open(S3Options opts, const EnvLookup& env) {
  const std::string& b = opts.bucket;
  bool bucket_ok = !b.empty() && b.size() <= 255;
  for (char c : b) {
    bucket_ok = bucket_ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_');
  }
  if (!bucket_ok) {
    return Status::InvalidArgument("S3 bucket name \"" + Printable(b) +
                                   "\" is not 1..255 of [A-Za-z0-9._-]");
  }
  std::string_view root = opts.root_prefix;
  while (!root.empty() && root.front() == '/') {
    root.remove_prefix(1);
  }
  while (!root.empty() && root.back() == '/') {
    root.remove_suffix(1);
  }
  if (!root.empty()) {
    CIUIC_RETURN_IF_ERROR(CheckS3Key(root).WithContext("s3://" + b + ": root prefix"));
  }
  opts.root_prefix = std::string(root);
  if (opts.part_size < kMinPartSize || opts.part_size > kMaxPartSize) {
    return Status::InvalidArgument("S3 part size " + std::to_string(opts.part_size) +
                                   " is not between 5 MiB and 5 GiB");
  }
  if (opts.parallelism < 1 || opts.parallelism > 256) {
    return Status::InvalidArgument("S3 parallelism " + std::to_string(opts.parallelism) +
                                   " is not 1..256");
  }
  if (opts.backoff_base.count() < 0 || opts.backoff_max < opts.backoff_base) {
    return Status::InvalidArgument("S3 backoff: need 0 <= backoff_base <= backoff_max");
  }

  CIUIC_ASSIGN_OR_RETURN(ResolvedCredentials creds, ResolveCredentials(opts.credentials, env));
  std::string region = ResolveRegion(opts.region, env);
  std::string endpoint = ResolveEndpoint(opts.endpoint, region, env);

  // scheme://host[:port][/]
  std::string_view rest = endpoint;
  std::string scheme;
  if (rest.starts_with("https://")) {
    scheme = "https";
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    scheme = "http";
    rest.remove_prefix(7);
  } else {
    return Status::InvalidArgument("S3 endpoint \"" + endpoint + "\" is not http:// or https://");
  }
  if (rest.ends_with("/")) {
    rest.remove_suffix(1);
  }
  std::string_view hostport = rest;
  if (hostport.empty() || hostport.find_first_of("/?#@ ") != std::string_view::npos) {
    return Status::InvalidArgument("S3 endpoint \"" + endpoint +
                                   "\" must be scheme://host[:port] without a path");
  }
  std::string host;
  int port = 0;
  size_t colon = hostport.rfind(':');
  size_t bracket = hostport.rfind(']');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    auto p = ParseUint(hostport.substr(colon + 1));
    if (!p || *p == 0 || *p > 65535) {
      return Status::InvalidArgument("S3 endpoint \"" + endpoint + "\" has a bad port");
    }
    port = static_cast<int>(*p);
    host = std::string(hostport.substr(0, colon));
  } else {
    host = std::string(hostport);
  }
  for (char& c : host) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  if (host.empty()) {
    return Status::InvalidArgument("S3 endpoint \"" + endpoint + "\" has no host");
  }
  if ((scheme == "http" && port == 80) || (scheme == "https" && port == 443)) {
    port = 0;
  }

  bool dns_label = b.size() >= 3 && b.size() <= 63;
  for (char c : b) {
    dns_label = dns_label && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  }
  bool virtual_hosted = false;
  switch (opts.addressing) {
    case S3Options::Addressing::kPath:
      break;
    case S3Options::Addressing::kVirtualHosted:
      if (!dns_label && b.find_first_of("_ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos) {
        return Status::InvalidArgument("s3://" + b +
                                       ": virtual-hosted addressing needs a lower-case bucket "
                                       "name without '_'");
      }
      virtual_hosted = true;
      break;
    case S3Options::Addressing::kAuto:
      virtual_hosted = dns_label && (host == "amazonaws.com" || host.ends_with(".amazonaws.com"));
      break;
  }

  std::unique_ptr<S3Store> store(new S3Store(std::move(opts)));
  store->scheme_ = std::move(scheme);
  store->host_ = std::move(host);
  store->port_ = port;
  store->endpoint_url_ = std::move(endpoint);
  store->region_ = std::move(region);
  store->virtual_hosted_ = virtual_hosted;
  store->creds_ = std::move(creds.creds);
  store->credential_source_ = std::move(creds.source);
  return store;
}

S3Store::S3Store(S3Options opts) : opts_(std::move(opts)) {
  prefix_ = opts_.root_prefix.empty() ? "" : opts_.root_prefix + "/";
  HttpOptions h;
  h.connect_timeout = opts_.connect_timeout;
  h.low_speed_time = opts_.low_speed_time;
  h.low_speed_limit = opts_.low_speed_limit;
  h.request_timeout = opts_.request_timeout;
  h.connect_to = opts_.connect_to;
  h.verify_tls = opts_.verify_tls;
  h.max_idle_handles = std::max<size_t>(16, size_t{2} * opts_.parallelism);
  http_ = std::make_unique<HttpClient>(std::move(h));
  if (opts_.parallelism > 1) {
    workers_ = std::make_unique<ThreadPool>(opts_.parallelism - 1, 4096, "s3-io");
  }
}

S3Store::~S3Store() {
  if (workers_) {
    workers_->Stop();
  }
}

std::string S3Store::Describe() const {
  return "s3://" + opts_.bucket + (opts_.root_prefix.empty() ? "" : "/" + opts_.root_prefix);
}

std::string S3Store::DescribeKey(std::string_view full_key) const {
  if (full_key.empty()) {
    return "s3://" + opts_.bucket;
  }
  return "s3://" + opts_.bucket + "/" + Printable(full_key);
}

Result<std::string> S3Store::FullKey(std::string_view key) const {
  CIUIC_RETURN_IF_ERROR(CheckS3Key(key).WithContext(Describe()));
  // S3's 1024-byte limit holds for the whole key, root prefix included.
  if (prefix_.size() + key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument(Describe() + ": invalid object key " + internal::QuoteKey(key) +
                                   ": with the root prefix the key is " +
                                   std::to_string(prefix_.size() + key.size()) +
                                   " bytes, more than " + std::to_string(kMaxKeyBytes));
  }
  return prefix_ + std::string(key);
}

Result<HttpResponse> S3Store::Execute(const Call& call) {
  const bool https = scheme_ == "https";
  std::string host = (virtual_hosted_ ? opts_.bucket + "." : "") + host_ +
                     (port_ == 0 ? "" : ":" + std::to_string(port_));
  std::string path;
  if (!virtual_hosted_) {
    path = "/" + opts_.bucket;
  }
  if (!call.full_key.empty() || virtual_hosted_) {
    path += "/" + sigv4::S3UriEncodePath(call.full_key);
  }
  std::string url = scheme_ + "://" + host + path;
  for (size_t i = 0; i < call.query.size(); ++i) {
    url += (i == 0 ? "?" : "&") + sigv4::UriEncode(call.query[i].first, false);
    if (!call.query[i].second.empty()) {
      url += "=" + sigv4::UriEncode(call.query[i].second, false);
    }
  }

  std::vector<sigv4::Header> headers = call.headers;
  std::string payload_hash;
  if (opts_.unsigned_payload && https) {
    payload_hash = std::string(sigv4::kUnsignedPayload);
    if (!call.body.empty()) {
      headers.emplace_back("content-md5", Md5Base64(call.body));
    }
  } else {
    payload_hash =
        call.body.empty() ? std::string(sigv4::kEmptyPayloadHash) : sigv4::Sha256Hex(call.body);
  }

  const uint32_t tries = opts_.max_retries + 1;
  Status last_transport;
  std::optional<HttpResponse> last_answer;
  for (uint32_t attempt = 0; attempt < tries; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(Backoff(opts_, attempt));
    }
    HttpRequest req;
    req.method = call.method;
    req.url = url;
    req.body = call.body;
    req.sink = call.sink;
    req.headers.emplace_back("Host", host);
    if (creds_.empty()) {
      req.headers.insert(req.headers.end(), headers.begin(), headers.end());
    } else {
      sigv4::Request sreq;
      sreq.method = call.method;
      sreq.path = path.empty() ? "/" : path;
      sreq.query = call.query;
      sreq.headers = headers;
      sreq.headers.emplace_back("host", host);
      sreq.payload_hash = payload_hash;
      // Each try is signed anew: its x-amz-date must be close to the server's clock.
      std::string amz_date =
          sigv4::FormatAmzDate(std::chrono::duration_cast<std::chrono::seconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
      sigv4::AddS3Headers(sreq, creds_, amz_date);
      sigv4::Signature sig =
          sigv4::Sign(sreq, creds_, amz_date, region_, "s3", sigv4::SigningOptions::S3());
      for (auto& h : sreq.headers) {
        if (h.first != "host") {
          req.headers.push_back(std::move(h));
        }
      }
      req.headers.emplace_back("Authorization", sig.authorization);
    }

    Result<HttpResponse> resp = http_->Perform(req);
    if (!resp.ok()) {
      if (!resp.status().IsRetryable()) {
        return Status(resp.status().code(),
                      DescribeKey(call.full_key) + ": " + call.op + ": " + resp.status().message());
      }
      LOG_DEBUG("{}: {}: try {} of {}: {}", DescribeKey(call.full_key), call.op, attempt + 1, tries,
                resp.status().message());
      last_transport = resp.status();
      last_answer.reset();
      continue;
    }
    if (call.error_in_200 && resp->status >= 200 && resp->status < 300) {
      Result<xml::Element> doc = xml::Parse(resp->body);
      if (doc.ok() && doc->name == "Error") {
        // Report it as the error status it stands for, so that it is retried or mapped.
        resp->status = IsRetryableCode(doc->ChildText("Code")) ? 503 : 400;
      }
    }
    if (IsRetryable(*resp)) {
      LOG_DEBUG("{}: {}: try {} of {}: HTTP {} {}", DescribeKey(call.full_key), call.op,
                attempt + 1, tries, resp->status, ErrorOf(*resp).code);
      last_answer = std::move(*resp);
      continue;
    }
    return resp;
  }
  if (last_answer.has_value()) {
    return std::move(*last_answer);  // ErrorFor reports it as kUnavailable
  }
  std::string what = last_transport.code() == StatusCode::kTimedOut ? "timed out on endpoint "
                                                                    : "cannot reach endpoint ";
  return Status(last_transport.code(), DescribeKey(call.full_key) + ": " + call.op + ": " + what +
                                           endpoint_url_ + " (" + last_transport.message() +
                                           ") after " + std::to_string(tries) + " tries");
}

Status S3Store::ErrorFor(const HttpResponse& resp,
                         std::string_view full_key,
                         std::string_view op) const {
  S3Error e = ErrorOf(resp);
  std::string what = e.code.empty() ? "HTTP " + std::to_string(resp.status) : e.code;
  if (!e.message.empty()) {
    what += ": " + e.message;
  }
  std::string where = DescribeKey(full_key);
  if (resp.status == 403) {
    std::string hint;
    if (creds_.empty()) {
      hint =
          "; no credentials were found (S3 options, AWS_ACCESS_KEY_ID and "
          "AWS_SECRET_ACCESS_KEY, or a shared credentials file)";
    }
    return Status::PermissionDenied(where + ": access denied (" + what + ")" + hint);
  }
  if (resp.status == 404) {
    if (e.code == "NoSuchBucket") {
      return Status::NotFound("s3://" + opts_.bucket + ": no such bucket (" + what + ")");
    }
    if (e.code == "NoSuchUpload") {
      return Status::IoError(where + ": " + std::string(op) + ": the multipart upload is gone (" +
                             what + ")");
    }
    return Status::NotFound(where + ": no such key (" + what + ")");
  }
  if (e.code == "PermanentRedirect" || e.code == "AuthorizationHeaderMalformed" ||
      e.code == "IllegalLocationConstraintException" || resp.status == 301) {
    return Status::InvalidArgument(where + ": region " + region_ + " is wrong for this bucket" +
                                   (e.region.empty() ? "" : " (it is in " + e.region + ")") + " (" +
                                   what + ")");
  }
  if (IsRetryable(resp)) {
    return Status::Unavailable(where + ": " + std::string(op) + ": " + what + " (HTTP " +
                               std::to_string(resp.status) + ") after " +
                               std::to_string(opts_.max_retries + 1) + " tries");
  }
  if (resp.status == 412) {
    return Status::Aborted(where + ": changed while being read (" + what + ")");
  }
  return Status::IoError(where + ": " + std::string(op) + ": unexpected answer HTTP " +
                         std::to_string(resp.status) + " (" + what + ")");
}

Status S3Store::RunParallel(size_t n, const std::function<Status(size_t)>& fn) {
  if (n == 0) {
    return Status::OK();
  }
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    Status first_error;   // CIUIC_GUARDED_BY(mu)
    int active = 0;       // CIUIC_GUARDED_BY(mu): lanes inside fn's loop
    bool closed = false;  // CIUIC_GUARDED_BY(mu): the caller returned; late lanes do nothing
  };
  auto state = std::make_shared<State>();
  auto lane = [state, n, &fn] {
    while (!state->failed.load()) {
      size_t i = state->next.fetch_add(1);
      if (i >= n) {
        break;
      }
      Status st;
      try {
        st = fn(i);
      } catch (const std::exception& e) {
        st = Status::Internal(std::string("exception in a parallel S3 request: ") + e.what());
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(state->mu);
        if (state->first_error.ok()) {
          state->first_error = std::move(st);
        }
        state->failed.store(true);
      }
    }
  };
  size_t lanes = std::min<size_t>(n, opts_.parallelism);
  for (size_t l = 1; l < lanes && workers_; ++l) {
    // A pool lane that starts after the caller has returned must not touch `fn`: it checks
    // `closed` first.
    bool queued = workers_->Submit([state, lane] {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        if (state->closed) {
          return;
        }
        ++state->active;
      }
      lane();
      std::lock_guard<std::mutex> lock(state->mu);
      --state->active;
      state->cv.notify_all();
    });
    if (!queued) {
      break;  // stopping: the caller's lane does the work
    }
  }
  lane();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->active == 0; });
  state->closed = true;
  return state->first_error;
}

Status S3Store::Put(std::string_view key, std::string_view data, const PutOptions& opts) {
  CIUIC_ASSIGN_OR_RETURN(std::string full_key, FullKey(key));
  CIUIC_RETURN_IF_ERROR(CheckMetadata(opts.metadata, DescribeKey(full_key)));
  if (data.size() > opts_.part_size) {
    PutSource from_memory = [data](uint64_t offset, std::span<char> dst) {
      std::copy_n(data.data() + offset, dst.size(), dst.data());
      return Status::OK();
    };
    return PutMultipart(full_key, data.size(), from_memory, opts);
  }
  Call call;
  call.op = "PUT";
  call.method = "PUT";
  call.full_key = full_key;
  for (const auto& [name, value] : opts.metadata) {
    call.headers.emplace_back("x-amz-meta-" + name, value);
  }
  call.body = data;
  CIUIC_ASSIGN_OR_RETURN(HttpResponse resp, Execute(call));
  if (resp.status != 200) {
    return ErrorFor(resp, full_key, call.op);
  }
  return Status::OK();
}

Status S3Store::PutStream(std::string_view key,
                          uint64_t size,
                          const PutSource& source,
                          const PutOptions& opts) {
  CIUIC_ASSIGN_OR_RETURN(std::string full_key, FullKey(key));
  CIUIC_RETURN_IF_ERROR(CheckMetadata(opts.metadata, DescribeKey(full_key)));
  if (size > opts_.part_size) {
    return PutMultipart(full_key, size, source, opts);
  }
  std::string data(size, '\0');
  if (size > 0) {
    CIUIC_RETURN_IF_ERROR(
        ReadSource(source, 0, std::span<char>(data.data(), data.size()), DescribeKey(full_key)));
  }
  return Put(key, data, opts);
}

Status S3Store::PutMultipart(const std::string& full_key,
                             uint64_t size,
                             const PutSource& source,
                             const PutOptions& opts) {
  // S3 allows 10,000 parts: grow the part (in whole MiB) for objects past 10,000 parts.
  uint64_t part = std::max<uint64_t>(opts_.part_size, ((size / kMaxParts) | ((1 << 20) - 1)) + 1);
  if (part > kMaxPartSize) {
    return Status::InvalidArgument(DescribeKey(full_key) + ": " + std::to_string(size) +
                                   " bytes is over S3's largest object");
  }
  const size_t parts = static_cast<size_t>((size + part - 1) / part);

  Call create;
  create.op = "CreateMultipartUpload";
  create.method = "POST";
  create.full_key = full_key;
  create.query = {{"uploads", ""}};
  for (const auto& [name, value] : opts.metadata) {
    create.headers.emplace_back("x-amz-meta-" + name, value);
  }
  CIUIC_ASSIGN_OR_RETURN(HttpResponse created, Execute(create));
  if (created.status != 200) {
    return ErrorFor(created, full_key, create.op);
  }
  Result<xml::Element> doc = xml::Parse(created.body);
  std::string upload_id = doc.ok() ? doc->ChildText("UploadId") : "";
  if (upload_id.empty()) {
    return Status::Corruption(DescribeKey(full_key) +
                              ": CreateMultipartUpload answered no UploadId");
  }

  std::vector<std::string> etags(parts);
  Status st = RunParallel(parts, [&](size_t i) -> Status {
    const uint64_t offset = i * part;
    const size_t len = static_cast<size_t>(std::min<uint64_t>(part, size - offset));
    std::unique_ptr<char[]> buf(new char[len]);
    CIUIC_RETURN_IF_ERROR(
        ReadSource(source, offset, std::span<char>(buf.get(), len), DescribeKey(full_key)));
    Call put;
    put.op = "UploadPart " + std::to_string(i + 1) + " of " + std::to_string(parts);
    put.method = "PUT";
    put.full_key = full_key;
    put.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
    put.body = std::string_view(buf.get(), len);
    CIUIC_ASSIGN_OR_RETURN(HttpResponse resp, Execute(put));
    if (resp.status != 200) {
      return ErrorFor(resp, full_key, put.op);
    }
    auto etag = resp.headers.find("etag");
    if (etag == resp.headers.end() || etag->second.empty()) {
      return Status::Corruption(DescribeKey(full_key) + ": " + put.op + " answered no ETag");
    }
    etags[i] = etag->second;
    return Status::OK();
  });

  if (st.ok()) {
    std::string body = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < parts; ++i) {
      body += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
              xml::EscapeText(etags[i]) + "</ETag></Part>";
    }
    body += "</CompleteMultipartUpload>";
    Call complete;
    complete.op = "CompleteMultipartUpload";
    complete.method = "POST";
    complete.full_key = full_key;
    complete.query = {{"uploadId", upload_id}};
    complete.headers.emplace_back("content-type", "application/xml");
    complete.body = body;
    complete.error_in_200 = true;
    Result<HttpResponse> done = Execute(complete);
    if (!done.ok()) {
      st = done.status();
    } else if (done->status != 200) {
      st = ErrorFor(*done, full_key, complete.op);
    } else {
      Result<xml::Element> result = xml::Parse(done->body);
      if (!result.ok() || result->name != "CompleteMultipartUploadResult") {
        st = Status::Corruption(DescribeKey(full_key) +
                                ": CompleteMultipartUpload answered something unreadable");
      }
    }
  }
  if (st.ok()) {
    return st;
  }

  // Leave no parts behind (they cost storage until a lifecycle rule removes them).
  Call abort;
  abort.op = "AbortMultipartUpload";
  abort.method = "DELETE";
  abort.full_key = full_key;
  abort.query = {{"uploadId", upload_id}};
  Result<HttpResponse> aborted = Execute(abort);
  Status abort_st = !aborted.ok() ? aborted.status()
                    : (aborted->status == 204 || aborted->status == 200 || aborted->status == 404)
                        ? Status::OK()
                        : ErrorFor(*aborted, full_key, abort.op);
  if (!abort_st.ok()) {
    LOG_WARN("{}: could not abort multipart upload {}: {}", DescribeKey(full_key), upload_id,
             abort_st.message());
    return Status(st.code(), st.message() + "; and aborting upload " + upload_id +
                                 " failed: " + abort_st.message());
  }
  return st;
}

Result<S3Store::RangeResult> S3Store::GetRange(const std::string& full_key,
                                               uint64_t offset,
                                               std::span<char> dst,
                                               const std::string& if_match) {
  const uint64_t last = offset + dst.size() - 1;
  Call call;
  call.op = "GET bytes=" + std::to_string(offset) + "-" + std::to_string(last);
  call.method = "GET";
  call.full_key = full_key;
  call.headers.emplace_back("range",
                            "bytes=" + std::to_string(offset) + "-" + std::to_string(last));
  if (!if_match.empty()) {
    call.headers.emplace_back("if-match", if_match);
  }
  call.sink = dst;
  CIUIC_ASSIGN_OR_RETURN(HttpResponse resp, Execute(call));
  RangeResult out;
  auto header = [&resp](const char* name) -> std::string {
    auto it = resp.headers.find(name);
    return it == resp.headers.end() ? "" : it->second;
  };
  if (resp.status == 416) {
    // Nothing at or past the end (S3 says InvalidRange).
    if (auto cr = ParseContentRange(header("content-range"))) {
      out.total = cr->total;
    }
    return out;
  }
  if (resp.status != 200 && resp.status != 206) {
    return ErrorFor(resp, full_key, call.op);
  }
  out.etag = header("etag");
  out.bytes = resp.sink_bytes;
  std::string length = header("content-length");
  if (!length.empty() && ParseUint(length) != std::optional<uint64_t>(resp.sink_bytes)) {
    return Status::Corruption(DescribeKey(full_key) + ": " + call.op + ": Content-Length " +
                              length + " but " + std::to_string(resp.sink_bytes) + " bytes came");
  }
  if (resp.status == 200) {
    // The whole object: only right when it starts where we read (a server ignoring Range).
    if (offset != 0) {
      return Status::IoError(DescribeKey(full_key) + ": " + call.op +
                             ": the server ignored the Range header");
    }
    out.total = resp.sink_bytes;
    return out;
  }
  std::optional<ContentRange> cr = ParseContentRange(header("content-range"));
  if (!cr || !cr->has_range || cr->first != offset || cr->last > last ||
      cr->last - cr->first + 1 != resp.sink_bytes ||
      (cr->total != UINT64_MAX && cr->last >= cr->total)) {
    return Status::Corruption(DescribeKey(full_key) + ": " + call.op +
                              ": answered Content-Range \"" + header("content-range") + "\" with " +
                              std::to_string(resp.sink_bytes) + " bytes");
  }
  out.total = cr->total;
  return out;
}

Result<size_t> S3Store::GetVersion(std::string_view key,
                                   std::string_view etag,
                                   uint64_t offset,
                                   std::span<char> dst) {
  CIUIC_ASSIGN_OR_RETURN(std::string full_key, FullKey(key));
  if (dst.empty()) {
    CIUIC_ASSIGN_OR_RETURN(ObjectInfo info, Head(key));
    if (info.etag != etag)
      return Status::Aborted(DescribeKey(full_key) + ": has ETag " + info.etag + ", not " +
                             std::string(etag) + " (it changed)");
    return size_t{0};
  }
  // Every range carries If-Match, and its answer's ETag is checked too (a server that ignores
  // If-Match still names the version it sent).
  const std::string if_match = "\"" + std::string(etag) + "\"";
  const uint64_t chunk = opts_.part_size;
  const size_t n = static_cast<size_t>((dst.size() + chunk - 1) / chunk);
  std::vector<size_t> got(n, 0);
  Status st = RunParallel(n, [&](size_t i) -> Status {
    const uint64_t o = i * chunk;
    const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, dst.size() - o));
    CIUIC_ASSIGN_OR_RETURN(RangeResult r,
                           GetRange(full_key, offset + o, dst.subspan(o, len), if_match));
    if (r.bytes > 0 && StripQuotes(r.etag) != etag) {
      return Status::Aborted(DescribeKey(full_key) + ": has ETag " + StripQuotes(r.etag) +
                             ", not " + std::string(etag) + " (it changed)");
    }
    got[i] = r.bytes;
    return Status::OK();
  });
  CIUIC_RETURN_IF_ERROR(st);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    total += got[i];
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, dst.size() - i * chunk));
    if (got[i] < want) {
      // The object ends in range i: no later range may hold bytes.
      for (size_t j = i + 1; j < n; ++j) {
        if (got[j] != 0)
          return Status::Aborted(DescribeKey(full_key) + ": changed while being read");
      }
      break;
    }
  }
  return total;
}

Result<size_t> S3Store::Get(std::string_view key, uint64_t offset, std::span<char> dst) {
  CIUIC_ASSIGN_OR_RETURN(std::string full_key, FullKey(key));
  if (dst.empty()) {
    CIUIC_RETURN_IF_ERROR(Head(key).status());
    return size_t{0};
  }
  const uint64_t chunk = opts_.part_size;
  const size_t first_len = static_cast<size_t>(std::min<uint64_t>(dst.size(), chunk));
  CIUIC_ASSIGN_OR_RETURN(RangeResult first, GetRange(full_key, offset, dst.first(first_len), ""));
  if (first.bytes < first_len || first_len == dst.size()) {
    return first.bytes;
  }
  // The first answer gave the object's size and ETag: read the rest of what exists in
  // parallel, each range only if the object is still the same one (If-Match).
  uint64_t end = offset + dst.size();
  const bool known = first.total != UINT64_MAX;
  if (known) {
    end = std::min(end, first.total);
  }
  const uint64_t start = offset + first_len;
  if (end <= start) {
    return first.bytes;
  }
  const size_t n = static_cast<size_t>((end - start + chunk - 1) / chunk);
  std::vector<size_t> got(n, 0);
  Status st = RunParallel(n, [&](size_t i) -> Status {
    const uint64_t o = start + i * chunk;
    const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, end - o));
    CIUIC_ASSIGN_OR_RETURN(
        RangeResult r,
        GetRange(full_key, o, dst.subspan(static_cast<size_t>(o - offset), len), first.etag));
    if (known && r.bytes != len) {
      return Status::Aborted(DescribeKey(full_key) + ": changed while being read (" +
                             std::to_string(r.bytes) + " bytes at " + std::to_string(o) +
                             " where " + std::to_string(len) + " were expected)");
    }
    got[i] = r.bytes;
    return Status::OK();
  });
  CIUIC_RETURN_IF_ERROR(st);
  size_t total = first.bytes;
  for (size_t i = 0; i < n; ++i) {
    total += got[i];
    const uint64_t o = start + i * chunk;
    if (got[i] < std::min<uint64_t>(chunk, end - o)) {
      // Without a known size a short range ends the object; nothing may follow it.
      for (size_t j = i + 1; j < n; ++j) {
        if (got[j] != 0) {
          return Status::Aborted(DescribeKey(full_key) + ": changed while being read");
        }
      }
      break;
    }
  }
  return total;
}

Result<ObjectInfo> S3Store::Head(std::string_view key) {
  CIUIC_ASSIGN_OR_RETURN(std::string full_key, FullKey(key));
  Call call;
  call.op = "HEAD";
  call.method = "HEAD";
  call.full_key = full_key;
  CIUIC_ASSIGN_OR_RETURN(HttpResponse resp, Execute(call));
  if (resp.status != 200) {
    return ErrorFor(resp, full_key, call.op);
  }
  ObjectInfo info;
  info.key = std::string(key);
  auto length = resp.headers.find("content-length");
  std::optional<uint64_t> size =
      length == resp.headers.end() ? std::nullopt : ParseUint(length->second);
  if (!size) {
    return Status::Corruption(DescribeKey(full_key) + ": HEAD answered no Content-Length");
  }
  info.size = *size;
  for (const auto& [name, value] : resp.headers) {
    if (name == "etag") {
      info.etag = StripQuotes(value);
    } else if (name == "last-modified") {
      info.mtime_ms = ParseHttpDateMs(value);
    } else if (name.starts_with("x-amz-meta-")) {
      info.metadata[name.substr(11)] = value;
    }
  }
  return info;
}

Result<ListPage> S3Store::List(const ListOptions& opts) {
  if (opts.max_keys < 1 || opts.max_keys > 1000) {
    return Status::InvalidArgument(Describe() + ": list max_keys " + std::to_string(opts.max_keys) +
                                   " is not 1..1000");
  }
  if (opts.prefix.find('\0') != std::string::npos ||
      opts.delimiter.find('\0') != std::string::npos) {
    return Status::InvalidArgument(Describe() + ": list prefix or delimiter holds a NUL byte");
  }
  const std::string full_prefix = prefix_ + opts.prefix;
  Call call;
  call.op = "ListObjectsV2";
  call.method = "GET";
  call.query = {{"list-type", "2"}, {"max-keys", std::to_string(opts.max_keys)}};
  if (!full_prefix.empty()) {
    call.query.emplace_back("prefix", full_prefix);
  }
  if (!opts.delimiter.empty()) {
    call.query.emplace_back("delimiter", opts.delimiter);
  }
  if (!opts.start.empty()) {
    call.query.emplace_back("continuation-token", opts.start);
  }
  // Keys may hold bytes XML 1.0 cannot carry; asking for them URL-encoded is safe.
  call.query.emplace_back("encoding-type", "url");
  CIUIC_ASSIGN_OR_RETURN(HttpResponse resp, Execute(call));
  if (resp.status != 200) {
    return ErrorFor(resp, "", call.op);
  }
  Result<xml::Element> doc = xml::Parse(resp.body);
  if (!doc.ok() || doc->name != "ListBucketResult") {
    return Status::Corruption(
        Describe() + ": ListObjectsV2 answered something unreadable" +
        (doc.ok() ? " (<" + doc->name + ">)" : ": " + doc.status().message()));
  }
  // Servers that ignore encoding-type (s3rver) send keys as they are and no EncodingType.
  const bool url_encoded = doc->ChildText("EncodingType") == "url";
  auto decode = [url_encoded](const std::string& s) {
    return url_encoded ? sigv4::UriDecode(s, /*plus_is_space=*/true) : s;
  };
  ListPage page;
  for (const xml::Element* c : doc->Children("Contents")) {
    std::string key = decode(c->ChildText("Key"));
    std::optional<uint64_t> size = ParseUint(c->ChildText("Size"));
    if (!key.starts_with(full_prefix) || key.size() == prefix_.size() || !size) {
      return Status::Corruption(Describe() + ": ListObjectsV2 answered an entry \"" +
                                Printable(key) + "\" outside the prefix or without a size");
    }
    ObjectInfo info;
    info.key = key.substr(prefix_.size());
    info.size = *size;
    info.etag = StripQuotes(c->ChildText("ETag"));
    info.mtime_ms = ParseIso8601Ms(c->ChildText("LastModified"));
    page.objects.push_back(std::move(info));
  }
  for (const xml::Element* p : doc->Children("CommonPrefixes")) {
    std::string prefix = decode(p->ChildText("Prefix"));
    if (!prefix.starts_with(full_prefix)) {
      return Status::Corruption(Describe() + ": ListObjectsV2 answered a prefix \"" +
                                Printable(prefix) + "\" outside the prefix asked for");
    }
    page.prefixes.push_back(prefix.substr(prefix_.size()));
  }
  std::sort(page.objects.begin(), page.objects.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  std::sort(page.prefixes.begin(), page.prefixes.end());
  if (doc->ChildText("IsTruncated") == "true") {
    page.next = doc->ChildText("NextContinuationToken");
    if (page.next.empty()) {
      return Status::Corruption(Describe() +
                                ": ListObjectsV2 said the listing goes on but gave no token");
    }
  }
  return page;
}

Status S3Store::Delete(std::string_view key) {
  CIUIC_ASSIGN_OR_RETURN(std::string full_key, FullKey(key));
  Call call;
  call.op = "DELETE";
  call.method = "DELETE";
  call.full_key = full_key;
  CIUIC_ASSIGN_OR_RETURN(HttpResponse resp, Execute(call));
  if (resp.status == 204 || resp.status == 200) {
    return Status::OK();
  }
  // S3 answers 204 for a key that is not there; some servers say NoSuchKey.
  if (resp.status == 404 && ErrorOf(resp).code != "NoSuchBucket") {
    return Status::OK();
  }
  return ErrorFor(resp, full_key, call.op);
}

}  // namespace ciuic::objstore
