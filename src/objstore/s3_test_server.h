// Servers for S3 tests (test-only library ciuic_objstore_testing), both on 127.0.0.1 with a
// port the kernel picks:
//
//   S3rverProcess      npm's s3rver (tests/s3, installed by scripts/install-deps.sh), a real
//                      S3-compatible server in a child process. It does not check SigV4
//                      signatures (only that the access key is "S3RVER"): the vectors and the
//                      botocore oracle cover signing.
//   ScriptedHttpServer an in-process HTTP/1.1 server whose every answer a test decides: S3
//                      errors, throttling, dropped connections, stalls. It checks each
//                      request's SigV4 signature against the bytes it received.
//
// Both are torn down by their destructors, also when a test fails; the s3rver child also dies
// with the test process (PR_SET_PDEATHSIG), so no process outlives a crashed test.
// Thread-safety: Start/Stop from one thread; ScriptedHttpServer's accessors from any.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace ciuic::objstore {

class S3rverProcess {
 public:
  struct Options {
    std::vector<std::string> buckets = {"ciuic-test"};
    // Virtual-hosted requests reach bucket B as Host "B.s3.<service_endpoint>".
    std::string service_endpoint = "localhost";
    std::chrono::seconds start_timeout{60};
  };

  // Starts s3rver with `opts.buckets` created, and returns once it answers a listing of each.
  // kUnavailable (with s3rver's stderr) if it does not start in time; kNotFound if node or
  // s3rver is not installed.
  static Result<std::unique_ptr<S3rverProcess>> Start(const Options& opts);
  ~S3rverProcess();
  S3rverProcess(const S3rverProcess&) = delete;
  S3rverProcess& operator=(const S3rverProcess&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  S3rverProcess() = default;
  void Kill();

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  std::string dir_;
};

// Returns a port on 127.0.0.1 that nothing listens on (bound, then closed), for tests of an
// unreachable endpoint.
int ClosedLocalPort();

class ScriptedHttpServer {
 public:
  struct Request {
    std::string method;
    std::string target;  // path and query as received
    std::string path;
    std::string query;                           // after '?', raw
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;
    // "" when the SigV4 signature matched the received request (or there was none), else why
    // not.
    std::string signature_problem;
  };
  struct Reply {
    enum class Action { kAnswer, kStall, kClose };
    Action action = Action::kAnswer;
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
  };
  using Handler = std::function<Reply(const Request&)>;

  // Serves on 127.0.0.1; `secret_access_key` verifies signatures (region and service are read
  // from the credential scope).
  static Result<std::unique_ptr<ScriptedHttpServer>> Start(Handler handler,
                                                           std::string secret_access_key);
  ~ScriptedHttpServer();
  ScriptedHttpServer(const ScriptedHttpServer&) = delete;
  ScriptedHttpServer& operator=(const ScriptedHttpServer&) = delete;

  // Stops accepting, ends stalled answers and closes every connection, then joins.
  void Stop();

  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Request> requests() const;

  // Builds an S3 error answer: <Error><Code>code</Code><Message>message</Message></Error>.
  static Reply S3ErrorReply(int status, const std::string& code, const std::string& message);

 private:
  ScriptedHttpServer() = default;
  void AcceptLoop();
  void Serve(int fd);
  // Waits until `fd` is readable or the server stops; false when stopping.
  bool WaitReadable(int fd);

  Handler handler_;
  std::string secret_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd, readable once Stop() begins
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  std::vector<std::thread> conns_;  // CIUIC_GUARDED_BY(mu_)
  std::vector<int> conn_fds_;       // CIUIC_GUARDED_BY(mu_)
  std::vector<Request> requests_;   // CIUIC_GUARDED_BY(mu_)
};

}  // namespace ciuic::objstore
