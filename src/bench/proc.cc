#include "bench/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace ciuic::bench {
namespace {

struct Registry {
  std::mutex mu;
  int next = 1;
  std::map<int, std::function<void()>> fns;
};

Registry& Reg() {
  static Registry* r = new Registry();  // never destroyed: used by the signal thread at exit
  return *r;
}

}  // namespace

Result<pid_t> Spawn(const std::vector<std::string>& argv,
                    const std::string& log_path,
                    const std::vector<std::string>& env) {
  if (argv.empty())
    return Status::InvalidArgument("empty command");
  // Everything the child needs is built before fork (no allocation after it).
  std::vector<char*> args;
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e)
    env_strings.emplace_back(*e);
  for (const auto& e : env)
    env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0)
    return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setsid();
    int devnull = ::open("/dev/null", O_RDONLY);
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (devnull >= 0)
      ::dup2(devnull, 0);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    ::closefrom(3);
    ::execvpe(args[0], args.data(), envp.data());
    ::dprintf(2, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

Result<int> RunCommand(const std::vector<std::string>& argv,
                       const std::string& log_path,
                       int timeout_s,
                       const std::vector<std::string>& env) {
  CIUIC_ASSIGN_OR_RETURN(pid_t pid, Spawn(argv, log_path, env));
  int id = AddCleanup([pid] { StopProcess(pid, 2000); });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      {
        std::lock_guard<std::mutex> g(Reg().mu);
        Reg().fns.erase(id);
      }
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (r < 0 && errno != EINTR)
      return Status::FromErrno(errno, "waitpid");
    if (std::chrono::steady_clock::now() > deadline) {
      RunCleanup(id);
      return Status::TimedOut(
          fmt::format("{} ran longer than {} s (killed; log {})", argv[0], timeout_s, log_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void StopProcess(pid_t pid, int timeout_ms) {
  if (pid <= 0)
    return;
  ::kill(pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return;
    if (std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
}

int AddCleanup(std::function<void()> fn) {
  std::lock_guard<std::mutex> g(Reg().mu);
  int id = Reg().next++;
  Reg().fns.emplace(id, std::move(fn));
  return id;
}

void RunCleanup(int id) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> g(Reg().mu);
    auto it = Reg().fns.find(id);
    if (it == Reg().fns.end())
      return;
    fn = std::move(it->second);
    Reg().fns.erase(it);
  }
  fn();
}

void RunAllCleanups() {
  for (;;) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> g(Reg().mu);
      if (Reg().fns.empty())
        return;
      auto it = std::prev(Reg().fns.end());
      fn = std::move(it->second);
      Reg().fns.erase(it);
    }
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ciuic-benchmark: cleanup failed: %s\n", e.what());
    }
  }
}

void InstallSignalCleanup() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (::sigwait(&set, &sig) != 0) {
    }
    std::fprintf(stderr, "\nciuic-benchmark: %s: cleaning up (servers, mounts, namespaces)\n",
                 strsignal(sig));
    RunAllCleanups();
    std::_Exit(128 + sig);
  }).detach();
}

std::string SelfDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string LastLines(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty())
      lines.push_back(line);
  }
  std::string out;
  size_t from = lines.size() > static_cast<size_t>(n) ? lines.size() - static_cast<size_t>(n) : 0;
  for (size_t i = from; i < lines.size(); ++i)
    out += (out.empty() ? "" : " | ") + lines[i];
  return out;
}

}  // namespace ciuic::bench
