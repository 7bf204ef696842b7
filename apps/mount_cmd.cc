// `ciuic mount` / `ciuic umount`: thin wrappers over the ciuic-fuse daemon and fusermount3.
#include "mount_cmd.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "fuse/fuse_server.h"

namespace ciuic::cli {
namespace fs = std::filesystem;
namespace {

int Fail(const std::string& msg) {
  fmt::print(stderr, "ciuic: {}\n", msg);
  return 1;
}

// ciuic-fuse next to this binary, else the bare name (looked up on $PATH).
std::string FuseBinary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path cand = self.parent_path() / "ciuic-fuse";
    if (::access(cand.c_str(), X_OK) == 0)
      return cand.string();
  }
  return "ciuic-fuse";
}

// Runs argv and returns its exit code (127 if it could not be started).
int RunWait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0)
    return 127;
  if (pid == 0) {
    ::execvp(argv[0], argv.data());
    fmt::print(stderr, "ciuic: cannot run {}: {}\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int Mount(const MountOptions& o) {
  std::vector<std::string> args = {FuseBinary(), o.cluster_file, o.mountpoint};
  if (o.foreground)
    args.push_back("-f");
  if (o.private_mount)
    args.push_back("--private");
  if (!o.log_file.empty()) {
    args.push_back("--log");
    args.push_back(o.log_file);
  }
  const int rc = RunWait(args);
  if (rc == 127)
    return Fail("ciuic-fuse not found (install it next to `ciuic` or on $PATH)");
  return rc;
}

int Umount(const std::string& mountpoint, int timeout_s) {
  std::error_code ec;
  std::string mp = fs::absolute(mountpoint, ec).lexically_normal().string();
  if (mp.size() > 1 && mp.back() == '/')
    mp.pop_back();
  if (!fuse::IsMountpoint(mp))
    return Fail(fmt::format("{} is not mounted", mp));
  int rc = RunWait({"fusermount3", "-u", "-q", mp});
  if (rc != 0 && ::geteuid() == 0) {
    // A dead daemon's mount ("Transport endpoint is not connected"): detach it.
    if (::umount2(mp.c_str(), MNT_DETACH) == 0)
      rc = 0;
  }
  if (rc != 0) {
    return Fail(fmt::format("cannot unmount {} (busy? close the files open in it)", mp));
  }
  // The daemon finishes when the kernel drops the connection; wait until the mount is gone.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (fuse::IsMountpoint(mp)) {
    if (std::chrono::steady_clock::now() > end)
      return Fail(fmt::format("{} is still mounted after {} s", mp, timeout_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

}  // namespace ciuic::cli
