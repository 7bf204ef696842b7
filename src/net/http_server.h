// HttpServer: a minimal HTTP/1.1 server for the servers' GET /metrics (Prometheus scrapes), and
// HttpGet, a blocking client for tools (`ciuic top`) and tests.
//
// The server answers one request per connection and closes: GET of a registered path gets 200
// with the handler's body, other paths 404, other methods 405 (HEAD too: scrapers use GET), a
// malformed request line 400, a request head over `max_request_bytes` 431. A connection that has
// not sent its whole request head within `timeout_ms` is closed, and at most `max_connections`
// are served at once (more are closed on accept). Request bodies are never read.
//
// Threads: one thread of its own running an asio io_context; handlers run on it (a metrics
// render takes microseconds to a millisecond). Thread-safety: Handle before Start; Start, Stop
// and port from any thread; Stop is idempotent and the destructor calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/status.h"

namespace ciuic::net {

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 0;  // 0: ephemeral
    size_t max_request_bytes = 8192;
    int timeout_ms = 5000;
    size_t max_connections = 32;
    std::string name = "http";  // for logs
  };
  // Returns the body of a GET of the registered path.
  using PathHandler = std::function<std::string()>;

  explicit HttpServer(Options options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET `path` (the query string is ignored) with `handler`'s body as `content_type`.
  void Handle(std::string path, std::string content_type, PathHandler handler);
  // Binds, listens and starts the thread. kUnavailable if the port is taken, kIoError else.
  Status Start();
  uint16_t port() const;
  void Stop();
  // Requests answered so far (any status), for tests.
  uint64_t requests() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct HttpResponse {
  int status = 0;
  std::string body;
};

// Sends `GET path` to `addr` and returns the status and body. kUnavailable if the server cannot
// be reached or closes early, kTimedOut after `timeout_ms`, kCorruption for a malformed reply.
Result<HttpResponse> HttpGet(const HostPort& addr, const std::string& path, int timeout_ms = 5000);

// The content type of the Prometheus text exposition format.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace ciuic::net
