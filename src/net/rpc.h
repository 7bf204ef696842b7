// RPC over TCP: framing, the authenticated handshake, servers and client channels.
//
// This header keeps asio out (it is heavy); the implementation runs asio C++20 coroutines.
// Frame = 32-byte header + protobuf body + raw data segment (docs/formats/wire.md).
//
// Threads: an RpcServer runs `io_threads` asio threads (default 1); an EventLoop does the same for
// client channels. Handlers run on a network thread and must not block: hand long work to a
// ThreadPool and reply from there (ServerCall is movable and thread-safe to reply from).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer.h"
#include "common/config.h"
#include "common/status.h"
#include "net/msg_types.h"

namespace google::protobuf {
class Message;
class MessageLite;
}  // namespace google::protobuf

namespace ciuic::metrics {
class Registry;
}  // namespace ciuic::metrics

namespace ciuic::net {

struct FrameLimits {
  uint32_t max_body = 16u << 20;  // bytes of protobuf body
  uint32_t max_data = 64u << 20;  // bytes of raw data segment
};

// A contiguous read-only byte range for scatter/gather sends.
struct ConstSpan {
  const void* data = nullptr;
  size_t size = 0;
};

// Encodes a protobuf message into a string. Never fails for initialized messages.
std::string Serialize(const google::protobuf::MessageLite& m);
// Parses `body` into `m`; kCorruption ("malformed <what>") on failure.
Status Parse(std::string_view body, google::protobuf::MessageLite* m, const char* what);

// ---------------------------------------------------------------------------------------------
// Server side.

struct CallState;  // internal

// The answer of a ServerCall made by Part(): what Reply or ReplyError would have sent.
struct PartReply {
  Status status;  // not OK: ReplyError's status (body and data empty)
  std::string body;
  std::vector<ConstSpan> data;
  std::shared_ptr<void> keepalive;  // holds what `data` points to
};

// One incoming request. Exactly one of Reply/ReplyError must be called (the destructor answers
// kInternal if neither was). Movable; may be replied from any thread.
class ServerCall {
 public:
  ServerCall() = default;
  explicit ServerCall(std::shared_ptr<CallState> state);
  ServerCall(ServerCall&&) noexcept;
  ServerCall& operator=(ServerCall&&) noexcept;
  ~ServerCall();

  MsgType type() const;
  Role peer_role() const;
  // The key id the peer authenticated with in the handshake.
  uint32_t key_id() const;
  const std::string& peer_addr() const;
  uint64_t request_id() const;
  std::string_view body() const;
  // The request's data segment, received into a 4 KiB-aligned buffer.
  AlignedBuffer& data();
  // Parses the body into `m` (kCorruption on failure).
  Status ParseBody(google::protobuf::MessageLite* m) const;

  // Sends `body` followed by the concatenation of `data` as the data segment. The memory that
  // `data` points to must stay valid until the reply is sent: `keepalive` is held until then.
  void Reply(const google::protobuf::MessageLite& body,
             std::vector<ConstSpan> data = {},
             std::shared_ptr<void> keepalive = nullptr);
  void ReplyError(const Status& status);
  bool replied() const;
  // Counts `bytes` of data delivered outside the reply's data segment (into a client's shared
  // memory) as read by the peer's job. Call before replying.
  void AddJobReadBytes(uint64_t bytes);
  // Counts `bytes` of data written from outside the request's data segment (a client's shared
  // memory) for the job.
  void AddJobWriteBytes(uint64_t bytes);
  // A call for one part of this request (an entry of a batch): the same peer, role, key and
  // job, type `type`, no body or data of its own; its Reply or ReplyError goes to `sink` (on
  // the replying thread) instead of the connection, and is not counted in the metrics (the
  // batch's own reply is). This call must be replied to separately.
  ServerCall Part(MsgType type, std::function<void(PartReply)> sink) const;

 private:
  std::shared_ptr<CallState> state_;
};

using Handler = std::function<void(ServerCall call)>;

class RpcServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 0;   // 0: ephemeral
    std::string secret;  // raw bytes of the cluster key
    uint32_t key_id = 1;
    std::string cluster_uuid;
    int io_threads = 1;
    FrameLimits limits;
    size_t max_connections = 1024;
    // Requests in flight per connection before the server stops reading from it.
    size_t max_inflight_per_conn = 256;
    std::string name = "rpc";  // for logs
    // A connection must finish the handshake within this time (0: no limit).
    int handshake_timeout_ms = 10000;
    // A frame that has started arriving, or a reply being written, must make progress within
    // this time, else the connection is closed.
    int stall_timeout_ms = 30000;
    // Connections with no traffic for this long are closed (0: never).
    int idle_timeout_ms = 0;
    // Protocol versions this server speaks.
    uint32_t min_version = kMinProtocolVersion;
    uint32_t max_version = kProtocolVersion;
    // Idle receive buffers kept for reuse (request data segments of 64 KiB and more).
    size_t buffer_pool_bytes = 64u << 20;
    // Decides which keys may authenticate (docs/formats/wire.md, "Client keys"): returns the
    // key bytes of `key_id` for a peer claiming `role`, or an error (kPermissionDenied with the
    // reason) that the handshake answers. Unset: only `key_id` with `secret`, any role. Called
    // on a network thread; must not block.
    std::function<Result<std::string>(uint32_t key_id, Role role)> key_lookup;
    // Where to export the server's metrics (not owned; it must outlive the server's Start):
    // requests, errors, bytes and latency per message type, connections, requests in flight,
    // and operations and data bytes per job (docs/design.md, "Observability"). Null: none.
    metrics::Registry* metrics = nullptr;
    // Jobs with their own series; the job ids of later connections count as "other".
    size_t max_jobs = 64;
  };

  explicit RpcServer(Options options);
  ~RpcServer();  // calls Stop()
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Registers the handler for `type`; call before Start(). Requests of unregistered types get
  // kNotSupported. `roles` limits which authenticated roles may call it (empty: any).
  void Register(MsgType type, Handler handler, std::vector<Role> roles = {});
  // Binds, listens and starts the network threads. kUnavailable/kIoError if it cannot bind.
  Status Start();
  // The bound port (after Start).
  uint16_t port() const;
  // Stops accepting, closes connections, joins threads. Idempotent.
  void Stop();
  // Closes every connection that authenticated with `key_id` (a revoked key); returns how many.
  size_t CloseConnectionsOfKey(uint32_t key_id);
  // Idle bytes in the pool that request data is received into (bounded by buffer_pool_bytes).
  size_t buffer_pool_idle_bytes() const;
  // Tests and fuzzing: hands a request of `type` from an authenticated peer (`role`, `key_id`)
  // with `body` and the data segment `data` to its handler as a connection would, without a
  // socket (the server need not be started). `on_reply` gets the reply, on whichever thread
  // the handler replies from; an unserved type or role is answered with the error at once.
  struct TestReply {
    bool error = false;  // body is pb::ErrorInfo
    std::string body;
    std::string data;  // the data segment
  };
  void TEST_Dispatch(MsgType type,
                     Role role,
                     uint32_t key_id,
                     std::string body,
                     std::string data,
                     std::function<void(TestReply)> on_reply);
  // Counters for tests and status pages.
  uint64_t connections_accepted() const;
  uint64_t frames_rejected() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Client side.

// Owns the network threads that client channels run on.
class EventLoop {
 public:
  explicit EventLoop(int threads = 1);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  void Stop();
  void* native();  // the asio::io_context*, for the implementation
  // Runs `fn` on one of the loop's threads, after what is already queued there (dropped once
  // the loop stopped).
  void Post(std::function<void()> fn);

 private:
  friend class RpcChannel;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Reply {
  std::string body;
  // Bytes of the reply's data segment. They were read into the caller's `in_dest` when it was
  // large enough, else into `data`.
  size_t data_len = 0;
  bool data_in_dest = false;
  AlignedBuffer data;
};

using ReplyCallback = std::function<void(Result<Reply>)>;

struct ChannelOptions {
  std::string secret;  // raw key bytes
  uint32_t key_id = 1;
  Role role = Role::kClient;
  int connect_timeout_ms = 5000;  // covers connecting and the handshake
  FrameLimits limits;
  // A reply that has started arriving, or a request being written, must make progress within
  // this time, else the connection is closed (pending calls fail with kUnavailable).
  int stall_timeout_ms = 30000;
  // Protocol versions this client offers.
  uint32_t min_version = kMinProtocolVersion;
  uint32_t max_version = kProtocolVersion;
  // Sent in the Hello (field 6) so that servers account this connection's requests to the job
  // (docs/formats/wire.md); empty: none. Clients fill it from JobIdFromEnv().
  std::string job_id;
};

// Returns the job id of this process for per-job statistics: $CIUIC_JOBID, else $SLURM_JOB_ID,
// else $TORCHELASTIC_RUN_ID, else "".
std::string JobIdFromEnv();

// One authenticated TCP connection to a server. Thread-safe: calls may be issued from any thread
// and are pipelined (many in flight). When the connection breaks, every pending call fails with
// kUnavailable and later calls fail at once; make a new channel to reconnect.
class RpcChannel {
 public:
  // Connects and runs the handshake. kUnavailable if the server cannot be reached,
  // kPermissionDenied if the secret is wrong, kNotSupported if no common protocol version.
  static Result<std::shared_ptr<RpcChannel>> Connect(EventLoop* loop,
                                                     const HostPort& addr,
                                                     const ChannelOptions& options);
  ~RpcChannel();

  // Sends a request; `cb` runs on a network thread with the reply or the error (an error reply's
  // Status, kUnavailable on a broken connection, kTimedOut after `timeout_ms`). `out_data` is the
  // request's data segment and must stay valid until `cb` runs. `in_dest`, if large enough, gets
  // the reply's data segment with no extra copy.
  void CallAsync(MsgType type,
                 const google::protobuf::MessageLite& req,
                 std::vector<ConstSpan> out_data,
                 std::span<uint8_t> in_dest,
                 ReplyCallback cb,
                 int timeout_ms = 60000);
  // Blocking form of CallAsync. Never call it from an EventLoop thread.
  Result<Reply> Call(MsgType type,
                     const google::protobuf::MessageLite& req,
                     std::vector<ConstSpan> out_data = {},
                     std::span<uint8_t> in_dest = {},
                     int timeout_ms = 60000);
  // Blocking call that parses the reply body into `resp`.
  Status CallMsg(MsgType type,
                 const google::protobuf::MessageLite& req,
                 google::protobuf::MessageLite* resp,
                 int timeout_ms = 60000);

  bool connected() const;
  void Close();
  const std::string& cluster_uuid() const;
  const HostPort& addr() const;

  struct Impl;

 private:
  explicit RpcChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ciuic::net
