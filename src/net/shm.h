// Shared-memory reads for a client and an OSS on the same host (docs/formats/shm-register.md).
//
// The client creates a sealed memfd (ShmRegion) and passes it once, over a Unix socket in the
// abstract namespace named after the OSS's address (ShmSocketName), to the OSS, which maps it and
// answers a random 64-bit token (RegisterShm). A read request over the normal authenticated
// RPC connection may then name (token, offset): the OSS reads the object's blocks from disk
// straight into that part of the region (O_DIRECT: the disk's DMA lands in the client's memory)
// and replies with the checksums only. No byte crosses a socket; the loopback copy on both sides
// and the TCP path per byte are gone.
//
// Safety: registering grants nothing by itself (data only moves in answer to an authenticated
// read that names the token). The region is sealed against shrinking (F_SEAL_SHRINK), so the OSS
// can never fault on a page the client took away; the OSS unmaps it when the registration
// socket closes (the client process ended or dropped the region) and its reads in it finished.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ciuic::net {

// The abstract Unix socket name (without the leading NUL) an OSS serving `oss_addr` listens on.
std::string ShmSocketName(const std::string& oss_addr);
// The abstract-namespace address of that socket; *len gets its length for bind/connect.
// kInvalidArgument when the name does not fit.
Result<sockaddr_un> ShmSocketAddr(const std::string& oss_addr, socklen_t* len);
// Sends `len` bytes of `msg` on the Unix socket `sock` in one message, with `fd` attached as
// SCM_RIGHTS (none when fd < 0). Returns what sendmsg returns.
ssize_t SendWithFd(int sock, const void* msg, size_t len, int fd);
// True when `host` (of "host:port") is a loopback address: 127.0.0.0/8, ::1 or "localhost".
bool IsLoopbackHost(const std::string& host);

// A sealed memfd mapped read-write in this process. Owns the fd and the mapping.
// Thread-safety: immutable after Create.
class ShmRegion {
 public:
  // Creates a region of `bytes` rounded up to 4 KiB (pages are allocated on first touch).
  // kInvalidArgument for 0 or more than kMaxShmRegionBytes; kIoError when memfds are unavailable.
  static Result<std::unique_ptr<ShmRegion>> Create(size_t bytes);
  // Maps a caller's memfd (a duplicate of `fd`; the caller keeps its own). It must be sealed
  // against shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW) and its size a positive
  // multiple of 4 KiB up to kMaxShmRegionBytes: kInvalidArgument otherwise, naming what is
  // wrong; kIoError when it cannot be mapped.
  static Result<std::unique_ptr<ShmRegion>> Adopt(int fd);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  uint8_t* data() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  bool Contains(const void* p, size_t len) const {
    auto* b = static_cast<const uint8_t*>(p);
    return b >= base_ && len <= size_ && b - base_ <= static_cast<ptrdiff_t>(size_ - len);
  }

 private:
  ShmRegion(int fd, uint8_t* base, size_t size) : fd_(fd), base_(base), size_(size) {}
  int fd_;
  uint8_t* base_;
  size_t size_;
};

constexpr size_t kMaxShmRegionBytes = size_t{16} << 30;

// A region registered with one OSS: its token, and the socket whose closing unregisters it.
class ShmRegistration {
 public:
  ShmRegistration(uint64_t token, int sock) : token_(token), sock_(sock) {}
  ~ShmRegistration();
  ShmRegistration(const ShmRegistration&) = delete;
  ShmRegistration& operator=(const ShmRegistration&) = delete;
  uint64_t token() const { return token_; }

 private:
  uint64_t token_;
  int sock_;
};

// Registers `region` with the OSS serving `oss_addr` on this host. Blocks for at most
// `timeout_ms`. kUnavailable when no OSS listens there (another host, another network namespace,
// an OSS without shared-memory reads); kInvalidArgument / kPermissionDenied when it refused the
// region (the message says why).
Result<std::unique_ptr<ShmRegistration>> RegisterShm(const std::string& oss_addr,
                                                     const ShmRegion& region,
                                                     int timeout_ms = 2000);

// Wire constants of the registration exchange (docs/formats/shm-register.md).
constexpr char kShmMagic[8] = {'C', 'I', 'U', 'I', 'C', 'S', 'H', 'M'};
constexpr uint32_t kShmVersion = 1;
struct ShmRegisterMsg {  // client -> OSS, with the memfd as SCM_RIGHTS
  char magic[8];
  uint32_t version;
  uint32_t flags;  // 0
};
struct ShmRegisterReply {  // OSS -> client
  char magic[8];
  uint32_t version;
  int32_t error;   // 0, or an errno: EINVAL, EPERM (not sealed), E2BIG, EMFILE
  uint64_t token;  // nonzero when error == 0
  uint64_t size;   // bytes the OSS mapped
};
static_assert(sizeof(ShmRegisterMsg) == 16 && sizeof(ShmRegisterReply) == 32);

}  // namespace ciuic::net
