#include "net/conn.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "common/logging.h"

namespace ciuic::net::detail {
namespace {

constexpr size_t kReadBufferSize = 64 << 10;
// Data tails up to this size are read through the buffer (one recv may bring the next frames
// too); longer ones go straight into their destination.
constexpr size_t kDirectReadMin = 16 << 10;
// Limits of one gather write. asio itself issues at most 64 iovecs per writev.
constexpr size_t kMaxIov = 64;
constexpr size_t kMaxBatchFrames = 32;
constexpr int kSocketBufferBytes = 4 << 20;

}  // namespace

std::string EndpointString(const asio::ip::tcp::endpoint& ep) {
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

// ---------------------------------------------------------------------------------------------
// Registry

uint64_t Registry::Add(std::shared_ptr<ConnHandle> h) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  conns_.emplace(id, std::move(h));
  return id;
}

void Registry::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  conns_.erase(id);
  if (conns_.empty())
    cv_.notify_all();
}

size_t Registry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conns_.size();
}

void Registry::CloseAll(const std::string& reason) {
  std::vector<std::shared_ptr<ConnHandle>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, h] : conns_)
      handles.push_back(h);
  }
  for (auto& h : handles) {
    h->Run([reason](Connection* c) { c->Close(reason); });
  }
}

size_t Registry::CloseKey(uint32_t key_id, const std::string& reason) {
  std::vector<std::shared_ptr<ConnHandle>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, h] : conns_) {
      if (h->key_id() == key_id)
        handles.push_back(h);
    }
  }
  for (auto& h : handles) {
    h->Run([reason](Connection* c) { c->Close(reason); });
  }
  return handles.size();
}

bool Registry::WaitEmpty(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return conns_.empty(); });
}

// ---------------------------------------------------------------------------------------------
// Frames

OutFrame MakeFrame(MsgType type,
                   uint16_t flags,
                   uint64_t request_id,
                   std::string body,
                   std::vector<ConstSpan> data,
                   std::shared_ptr<void> keepalive) {
  OutFrame f;
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.flags = flags;
  h.request_id = request_id;
  uint64_t data_len = 0;
  for (const auto& s : data)
    data_len += s.size;
  h.data_len = static_cast<uint32_t>(data_len);
  EncodeFrameHeader(h, body, f.header.data());
  f.body = std::move(body);
  f.data = std::move(data);
  f.keepalive = std::move(keepalive);
  return f;
}

OutFrame MakeErrorFrame(uint16_t type, uint64_t request_id, const Status& status) {
  pb::ErrorInfo e;
  e.set_code(static_cast<uint32_t>(status.code()));
  e.set_message(status.message());
  return MakeFrame(static_cast<MsgType>(type), kFlagResponse | kFlagError, request_id,
                   e.SerializeAsString());
}

// ---------------------------------------------------------------------------------------------
// Connection

Connection::Connection(asio::ip::tcp::socket socket,
                       Strand strand,
                       std::shared_ptr<Registry> registry,
                       ConnParams params,
                       std::string peer)
    : socket_(std::move(socket)),
      params_(std::move(params)),
      strand_(std::move(strand)),
      registry_(std::move(registry)),
      rbuf_(new uint8_t[kReadBufferSize]),
      rcap_(kReadBufferSize),
      watchdog_timer_(strand_) {
  if (peer.empty()) {
    std::error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    peer = ec ? std::string("?") : EndpointString(ep);
  }
  handle_ = std::make_shared<ConnHandle>(this, std::move(peer));
  registry_id_ = registry_->Add(handle_);
  last_progress_ = Clock::now();
  handshake_deadline_ =
      params_.handshake_timeout_ms > 0
          ? last_progress_ + std::chrono::milliseconds(params_.handshake_timeout_ms)
          : Clock::time_point::max();
}

Connection::~Connection() {
  handle_->Detach();
  registry_->Remove(registry_id_);
}

void Connection::TuneSocket() {
  std::error_code ec;
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);
  socket_.set_option(asio::socket_base::keep_alive(true), ec);
  socket_.set_option(asio::socket_base::send_buffer_size(kSocketBufferBytes), ec);
  socket_.set_option(asio::socket_base::receive_buffer_size(kSocketBufferBytes), ec);
}

void Connection::Close(const std::string& reason, log::Level level) {
  if (closed_)
    return;
  closed_ = true;
  close_reason_ = reason;
  if (!reason.empty()) {
    CIUIC_LOG_AT_(level, "[{}] closing connection with {}: {}", params_.name, peer(), reason);
  }
  std::error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_both, ec);
  socket_.close(ec);
  watchdog_timer_.cancel();
  // Frames the current write covers are released by its completion; the rest never go out.
  size_t keep = writing_ ? writing_frames_ : 0;
  std::vector<OutFrame> dropped;
  while (wq_.size() > keep) {
    dropped.push_back(std::move(wq_.back()));
    wq_.pop_back();
  }
  for (auto& f : dropped) {
    if (!f.cancelled)
      OnWritten(f, false);
  }
  OnClosed();
}

void Connection::Reject(const std::string& reason) {
  if (params_.frames_rejected != nullptr) {
    params_.frames_rejected->fetch_add(1, std::memory_order_relaxed);
  }
  Close("rejected frame: " + reason, log::Level::kError);
}

bool Connection::NoteReadError(const std::error_code& ec) {
  if (closed_)
    return false;
  if (ec == asio::error::eof) {
    bool partial = mid_frame_ || rend_ > rpos_;
    Close(partial ? "peer closed the connection mid-frame" : "",
          partial ? log::Level::kWarn : log::Level::kDebug);
  } else {
    Close(fmt::format("read failed: {}", ec.message()), log::Level::kInfo);
  }
  return false;
}

asio::awaitable<bool> Connection::Fill(size_t need) {
  if (rend_ - rpos_ >= need)
    co_return true;
  if (rcap_ - rpos_ < need) {
    std::memmove(rbuf_.get(), rbuf_.get() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  while (rend_ - rpos_ < need) {
    if (closed_)
      co_return false;
    ReleaseWrites();
    read_waiting_ = true;
    last_progress_ = Clock::now();
    std::error_code ec;
    size_t n = co_await socket_.async_read_some(asio::buffer(rbuf_.get() + rend_, rcap_ - rend_),
                                                asio::redirect_error(asio::use_awaitable, ec));
    read_waiting_ = false;
    hold_writes_ = true;
    if (ec)
      co_return NoteReadError(ec);
    last_progress_ = Clock::now();
    rend_ += n;
  }
  co_return true;
}

void Connection::ReleaseWrites() {
  hold_writes_ = false;
  if (!writing_ && !wq_.empty() && !closed_)
    WriteMore();
}

asio::awaitable<bool> Connection::ReadFrame(InFrame* f) {
  if (!co_await Fill(kFrameHeaderSize))
    co_return false;
  std::memcpy(f->raw.data(), rbuf_.get() + rpos_, kFrameHeaderSize);
  rpos_ += kFrameHeaderSize;
  mid_frame_ = true;
  Status s = DecodeFrameHeader(f->raw.data(), params_.limits, &f->h);
  if (!s.ok()) {
    Reject(s.message());
    co_return false;
  }
  size_t len = f->h.body_len;
  if (len <= rcap_) {
    if (!co_await Fill(len))
      co_return false;
    f->body.assign(reinterpret_cast<const char*>(rbuf_.get() + rpos_), len);
    rpos_ += len;
  } else {
    f->body.resize(len);
    if (!co_await ReadData(reinterpret_cast<uint8_t*>(f->body.data()), len))
      co_return false;
  }
  s = VerifyFrameCrc(f->raw.data(), f->h, f->body);
  if (!s.ok()) {
    Reject(s.message());
    co_return false;
  }
  if (f->h.data_len == 0)
    mid_frame_ = false;
  co_return true;
}

asio::awaitable<bool> Connection::ReadData(uint8_t* dest, size_t len) {
  size_t have = std::min(rend_ - rpos_, len);
  std::memcpy(dest, rbuf_.get() + rpos_, have);
  rpos_ += have;
  size_t done = have;
  if (len - done < kDirectReadMin) {
    if (!co_await Fill(len - done))
      co_return false;
    std::memcpy(dest + done, rbuf_.get() + rpos_, len - done);
    rpos_ += len - done;
    co_return true;
  }
  // The buffer is empty now; read the rest straight into the destination.
  rpos_ = rend_ = 0;
  while (done < len) {
    if (closed_)
      co_return false;
    ReleaseWrites();
    read_waiting_ = true;
    last_progress_ = Clock::now();
    std::error_code ec;
    size_t n = co_await socket_.async_read_some(asio::buffer(dest + done, len - done),
                                                asio::redirect_error(asio::use_awaitable, ec));
    read_waiting_ = false;
    hold_writes_ = true;
    if (ec)
      co_return NoteReadError(ec);
    last_progress_ = Clock::now();
    done += n;
  }
  co_return true;
}

asio::awaitable<bool> Connection::SkipData(size_t len) {
  while (len > 0) {
    if (rend_ == rpos_ && !co_await Fill(1))
      co_return false;
    size_t n = std::min(rend_ - rpos_, len);
    rpos_ += n;
    len -= n;
  }
  co_return true;
}

void Connection::Enqueue(OutFrame f) {
  if (closed_) {
    OnWritten(f, false);
    return;
  }
  wq_.push_back(std::move(f));
  if (!writing_ && !hold_writes_)
    WriteMore();
}

bool Connection::CancelQueued(uint64_t call_id) {
  size_t start = writing_ ? writing_frames_ : 0;
  for (size_t i = start; i < wq_.size(); ++i) {
    OutFrame& f = wq_[i];
    if (f.call_id == call_id && !f.cancelled) {
      f.cancelled = true;
      f.data.clear();
      f.keepalive.reset();
      return true;
    }
  }
  return false;
}

void Connection::WriteMore() {
  iov_.clear();
  size_t frames = 0;
  for (const OutFrame& f : wq_) {
    if (frames == kMaxBatchFrames)
      break;
    if (f.cancelled) {
      ++frames;
      continue;
    }
    size_t need = 2 + f.data.size();
    if (frames > 0 && iov_.size() + need > kMaxIov)
      break;
    iov_.emplace_back(f.header.data(), f.header.size());
    if (!f.body.empty())
      iov_.emplace_back(f.body.data(), f.body.size());
    for (const ConstSpan& s : f.data) {
      if (s.size > 0)
        iov_.emplace_back(s.data, s.size);
    }
    ++frames;
    if (f.close_after)
      break;
  }
  writing_frames_ = frames;
  if (iov_.empty()) {
    // Only cancelled frames: drop them without a write.
    for (size_t i = 0; i < frames; ++i)
      wq_.pop_front();
    writing_frames_ = 0;
    if (!wq_.empty())
      WriteMore();
    return;
  }
  writing_ = true;
  write_started_ = Clock::now();
  // asio's default completion condition caps each writev at 64 KiB; let the kernel take as much
  // as it will per call instead.
  asio::async_write(
      socket_, iov_,
      [](const std::error_code& ec, size_t /*done*/) -> size_t {
        return ec ? 0 : std::numeric_limits<size_t>::max();
      },
      [self = shared_from_this()](const std::error_code& ec, size_t /*bytes*/) {
        self->OnWriteDone(ec);
      });
}

void Connection::OnWriteDone(const std::error_code& ec) {
  writing_ = false;
  // Take the written frames out of the queue before running any hook: a hook may queue a new
  // frame and start the next write, which must not see these.
  completed_.clear();
  for (size_t i = 0; i < writing_frames_ && !wq_.empty(); ++i) {
    completed_.push_back(std::move(wq_.front()));
    wq_.pop_front();
  }
  writing_frames_ = 0;
  bool close_after = false;
  for (OutFrame& f : completed_) {
    if (f.cancelled)
      continue;
    close_after = close_after || f.close_after;
    OnWritten(f, !ec);
  }
  completed_.clear();
  if (ec) {
    Close(closed_ ? "" : fmt::format("write failed: {}", ec.message()), log::Level::kInfo);
    return;
  }
  if (close_after) {
    Close("");
    return;
  }
  if (!writing_ && !wq_.empty() && !hold_writes_ && !closed_)
    WriteMore();
}

void Connection::StartWatchdog() {
  asio::co_spawn(strand_, WatchdogLoop(shared_from_this()), [](std::exception_ptr e) {
    if (e)
      LOG_ERROR("rpc watchdog failed with an exception");
  });
}

asio::awaitable<void> Connection::WatchdogLoop(std::shared_ptr<Connection> self) {
  using std::chrono::milliseconds;
  const auto stall = milliseconds(self->params_.stall_timeout_ms);
  const auto idle = milliseconds(self->params_.idle_timeout_ms);
  // Deadlines are rechecked at least this often; state changes do not wake the watchdog.
  auto period = milliseconds(std::max(10, self->params_.stall_timeout_ms / 4));
  if (self->params_.handshake_timeout_ms > 0) {
    period = std::min(period, milliseconds(std::max(10, self->params_.handshake_timeout_ms / 4)));
  }
  while (!self->closed_) {
    auto now = Clock::now();
    if (!self->handshake_done_ && now >= self->handshake_deadline_) {
      self->Close(
          fmt::format("handshake not completed within {} ms", self->params_.handshake_timeout_ms),
          log::Level::kError);
      break;
    }
    if (self->read_waiting_ && stall.count() > 0 &&
        (self->mid_frame_ || self->rend_ > self->rpos_) && now - self->last_progress_ >= stall) {
      self->Close(fmt::format("peer stalled mid-frame for {} ms", stall.count()),
                  log::Level::kError);
      break;
    }
    if (self->read_waiting_ && idle.count() > 0 && !self->mid_frame_ &&
        self->rend_ == self->rpos_ && now - self->last_progress_ >= idle) {
      self->Close(fmt::format("idle for {} ms", idle.count()), log::Level::kInfo);
      break;
    }
    if (self->writing_ && stall.count() > 0 && now - self->write_started_ >= stall) {
      self->Close(fmt::format("peer did not take our data for {} ms", stall.count()),
                  log::Level::kError);
      break;
    }
    auto wake = now + period;
    if (!self->handshake_done_)
      wake = std::min(wake, self->handshake_deadline_);
    self->watchdog_timer_.expires_at(wake);
    std::error_code ec;
    co_await self->watchdog_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

}  // namespace ciuic::net::detail
