// ShmRegistry: the OSS side of shared-memory reads (net/shm.h, docs/formats/shm-register.md).
// Listens on the abstract Unix socket named after the OSS's address, maps each client's sealed
// memfd, answers a random token, and unmaps the region when the client's socket closes and no
// read still writes into it.
//
// Threads: one thread polls the listener and the registration sockets (registrations are rare:
// one per client region and OSS). Thread-safety: Find() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace ciuic::oss {

// A client's region as mapped here. Unmapped when the last reference goes.
class MappedShm {
 public:
  MappedShm(uint8_t* base, size_t size) : base_(base), size_(size) {}
  ~MappedShm();
  MappedShm(const MappedShm&) = delete;
  MappedShm& operator=(const MappedShm&) = delete;
  // The `len` bytes at `offset`, or nullptr when the range is not inside the region.
  uint8_t* At(uint64_t offset, uint64_t len) const {
    return offset <= size_ && len <= size_ - offset ? base_ + offset : nullptr;
  }
  size_t size() const { return size_; }

 private:
  uint8_t* base_;
  size_t size_;
};

class ShmRegistry {
 public:
  struct Limits {
    size_t max_regions = 1024;
    size_t max_region_bytes = size_t{16} << 30;
  };
  ShmRegistry() = default;
  explicit ShmRegistry(Limits limits) : limits_(limits) {}
  ~ShmRegistry();  // Stop()
  ShmRegistry(const ShmRegistry&) = delete;
  ShmRegistry& operator=(const ShmRegistry&) = delete;

  // Listens on ShmSocketName(served_addr). kUnavailable when the name is taken (another OSS
  // serves the same address) or Unix sockets are unavailable.
  Status Start(const std::string& served_addr);
  // Closes the listener and every registration; regions stay mapped while reads hold them.
  void Stop();

  // The answer to one registration: error 0 with the token and the bytes mapped, or an errno.
  struct Admission {
    int error = 0;
    uint64_t token = 0;
    uint64_t size = 0;
  };
  // Checks one registration message as received (`received`: its bytes; `msg_flags`: recvmsg's
  // flags; `fds`: the descriptors it carried, which this takes and closes) and maps the region
  // under a new token: the OSS side of the exchange without its socket (Register calls it after
  // recvmsg; the shm_register fuzz target calls it directly). Errors (docs/formats/
  // shm-register.md): EINVAL (malformed, unknown flags, not exactly one fd, bad size), EPERM
  // (not sealed against shrinking), E2BIG, EMFILE.
  Admission Admit(std::string_view received, int msg_flags, std::vector<int> fds);
  // Forgets the region of `token` (its registration socket closed); reads in flight keep it.
  void Forget(uint64_t token);

  // The region registered under `token`, or nullptr.
  std::shared_ptr<MappedShm> Find(uint64_t token) const;
  size_t regions() const;
  // Reads served into shared memory so far (counted by the caller).
  std::atomic<uint64_t> reads{0};
  // Writes served from shared memory so far (counted by the caller).
  std::atomic<uint64_t> writes{0};

 private:
  void Loop();
  // Handles one registration message on `sock`; returns the token (0: refused, already answered).
  uint64_t Register(int sock);

  Limits limits_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd
  std::thread thread_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<MappedShm>> regions_;  // CIUIC_GUARDED_BY(mu_)
};

}  // namespace ciuic::oss
