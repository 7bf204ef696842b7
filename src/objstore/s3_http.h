// HttpClient: one HTTP/1.1 request at a time per caller, on libcurl easy handles kept in a pool
// so that their connections are reused (keep-alive) by later requests. It does no retries and
// knows nothing of S3: S3Store builds, signs and retries the requests.
//
// Blocking. Thread-safety: Perform may be called from many threads at once; each call takes a
// handle of its own from the pool (one per concurrent request) and puts it back after.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

typedef void CURL;  // NOLINT(modernize-use-using): matches curl/curl.h

namespace ciuic::objstore {

struct HttpOptions {
  std::chrono::milliseconds connect_timeout{5000};
  // A transfer slower than low_speed_limit bytes/s for low_speed_time is abandoned (kTimedOut):
  // a stalled server, without capping how long a big healthy transfer may take.
  std::chrono::seconds low_speed_time{30};
  uint32_t low_speed_limit = 1024;
  std::chrono::milliseconds request_timeout{0};  // 0: no cap on a whole request
  // curl's CONNECT_TO entries ("HOST:PORT:CONNECT-HOST:CONNECT-PORT", empty parts match all):
  // connect elsewhere than the URL's host while keeping its name (tests; pinned addresses).
  std::vector<std::string> connect_to;
  bool verify_tls = true;
  size_t max_idle_handles = 64;
};

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST, DELETE
  std::string url;     // sent as is (PATH_AS_IS: no dot-segment removal)
  std::vector<std::pair<std::string, std::string>> headers;  // Host included
  std::string_view body;                                     // PUT and POST; must outlive Perform
  // When not empty, the body of a 2xx answer is written here instead of HttpResponse::body;
  // a body longer than the span is kCorruption.
  std::span<char> sink;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;       // error bodies, and 2xx bodies when the request had no sink
  size_t sink_bytes = 0;  // bytes written into the sink
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions opts);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Performs `req` once and returns the answer, whatever its status. A transport failure is
  // kUnavailable (cannot resolve or connect, connection reset or closed early), kTimedOut
  // (connect or low-speed timeout), kCorruption (more body than the sink holds) or kIoError;
  // the message is curl's.
  Result<HttpResponse> Perform(const HttpRequest& req);

 private:
  CURL* Acquire();
  void Release(CURL* handle);

  const HttpOptions opts_;
  std::mutex mu_;
  std::vector<CURL*> idle_;  // CIUIC_GUARDED_BY(mu_)
};

}  // namespace ciuic::objstore
