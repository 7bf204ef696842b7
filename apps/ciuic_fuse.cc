// `ciuic-fuse CLUSTER_FILE MOUNTPOINT`: mounts a ciuic cluster as a directory tree (docs/fuse.md).
//
// Without -f it returns once the mount is ready (exit 0) or failed (one line "ciuic-fuse: ...",
// exit 1) and keeps serving in the background; it unmounts on SIGINT/SIGTERM/SIGHUP or when
// `ciuic umount` / `fusermount3 -u` unmounts it, and fusermount3 unmounts the mount if the
// daemon dies (auto_unmount).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "ciuic/client.h"
#include "common/config.h"
#include "common/logging.h"
#include "fuse/fuse_server.h"

namespace {

namespace fs = std::filesystem;

// Where the background daemon reports "OK" or its error line to the waiting parent.
int g_report_fd = -1;

void Report(const std::string& line) {
  if (g_report_fd < 0) {
    if (line != "OK")
      fmt::print(stderr, "ciuic-fuse: {}\n", line);
    return;
  }
  const std::string msg = line + "\n";
  ssize_t n = ::write(g_report_fd, msg.data(), msg.size());
  (void)n;  // the parent may be gone: nothing else to tell
  ::close(g_report_fd);
  g_report_fd = -1;
}

// Forks: the parent waits for the child's report and exits with it; the child returns.
[[noreturn]] void WaitForChild(int read_fd, pid_t child) {
  std::string got;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(read_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got.append(buf, static_cast<size_t>(n));
  }
  while (!got.empty() && got.back() == '\n')
    got.pop_back();
  if (got == "OK")
    std::exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  fmt::print(stderr, "ciuic-fuse: {}\n",
             got.empty() ? "the daemon exited before mounting (see its log)" : got);
  std::exit(1);
}

void Detach(const std::string& log_file) {
  ::setsid();
  int in = ::open("/dev/null", O_RDWR);
  int out = log_file.empty() ? ::open("/dev/null", O_RDWR)
                             : ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (in >= 0)
    ::dup2(in, 0);
  if (out >= 0) {
    ::dup2(out, 1);
    ::dup2(out, 2);
  }
  if (in > 2)
    ::close(in);
  if (out > 2)
    ::close(out);
  if (::chdir("/") != 0) {
    // Not fatal: the daemon only keeps the old working directory busy.
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ciuic-fuse: mount a ciuic cluster as a directory tree.\n"
      "Example: ciuic-fuse ~/ciuic/cluster.conf /mnt/ciuic   (unmount: ciuic umount /mnt/ciuic)"};
  std::string cluster_file, mountpoint, log_file;
  bool foreground = false, debug = false, private_mount = false;
  ciuic::fuse::FuseOptions opts;
  app.add_option("cluster_file", cluster_file, "cluster file (from `ciuic cluster up`)")
      ->required();
  app.add_option("mountpoint", mountpoint, "an existing empty directory")->required();
  app.add_flag("-f,--foreground", foreground, "stay in the foreground");
  app.add_flag("-d,--debug", debug, "trace FUSE requests to stderr (implies -f)");
  bool allow_other = false;
  app.add_flag("--private", private_mount,
               "only the mounting user may use the mount (default for non-root users)");
  app.add_flag("--allow-other", allow_other,
               "let other users use the mount (default for root; other users need "
               "user_allow_other in /etc/fuse.conf)");
  app.add_option("--attr-timeout", opts.attr_timeout_s, "seconds the kernel caches attributes");
  app.add_option("--entry-timeout", opts.entry_timeout_s, "seconds the kernel caches names");
  app.add_option("--meta-threads", opts.meta_threads, "threads for metadata requests")
      ->check(CLI::Range(1, 64));
  app.add_option("--log", log_file, "log file of the background daemon");
  CLI11_PARSE(app, argc, argv);
  if (debug)
    foreground = true;
  opts.debug = debug;
  opts.allow_other = !private_mount && (allow_other || ::geteuid() == 0);

  std::error_code ec;
  fs::path mp = fs::absolute(mountpoint, ec);
  opts.mountpoint = ec ? mountpoint : mp.lexically_normal().string();
  if (opts.mountpoint.size() > 1 && opts.mountpoint.back() == '/')
    opts.mountpoint.pop_back();
  if (ciuic::Status st = ciuic::fuse::CheckMountpoint(opts.mountpoint); !st.ok()) {
    fmt::print(stderr, "ciuic-fuse: {}\n", st.message());
    return 1;
  }
  auto found = ciuic::FindClusterFile(cluster_file);
  if (!found.ok()) {
    fmt::print(stderr, "ciuic-fuse: {}\n", found.status().message());
    return 1;
  }
  std::string conf = fs::absolute(*found, ec).string();
  if (!log_file.empty())
    log_file = fs::absolute(log_file, ec).string();

  if (!foreground) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      fmt::print(stderr, "ciuic-fuse: pipe: {}\n", std::strerror(errno));
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      fmt::print(stderr, "ciuic-fuse: fork: {}\n", std::strerror(errno));
      return 1;
    }
    if (pid > 0) {
      ::close(fds[1]);
      WaitForChild(fds[0], pid);
    }
    ::close(fds[0]);
    g_report_fd = fds[1];
    Detach(log_file);
  }
  ciuic::log::SetName("fuse");

  // Mount first, while this process has one thread (see FuseServer(FuseOptions)); the kernel
  // holds requests to the new mount until the loop runs.
  ciuic::fuse::FuseServer server(opts);
  if (ciuic::Status st = server.Mount(); !st.ok()) {
    Report(st.message());
    return 1;
  }
  ciuic::ClientOptions copts;
  copts.cluster_file = conf;
  copts.client_name = fmt::format("fuse:{}", opts.mountpoint);
  copts.attr_cache_ms = 0;  // the kernel caches attributes (attr_timeout)
  // ...but asks for a directory's after every create or unlink in it: serve those from the replies.
  copts.dir_attr_cache_ms = static_cast<int>(opts.attr_timeout_s * 1000);
  auto client = ciuic::Client::Connect(copts);
  if (!client.ok()) {
    // The server's destructor unmounts again.
    if (client.status().code() == ciuic::StatusCode::kUnavailable) {
      Report(
          fmt::format("cluster not running (cannot reach the MDS named in {}): start it with "
                      "`ciuic cluster up DIR`",
                      conf));
    } else {
      Report(fmt::format("cannot connect: {}", client.status().ToString()));
    }
    return 1;
  }
  server.Attach(std::move(*client));
  Report("OK");
  ciuic::Status st = server.Run();
  if (!st.ok()) {
    fmt::print(stderr, "ciuic-fuse: {}\n", st.ToString());
    return 1;
  }
  return 0;
}
