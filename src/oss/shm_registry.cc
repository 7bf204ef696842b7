#include "oss/shm_registry.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/config.h"
#include "common/logging.h"
#include "net/shm.h"

namespace ciuic::oss {

MappedShm::~MappedShm() {
  munmap(base_, size_);
}

ShmRegistry::~ShmRegistry() {
  Stop();
}

Status ShmRegistry::Start(const std::string& served_addr) {
  socklen_t len;
  CIUIC_ASSIGN_OR_RETURN(sockaddr_un a, net::ShmSocketAddr(served_addr, &len));
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return Status::Unavailable(fmt::format("unix socket: {}", strerror(errno)));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return Status::Unavailable(
        fmt::format("shm endpoint @{}: {}", net::ShmSocketName(served_addr), strerror(e)));
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) {
    int e = errno;
    close(fd);
    return Status::Unavailable(fmt::format("eventfd: {}", strerror(e)));
  }
  listen_fd_ = fd;
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void ShmRegistry::Stop() {
  if (!thread_.joinable())
    return;
  uint64_t one = 1;
  ssize_t w = write(stop_fd_, &one, sizeof(one));
  (void)w;  // an eventfd write of 1 cannot fail short of overflow
  thread_.join();
  close(listen_fd_);
  close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
  std::lock_guard<std::mutex> lock(mu_);
  regions_.clear();  // reads in flight keep their region mapped until they finish
}

std::shared_ptr<MappedShm> ShmRegistry::Find(uint64_t token) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(token);
  return it == regions_.end() ? nullptr : it->second;
}

size_t ShmRegistry::regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

namespace {

void Answer(int sock, int error, uint64_t token, uint64_t size) {
  net::ShmRegisterReply r{};
  std::memcpy(r.magic, net::kShmMagic, sizeof(r.magic));
  r.version = net::kShmVersion;
  r.error = error;
  r.token = token;
  r.size = size;
  ssize_t n = send(sock, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n;  // a client that cannot take 32 bytes sees its socket closed next
}

}  // namespace

uint64_t ShmRegistry::Register(int sock) {
  net::ShmRegisterMsg msg{};
  iovec iov{&msg, sizeof(msg)};
  alignas(cmsghdr) char ctl[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof(ctl);
  ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
    }
  }
  const std::string_view received(reinterpret_cast<const char*>(&msg),
                                  n < 0 ? 0 : static_cast<size_t>(n));
  const Admission a = Admit(received, mh.msg_flags, std::move(fds));
  Answer(sock, a.error, a.token, a.size);
  return a.error == 0 ? a.token : 0;
}

ShmRegistry::Admission ShmRegistry::Admit(std::string_view received,
                                          int msg_flags,
                                          std::vector<int> fds) {
  auto refuse = [&](int error, const char* why) -> Admission {
    for (int fd : fds)
      close(fd);
    LOG_WARN("oss: refused a shared-memory region: {}", why);
    return Admission{.error = error};
  };
  net::ShmRegisterMsg msg{};
  if (received.size() != sizeof(msg) || (msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0)
    return refuse(EINVAL, "malformed register message");
  std::memcpy(&msg, received.data(), sizeof(msg));
  if (std::memcmp(msg.magic, net::kShmMagic, sizeof(msg.magic)) != 0 ||
      msg.version != net::kShmVersion) {
    return refuse(EINVAL, "malformed register message");
  }
  // No flag is defined yet: one set asks for something this OSS does not do.
  if (msg.flags != 0)
    return refuse(EINVAL, "unknown flags in the register message");
  if (fds.size() != 1)
    return refuse(EINVAL, "register message without exactly one fd");
  const int fd = fds[0];
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return refuse(EPERM, "fd is not a memfd sealed against shrinking");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size % 4096 != 0)
    return refuse(EINVAL, "region size is not a positive multiple of 4 KiB");
  const auto size = static_cast<size_t>(st.st_size);
  if (size > limits_.max_region_bytes)
    return refuse(E2BIG, "region larger than the limit");
  if (regions() >= limits_.max_regions)
    return refuse(EMFILE, "too many regions registered");
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return refuse(EINVAL, "mmap of the region failed");
  close(fd);
  fds.clear();
  auto region = std::make_shared<MappedShm>(static_cast<uint8_t*>(p), size);
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (token == 0 || regions_.count(token) != 0) {
      const std::string r = RandomBytes(sizeof(token));
      std::memcpy(&token, r.data(), sizeof(token));
    }
    regions_.emplace(token, std::move(region));
  }
  return Admission{.error = 0, .token = token, .size = size};
}

void ShmRegistry::Forget(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(token);
}

void ShmRegistry::Loop() {
  constexpr size_t kMaxPending = 64;        // connections that have not registered yet
  std::unordered_map<int, uint64_t> socks;  // fd -> token (0: not registered yet)
  auto drop = [&](int fd) {
    auto it = socks.find(fd);
    if (it->second != 0)
      Forget(it->second);
    close(fd);
    socks.erase(it);
  };
  while (true) {
    std::vector<pollfd> pfds;
    pfds.push_back({stop_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, token] : socks)
      pfds.push_back({fd, POLLIN, 0});
    int r = poll(pfds.data(), pfds.size(), -1);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      LOG_ERROR("oss: shm endpoint poll: {}", strerror(errno));
      break;
    }
    if (pfds[0].revents != 0)
      break;
    if (pfds[1].revents & POLLIN) {
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        size_t pending = 0;
        for (auto& [fd, token] : socks)
          pending += token == 0;
        if (pending >= kMaxPending) {
          close(c);
        } else {
          socks.emplace(c, 0);
        }
      }
    }
    for (size_t i = 2; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0)
        continue;
      const int fd = pfds[i].fd;
      if (socks[fd] == 0 && (pfds[i].revents & POLLIN)) {
        const uint64_t token = Register(fd);
        if (token == 0) {
          drop(fd);
        } else {
          socks[fd] = token;
        }
        continue;
      }
      // A registered socket says nothing more: readable means closed (or a protocol breach).
      drop(fd);
    }
  }
  while (!socks.empty())
    drop(socks.begin()->first);
}

}  // namespace ciuic::oss
