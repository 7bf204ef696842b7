// S3Store: the ObjectStore of an S3 bucket (AWS S3 or any S3-compatible server: MinIO, Ceph
// RGW, s3rver), rooted at a key prefix, over HTTP(S) with libcurl and SigV4 (sigv4.h).
//
// Every request is signed with the credentials resolved at Open (s3_credentials.h) and retried
// with capped exponential backoff and jitter on 5xx, 429, SlowDown, RequestTimeout and on
// connection failures and timeouts; other 4xx are final. Objects over part_size are uploaded
// as multipart uploads and ranges over part_size are read as ranged GETs, several at once; the
// parts and ranges of all calls share one bounded set of `parallelism - 1` worker threads, plus
// the calling thread. A failed multipart upload is aborted.
//
// Ownership: owns its HttpClient (a pool of curl handles) and its worker threads; the
// destructor joins them, so no call may be running then.
// Thread-safety: every method may be called from many threads at once. All block.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_pool.h"
#include "objstore/object_store.h"
#include "objstore/s3_credentials.h"
#include "objstore/s3_http.h"
#include "objstore/sigv4.h"

namespace ciuic::objstore {

struct S3Options {
  std::string bucket;       // required
  std::string root_prefix;  // keys live under "<root_prefix>/"; "" for the whole bucket
  // "" resolves to AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then https://s3.<region>.amazonaws.com.
  // Only a scheme (http or https), a host and a port: "http://127.0.0.1:9000".
  std::string endpoint;
  std::string region;  // "" resolves to AWS_REGION, AWS_DEFAULT_REGION, then us-east-1

  // kPath: http://endpoint/bucket/key. kVirtualHosted: http://bucket.endpoint/key. kAuto:
  // virtual-hosted on amazonaws.com endpoints when the bucket name is a DNS label (no dots:
  // they break TLS names), path-style elsewhere (MinIO, Ceph and most local servers).
  enum class Addressing { kAuto, kPath, kVirtualHosted };
  Addressing addressing = Addressing::kAuto;

  // Empty resolves as s3_credentials.h says; nothing anywhere sends unsigned requests.
  sigv4::Credentials credentials;

  uint64_t part_size = 8 << 20;  // multipart part and parallel-GET chunk size; >= 5 MiB
  uint32_t parallelism = 8;      // concurrent parts or ranged GETs, across all calls
  uint32_t max_retries = 5;      // retries after the first try
  std::chrono::milliseconds backoff_base{100};  // first retry waits about this long
  std::chrono::milliseconds backoff_max{5000};  // no wait is longer
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::seconds low_speed_time{30};  // below low_speed_limit bytes/s this long: retry
  uint32_t low_speed_limit = 1024;
  std::chrono::milliseconds request_timeout{0};  // 0: no cap on one request
  // On https, sign bodies as UNSIGNED-PAYLOAD (TLS and a Content-MD5 guard them) instead of
  // hashing them with SHA-256.
  bool unsigned_payload = false;
  bool verify_tls = true;
  // curl CONNECT_TO entries: connect elsewhere than the endpoint's (or the virtual host's)
  // name, keeping the name in Host and TLS. "::127.0.0.1:" sends everything to 127.0.0.1.
  std::vector<std::string> connect_to;
};

class S3Store : public ObjectStore {
 public:
  static constexpr uint64_t kMinPartSize = 5 << 20;  // S3's smallest part but the last
  static constexpr uint64_t kMaxPartSize = 5ULL << 30;
  static constexpr uint32_t kMaxParts = 10000;

  // Resolves credentials, region and endpoint (from `env` where the options leave them empty)
  // and checks the options. Does no IO beyond reading the shared credentials file. Returns
  // kInvalidArgument naming the bad option.
  static Result<std::unique_ptr<S3Store>> Open(S3Options opts, const EnvLookup& env = ProcessEnv());

  ~S3Store() override;

  Status Put(std::string_view key, std::string_view data, const PutOptions& opts = {}) override;
  Status PutStream(std::string_view key,
                   uint64_t size,
                   const PutSource& source,
                   const PutOptions& opts = {}) override;
  Result<size_t> Get(std::string_view key, uint64_t offset, std::span<char> dst) override;
  Result<size_t> GetVersion(std::string_view key,
                            std::string_view etag,
                            uint64_t offset,
                            std::span<char> dst) override;
  Result<ObjectInfo> Head(std::string_view key) override;
  Result<ListPage> List(const ListOptions& opts) override;
  Status Delete(std::string_view key) override;
  std::string Describe() const override;

  // The endpoint, region, addressing and credential source in use, for `ciuic` output.
  std::string endpoint() const { return endpoint_url_; }
  std::string region() const { return region_; }
  bool virtual_hosted() const { return virtual_hosted_; }
  const std::string& credential_source() const { return credential_source_; }

 private:
  struct Call;         // one S3 request as the store sees it (s3_store.cc)
  struct RangeResult;  // what one ranged GET read

  explicit S3Store(S3Options opts);

  // Sends `call`, retrying as the class comment says; returns the final answer (any status)
  // or the transport error of the last try.
  Result<HttpResponse> Execute(const Call& call);
  // Maps a final answer that is not a success to a Status naming the bucket and key.
  Status ErrorFor(const HttpResponse& resp, std::string_view full_key, std::string_view op) const;

  Result<RangeResult> GetRange(const std::string& full_key,
                               uint64_t offset,
                               std::span<char> dst,
                               const std::string& if_match);
  Status PutMultipart(const std::string& full_key,
                      uint64_t size,
                      const PutSource& source,
                      const PutOptions& opts);
  // Runs fn(0) .. fn(n - 1) on the calling thread and the workers, at most `parallelism` at
  // once, stopping at the first error, which it returns.
  Status RunParallel(size_t n, const std::function<Status(size_t)>& fn);

  Result<std::string> FullKey(std::string_view key) const;
  std::string DescribeKey(std::string_view full_key) const;

  S3Options opts_;
  std::string scheme_;
  std::string host_;  // lower-case, with brackets for IPv6
  int port_ = 0;      // 0: the scheme's default
  std::string endpoint_url_;
  std::string region_;
  std::string prefix_;  // root_prefix + "/", or ""
  bool virtual_hosted_ = false;
  sigv4::Credentials creds_;
  std::string credential_source_;
  std::unique_ptr<HttpClient> http_;
  std::unique_ptr<ThreadPool> workers_;  // null when parallelism is 1
};

}  // namespace ciuic::objstore
