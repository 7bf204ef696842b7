// HttpServer on its own asio thread, and the blocking HttpGet client (POSIX sockets and poll).
#include "net/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <asio.hpp>
#include <fmt/format.h>

#include "common/logging.h"

namespace ciuic::net {
namespace {

struct Route {
  std::string content_type;
  HttpServer::PathHandler handler;
};

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

std::string MakeResponse(int code, const std::string& content_type, const std::string& body) {
  std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n", code,
      Reason(code), content_type, body.size());
  if (code == 405)
    head += "Allow: GET\r\n";
  return head + "\r\n" + body;
}

bool IsToken(std::string_view s) {
  if (s.empty() || s.size() > 16)
    return false;
  for (char c : s) {
    if (c < 'A' || c > 'Z')
      return false;
  }
  return true;
}

}  // namespace

struct HttpServer::Impl {
  Options opts;
  std::map<std::string, Route> routes;  // read-only after Start
  // The io_context must outlive the acceptor and the connections, so it is declared first.
  asio::io_context ctx{1};
  std::optional<asio::ip::tcp::acceptor> acceptor;
  std::thread thread;
  std::atomic<size_t> open{0};
  std::atomic<uint64_t> requests{0};
  uint16_t port = 0;
  std::mutex mu;  // serializes Start and Stop
  bool started = false;
  bool stopped = false;

  // Answers the request head in `head` (ends with CRLF CRLF, or is empty when it was too long).
  std::string Answer(std::string_view head, bool too_long) {
    if (too_long)
      return MakeResponse(431, "text/plain", "request head too large\n");
    size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    size_t sp1 = line.find(' ');
    size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
      return MakeResponse(400, "text/plain", "malformed request line\n");
    std::string_view method = line.substr(0, sp1);
    std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string_view version = line.substr(sp2 + 1);
    if (!IsToken(method) || target.empty() || target[0] != '/' || !version.starts_with("HTTP/1."))
      return MakeResponse(400, "text/plain", "malformed request line\n");
    if (method != "GET")
      return MakeResponse(405, "text/plain", "only GET is served\n");
    std::string path(target.substr(0, target.find('?')));
    auto it = routes.find(path);
    if (it == routes.end())
      return MakeResponse(404, "text/plain", "not found\n");
    try {
      return MakeResponse(200, it->second.content_type, it->second.handler());
    } catch (const std::exception& e) {
      LOG_ERROR("[{}] handler of {} threw: {}", opts.name, path, e.what());
      return MakeResponse(500, "text/plain", "internal error\n");
    }
  }

  static asio::awaitable<void> Serve(Impl* self, std::shared_ptr<asio::ip::tcp::socket> sock) {
    std::error_code ec;
    // Closes the socket when the request head does not arrive in time; the pending read then
    // fails and the coroutine ends.
    asio::steady_timer timer(self->ctx);
    timer.expires_after(std::chrono::milliseconds(self->opts.timeout_ms));
    timer.async_wait([sock](std::error_code e) {
      if (!e) {
        std::error_code ignored;
        sock->close(ignored);
      }
    });
    std::string buf;
    co_await asio::async_read_until(*sock, asio::dynamic_buffer(buf, self->opts.max_request_bytes),
                                    "\r\n\r\n", asio::redirect_error(asio::use_awaitable, ec));
    bool too_long = ec == asio::error::not_found;
    if (!ec || too_long) {
      std::string reply = self->Answer(buf, too_long);
      self->requests.fetch_add(1, std::memory_order_relaxed);
      co_await asio::async_write(*sock, asio::buffer(reply),
                                 asio::redirect_error(asio::use_awaitable, ec));
      sock->shutdown(asio::ip::tcp::socket::shutdown_send, ec);
    }
    timer.cancel();
    sock->close(ec);
    self->open.fetch_sub(1, std::memory_order_relaxed);
  }

  static asio::awaitable<void> AcceptLoop(Impl* self) {
    for (;;) {
      auto sock = std::make_shared<asio::ip::tcp::socket>(self->ctx);
      std::error_code ec;
      co_await self->acceptor->async_accept(*sock, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !self->acceptor->is_open())
          co_return;
        LOG_WARN("[{}] accept failed: {}", self->opts.name, ec.message());
        asio::steady_timer backoff(self->ctx, std::chrono::milliseconds(50));
        co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      if (self->open.load(std::memory_order_relaxed) >= self->opts.max_connections) {
        sock->close(ec);
        continue;
      }
      self->open.fetch_add(1, std::memory_order_relaxed);
      asio::co_spawn(self->ctx, Serve(self, std::move(sock)), asio::detached);
    }
  }
};

HttpServer::HttpServer(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(options);
}

HttpServer::~HttpServer() {
  Stop();
}

void HttpServer::Handle(std::string path, std::string content_type, PathHandler handler) {
  impl_->routes[std::move(path)] = Route{std::move(content_type), std::move(handler)};
}

Status HttpServer::Start() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->started)
    return Status::InvalidArgument("http server already started");
  const Options& o = impl_->opts;
  std::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec)
    return Status::InvalidArgument(fmt::format("bad listen address '{}'", o.host));
  asio::ip::tcp::endpoint ep(addr, o.port);
  auto& acc = impl_->acceptor.emplace(impl_->ctx);
  if (acc.open(ep.protocol(), ec); ec)
    return Status::IoError(fmt::format("socket for {}: {}", o.name, ec.message()));
  acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (acc.bind(ep, ec); ec) {
    return Status(
        ec == asio::error::address_in_use ? StatusCode::kUnavailable : StatusCode::kIoError,
        fmt::format("{} cannot bind {}:{}: {}", o.name, o.host, o.port, ec.message()));
  }
  if (acc.listen(asio::socket_base::max_listen_connections, ec); ec)
    return Status::IoError(fmt::format("{} cannot listen: {}", o.name, ec.message()));
  impl_->port = acc.local_endpoint(ec).port();
  impl_->started = true;
  asio::co_spawn(impl_->ctx, Impl::AcceptLoop(impl_.get()), asio::detached);
  impl_->thread = std::thread([impl = impl_.get()] {
    for (;;) {
      try {
        impl->ctx.run();
        return;
      } catch (const std::exception& e) {
        LOG_ERROR("[{}] http thread caught: {}", impl->opts.name, e.what());
      } catch (...) {
        LOG_ERROR("[{}] http thread caught an unknown exception", impl->opts.name);
      }
    }
  });
  LOG_INFO("[{}] serving http on {}:{}", o.name, o.host, impl_->port);
  return Status::OK();
}

uint16_t HttpServer::port() const {
  return impl_->port;
}

uint64_t HttpServer::requests() const {
  return impl_->requests.load();
}

void HttpServer::Stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->started || impl_->stopped)
    return;
  impl_->stopped = true;
  impl_->ctx.stop();
  if (impl_->thread.joinable())
    impl_->thread.join();
  std::error_code ec;
  impl_->acceptor->close(ec);
}

// ---------------------------------------------------------------------------------------------
// HttpGet

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on `fd` until `deadline`; kTimedOut when it passes.
Status WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0)
      return Status::TimedOut("http request timed out");
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0)
      return Status::OK();
    if (n < 0 && errno != EINTR)
      return Status::IoError(fmt::format("poll: {}", std::strerror(errno)));
  }
}

}  // namespace

Result<HttpResponse> HttpGet(const HostPort& addr, const std::string& path, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  if (int rc = ::getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res)
    return Status::Unavailable(fmt::format("cannot resolve {}: {}", addr.host, gai_strerror(rc)));
  Fd fd(::socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  int rc = fd.get() < 0 ? -1 : ::connect(fd.get(), res->ai_addr, res->ai_addrlen);
  int err = errno;
  ::freeaddrinfo(res);
  if (fd.get() < 0 || (rc != 0 && err != EINPROGRESS))
    return Status::Unavailable(
        fmt::format("cannot connect to {}: {}", addr.ToString(), std::strerror(err)));
  if (rc != 0) {
    CIUIC_RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline));
    int so = 0;
    socklen_t len = sizeof(so);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so, &len);
    if (so != 0)
      return Status::Unavailable(
          fmt::format("cannot connect to {}: {}", addr.ToString(), std::strerror(so)));
  }
  std::string req = fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", path,
                                addr.ToString());
  size_t sent = 0;
  while (sent < req.size()) {
    CIUIC_RETURN_IF_ERROR(WaitFd(fd.get(), POLLOUT, deadline));
    ssize_t n = ::send(fd.get(), req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return Status::Unavailable(fmt::format("send to {}: {}", addr.ToString(), strerror(errno)));
    if (n > 0)
      sent += static_cast<size_t>(n);
  }
  std::string in;
  char buf[65536];
  for (;;) {
    CIUIC_RETURN_IF_ERROR(WaitFd(fd.get(), POLLIN, deadline));
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0)
      break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      return Status::Unavailable(fmt::format("recv from {}: {}", addr.ToString(), strerror(errno)));
    }
    in.append(buf, static_cast<size_t>(n));
    if (in.size() > (size_t{256} << 20))
      return Status::Corruption("http reply over 256 MiB");
  }
  size_t head_end = in.find("\r\n\r\n");
  if (head_end == std::string::npos || !in.starts_with("HTTP/1.") || in.size() < 12)
    return Status::Corruption(fmt::format("malformed http reply from {}", addr.ToString()));
  HttpResponse r;
  r.status = std::atoi(in.c_str() + 9);
  r.body = in.substr(head_end + 4);
  // Content-Length, when given, must match what arrived before the close.
  std::string head = in.substr(0, head_end);
  for (auto& c : head)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (size_t p = head.find("\r\ncontent-length:"); p != std::string::npos) {
    size_t len = std::strtoull(head.c_str() + p + 17, nullptr, 10);
    if (len != r.body.size())
      return Status::Unavailable(fmt::format("short http reply from {}", addr.ToString()));
  }
  return r;
}

}  // namespace ciuic::net
