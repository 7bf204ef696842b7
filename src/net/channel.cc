// EventLoop and RpcChannel: client connections, the client side of the handshake, pipelined
// calls matched to replies by request id, per-call timeouts.
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "common/config.h"
#include "common/logging.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "net/pb_convert.h"
#include "net/rpc.h"

namespace ciuic::net {
namespace detail {
namespace {

// The io_context whose thread this is, to refuse blocking calls that would deadlock.
thread_local const void* t_loop_ctx = nullptr;

Status StatusFromErrorInfo(const pb::ErrorInfo& e) {
  if (e.code() > static_cast<uint32_t>(StatusCode::kLoop)) {
    return Status::Internal(fmt::format("unknown error code {}: {}", e.code(), e.message()));
  }
  return FromPb(e);
}

}  // namespace

// State shared by an RpcChannel and its connection.
struct ChannelState {
  std::atomic<bool> closed{false};
  std::atomic<bool> closed_by_user{false};
  std::string addr;  // "host:port"

  Status LostStatus() const {
    return Status::Unavailable(closed_by_user.load() ? fmt::format("channel to {} closed", addr)
                                                     : fmt::format("connection to {} lost", addr));
  }
};

// Runs a ReplyCallback exactly once: with the result, or with kUnavailable when it is destroyed
// unused (the event loop went away before the call could run).
class CallbackOnce {
 public:
  CallbackOnce(ReplyCallback cb, std::shared_ptr<ChannelState> state)
      : cb_(std::move(cb)), state_(std::move(state)) {}
  CallbackOnce(CallbackOnce&& o) noexcept
      : cb_(std::exchange(o.cb_, nullptr)), state_(std::move(o.state_)) {}
  CallbackOnce& operator=(CallbackOnce&&) = delete;
  ~CallbackOnce() {
    if (cb_)
      (*this)(state_->LostStatus());
  }

  void operator()(Result<Reply> r) {
    ReplyCallback cb = std::exchange(cb_, nullptr);
    if (!cb)
      return;
    try {
      cb(std::move(r));
    } catch (const std::exception& e) {
      LOG_ERROR("rpc reply callback threw: {}", e.what());
    } catch (...) {
      LOG_ERROR("rpc reply callback threw");
    }
  }

 private:
  ReplyCallback cb_;
  std::shared_ptr<ChannelState> state_;
};

struct PendingCall {
  PendingCall(const Strand& strand, CallbackOnce c) : cb(std::move(c)), timer(strand) {}
  CallbackOnce cb;
  std::span<uint8_t> in_dest;
  asio::steady_timer timer;
  std::optional<Result<Reply>> result;  // set once: reply, error, timeout or loss
  bool in_write = true;       // the request frame (and the caller's out_data) is still queued
  bool reading_data = false;  // the reply's data segment is being read into in_dest
  MsgType type = MsgType::kPing;
  int timeout_ms = 0;
};

class ClientConn : public Connection {
 public:
  ClientConn(asio::ip::tcp::socket socket,
             Strand strand,
             std::shared_ptr<Registry> registry,
             ConnParams params,
             std::shared_ptr<ChannelState> state)
      : Connection(std::move(socket),
                   std::move(strand),
                   std::move(registry),
                   std::move(params),
                   state->addr),
        state_(std::move(state)) {}

  static asio::awaitable<void> Run(std::shared_ptr<ClientConn> self,
                                   HostPort addr,
                                   ChannelOptions o,
                                   std::shared_ptr<std::promise<Result<std::string>>> done);

  void StartCall(uint64_t id,
                 MsgType type,
                 OutFrame f,
                 std::span<uint8_t> in_dest,
                 CallbackOnce cb,
                 int timeout_ms);

 protected:
  void OnWritten(OutFrame& f, bool ok) override;
  void OnClosed() override;

 private:
  asio::awaitable<Result<std::string>> Handshake(HostPort addr, ChannelOptions o);
  static asio::awaitable<void> ReadLoop(std::shared_ptr<ClientConn> self);
  void OnTimeout(uint64_t id);
  void TryComplete(uint64_t id);
  Status HandshakeFailure(const char* what) const {
    return Status::Unavailable(
        fmt::format("{} {}: {}", what, state_->addr,
                    close_reason().empty() ? std::string("connection closed") : close_reason()));
  }

  std::shared_ptr<ChannelState> state_;
  std::unordered_map<uint64_t, std::unique_ptr<PendingCall>> pending_;
  std::string session_key_;  // for a future per-frame MAC
};

asio::awaitable<Result<std::string>> ClientConn::Handshake(HostPort addr, ChannelOptions o) {
  std::error_code ec;
  asio::ip::tcp::endpoint ep;
  auto ip = asio::ip::make_address(addr.host, ec);
  if (!ec) {
    ep = asio::ip::tcp::endpoint(ip, addr.port);
  } else {
    asio::ip::tcp::resolver resolver(strand());
    auto results = co_await resolver.async_resolve(addr.host, std::to_string(addr.port),
                                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec || results.empty()) {
      co_return Status::Unavailable(
          fmt::format("cannot resolve {}: {}", addr.host, ec ? ec.message() : "no address"));
    }
    ep = results.begin()->endpoint();
  }
  co_await socket_.async_connect(ep, asio::redirect_error(asio::use_awaitable, ec));
  if (ec || closed()) {
    if (closed())
      co_return HandshakeFailure("cannot connect to");
    co_return Status::Unavailable(
        fmt::format("cannot connect to {}: {}", state_->addr, ec.message()));
  }
  TuneSocket();

  pb::Hello hello;
  hello.set_min_version(o.min_version);
  hello.set_max_version(o.max_version);
  hello.set_role(static_cast<uint32_t>(o.role));
  hello.set_key_id(o.key_id);
  hello.set_nonce(RandomBytes(kNonceSize));
  if (!o.job_id.empty())
    hello.set_job_id(o.job_id);
  std::string hello_bytes = hello.SerializeAsString();
  Enqueue(MakeFrame(MsgType::kHello, 0, 0, hello_bytes));

  InFrame f;
  if (!co_await ReadFrame(&f))
    co_return HandshakeFailure("handshake failed with");
  EndFrame();
  if ((f.h.flags & kFlagResponse) == 0 || f.h.data_len != 0) {
    Reject("unexpected frame during the handshake");
    co_return HandshakeFailure("handshake failed with");
  }
  if ((f.h.flags & kFlagError) != 0) {
    pb::ErrorInfo e;
    Status s = e.ParseFromString(f.body) ? StatusFromErrorInfo(e)
                                         : Status::Corruption("malformed handshake error");
    Close("");
    co_return s;
  }
  pb::Challenge ch;
  if (f.h.type != static_cast<uint16_t>(MsgType::kChallenge) || !ch.ParseFromString(f.body) ||
      ch.nonce().size() != kNonceSize || ch.version() < o.min_version ||
      ch.version() > o.max_version) {
    Reject("bad Challenge");
    co_return HandshakeFailure("handshake failed with");
  }
  std::string transcript = HandshakeTranscript(hello_bytes, ch.version(), ch.nonce(),
                                               static_cast<uint32_t>(o.role), o.key_id);
  if (!MacEqual(ch.mac(), ServerMac(o.secret, transcript))) {
    Close("server failed to prove the cluster secret", log::Level::kWarn);
    co_return Status::PermissionDenied(
        fmt::format("authentication failed: {} does not know the cluster secret", state_->addr));
  }
  pb::Proof proof;
  proof.set_mac(ClientMac(o.secret, transcript));
  Enqueue(MakeFrame(MsgType::kProof, 0, 0, proof.SerializeAsString()));

  InFrame w;
  if (!co_await ReadFrame(&w))
    co_return HandshakeFailure("handshake failed with");
  EndFrame();
  if ((w.h.flags & kFlagResponse) == 0 || w.h.data_len != 0) {
    Reject("unexpected frame during the handshake");
    co_return HandshakeFailure("handshake failed with");
  }
  if ((w.h.flags & kFlagError) != 0) {
    pb::ErrorInfo e;
    Status s = e.ParseFromString(w.body) ? StatusFromErrorInfo(e)
                                         : Status::Corruption("malformed handshake error");
    Close("");
    co_return s;
  }
  pb::Welcome welcome;
  if (w.h.type != static_cast<uint16_t>(MsgType::kWelcome) || !welcome.ParseFromString(w.body)) {
    Reject("bad Welcome");
    co_return HandshakeFailure("handshake failed with");
  }
  session_key_ = SessionKey(o.secret, transcript);
  SetHandshakeDone();
  co_return welcome.cluster_uuid();
}

asio::awaitable<void> ClientConn::Run(std::shared_ptr<ClientConn> self,
                                      HostPort addr,
                                      ChannelOptions o,
                                      std::shared_ptr<std::promise<Result<std::string>>> done) {
  self->StartWatchdog();
  Result<std::string> r = co_await self->Handshake(std::move(addr), std::move(o));
  if (!r.ok()) {
    self->Close("");
    done->set_value(std::move(r));
    co_return;
  }
  done->set_value(std::move(r));
  co_await ReadLoop(self);
}

asio::awaitable<void> ClientConn::ReadLoop(std::shared_ptr<ClientConn> self) {
  for (;;) {
    InFrame f;
    if (!co_await self->ReadFrame(&f))
      break;
    const uint64_t id = f.h.request_id;
    if ((f.h.flags & kFlagResponse) == 0) {
      self->Reject("request frame sent to a client");
      break;
    }
    auto it = self->pending_.find(id);
    PendingCall* pc =
        (it != self->pending_.end() && !it->second->result) ? it->second.get() : nullptr;
    if (pc == nullptr) {
      // A late reply to a call that timed out: its destination is no longer ours to write.
      if (!co_await self->SkipData(f.h.data_len))
        break;
      self->EndFrame();
      continue;
    }
    if ((f.h.flags & kFlagError) != 0) {
      if (!co_await self->SkipData(f.h.data_len))
        break;
      self->EndFrame();
      pb::ErrorInfo e;
      pc->result = e.ParseFromString(f.body) ? StatusFromErrorInfo(e)
                                             : Status::Corruption("malformed error reply");
      self->TryComplete(id);
      continue;
    }
    Reply reply;
    reply.body = std::move(f.body);
    reply.data_len = f.h.data_len;
    if (f.h.data_len > 0) {
      uint8_t* dest;
      if (pc->in_dest.size() >= f.h.data_len) {
        dest = pc->in_dest.data();
        reply.data_in_dest = true;
      } else {
        reply.data.Resize(f.h.data_len);
        dest = reply.data.data();
      }
      // While this is set, a timeout or loss only records its status: the entry (and the
      // caller's destination) stays ours until the read is over.
      pc->reading_data = true;
      bool ok = co_await self->ReadData(dest, f.h.data_len);
      pc->reading_data = false;
      if (!ok) {
        self->TryComplete(id);
        break;
      }
    }
    self->EndFrame();
    if (!pc->result)
      pc->result = std::move(reply);
    self->TryComplete(id);
  }
  self->Close("");
}

void ClientConn::StartCall(uint64_t id,
                           MsgType type,
                           OutFrame f,
                           std::span<uint8_t> in_dest,
                           CallbackOnce cb,
                           int timeout_ms) {
  if (closed()) {
    cb(state_->LostStatus());
    return;
  }
  auto pc = std::make_unique<PendingCall>(strand(), std::move(cb));
  pc->in_dest = in_dest;
  pc->type = type;
  pc->timeout_ms = timeout_ms;
  if (timeout_ms > 0) {
    pc->timer.expires_after(std::chrono::milliseconds(timeout_ms));
    pc->timer.async_wait([w = weak_from_this(), id](const std::error_code& ec) {
      if (ec)
        return;
      if (auto c = w.lock())
        static_cast<ClientConn*>(c.get())->OnTimeout(id);
    });
  }
  pending_.emplace(id, std::move(pc));
  f.call_id = id;
  Enqueue(std::move(f));
}

void ClientConn::OnTimeout(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end() || it->second->result)
    return;
  PendingCall& pc = *it->second;
  pc.result = Status::TimedOut(fmt::format("{} call to {} timed out after {} ms",
                                           MsgTypeName(static_cast<uint16_t>(pc.type)),
                                           state_->addr, pc.timeout_ms));
  // A request still waiting in the queue is never sent; one being written finishes first.
  if (pc.in_write && CancelQueued(id))
    pc.in_write = false;
  TryComplete(id);
}

void ClientConn::OnWritten(OutFrame& f, bool ok) {
  if (f.call_id == 0)
    return;
  auto it = pending_.find(f.call_id);
  if (it == pending_.end())
    return;
  it->second->in_write = false;
  if (!ok && !it->second->result)
    it->second->result = state_->LostStatus();
  TryComplete(f.call_id);
}

void ClientConn::OnClosed() {
  state_->closed.store(true);
  std::vector<uint64_t> ids;
  ids.reserve(pending_.size());
  for (auto& [id, pc] : pending_) {
    if (!pc->result)
      pc->result = state_->LostStatus();
    ids.push_back(id);
  }
  for (uint64_t id : ids)
    TryComplete(id);
}

void ClientConn::TryComplete(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end())
    return;
  PendingCall& pc = *it->second;
  if (!pc.result || pc.in_write || pc.reading_data)
    return;
  std::unique_ptr<PendingCall> done = std::move(it->second);
  pending_.erase(it);
  done->timer.cancel();
  done->cb(std::move(*done->result));
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// EventLoop

struct EventLoop::Impl {
  explicit Impl(int threads) : ctx(std::max(1, threads)) {}
  asio::io_context ctx;  // concurrency hint: the number of threads
  std::shared_ptr<detail::Registry> registry = std::make_shared<detail::Registry>();
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::atomic<bool> stopped{false};
};

EventLoop::EventLoop(int threads) : impl_(std::make_unique<Impl>(threads)) {
  impl_->work.emplace(impl_->ctx.get_executor());
  for (int i = 0; i < std::max(1, threads); ++i) {
    impl_->threads.emplace_back([ctx = &impl_->ctx] {
      detail::t_loop_ctx = ctx;
      for (;;) {
        try {
          ctx->run();
          return;
        } catch (const std::exception& e) {
          LOG_ERROR("event loop thread caught: {}", e.what());
        } catch (...) {
          LOG_ERROR("event loop thread caught an unknown exception");
        }
      }
    });
  }
}

EventLoop::~EventLoop() {
  Stop();
}

void EventLoop::Stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopped.exchange(true))
    return;
  impl_->registry->CloseAll("");
  if (!impl_->registry->WaitEmpty(std::chrono::seconds(5))) {
    LOG_WARN("event loop: connections still open 5 s after Stop; abandoning them");
  }
  impl_->work.reset();
  impl_->ctx.stop();
  for (auto& t : impl_->threads)
    t.join();
  impl_->threads.clear();
}

void* EventLoop::native() {
  return &impl_->ctx;
}

void EventLoop::Post(std::function<void()> fn) {
  asio::post(impl_->ctx, std::move(fn));
}

// ---------------------------------------------------------------------------------------------
// RpcChannel

struct RpcChannel::Impl {
  std::shared_ptr<detail::ConnHandle> handle;
  std::shared_ptr<detail::ChannelState> state;
  HostPort addr;
  std::string cluster_uuid;
  FrameLimits limits;
  const void* ctx = nullptr;
  std::atomic<uint64_t> next_id{1};  // 0 is the handshake's
};

RpcChannel::RpcChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RpcChannel::~RpcChannel() {
  Close();
}

std::string JobIdFromEnv() {
  for (const char* var : {"CIUIC_JOBID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0')
      return v;
  }
  return "";
}

Result<std::shared_ptr<RpcChannel>> RpcChannel::Connect(EventLoop* loop,
                                                        const HostPort& addr,
                                                        const ChannelOptions& options) {
  if (loop == nullptr)
    return Status::InvalidArgument("RpcChannel::Connect without an EventLoop");
  auto* ctx = static_cast<asio::io_context*>(loop->native());
  if (detail::t_loop_ctx == ctx) {
    return Status::Internal("RpcChannel::Connect called on its own EventLoop thread");
  }
  if (loop->impl_->stopped.load())
    return Status::Unavailable("event loop stopped");
  auto state = std::make_shared<detail::ChannelState>();
  state->addr = addr.ToString();
  detail::ConnParams params;
  params.limits = options.limits;
  params.handshake_timeout_ms = std::max(1, options.connect_timeout_ms);
  params.stall_timeout_ms = options.stall_timeout_ms;
  params.name = "rpc-client";
  detail::Strand strand = asio::make_strand(*ctx);
  auto conn = std::make_shared<detail::ClientConn>(asio::ip::tcp::socket(strand), strand,
                                                   loop->impl_->registry, params, state);
  auto handle = conn->handle();
  auto done = std::make_shared<std::promise<Result<std::string>>>();
  auto fut = done->get_future();
  asio::co_spawn(strand, detail::ClientConn::Run(std::move(conn), addr, options, std::move(done)),
                 [](std::exception_ptr e) {
                   if (e)
                     LOG_ERROR("rpc client connection failed with an exception");
                 });
  Result<std::string> uuid;
  try {
    // The watchdog ends a slow connect or handshake; the extra wait only guards against a loop
    // that stopped under us.
    if (fut.wait_for(std::chrono::milliseconds(options.connect_timeout_ms) +
                     std::chrono::seconds(5)) != std::future_status::ready) {
      handle->Run([](detail::Connection* c) { c->Close(""); });
      return Status::Unavailable(fmt::format("connecting to {} timed out", state->addr));
    }
    uuid = fut.get();
  } catch (const std::exception&) {
    return Status::Unavailable(
        fmt::format("connecting to {} failed: event loop stopped", state->addr));
  }
  if (!uuid.ok())
    return uuid.status();
  auto impl = std::make_unique<Impl>();
  impl->handle = std::move(handle);
  impl->state = std::move(state);
  impl->addr = addr;
  impl->cluster_uuid = std::move(uuid).value();
  impl->limits = options.limits;
  impl->ctx = ctx;
  return std::shared_ptr<RpcChannel>(new RpcChannel(std::move(impl)));
}

void RpcChannel::CallAsync(MsgType type,
                           const google::protobuf::MessageLite& req,
                           std::vector<ConstSpan> out_data,
                           std::span<uint8_t> in_dest,
                           ReplyCallback cb,
                           int timeout_ms) {
  detail::CallbackOnce once(std::move(cb), impl_->state);
  if (impl_->state->closed.load()) {
    once(impl_->state->LostStatus());
    return;
  }
  std::string body = Serialize(req);
  uint64_t data_len = 0;
  for (const auto& s : out_data)
    data_len += s.size;
  if (body.size() > impl_->limits.max_body || data_len > impl_->limits.max_data) {
    once(Status::InvalidArgument(fmt::format("{} request too large: body {} bytes, data {} bytes",
                                             MsgTypeName(static_cast<uint16_t>(type)), body.size(),
                                             data_len)));
    return;
  }
  uint64_t id = impl_->next_id.fetch_add(1, std::memory_order_relaxed);
  detail::OutFrame f = detail::MakeFrame(type, 0, id, std::move(body), std::move(out_data));
  // If the connection is already gone, Run drops the closure and `once` reports kUnavailable.
  impl_->handle->Run([id, type, f = std::move(f), in_dest, once = std::move(once),
                      timeout_ms](detail::Connection* c) mutable {
    static_cast<detail::ClientConn*>(c)->StartCall(id, type, std::move(f), in_dest, std::move(once),
                                                   timeout_ms);
  });
}

Result<Reply> RpcChannel::Call(MsgType type,
                               const google::protobuf::MessageLite& req,
                               std::vector<ConstSpan> out_data,
                               std::span<uint8_t> in_dest,
                               int timeout_ms) {
  if (detail::t_loop_ctx == impl_->ctx) {
    return Status::Internal("blocking RpcChannel::Call on its own EventLoop thread");
  }
  auto p = std::make_shared<std::promise<Result<Reply>>>();
  auto fut = p->get_future();
  CallAsync(
      type, req, std::move(out_data), in_dest, [p](Result<Reply> r) { p->set_value(std::move(r)); },
      timeout_ms);
  return fut.get();
}

Status RpcChannel::CallMsg(MsgType type,
                           const google::protobuf::MessageLite& req,
                           google::protobuf::MessageLite* resp,
                           int timeout_ms) {
  CIUIC_ASSIGN_OR_RETURN(Reply reply, Call(type, req, {}, {}, timeout_ms));
  return Parse(reply.body, resp, "reply body");
}

bool RpcChannel::connected() const {
  return !impl_->state->closed.load();
}

void RpcChannel::Close() {
  if (impl_->state->closed.load())
    return;
  impl_->state->closed_by_user.store(true);
  if (impl_->state->closed.exchange(true))
    return;
  impl_->handle->Run([](detail::Connection* c) { c->Close(""); });
}

const std::string& RpcChannel::cluster_uuid() const {
  return impl_->cluster_uuid;
}
const HostPort& RpcChannel::addr() const {
  return impl_->addr;
}

}  // namespace ciuic::net
