#include "objstore/s3_test_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "objstore/s3_http.h"
#include "objstore/sigv4.h"

#ifndef CIUIC_S3RVER_JS
#define CIUIC_S3RVER_JS "tests/s3/node_modules/s3rver/bin/s3rver.js"
#endif

namespace ciuic::objstore {
namespace {

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 416:
      return "Range Not Satisfiable";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// Checks the request's SigV4 signature as a server would: from the bytes received.
std::string SignatureProblem(const ScriptedHttpServer::Request& r, const std::string& secret) {
  auto header = [&r](const std::string& name) -> std::string {
    auto it = r.headers.find(name);
    return it == r.headers.end() ? "" : it->second;
  };
  std::string auth = header("authorization");
  if (auth.empty()) {
    return "";
  }
  auto field = [&auth](const std::string& name) -> std::string {
    size_t at = auth.find(name + "=");
    if (at == std::string::npos) {
      return "";
    }
    at += name.size() + 1;
    size_t end = auth.find_first_of(", ", at);
    return auth.substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  std::string credential = field("Credential");
  std::vector<std::string> scope;
  for (size_t pos = 0; pos <= credential.size();) {
    size_t slash = credential.find('/', pos);
    if (slash == std::string::npos) {
      slash = credential.size();
    }
    scope.push_back(credential.substr(pos, slash - pos));
    pos = slash + 1;
  }
  if (!auth.starts_with("AWS4-HMAC-SHA256 ") || scope.size() != 5) {
    return "malformed Authorization: " + auth;
  }
  sigv4::Request sreq;
  sreq.method = r.method;
  sreq.path = r.path;
  sreq.query = sigv4::ParseQueryString(r.query);
  std::string signed_headers = field("SignedHeaders");
  for (size_t pos = 0; pos <= signed_headers.size();) {
    size_t semi = signed_headers.find(';', pos);
    if (semi == std::string::npos) {
      semi = signed_headers.size();
    }
    std::string name = signed_headers.substr(pos, semi - pos);
    if (r.headers.count(name) == 0) {
      return "signed header " + name + " was not sent";
    }
    sreq.headers.emplace_back(name, header(name));
    pos = semi + 1;
  }
  sreq.payload_hash = header("x-amz-content-sha256");
  if (sreq.payload_hash != sigv4::kUnsignedPayload &&
      sreq.payload_hash != sigv4::Sha256Hex(r.body)) {
    return "x-amz-content-sha256 " + sreq.payload_hash + " is not the body's hash";
  }
  sigv4::Signature want = sigv4::Sign(sreq, {scope[0], secret, ""}, header("x-amz-date"), scope[2],
                                      scope[3], sigv4::SigningOptions::S3());
  if (want.signature != field("Signature")) {
    return "signature mismatch; the canonical request received:\n" + want.canonical_request;
  }
  return "";
}

}  // namespace

// ---- S3rverProcess ----

Result<std::unique_ptr<S3rverProcess>> S3rverProcess::Start(const Options& opts) {
  const char* js_env = getenv("CIUIC_S3RVER_JS");
  std::string js = js_env != nullptr ? js_env : CIUIC_S3RVER_JS;
  if (access(js.c_str(), R_OK) != 0) {
    return Status::NotFound("s3rver is not installed (" + js +
                            "): run scripts/install-deps.sh, which runs npm ci in tests/s3");
  }
  std::unique_ptr<S3rverProcess> p(new S3rverProcess());
  std::string tmpl = (std::filesystem::temp_directory_path() / "ciuic-s3rver-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return Status::FromErrno(errno, "mkdtemp");
  }
  p->dir_ = tmpl;
  const std::string data_dir = p->dir_ + "/data";
  const std::string log_path = p->dir_ + "/s3rver.log";
  std::filesystem::create_directories(data_dir);

  // s3rver 3.7.1 makes its ListObjectsV2 continuation tokens with DES, which Node 17+ (OpenSSL
  // 3) only offers from the legacy provider: without it every truncated listing is a 500.
  std::vector<std::string> args = {"node",
                                   "--openssl-legacy-provider",
                                   js,
                                   "-d",
                                   data_dir,
                                   "-a",
                                   "127.0.0.1",
                                   "-p",
                                   "0",
                                   "--silent",
                                   "--service-endpoint",
                                   opts.service_endpoint};
  for (const std::string& b : opts.buckets) {
    args.push_back("--configure-bucket");
    args.push_back(b);
  }
  std::vector<char*> argv;
  for (std::string& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return Status::FromErrno(errno, "pipe2");
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    return Status::FromErrno(errno, "fork");
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec. Die with the test process, in a process
    // group of our own so that the kill reaches anything node starts.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(126);
    }
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out[1], STDOUT_FILENO);
    if (log >= 0) {
      dup2(log, STDERR_FILENO);
    }
    execvp("node", argv.data());
    const char msg[] = "exec node failed\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    _exit(127);
  }
  close(out[1]);
  p->pid_ = pid;
  p->stdout_fd_ = out[0];

  // s3rver prints "S3rver listening on 127.0.0.1:<port>" once the buckets exist and it listens.
  const auto deadline = std::chrono::steady_clock::now() + opts.start_timeout;
  std::string printed;
  const std::string marker = "listening on 127.0.0.1:";
  while (true) {
    size_t at = printed.find(marker);
    if (at != std::string::npos && printed.find('\n', at) != std::string::npos) {
      p->port_ = atoi(printed.c_str() + at + marker.size());
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Status::Unavailable("s3rver did not start in " +
                                 std::to_string(opts.start_timeout.count()) +
                                 " s; its log: " + ReadFileOrEmpty(log_path));
    }
    pollfd pfd{p->stdout_fd_, POLLIN, 0};
    int n = poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      continue;
    }
    char buf[512];
    ssize_t got = read(p->stdout_fd_, buf, sizeof(buf));
    if (got <= 0) {
      return Status::Unavailable("s3rver exited while starting; its log: " +
                                 ReadFileOrEmpty(log_path));
    }
    printed.append(buf, static_cast<size_t>(got));
  }
  if (p->port_ <= 0) {
    return Status::Unavailable("s3rver printed no port: " + printed);
  }

  // It listens: check that each bucket answers a listing.
  HttpClient http(HttpOptions{});
  for (const std::string& b : opts.buckets) {
    HttpRequest req;
    req.method = "GET";
    req.url = p->endpoint() + "/" + b + "?list-type=2&max-keys=1";
    req.headers = {{"Host", "127.0.0.1:" + std::to_string(p->port_)}};
    Result<HttpResponse> resp = http.Perform(req);
    if (!resp.ok() || resp->status != 200) {
      return Status::Unavailable("s3rver does not list bucket " + b + ": " +
                                 (resp.ok()
                                      ? "HTTP " + std::to_string(resp->status) + " " + resp->body
                                      : resp.status().ToString()));
    }
  }
  return p;
}

void S3rverProcess::Kill() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

S3rverProcess::~S3rverProcess() {
  Kill();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

int ClosedLocalPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) {
    close(fd);
  }
  return port;
}

// ---- ScriptedHttpServer ----

Result<std::unique_ptr<ScriptedHttpServer>> ScriptedHttpServer::Start(
    Handler handler, std::string secret_access_key) {
  std::unique_ptr<ScriptedHttpServer> s(new ScriptedHttpServer());
  s->handler_ = std::move(handler);
  s->secret_ = std::move(secret_access_key);
  s->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) {
    return Status::FromErrno(errno, "socket");
  }
  int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(s->listen_fd_, 64) != 0 ||
      getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Status::FromErrno(errno, "bind/listen on 127.0.0.1");
  }
  s->port_ = ntohs(addr.sin_port);
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (s->wake_fd_ < 0) {
    return Status::FromErrno(errno, "eventfd");
  }
  s->acceptor_ = std::thread([raw = s.get()] { raw->AcceptLoop(); });
  return s;
}

ScriptedHttpServer::~ScriptedHttpServer() {
  Stop();
}

void ScriptedHttpServer::Stop() {
  {
    // Under mu_, so that a stalled answer cannot miss the wake-up between its check and its wait.
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.exchange(true)) {
      return;
    }
  }
  uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
  stop_cv_.notify_all();
  if (acceptor_.joinable()) {
    acceptor_.join();
  }
  std::vector<std::thread> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : conn_fds_) {
      shutdown(fd, SHUT_RDWR);
    }
    conns.swap(conns_);
  }
  for (std::thread& t : conns) {
    t.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
  }
}

std::vector<ScriptedHttpServer::Request> ScriptedHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

ScriptedHttpServer::Reply ScriptedHttpServer::S3ErrorReply(int status,
                                                           const std::string& code,
                                                           const std::string& message) {
  Reply r;
  r.status = status;
  r.headers = {{"Content-Type", "application/xml"}};
  r.body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code + "</Code><Message>" +
           message + "</Message><RequestId>test</RequestId></Error>";
  return r;
}

bool ScriptedHttpServer::WaitReadable(int fd) {
  pollfd pfds[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    int n = poll(pfds, 2, -1);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 || (pfds[1].revents & POLLIN) != 0) {
      return false;
    }
    return true;
  }
}

void ScriptedHttpServer::AcceptLoop() {
  while (WaitReadable(listen_fd_)) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      close(fd);
      break;
    }
    conn_fds_.push_back(fd);
    conns_.emplace_back([this, fd] { Serve(fd); });
  }
}

void ScriptedHttpServer::Serve(int fd) {
  std::string buf;
  bool open = true;
  while (open) {
    // Read one request: the head up to an empty line, then Content-Length bytes of body.
    size_t head_end;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      char chunk[65536];
      if (!WaitReadable(fd)) {
        open = false;
        break;
      }
      ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        open = false;
        break;
      }
      buf.append(chunk, static_cast<size_t>(n));
    }
    if (!open) {
      break;
    }
    Request req;
    std::istringstream head(buf.substr(0, head_end));
    std::string line;
    std::getline(head, line);
    std::istringstream request_line(line);
    request_line >> req.method >> req.target;
    size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    req.query = q == std::string::npos ? "" : req.target.substr(q + 1);
    while (std::getline(head, line)) {
      if (!line.empty() && line.back() == '\r') {
        line.pop_back();
      }
      size_t colon = line.find(':');
      if (colon == std::string::npos) {
        continue;
      }
      std::string name = line.substr(0, colon);
      for (char& c : name) {
        c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
      }
      size_t v = line.find_first_not_of(" \t", colon + 1);
      req.headers[name] = v == std::string::npos ? "" : line.substr(v);
    }
    size_t body_len = 0;
    if (auto it = req.headers.find("content-length"); it != req.headers.end()) {
      body_len = std::stoull(it->second);
    }
    buf.erase(0, head_end + 4);
    while (buf.size() < body_len) {
      char chunk[65536];
      if (!WaitReadable(fd)) {
        open = false;
        break;
      }
      ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        open = false;
        break;
      }
      buf.append(chunk, static_cast<size_t>(n));
    }
    if (!open) {
      break;
    }
    req.body = buf.substr(0, body_len);
    buf.erase(0, body_len);
    req.signature_problem = SignatureProblem(req, secret_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
    }

    Reply reply;
    if (!req.signature_problem.empty()) {
      reply = S3ErrorReply(403, "SignatureDoesNotMatch", "checked by ScriptedHttpServer");
    } else {
      reply = handler_(req);
    }
    if (reply.action == Reply::Action::kClose) {
      break;
    }
    if (reply.action == Reply::Action::kStall) {
      std::unique_lock<std::mutex> lock(mu_);
      stop_cv_.wait(lock, [this] { return stopping_.load(); });
      break;
    }
    std::string out =
        "HTTP/1.1 " + std::to_string(reply.status) + " " + Reason(reply.status) + "\r\n";
    bool has_length = false;
    for (const auto& [name, value] : reply.headers) {
      out += name + ": " + value + "\r\n";
      has_length = has_length || strcasecmp(name.c_str(), "content-length") == 0;
    }
    if (!has_length) {
      out += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
    }
    out += "\r\n";
    if (req.method != "HEAD") {
      out += reply.body;
    }
    if (!WriteAll(fd, out)) {
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < conn_fds_.size(); ++i) {
    if (conn_fds_[i] == fd) {
      conn_fds_.erase(conn_fds_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  close(fd);
}

}  // namespace ciuic::objstore
