// Shared-memory reads and writes with OSSes on this host (net/shm.h, docs/formats/shm-register.md).
#include <map>
#include <utility>

#include <fmt/format.h>

#include "ciuic.pb.h"
#include "client/client_core.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "net/shm.h"

namespace ciuic::client {

// One SharedMemory and its registrations, one per local OSS that reads went to.
struct ClientCore::ShmState : SharedMemory {
  std::unique_ptr<net::ShmRegion> region;
  std::mutex mu;
  struct Reg {
    std::unique_ptr<net::ShmRegistration> reg;  // null: not registered
    int64_t retry_ms = 0;  // when null: register at the next read after this (INT64_MAX: never)
  };
  std::map<std::string, Reg> regs;  // by OSS address; CIUIC_GUARDED_BY(mu)

  uint8_t* data() const override { return region->data(); }
  size_t size() const override { return region->size(); }
};

// The last SharedMemory its user let go, kept for the next one: its pages stay allocated and
// registered. (Memory given back to the kernel and faulted in again costs a trap per page in a
// VM: a data loader that made a fresh region per epoch read 17-19k instead of 22k samples/s.)
struct ClientCore::ShmSpare {
  std::mutex mu;
  std::shared_ptr<ShmState> state;  // CIUIC_GUARDED_BY(mu)
};

std::shared_ptr<ClientCore::ShmSpare> ClientCore::NewShmSpare() {
  return std::make_shared<ShmSpare>();
}

Result<std::shared_ptr<SharedMemory>> ClientCore::NewSharedMemory(size_t bytes) {
  std::shared_ptr<ShmState> state;
  {
    std::lock_guard<std::mutex> lock(shm_spare_->mu);
    auto& spare = shm_spare_->state;
    if (spare && spare->size() >= bytes && spare->size() / 2 <= bytes)
      state = std::move(spare);
  }
  if (!state) {
    CIUIC_ASSIGN_OR_RETURN(auto region, net::ShmRegion::Create(bytes));
    state = std::make_shared<ShmState>();
    state->region = std::move(region);
    std::lock_guard<std::mutex> lock(shm_mu_);
    std::erase_if(shm_, [](const std::weak_ptr<ShmState>& w) { return w.expired(); });
    shm_.push_back(state);
  }
  // The caller's handle: when its last copy goes, the region becomes the spare (while this
  // client lives; the previous spare is freed).
  SharedMemory* raw = state.get();
  return std::shared_ptr<SharedMemory>(
      raw, [state = std::move(state),
            weak = std::weak_ptr<ShmSpare>(shm_spare_)](SharedMemory*) mutable {
        if (auto spare = weak.lock()) {
          std::shared_ptr<ShmState> old;
          std::lock_guard<std::mutex> lock(spare->mu);
          old = std::exchange(spare->state, std::move(state));
        }
      });
}

Result<std::shared_ptr<SharedMemory>> ClientCore::ImportSharedMemory(int fd) {
  CIUIC_ASSIGN_OR_RETURN(auto region, net::ShmRegion::Adopt(fd));
  auto state = std::make_shared<ShmState>();
  state->region = std::move(region);
  std::lock_guard<std::mutex> lock(shm_mu_);
  std::erase_if(shm_, [](const std::weak_ptr<ShmState>& w) { return w.expired(); });
  shm_.push_back(state);
  return std::shared_ptr<SharedMemory>(std::move(state));
}

uint64_t ClientCore::ShmToken(const std::string& addr,
                              const void* p,
                              size_t len,
                              uint64_t* region_off) {
  std::shared_ptr<ShmState> state;
  {
    std::lock_guard<std::mutex> lock(shm_mu_);
    for (auto& w : shm_) {
      auto s = w.lock();
      if (s && s->region->Contains(p, len)) {
        state = std::move(s);
        break;
      }
    }
  }
  if (!state)
    return 0;
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    ShmState::Reg& r = state->regs[addr];
    if (r.reg) {
      token = r.reg->token();
    } else if (r.retry_ms != INT64_MAX && MonoMillis() >= r.retry_ms) {
      // First use with this OSS (or a retry 10 s after a failure): register - a Unix socket
      // exchange on this host, well under a millisecond - unless the OSS is on another host.
      auto hp = HostPort::Parse(addr);
      if (hp.ok() && net::IsLoopbackHost(hp->host)) {
        auto reg = net::RegisterShm(addr, *state->region);
        if (reg.ok()) {
          token = (*reg)->token();
          r.reg = std::move(*reg);
          LOG_DEBUG("client: shared memory of {} bytes registered with OSS {}",
                    state->region->size(), addr);
        } else {
          LOG_INFO("client: IO with OSS {} goes over TCP: {}", addr, reg.status().ToString());
          r.retry_ms = MonoMillis() + 10000;
        }
      } else {
        r.retry_ms = INT64_MAX;  // another host: never
      }
    }
  }
  if (token != 0)
    *region_off = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - state->region->data());
  return token;
}

bool ClientCore::PrepareShmRead(const std::string& addr, OstCall* call) {
  auto* req = static_cast<pb::ReadReq*>(call->req.get());
  req->clear_shm_token();
  req->clear_shm_offset();
  call->shm = false;
  const std::span<uint8_t> dest = call->in_dest;
  // The OSS writes whole 4 KiB blocks: only a block-aligned read of whole blocks into a
  // block-aligned destination of exactly that size goes through shared memory.
  if (call->no_shm || reinterpret_cast<uintptr_t>(dest.data()) % kCrcBlockSize != 0 ||
      dest.size() % kCrcBlockSize != 0 || req->offset() % kCrcBlockSize != 0 ||
      req->length() != dest.size()) {
    return false;
  }
  uint64_t region_off = 0;
  const uint64_t token = ShmToken(addr, dest.data(), dest.size(), &region_off);
  if (token == 0)
    return false;
  req->set_shm_token(token);
  req->set_shm_offset(region_off);
  call->shm = true;
  return true;
}

bool ClientCore::PrepareShmWrite(const std::string& addr, OstCall* call) {
  auto* req = static_cast<pb::WriteReq*>(call->req.get());
  req->clear_shm_token();
  req->clear_shm_offset();
  req->clear_shm_len();
  call->shm = false;
  // One source span, not to a chain (the chain forwards the data segment itself).
  if (call->no_shm || call->out_data.size() != 1 || req->chain() != 0 ||
      call->out_data[0].size == 0)
    return false;
  const net::ConstSpan src = call->out_data[0];
  uint64_t region_off = 0;
  const uint64_t token = ShmToken(addr, src.data, src.size, &region_off);
  if (token == 0)
    return false;
  req->set_shm_token(token);
  req->set_shm_offset(region_off);
  req->set_shm_len(src.size);
  call->shm = true;
  return true;
}

void ClientCore::ForgetShm(const std::string& addr) {
  std::vector<std::shared_ptr<ShmState>> live;
  {
    std::lock_guard<std::mutex> lock(shm_mu_);
    for (auto& w : shm_) {
      if (auto s = w.lock())
        live.push_back(std::move(s));
    }
  }
  for (auto& s : live) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->regs.erase(addr);
  }
}

}  // namespace ciuic::client
