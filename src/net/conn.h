// Connection: the asio side of one TCP connection, shared by RpcServer and RpcChannel.
//
// Internal to ciuic_net (it includes asio). A Connection lives on one strand of an io_context and
// is owned only by the coroutines and handlers running there; other threads reach it through a
// ConnHandle, which never extends its life. It provides:
//   - a buffered frame reader (many frames per recv; data segments read straight into the
//     destination after copying what is already buffered),
//   - one write queue, sent with gather writes that coalesce several frames per writev,
//   - a watchdog that closes connections whose handshake, frame or write stalls.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <asio.hpp>

#include "common/logging.h"
#include "common/status.h"
#include "net/frame.h"
#include "net/rpc.h"

namespace ciuic::net::detail {

using Strand = asio::strand<asio::io_context::executor_type>;
using Clock = std::chrono::steady_clock;

class Connection;

// A thread-safe way to run code on a Connection's strand. Holds a plain pointer that the
// Connection clears when it is destroyed, so a handle never keeps asio objects alive (they must
// die with their io_context).
class ConnHandle {
 public:
  ConnHandle(Connection* conn, std::string peer) : conn_(conn), peer_(std::move(peer)) {}

  // Runs `f(Connection*)` on the connection's strand: inline when the caller is already on it,
  // else posted. Returns false (and drops `f`) when the connection is gone.
  template <typename F>
  bool Run(F f);

  const std::string& peer() const { return peer_; }
  // The key id the peer authenticated with (servers; 0 until the handshake is done).
  uint32_t key_id() const { return key_id_.load(std::memory_order_relaxed); }
  void set_key_id(uint32_t id) { key_id_.store(id, std::memory_order_relaxed); }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    conn_ = nullptr;
  }

 private:
  std::mutex mu_;
  Connection* conn_;  // guarded by mu_
  const std::string peer_;
  std::atomic<uint32_t> key_id_{0};
};

// The live connections of a server or event loop, so Stop() can close them and wait for them.
class Registry {
 public:
  uint64_t Add(std::shared_ptr<ConnHandle> h);
  void Remove(uint64_t id);
  size_t size() const;
  // Asks every live connection to close (posted to their strands).
  void CloseAll(const std::string& reason);
  // Asks the connections that authenticated with `key_id` to close; returns how many.
  size_t CloseKey(uint32_t key_id, const std::string& reason);
  // Waits until no connection is left or `timeout` passes; returns whether it emptied.
  bool WaitEmpty(std::chrono::milliseconds timeout);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<ConnHandle>> conns_;
};

struct ConnParams {
  FrameLimits limits;
  int handshake_timeout_ms = 10000;  // 0: none
  int stall_timeout_ms = 30000;      // a started frame or a write must progress within this
  int idle_timeout_ms = 0;           // 0: idle connections stay open
  std::string name = "rpc";          // for logs
  std::atomic<uint64_t>* frames_rejected = nullptr;
};

// One frame to send. The header bytes live here; the body is owned; the data spans are not
// (keepalive holds their owner until the frame is written or dropped).
struct OutFrame {
  std::array<uint8_t, kFrameHeaderSize> header;
  std::string body;
  std::vector<ConstSpan> data;
  std::shared_ptr<void> keepalive;
  uint64_t call_id = 0;      // client: the pending call whose request this is
  bool close_after = false;  // close the connection once this frame is written
  bool cancelled = false;    // skipped, never written (client call timed out while queued)
};

// Builds a frame: the header is encoded over `body`; data_len is the total size of `data`.
OutFrame MakeFrame(MsgType type,
                   uint16_t flags,
                   uint64_t request_id,
                   std::string body,
                   std::vector<ConstSpan> data = {},
                   std::shared_ptr<void> keepalive = nullptr);
// Builds an error response carrying `status` as pb::ErrorInfo.
OutFrame MakeErrorFrame(uint16_t type, uint64_t request_id, const Status& status);

struct InFrame {
  std::array<uint8_t, kFrameHeaderSize> raw;
  FrameHeader h;
  std::string body;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `peer` names the other side in logs; empty: the socket's remote endpoint.
  Connection(asio::ip::tcp::socket socket,
             Strand strand,
             std::shared_ptr<Registry> registry,
             ConnParams params,
             std::string peer = {});
  virtual ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // All methods below run on the strand.
  const Strand& strand() const { return strand_; }
  const std::shared_ptr<ConnHandle>& handle() const { return handle_; }
  const std::string& peer() const { return handle_->peer(); }
  bool closed() const { return closed_; }
  // Frames queued or being written.
  size_t queued_frames() const { return wq_.size(); }
  // Why the connection was closed (empty while open or for a quiet close).
  const std::string& close_reason() const { return close_reason_; }

  // Queues `f` for sending. Dropped (OnWritten(f, false)) when the connection is closed.
  void Enqueue(OutFrame f);
  // Marks a queued, not yet started frame of `call_id` as never to be sent. Returns false when
  // no such frame is queued (it is being written, was written, or never was).
  bool CancelQueued(uint64_t call_id);
  // Closes the socket, drops queued frames and fails what waits on this connection. `reason` is
  // logged at `level` (nothing for an empty reason).
  void Close(const std::string& reason, log::Level level = log::Level::kDebug);
  // Logs a protocol violation, counts it, and closes.
  void Reject(const std::string& reason);
  // Starts the watchdog coroutine. Call once, on the strand.
  void StartWatchdog();
  void SetHandshakeDone() { handshake_done_ = true; }
  // Applies TCP_NODELAY, keepalive and socket buffer sizes.
  void TuneSocket();

 protected:
  // Reads one frame's header and body and validates them (magic, version, flags, limits, CRC).
  // Returns false when the connection ended or the frame was rejected (then it is closed).
  asio::awaitable<bool> ReadFrame(InFrame* f);
  // Reads the current frame's data segment of `len` bytes into `dest`.
  asio::awaitable<bool> ReadData(uint8_t* dest, size_t len);
  // Reads and drops the current frame's data segment.
  asio::awaitable<bool> SkipData(size_t len);
  // Lets queued writes go out before the reader waits on something other than the socket.
  void ReleaseWrites();
  // Marks the end of the current frame.
  void EndFrame() { mid_frame_ = false; }

  // Called for every frame that leaves the queue (written or dropped), except cancelled ones.
  virtual void OnWritten(OutFrame& f, bool ok) {
    (void)f;
    (void)ok;
  }
  // Called once, from Close().
  virtual void OnClosed() {}

  asio::ip::tcp::socket socket_;
  ConnParams params_;

 private:
  static asio::awaitable<void> WatchdogLoop(std::shared_ptr<Connection> self);
  asio::awaitable<bool> Fill(size_t need);
  bool NoteReadError(const std::error_code& ec);
  void WriteMore();
  void OnWriteDone(const std::error_code& ec);

  Strand strand_;
  std::shared_ptr<Registry> registry_;
  uint64_t registry_id_ = 0;
  std::shared_ptr<ConnHandle> handle_;
  bool closed_ = false;
  std::string close_reason_;

  // Reading.
  std::unique_ptr<uint8_t[]> rbuf_;
  size_t rcap_;
  size_t rpos_ = 0;
  size_t rend_ = 0;
  bool mid_frame_ = false;     // part of a frame has been consumed
  bool read_waiting_ = false;  // waiting on the socket
  Clock::time_point last_progress_;

  // Writing.
  std::deque<OutFrame> wq_;
  std::vector<asio::const_buffer> iov_;
  std::vector<OutFrame> completed_;  // frames of the last write, while their hooks run
  size_t writing_frames_ = 0;        // frames at the front of wq_ that the current write covers
  bool writing_ = false;
  bool hold_writes_ = false;  // the reader is handling buffered frames: batch their replies
  Clock::time_point write_started_;

  // Watchdog.
  bool handshake_done_ = false;
  Clock::time_point handshake_deadline_;
  asio::steady_timer watchdog_timer_;
};

template <typename F>
bool ConnHandle::Run(F f) {
  std::shared_ptr<Connection> inline_conn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn_ == nullptr)
      return false;
    if (!conn_->strand().running_in_this_thread()) {
      asio::post(conn_->strand(), [w = conn_->weak_from_this(), f = std::move(f)]() mutable {
        if (auto c = w.lock())
          f(c.get());
      });
      return true;
    }
    inline_conn = conn_->weak_from_this().lock();
  }
  if (inline_conn == nullptr)
    return false;
  f(inline_conn.get());
  return true;
}

// Formats an endpoint as "host:port".
std::string EndpointString(const asio::ip::tcp::endpoint& ep);

}  // namespace ciuic::net::detail
