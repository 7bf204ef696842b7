// RpcServer and ServerCall: accept loop, per-connection serve coroutine, handshake (server side),
// dispatch to registered handlers, replies from any thread.
#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/submit_batch.h"
#include "net/buffer_pool.h"
#include "net/conn.h"
#include "net/handshake.h"
#include "net/rpc.h"
#include "net/rpc_metrics.h"

namespace ciuic::net {
// One received request, shared by the ServerCall handed to the handler and nothing else.
struct CallState {
  std::shared_ptr<detail::ConnHandle> conn;
  MsgType type = MsgType::kPing;
  Role role = Role::kClient;
  uint32_t key_id = 0;
  uint64_t request_id = 0;
  std::string body;
  AlignedBuffer data;
  std::shared_ptr<detail::BufferPool> pool;  // takes `data` back unless the handler kept it
  std::atomic<bool> replied{false};
  // Set instead of `conn` for a request made by RpcServer::TEST_Dispatch: takes the reply.
  std::function<void(detail::OutFrame)> sink;
  // Set for a part of a batched request (ServerCall::Part): takes the reply unframed.
  std::function<void(PartReply)> part_sink;
  // Metrics (metrics null: the server exports none).
  std::shared_ptr<detail::RpcMetrics> metrics;
  detail::OpMetrics* op = nullptr;
  detail::JobStats* job = nullptr;
  std::chrono::steady_clock::time_point received;
  uint64_t request_data_len = 0;

  ~CallState() {
    if (pool != nullptr && data.capacity() > 0)
      pool->Put(std::move(data));
  }

  // Queues `f` on the connection's strand; dropped when the connection or the server is gone.
  void Send(detail::OutFrame f);
  const std::string& peer() const {
    static const std::string kInProcess = "in-process";
    return conn != nullptr ? conn->peer() : kInProcess;
  }
  // Counts the reply `f` (with `data_len` bytes of data) in the metrics, if any.
  void Account(const detail::OutFrame& f, uint64_t data_len, StatusCode code);
};

namespace detail {
namespace {

struct HandlerEntry {
  Handler handler;
  std::vector<Role> roles;
  OpMetrics* metrics = nullptr;  // set at Start when the server exports metrics
};

}  // namespace

// State shared by the server object and its connections; it outlives both.
struct ServerShared {
  RpcServer::Options opts;
  std::unordered_map<uint16_t, HandlerEntry> handlers;  // read-only after Start()
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<bool> stopping{false};
  std::shared_ptr<BufferPool> pool;
  ServerHandshake::Config handshake;    // from opts
  std::shared_ptr<RpcMetrics> metrics;  // null: no metrics
};

// Why a request of `type` from `role` is refused (no handler, or not for that role); OK when a
// handler takes it.
Status Refusal(const ServerShared& shared, uint16_t type, Role role) {
  auto it = shared.handlers.find(type);
  if (it == shared.handlers.end()) {
    return Status::NotSupported(
        fmt::format("message type {} is not served by {}", MsgTypeName(type), shared.opts.name));
  }
  const std::vector<Role>& roles = it->second.roles;
  if (!roles.empty() && std::find(roles.begin(), roles.end(), role) == roles.end()) {
    return Status::PermissionDenied(
        fmt::format("role {} may not call {}", static_cast<uint32_t>(role), MsgTypeName(type)));
  }
  return Status::OK();
}

class ServerConn : public Connection {
 public:
  ServerConn(asio::ip::tcp::socket socket,
             Strand strand,
             std::shared_ptr<ServerShared> shared,
             ConnParams params)
      : Connection(std::move(socket), std::move(strand), shared->registry, std::move(params)),
        shared_(std::move(shared)),
        resume_timer_(this->strand()) {}

  static asio::awaitable<void> Serve(std::shared_ptr<ServerConn> self);

  // Queues a handler's reply (on the strand) and lets the reader go on if it was held back.
  void OnReply(OutFrame f) {
    if (inflight_ > 0)
      --inflight_;
    Enqueue(std::move(f));
    if (paused_ && MayRead())
      resume_timer_.cancel();
  }

 protected:
  void OnClosed() override { resume_timer_.cancel(); }
  void OnWritten(OutFrame& f, bool ok) override {
    (void)f;
    (void)ok;
    if (paused_ && MayRead())
      resume_timer_.cancel();
  }

 private:
  asio::awaitable<bool> Handshake();
  asio::awaitable<bool> Dispatch(InFrame f);
  // Whether the reader may take another request: handlers and the send queue are both under
  // their bounds (error replies to a peer that does not read them must not pile up).
  bool MayRead() const {
    size_t max = std::max<size_t>(1, shared_->opts.max_inflight_per_conn);
    return inflight_ < max && queued_frames() < std::max<size_t>(max, 64);
  }
  void FailHandshake(uint16_t type, uint64_t request_id, const Status& status) {
    LOG_WARN("[{}] handshake with {} failed: {}", params_.name, peer(), status.ToString());
    OutFrame e = MakeErrorFrame(type, request_id, status);
    e.close_after = true;
    Enqueue(std::move(e));
  }

  std::shared_ptr<ServerShared> shared_;
  Role role_ = Role::kClient;
  uint32_t key_id_ = 0;
  JobStats* job_ = nullptr;  // the peer's job (metrics only)
  std::string session_key_;  // for a future per-frame MAC
  size_t inflight_ = 0;
  bool paused_ = false;
  asio::steady_timer resume_timer_;
};

asio::awaitable<bool> ServerConn::Handshake() {
  ServerHandshake hs(&shared_->handshake);
  InFrame f;
  if (!co_await ReadFrame(&f))
    co_return false;
  if (f.h.type != static_cast<uint16_t>(MsgType::kHello) || (f.h.flags & kFlagResponse) != 0 ||
      f.h.data_len != 0) {
    Reject(fmt::format("expected Hello, got {} before the handshake", MsgTypeName(f.h.type)));
    co_return false;
  }
  EndFrame();
  Result<std::string> challenge = hs.OnHello(f.body, RandomBytes(kNonceSize));
  if (!challenge.ok()) {
    if (challenge.status().code() == StatusCode::kCorruption)
      Reject(challenge.status().message());
    else
      FailHandshake(f.h.type, f.h.request_id, challenge.status());
    co_return false;
  }
  Enqueue(MakeFrame(MsgType::kChallenge, kFlagResponse, f.h.request_id, std::move(*challenge)));

  InFrame p;
  if (!co_await ReadFrame(&p))
    co_return false;
  if (p.h.type != static_cast<uint16_t>(MsgType::kProof) || (p.h.flags & kFlagResponse) != 0 ||
      p.h.data_len != 0) {
    Reject(fmt::format("expected Proof, got {} during the handshake", MsgTypeName(p.h.type)));
    co_return false;
  }
  EndFrame();
  Result<std::string> welcome = hs.OnProof(p.body);
  if (!welcome.ok()) {
    if (welcome.status().code() == StatusCode::kCorruption)
      Reject(welcome.status().message());
    else
      FailHandshake(p.h.type, p.h.request_id, welcome.status());
    co_return false;
  }
  session_key_ = hs.session_key();
  role_ = hs.role();
  key_id_ = hs.key_id();
  handle()->set_key_id(key_id_);
  // Jobs are clients' (and admin tools'); OSS-to-MDS traffic (heartbeats) belongs to none.
  if (shared_->metrics != nullptr && role_ != Role::kOss)
    job_ = shared_->metrics->Job(hs.job_id());
  SetHandshakeDone();
  Enqueue(MakeFrame(MsgType::kWelcome, kFlagResponse, p.h.request_id, std::move(*welcome)));
  LOG_DEBUG("[{}] {} authenticated as role {}, protocol {}", params_.name, peer(),
            static_cast<uint32_t>(role_), hs.version());
  co_return true;
}

asio::awaitable<bool> ServerConn::Dispatch(InFrame f) {
  const uint16_t type = f.h.type;
  const uint64_t id = f.h.request_id;
  auto it = shared_->handlers.find(type);
  if (it == shared_->handlers.end() && type == static_cast<uint16_t>(MsgType::kPing)) {
    if (!co_await SkipData(f.h.data_len))
      co_return false;
    EndFrame();
    Enqueue(MakeFrame(MsgType::kPing, kFlagResponse, id, std::string()));
    co_return true;
  }
  Status refuse = Refusal(*shared_, type, role_);
  if (!refuse.ok()) {
    if (shared_->metrics != nullptr)
      shared_->metrics->CountError(MsgTypeName(type), refuse.code());
    if (!co_await SkipData(f.h.data_len))
      co_return false;
    EndFrame();
    Enqueue(MakeErrorFrame(type, id, refuse));
    co_return true;
  }
  auto st = std::make_shared<CallState>();
  st->conn = handle();
  st->type = static_cast<MsgType>(type);
  st->role = role_;
  st->key_id = key_id_;
  st->request_id = id;
  st->body = std::move(f.body);
  if (f.h.data_len > 0) {
    st->pool = shared_->pool;
    st->data = shared_->pool->Get(f.h.data_len);
    if (!co_await ReadData(st->data.data(), f.h.data_len))
      co_return false;
  }
  EndFrame();
  ++inflight_;
  if (OpMetrics* m = it->second.metrics; m != nullptr) {
    st->metrics = shared_->metrics;
    st->op = m;
    st->job = job_;
    st->received = std::chrono::steady_clock::now();
    st->request_data_len = f.h.data_len;
    m->requests->Inc();
    m->request_bytes->Inc(kFrameHeaderSize + st->body.size() + f.h.data_len);
    st->metrics->inflight()->Add(1);
  }
  try {
    it->second.handler(ServerCall(std::move(st)));
  } catch (const std::exception& e) {
    LOG_ERROR("[{}] handler for {} threw: {}", params_.name, MsgTypeName(type), e.what());
  } catch (...) {
    LOG_ERROR("[{}] handler for {} threw", params_.name, MsgTypeName(type));
  }
  co_return true;
}

asio::awaitable<void> ServerConn::Serve(std::shared_ptr<ServerConn> self) {
  if (!co_await self->Handshake()) {
    // A failed handshake either closed the connection or queued an error that closes it.
    self->ReleaseWrites();
    co_return;
  }
  while (!self->closed()) {
    if (!self->MayRead()) {
      // Backpressure: stop reading this socket until replies go out.
      self->ReleaseWrites();
      self->paused_ = true;
      self->resume_timer_.expires_at(Clock::time_point::max());
      std::error_code ec;
      co_await self->resume_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      self->paused_ = false;
      continue;
    }
    InFrame f;
    if (!co_await self->ReadFrame(&f))
      break;
    if ((f.h.flags & kFlagResponse) != 0) {
      self->Reject("response frame sent to a server");
      break;
    }
    if (!co_await self->Dispatch(std::move(f)))
      break;
  }
  self->Close("");
}

asio::awaitable<void> AcceptLoop(std::shared_ptr<ServerShared> shared,
                                 asio::ip::tcp::acceptor* acceptor,
                                 asio::io_context* ctx) {
  const RpcServer::Options& o = shared->opts;
  ConnParams params;
  params.limits = o.limits;
  params.handshake_timeout_ms = o.handshake_timeout_ms;
  params.stall_timeout_ms = o.stall_timeout_ms;
  params.idle_timeout_ms = o.idle_timeout_ms;
  params.name = o.name;
  params.frames_rejected = &shared->rejected;
  asio::steady_timer backoff(acceptor->get_executor());
  for (;;) {
    Strand strand = asio::make_strand(*ctx);
    asio::ip::tcp::socket socket(strand);
    std::error_code ec;
    co_await acceptor->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (shared->stopping.load())
      break;
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open())
        break;
      LOG_WARN("[{}] accept failed: {}", o.name, ec.message());
      // Out of descriptors or memory: wait a little instead of spinning.
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (shared->registry->size() >= o.max_connections) {
      LOG_WARN("[{}] refusing a connection: {} connections open", o.name, o.max_connections);
      socket.close(ec);
      continue;
    }
    shared->accepted.fetch_add(1, std::memory_order_relaxed);
    auto conn = std::make_shared<ServerConn>(std::move(socket), strand, shared, params);
    conn->TuneSocket();
    conn->StartWatchdog();
    asio::co_spawn(strand, ServerConn::Serve(conn), [](std::exception_ptr e) {
      if (e)
        LOG_ERROR("rpc connection coroutine failed with an exception");
    });
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// ServerCall

void CallState::Send(detail::OutFrame f) {
  if (sink) {
    sink(std::move(f));
    return;
  }
  conn->Run([f = std::move(f)](detail::Connection* c) mutable {
    static_cast<detail::ServerConn*>(c)->OnReply(std::move(f));
  });
}

void CallState::Account(const detail::OutFrame& f, uint64_t data_len, StatusCode code) {
  if (op == nullptr)
    return;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                  received)
                .count();
  op->latency->Observe(static_cast<uint64_t>(std::max<int64_t>(0, us)));
  op->reply_bytes->Inc(kFrameHeaderSize + f.body.size() + data_len);
  metrics->inflight()->Add(-1);
  if (code != StatusCode::kOk)
    metrics->CountError(op->op, code);
  if (job != nullptr) {
    job->ops[op->index].fetch_add(1, std::memory_order_relaxed);
    if (data_len > 0)
      job->read_bytes.fetch_add(data_len, std::memory_order_relaxed);
    // Data a failed request carried was not written.
    if (request_data_len > 0 && code == StatusCode::kOk)
      job->write_bytes.fetch_add(request_data_len, std::memory_order_relaxed);
  }
}

ServerCall::ServerCall(std::shared_ptr<CallState> state) : state_(std::move(state)) {}
ServerCall::ServerCall(ServerCall&& o) noexcept = default;

ServerCall& ServerCall::operator=(ServerCall&& o) noexcept {
  if (this != &o) {
    if (state_ != nullptr && !state_->replied.load())
      ReplyError(Status::Internal("no reply"));
    state_ = std::move(o.state_);
  }
  return *this;
}

ServerCall::~ServerCall() {
  if (state_ != nullptr && !state_->replied.load())
    ReplyError(Status::Internal("no reply"));
}

MsgType ServerCall::type() const {
  return state_ ? state_->type : MsgType::kPing;
}
Role ServerCall::peer_role() const {
  return state_ ? state_->role : Role::kClient;
}
const std::string& ServerCall::peer_addr() const {
  static const std::string kNone;
  return state_ ? state_->peer() : kNone;
}
uint32_t ServerCall::key_id() const {
  return state_ ? state_->key_id : 0;
}
uint64_t ServerCall::request_id() const {
  return state_ ? state_->request_id : 0;
}
std::string_view ServerCall::body() const {
  return state_ ? std::string_view(state_->body) : std::string_view();
}
AlignedBuffer& ServerCall::data() {
  static thread_local AlignedBuffer empty;
  return state_ ? state_->data : empty;
}
Status ServerCall::ParseBody(google::protobuf::MessageLite* m) const {
  return Parse(body(), m, "request body");
}
void ServerCall::AddJobReadBytes(uint64_t bytes) {
  if (state_ != nullptr && state_->job != nullptr)
    state_->job->read_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void ServerCall::AddJobWriteBytes(uint64_t bytes) {
  if (state_ != nullptr && state_->job != nullptr)
    state_->job->write_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

bool ServerCall::replied() const {
  return state_ && state_->replied.load();
}

ServerCall ServerCall::Part(MsgType type, std::function<void(PartReply)> sink) const {
  auto st = std::make_shared<CallState>();
  if (state_ != nullptr) {
    st->conn = state_->conn;  // for peer() only: the reply goes to part_sink
    st->role = state_->role;
    st->key_id = state_->key_id;
    st->request_id = state_->request_id;
    st->job = state_->job;
    st->received = state_->received;
  }
  st->type = type;
  st->part_sink = std::move(sink);
  return ServerCall(std::move(st));
}

void ServerCall::Reply(const google::protobuf::MessageLite& body,
                       std::vector<ConstSpan> data,
                       std::shared_ptr<void> keepalive) {
  if (state_ == nullptr)
    return;
  if (state_->replied.exchange(true)) {
    LOG_ERROR("second reply to {} request {} from {} ignored",
              MsgTypeName(static_cast<uint16_t>(state_->type)), state_->request_id, state_->peer());
    return;
  }
  if (state_->part_sink) {
    state_->part_sink(
        PartReply{Status::OK(), Serialize(body), std::move(data), std::move(keepalive)});
    return;
  }
  uint64_t data_len = 0;
  for (const auto& s : data)
    data_len += s.size;
  if (data_len > UINT32_MAX) {
    detail::OutFrame e =
        detail::MakeErrorFrame(static_cast<uint16_t>(state_->type), state_->request_id,
                               Status::Internal("reply data segment over 4 GiB"));
    state_->Account(e, 0, StatusCode::kInternal);
    state_->Send(std::move(e));
    return;
  }
  detail::OutFrame f = detail::MakeFrame(state_->type, kFlagResponse, state_->request_id,
                                         Serialize(body), std::move(data), std::move(keepalive));
  state_->Account(f, data_len, StatusCode::kOk);
  state_->Send(std::move(f));
}

void ServerCall::ReplyError(const Status& status) {
  if (state_ == nullptr)
    return;
  if (state_->replied.exchange(true)) {
    LOG_ERROR("second reply ({}) to {} request {} from {} ignored", status.ToString(),
              MsgTypeName(static_cast<uint16_t>(state_->type)), state_->request_id, state_->peer());
    return;
  }
  Status s = status.ok() ? Status::Internal("error reply with an OK status") : status;
  if (state_->part_sink) {
    state_->part_sink(PartReply{std::move(s), {}, {}, nullptr});
    return;
  }
  detail::OutFrame f =
      detail::MakeErrorFrame(static_cast<uint16_t>(state_->type), state_->request_id, s);
  state_->Account(f, 0, s.code());
  state_->Send(std::move(f));
}

// ---------------------------------------------------------------------------------------------
// RpcServer

struct RpcServer::Impl {
  explicit Impl(int threads) : ctx(std::max(1, threads)) {}
  std::shared_ptr<detail::ServerShared> shared = std::make_shared<detail::ServerShared>();
  // The io_context must outlive every asio object below, so it is declared first.
  asio::io_context ctx;  // concurrency hint: the number of threads
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<detail::Strand> accept_strand;
  std::optional<asio::ip::tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  uint16_t port = 0;
  std::mutex mu;  // serializes Start and Stop
  bool started = false;
  bool stopped = false;
};

RpcServer::RpcServer(Options options) : impl_(std::make_unique<Impl>(options.io_threads)) {
  impl_->shared->opts = std::move(options);
  impl_->shared->pool = std::make_shared<detail::BufferPool>(impl_->shared->opts.buffer_pool_bytes);
  const Options& o = impl_->shared->opts;
  impl_->shared->handshake = ServerHandshake::Config{.min_version = o.min_version,
                                                     .max_version = o.max_version,
                                                     .secret = o.secret,
                                                     .key_id = o.key_id,
                                                     .cluster_uuid = o.cluster_uuid,
                                                     .key_lookup = o.key_lookup};
}

RpcServer::~RpcServer() {
  Stop();
}

void RpcServer::Register(MsgType type, Handler handler, std::vector<Role> roles) {
  impl_->shared->handlers[static_cast<uint16_t>(type)] =
      detail::HandlerEntry{std::move(handler), std::move(roles)};
}

Status RpcServer::Start() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->started)
    return Status::InvalidArgument("server already started");
  const Options& o = impl_->shared->opts;
  std::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec)
    return Status::InvalidArgument(fmt::format("bad listen address '{}'", o.host));
  asio::ip::tcp::endpoint ep(addr, o.port);
  impl_->accept_strand.emplace(asio::make_strand(impl_->ctx));
  auto& acc = impl_->acceptor.emplace(*impl_->accept_strand);
  if (acc.open(ep.protocol(), ec); ec) {
    return Status::IoError(fmt::format("socket for {}: {}", o.name, ec.message()));
  }
  acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (acc.bind(ep, ec); ec) {
    return Status(
        ec == asio::error::address_in_use ? StatusCode::kUnavailable : StatusCode::kIoError,
        fmt::format("{} cannot bind {}:{}: {}", o.name, o.host, o.port, ec.message()));
  }
  if (acc.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return Status::IoError(fmt::format("{} cannot listen: {}", o.name, ec.message()));
  }
  impl_->port = acc.local_endpoint(ec).port();
  impl_->started = true;
  if (o.metrics != nullptr) {
    auto m = std::make_shared<detail::RpcMetrics>(o.metrics, o.max_jobs);
    for (auto& [type, entry] : impl_->shared->handlers)
      entry.metrics = m->AddOp(type);
    std::weak_ptr<detail::ServerShared> weak = impl_->shared;
    m->Freeze(
        [weak] {
          auto s = weak.lock();
          return s ? s->registry->size() : 0;
        },
        [weak]() -> uint64_t {
          auto s = weak.lock();
          return s ? s->rejected.load() : 0;
        });
    impl_->shared->metrics = std::move(m);
  }
  impl_->work.emplace(impl_->ctx.get_executor());
  asio::co_spawn(*impl_->accept_strand, detail::AcceptLoop(impl_->shared, &acc, &impl_->ctx),
                 [](std::exception_ptr e) {
                   if (e)
                     LOG_ERROR("rpc accept loop failed with an exception");
                 });
  int n = std::max(1, o.io_threads);
  for (int i = 0; i < n; ++i) {
    impl_->threads.emplace_back([ctx = &impl_->ctx, name = o.name] {
      for (;;) {
        try {
          // One turn: run what is ready (up to 64 handlers), then flush the disk submissions
          // they made in one go (an OSS's io_uring: one io_uring_submit per turn).
          for (;;) {
            SubmitBatch batch;
            if (ctx->run_one() == 0)
              return;
            for (int i = 0; i < 63 && ctx->poll_one() != 0; ++i) {
            }
          }
        } catch (const std::exception& e) {
          LOG_ERROR("[{}] network thread caught: {}", name, e.what());
        } catch (...) {
          LOG_ERROR("[{}] network thread caught an unknown exception", name);
        }
      }
    });
  }
  LOG_INFO("[{}] listening on {}:{}", o.name, o.host, impl_->port);
  return Status::OK();
}

uint16_t RpcServer::port() const {
  return impl_->port;
}

void RpcServer::Stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->started || impl_->stopped)
    return;
  impl_->stopped = true;
  impl_->shared->stopping.store(true);
  asio::post(*impl_->accept_strand, [acc = &*impl_->acceptor] {
    std::error_code ec;
    acc->close(ec);
  });
  impl_->shared->registry->CloseAll("");
  if (!impl_->shared->registry->WaitEmpty(std::chrono::seconds(5))) {
    LOG_WARN("[{}] connections still open 5 s after Stop; abandoning them",
             impl_->shared->opts.name);
  }
  impl_->work.reset();
  impl_->ctx.stop();
  for (auto& t : impl_->threads)
    t.join();
  impl_->threads.clear();
}

void RpcServer::TEST_Dispatch(MsgType type,
                              Role role,
                              uint32_t key_id,
                              std::string body,
                              std::string data,
                              std::function<void(TestReply)> on_reply) {
  auto st = std::make_shared<CallState>();
  st->type = type;
  st->role = role;
  st->key_id = key_id;
  st->request_id = 1;
  st->body = std::move(body);
  st->sink = [on_reply = std::move(on_reply)](detail::OutFrame f) {
    TestReply r;
    r.error = (f.header[8] & kFlagError) != 0;
    r.body = std::move(f.body);
    for (const ConstSpan& s : f.data)
      r.data.append(static_cast<const char*>(s.data), s.size);
    on_reply(std::move(r));
  };
  if (!data.empty()) {
    st->data = AlignedBuffer(data.size());
    std::memcpy(st->data.data(), data.data(), data.size());
  }
  const detail::ServerShared& shared = *impl_->shared;
  Status refuse = detail::Refusal(shared, static_cast<uint16_t>(type), role);
  if (!refuse.ok()) {
    ServerCall(std::move(st)).ReplyError(refuse);
    return;
  }
  // Unlike Dispatch, an exception from the handler is not caught: a fuzzer must see it.
  shared.handlers.at(static_cast<uint16_t>(type)).handler(ServerCall(std::move(st)));
}

size_t RpcServer::buffer_pool_idle_bytes() const {
  return impl_->shared->pool ? impl_->shared->pool->idle_bytes() : 0;
}

size_t RpcServer::CloseConnectionsOfKey(uint32_t key_id) {
  return impl_->shared->registry->CloseKey(key_id, fmt::format("key {} revoked", key_id));
}

uint64_t RpcServer::connections_accepted() const {
  return impl_->shared->accepted.load();
}
uint64_t RpcServer::frames_rejected() const {
  return impl_->shared->rejected.load();
}

}  // namespace ciuic::net
