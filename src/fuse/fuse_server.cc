// FuseServer: lifecycle (mount point checks, mount, loop, unmount) and the inode and handle
// tables. The request handlers are in fuse_ops.cc.
#include "fuse/fuse_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/logging.h"
#include "fuse/fuse_impl.h"

namespace ciuic::fuse {
namespace fs = std::filesystem;

namespace {

// Undoes the octal escapes (\040 for a space...) of a /proc/self/mountinfo path.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        if (s[i + k] < '0' || s[i + k] > '7') {
          ok = false;
          break;
        }
        v = v * 8 + (s[i + k] - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

bool IsMountpoint(const std::string& path) {
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(path, ec);
  const std::string want = ec ? path : canon.string();
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mnt;
    if (!(fields >> id >> parent >> dev >> root >> mnt))
      continue;
    if (Unescape(mnt) == want)
      return true;
  }
  return false;
}

Status CheckMountpoint(const std::string& mountpoint) {
  if (mountpoint.empty())
    return Status::InvalidArgument("no mount point given");
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOTCONN) {
      return Status::Busy(
          fmt::format("{}: a dead mount is still there (its daemon exited): run `ciuic umount {}`",
                      mountpoint, mountpoint));
    }
    if (err == ENOENT)
      return Status::NotFound(fmt::format("mount point {} does not exist", mountpoint));
    return Status::FromErrno(err, fmt::format("mount point {}", mountpoint));
  }
  if (!S_ISDIR(st.st_mode))
    return Status::NotADirectory(fmt::format("mount point {} is not a directory", mountpoint));
  if (IsMountpoint(mountpoint)) {
    return Status::Busy(fmt::format("{} is already a mount point (unmount it first)", mountpoint));
  }
  std::error_code ec;
  fs::directory_iterator it(mountpoint, ec);
  if (ec) {
    return Status::FromErrno(ec.value(), fmt::format("cannot list mount point {}", mountpoint));
  }
  if (it != fs::directory_iterator()) {
    return Status::NotEmpty(fmt::format("mount point {} is not empty", mountpoint));
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// Impl: tables

FuseServer::Impl::Impl(FuseOptions options) : opts_(std::move(options)) {}

void FuseServer::Impl::Attach(std::unique_ptr<Client> client) {
  client_ = std::move(client);
  root_ = client_->RootId();
  pool_ = std::make_unique<ThreadPool>(static_cast<size_t>(std::max(1, opts_.meta_threads)), 4096,
                                       "fuse-meta");
  StartLockWaiter();
}

FuseServer::Impl::~Impl() {
  StopLockWaiter();
  if (pool_ != nullptr)
    pool_->Stop();
  // Handles the kernel never released (the connection was aborted): close them.
  std::unordered_map<uint64_t, Handle*> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(handles_);
  }
  for (auto& [ptr, h] : left) {
    h->file->Close().IgnoreError();  // the kernel is gone: nobody to report to
    delete h;
  }
  if (se_ != nullptr) {
    if (mounted_)
      fuse_session_unmount(se_);
    fuse_session_destroy(se_);
  }
}

FileId FuseServer::Impl::IdOf(fuse_ino_t ino) {
  if (ino == FUSE_ROOT_ID)
    return root_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inodes_.find(ino);
  if (it != inodes_.end())
    return it->second.id;
  return FileId{ino, 0, 0};
}

fuse_ino_t FuseServer::Impl::InoOf(const FileStat& s) const {
  if (s.ino == root_.seq)
    return FUSE_ROOT_ID;
  return s.ino;
}

void FuseServer::Impl::Ref(const FileStat& s) {
  const fuse_ino_t ino = InoOf(s);
  if (ino == FUSE_ROOT_ID)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  InodeEntry& e = inodes_[ino];
  e.id = IdOf(s);
  e.nlookup++;
}

void FuseServer::Impl::Forget(fuse_ino_t ino, uint64_t n) {
  if (ino == FUSE_ROOT_ID)
    return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end())
    return;
  if (it->second.nlookup <= n) {
    inodes_.erase(it);
  } else {
    it->second.nlookup -= n;
  }
}

bool FuseServer::Impl::KeepCache(fuse_ino_t ino, uint64_t data_version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end())
    return false;
  const bool keep = it->second.version_known && it->second.data_version == data_version;
  it->second.version_known = true;
  it->second.data_version = data_version;
  return keep;
}

void FuseServer::Impl::ForgetVersion(fuse_ino_t ino) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inodes_.find(ino);
  if (it != inodes_.end())
    it->second.version_known = false;
}

uint64_t FuseServer::Impl::AddHandle(std::unique_ptr<File> file, fuse_ino_t ino) {
  auto* h = new Handle{std::move(file), ino};
  const auto fh = reinterpret_cast<uint64_t>(h);
  std::lock_guard<std::mutex> lock(mu_);
  handles_.emplace(fh, h);
  return fh;
}

std::unique_ptr<FuseServer::Impl::Handle> FuseServer::Impl::TakeHandle(uint64_t fh) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(fh);
  if (it == handles_.end())
    return nullptr;
  std::unique_ptr<Handle> h(it->second);
  handles_.erase(it);
  return h;
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

Status FuseServer::Impl::Mount() {
  CIUIC_RETURN_IF_ERROR(CheckMountpoint(opts_.mountpoint));
  std::vector<std::string> argv_s = {"ciuic-fuse"};
  std::string o = fmt::format("fsname=ciuic,subtype=ciuic,max_read={}", opts_.max_io_bytes);
  o += ",default_permissions";
  if (opts_.allow_other)
    o += ",allow_other";
  if (opts_.auto_unmount)
    o += ",auto_unmount";
  argv_s.push_back("-o");
  argv_s.push_back(o);
  if (opts_.debug)
    argv_s.push_back("-d");
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  const fuse_lowlevel_ops ops = Ops();
  se_ = fuse_session_new(&args, &ops, sizeof(ops), this);
  fuse_opt_free_args(&args);  // the session parsed them into copies; this frees libfuse's copy
  if (se_ == nullptr)
    return Status::Internal("fuse_session_new failed (bad options?)");
  if (fuse_session_mount(se_, opts_.mountpoint.c_str()) != 0) {
    return Status::IoError(fmt::format(
        "cannot mount on {} (is /dev/fuse present and fusermount3 installed? see the lines "
        "above)",
        opts_.mountpoint));
  }
  mounted_ = true;
  RaiseReadahead();
  return Status::OK();
}

void FuseServer::Impl::RaiseReadahead() {
  // The kernel reads ahead only 128 KiB on a FUSE mount by default (its bdi's read_ahead_kb);
  // sequential readers do better with a few MiB in flight. Best effort: needs root. The device
  // number comes from mountinfo: a stat() of the mount point would wait for this very daemon.
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mnt;
    if (!(fields >> id >> parent >> dev >> root >> mnt) || Unescape(mnt) != opts_.mountpoint)
      continue;
    std::ofstream out(fmt::format("/sys/class/bdi/{}/read_ahead_kb", dev));
    if (out)
      out << opts_.readahead_kb << "\n";
  }
}

Status FuseServer::Impl::Run() {
  if (se_ == nullptr || !mounted_)
    return Status::InvalidArgument("not mounted");
  if (client_ == nullptr)
    return Status::InvalidArgument("no client attached");
  if (fuse_set_signal_handlers(se_) != 0)
    return Status::Internal("cannot install signal handlers");
  struct fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 1);
  fuse_loop_cfg_set_max_threads(cfg, static_cast<unsigned>(std::max(2, opts_.max_fuse_threads)));
  fuse_loop_cfg_set_idle_threads(cfg, 4);
  const int rc = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_remove_signal_handlers(se_);
  fuse_session_unmount(se_);
  mounted_ = false;
  StopLockWaiter();  // waiting lock requests get EINTR
  pool_->Stop();     // finish the metadata requests in progress
  if (rc < 0)
    return Status::FromErrno(-rc, "fuse loop");
  return Status::OK();
}

FuseServer::FuseServer(std::unique_ptr<Client> client, FuseOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->Attach(std::move(client));
}

FuseServer::FuseServer(FuseOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

void FuseServer::Attach(std::unique_ptr<Client> client) {
  impl_->Attach(std::move(client));
}

FuseServer::~FuseServer() = default;

Status FuseServer::Mount() {
  return impl_->Mount();
}

Status FuseServer::Run() {
  return impl_->Run();
}

}  // namespace ciuic::fuse
