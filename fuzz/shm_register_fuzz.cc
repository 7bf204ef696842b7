// Fuzz target: the OSS side of the shared-memory registration (oss::ShmRegistry::Admit, the
// check and mapping Register does after recvmsg). The input is the message as received and a
// first byte that picks the descriptors it carries: none, a sealed memfd, an unsealed one, a
// pipe, or two memfds, and the memfd's size in pages (0 to 3, or not a multiple of 4 KiB).
// Regions admitted are looked up and forgotten again, so the registry stays small.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/logging.h"
#include "fuzz/fuzz_util.h"
#include "oss/shm_registry.h"

namespace {

int MakeMemfd(size_t bytes, bool seal) {
  const int fd = memfd_create("ciuic-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    std::abort();
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    std::abort();
  if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    std::abort();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  ciuic::log::SetLevel(ciuic::log::Level::kError);  // every refusal logs a warning
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ciuic::oss::ShmRegistry registry(
      ciuic::oss::ShmRegistry::Limits{.max_regions = 4, .max_region_bytes = 2 * 4096});
  ciuic::fuzz::FuzzReader in(data, size);
  const uint8_t pick = in.U8();
  const uint8_t recv_flags = in.U8();
  const size_t pages = (pick >> 3) & 3;
  const size_t bytes = (pick & 0x20) != 0 ? pages * 4096 + 100 : pages * 4096;
  std::vector<int> fds;
  switch (pick & 7) {
    case 0:
      break;
    case 1:
    case 2:
      fds.push_back(MakeMemfd(bytes, true));
      break;
    case 3:
      fds.push_back(MakeMemfd(bytes, false));
      break;
    case 4: {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0)
        std::abort();
      close(p[1]);
      fds.push_back(p[0]);
      break;
    }
    default:
      fds.push_back(MakeMemfd(bytes, true));
      fds.push_back(MakeMemfd(bytes, true));
      break;
  }
  // recvmsg's MSG_TRUNC / MSG_CTRUNC, or nothing.
  const int msg_flags =
      ((recv_flags & 1) != 0 ? MSG_TRUNC : 0) | ((recv_flags & 2) != 0 ? MSG_CTRUNC : 0);
  const ciuic::oss::ShmRegistry::Admission a = registry.Admit(in.Rest(), msg_flags, std::move(fds));
  if (a.error == 0) {
    auto region = registry.Find(a.token);
    if (a.token == 0 || region == nullptr || region->size() != a.size || a.size % 4096 != 0)
      std::abort();
    // The whole region is mapped and writable, as the OSS's reads into it assume.
    region->At(0, a.size)[a.size - 1] = 1;
    registry.Forget(a.token);
  }
  return 0;
}
