#include "net/shm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ciuic::net {

std::string ShmSocketName(const std::string& oss_addr) {
  return "ciuic-oss-shm/" + oss_addr;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1")
    return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1)
    return false;
  return (ntohl(a.s_addr) >> 24) == 127;
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::Create(size_t bytes) {
  if (bytes == 0 || bytes > kMaxShmRegionBytes) {
    return Status::InvalidArgument(
        fmt::format("shared-memory region of {} bytes (1 to {})", bytes, kMaxShmRegionBytes));
  }
  const size_t size = (bytes + 4095) & ~size_t{4095};
  int fd = memfd_create("ciuic-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return Status::IoError(fmt::format("memfd_create: {}", strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    close(fd);
    return Status::IoError(fmt::format("shared-memory region of {} bytes: {}", size, strerror(e)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return Status::IoError(fmt::format("mmap of a {}-byte region: {}", size, strerror(e)));
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(fd, static_cast<uint8_t*>(p), size));
}

Result<std::unique_ptr<ShmRegion>> ShmRegion::Adopt(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return Status::InvalidArgument(fmt::format(
        "shared-memory region: fd {} is not a sealable memfd: {}", fd, strerror(errno)));
  }
  if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    return Status::InvalidArgument(
        fmt::format("shared-memory region: fd {} can still be resized; seal it with "
                    "F_SEAL_SHRINK | F_SEAL_GROW first",
                    fd));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0)
    return Status::IoError(fmt::format("shared-memory region: fstat: {}", strerror(errno)));
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0 || size % 4096 != 0 || size > kMaxShmRegionBytes) {
    return Status::InvalidArgument(fmt::format(
        "shared-memory region of {} bytes: a positive multiple of 4 KiB up to {} is needed", size,
        kMaxShmRegionBytes));
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0)
    return Status::IoError(fmt::format("shared-memory region: dup: {}", strerror(errno)));
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(own);
    return Status::IoError(fmt::format("mmap of a {}-byte region: {}", size, strerror(e)));
  }
  return std::unique_ptr<ShmRegion>(new ShmRegion(own, static_cast<uint8_t*>(p), size));
}

ShmRegion::~ShmRegion() {
  munmap(base_, size_);
  close(fd_);
}

ShmRegistration::~ShmRegistration() {
  close(sock_);
}

Result<sockaddr_un> ShmSocketAddr(const std::string& oss_addr, socklen_t* len) {
  const std::string name = ShmSocketName(oss_addr);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof(a.sun_path))
    return Status::InvalidArgument(fmt::format("shm socket name too long: {}", name));
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

ssize_t SendWithFd(int sock, const void* msg, size_t len, int fd) {
  iovec iov{const_cast<void*>(msg), len};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fd >= 0) {
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof(ctl);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

Result<std::unique_ptr<ShmRegistration>> RegisterShm(const std::string& oss_addr,
                                                     const ShmRegion& region,
                                                     int timeout_ms) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0)
    return Status::Unavailable(fmt::format("unix socket: {}", strerror(errno)));
  auto fail = [&](Status st) {
    close(s);
    return st;
  };
  socklen_t alen;
  auto addr = ShmSocketAddr(oss_addr, &alen);
  if (!addr.ok())
    return fail(addr.status());
  if (connect(s, reinterpret_cast<sockaddr*>(&*addr), alen) != 0) {
    return fail(Status::Unavailable(fmt::format(
        "no shared-memory endpoint for OSS {} on this host: {}", oss_addr, strerror(errno))));
  }
  ShmRegisterMsg msg{};
  std::memcpy(msg.magic, kShmMagic, sizeof(msg.magic));
  msg.version = kShmVersion;
  if (SendWithFd(s, &msg, sizeof(msg), region.fd()) != static_cast<ssize_t>(sizeof(msg)))
    return fail(
        Status::Unavailable(fmt::format("shm register with {}: {}", oss_addr, strerror(errno))));
  pollfd pfd{s, POLLIN, 0};
  int pr;
  do {
    pr = poll(&pfd, 1, timeout_ms);
  } while (pr < 0 && errno == EINTR);
  if (pr <= 0) {
    return fail(Status::Unavailable(
        fmt::format("OSS {} did not answer the shm register in {} ms", oss_addr, timeout_ms)));
  }
  ShmRegisterReply rep{};
  ssize_t n = recv(s, &rep, sizeof(rep), 0);
  if (n != static_cast<ssize_t>(sizeof(rep)) ||
      std::memcmp(rep.magic, kShmMagic, sizeof(rep.magic)) != 0) {
    return fail(Status::Unavailable(
        fmt::format("OSS {}: malformed shm register reply ({} bytes)", oss_addr, n)));
  }
  if (rep.error != 0) {
    Status st =
        rep.error == EPERM
            ? Status::PermissionDenied(fmt::format("OSS {} refused the shared-memory "
                                                   "region: {}",
                                                   oss_addr, strerror(rep.error)))
            : Status::InvalidArgument(fmt::format("OSS {} refused the shared-memory region: {}",
                                                  oss_addr, strerror(rep.error)));
    return fail(st);
  }
  if (rep.token == 0 || rep.size != region.size()) {
    return fail(Status::Unavailable(
        fmt::format("OSS {}: shm register reply with token {} for {} bytes (region has {})",
                    oss_addr, rep.token, rep.size, region.size())));
  }
  return std::make_unique<ShmRegistration>(rep.token, s);
}

}  // namespace ciuic::net
