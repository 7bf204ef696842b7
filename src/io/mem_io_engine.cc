#include "io/mem_io_engine.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "common/fault.h"

namespace ciuic::io {

struct MemIoEngine::Inode {
  std::vector<uint8_t> data;          // what readers see
  std::vector<uint8_t> durable_data;  // what survives a power loss
  bool synced = false;                // durable_data was ever set
};

namespace {

constexpr uint64_t kDefaultCapacity = uint64_t{1} << 40;
constexpr uint64_t kMemDeviceId = 0x6d656d;
thread_local bool t_on_engine_thread = false;

std::string Normalize(const std::string& p) {
  std::string out;
  out.reserve(p.size());
  for (char c : p) {
    if (c == '/' && !out.empty() && out.back() == '/')
      continue;
    out.push_back(c);
  }
  if (out.size() > 1 && out.back() == '/')
    out.pop_back();
  return out;
}

std::string Parent(const std::string& p) {
  size_t pos = p.rfind('/');
  if (pos == std::string::npos)
    return "";
  if (pos == 0)
    return "/";
  return p.substr(0, pos);
}

std::string Base(const std::string& p) {
  size_t pos = p.rfind('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

bool IsUnder(const std::string& path, const std::string& dir) {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

Status BadHandle() {
  return Status::FromErrno(EBADF, "mem handle");
}

}  // namespace

MemIoEngine::MemIoEngine() : pool_(2, 4096, "mem-io") {}

MemIoEngine::~MemIoEngine() {
  pool_.Stop();
}

bool MemIoEngine::IsDirLocked(const std::string& path) const {
  if (path.empty() || path == "/" || path == ".")
    return true;
  auto it = live_.find(path);
  return it != live_.end() && it->second.dir;
}

Result<MemIoEngine::Handle*> MemIoEngine::FindLocked(FileHandle fh) {
  auto it = handles_.find(fh);
  if (it == handles_.end())
    return BadHandle();
  return &it->second;
}

Status MemIoEngine::CheckDirectLocked(const Handle& h,
                                      const void* buf,
                                      uint64_t offset,
                                      size_t len) const {
  if ((h.flags & O_DIRECT) == 0)
    return Status::OK();
  if (reinterpret_cast<uintptr_t>(buf) % 4096 != 0 || offset % 4096 != 0 || len % 4096 != 0) {
    return Status::InvalidArgument(
        fmt::format("misaligned O_DIRECT IO (buffer {}, offset {}, length {})", buf, offset, len));
  }
  return Status::OK();
}

Status MemIoEngine::ResizeLocked(Inode* inode, uint64_t size) {
  uint64_t old = inode->data.size();
  if (size > old && capacity_ != 0 && used_ + (size - old) > capacity_) {
    return Status::NoSpace("mem engine: no space left on device");
  }
  inode->data.resize(size);
  used_ = used_ + size - old;
  return Status::OK();
}

Result<FileHandle> MemIoEngine::Open(const std::string& raw_path, int flags, mode_t /*mode*/) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.open"));
  std::string path = Normalize(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  if (max_handles_ != 0 && handles_.size() >= max_handles_)
    return Status::Unavailable("open " + path + ": Too many open files");
  if (!IsDirLocked(Parent(path)))
    return Status::NotFound("open " + path + ": no parent directory");
  auto it = live_.find(path);
  std::shared_ptr<Inode> inode;
  if (it != live_.end()) {
    if (it->second.dir)
      return Status::IsADirectory("open " + path + ": is a directory");
    if ((flags & O_CREAT) && (flags & O_EXCL))
      return Status::AlreadyExists("open " + path);
    inode = it->second.inode;
    if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) {
      CIUIC_RETURN_IF_ERROR(ResizeLocked(inode.get(), 0));
    }
  } else {
    if ((flags & O_CREAT) == 0)
      return Status::NotFound("open " + path + ": no such file");
    inode = std::make_shared<Inode>();
    live_[path] = Node{false, inode};
  }
  FileHandle fh = next_fh_++;
  handles_[fh] = Handle{std::move(inode), flags};
  return fh;
}

size_t MemIoEngine::OpenHandles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return handles_.size();
}

void MemIoEngine::SetMaxOpenHandles(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  max_handles_ = n;
}

Status MemIoEngine::Close(FileHandle fh) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(fh);
  if (it == handles_.end())
    return BadHandle();
  auto lit = locks_.find(it->second.inode.get());
  if (lit != locks_.end() && lit->second == fh)
    locks_.erase(lit);
  std::shared_ptr<Inode> inode = std::move(it->second.inode);
  handles_.erase(it);
  ReleaseIfOrphanLocked(inode.get());
  return Status::OK();
}

void MemIoEngine::ReleaseIfOrphanLocked(Inode* inode) {
  for (const auto& e : live_) {
    if (e.second.inode.get() == inode)
      return;
  }
  for (const auto& e : handles_) {
    if (e.second.inode.get() == inode)
      return;
  }
  used_ -= inode->data.size();
  inode->data.clear();
  inode->data.shrink_to_fit();
}

Result<size_t> MemIoEngine::RunOp(const IoOp& op) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT(op.kind == IoKind::kRead ? "io.read" : "io.write"));
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  CIUIC_ASSIGN_OR_RETURN(Handle * h, FindLocked(op.fh));
  CIUIC_RETURN_IF_ERROR(CheckDirectLocked(*h, op.buf, op.offset, op.len));
  Inode* inode = h->inode.get();
  if (op.kind == IoKind::kRead) {
    if ((h->flags & O_ACCMODE) == O_WRONLY)
      return BadHandle();
    if (op.offset >= inode->data.size())
      return size_t{0};
    size_t n = std::min<uint64_t>(op.len, inode->data.size() - op.offset);
    std::memcpy(op.buf, inode->data.data() + op.offset, n);
    return n;
  }
  if ((h->flags & O_ACCMODE) == O_RDONLY)
    return BadHandle();
  uint64_t end = op.offset + op.len;
  if (end > inode->data.size())
    CIUIC_RETURN_IF_ERROR(ResizeLocked(inode, end));
  if (op.len > 0)
    std::memcpy(inode->data.data() + op.offset, op.buf, op.len);
  return op.len;
}

void MemIoEngine::SubmitAsync(const IoOp& op, IoCallback cb) {
  auto task = std::make_shared<std::pair<IoOp, IoCallback>>(op, std::move(cb));
  auto run = [this, task] {
    t_on_engine_thread = true;
    task->second(RunOp(task->first));
  };
  bool queued = t_on_engine_thread ? pool_.TrySubmit(run) : pool_.Submit(run);
  if (!queued)
    task->second(RunOp(task->first));
}

Status MemIoEngine::Fsync(FileHandle fh) {
  return Fdatasync(fh);
}

Status MemIoEngine::Fdatasync(FileHandle fh) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.fsync"));
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  CIUIC_ASSIGN_OR_RETURN(Handle * h, FindLocked(fh));
  Inode* inode = h->inode.get();
  inode->durable_data = inode->data;
  inode->synced = true;
  // A new file's creation becomes durable with its first sync.
  bool has_durable_name = std::any_of(durable_.begin(), durable_.end(),
                                      [&](const auto& e) { return e.second.inode.get() == inode; });
  if (!has_durable_name) {
    for (const auto& [path, node] : live_) {
      if (node.inode.get() == inode)
        durable_[path] = node;
    }
  }
  return Status::OK();
}

Status MemIoEngine::Truncate(FileHandle fh, uint64_t length) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.truncate"));
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  CIUIC_ASSIGN_OR_RETURN(Handle * h, FindLocked(fh));
  if ((h->flags & O_ACCMODE) == O_RDONLY)
    return BadHandle();
  return ResizeLocked(h->inode.get(), length);
}

Status MemIoEngine::PunchHole(FileHandle fh, uint64_t offset, uint64_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  CIUIC_ASSIGN_OR_RETURN(Handle * h, FindLocked(fh));
  auto& data = h->inode->data;
  if (offset >= data.size())
    return Status::OK();
  uint64_t end = std::min<uint64_t>(data.size(), offset + len);
  std::fill(data.begin() + static_cast<ptrdiff_t>(offset),
            data.begin() + static_cast<ptrdiff_t>(end), 0);
  return Status::OK();
}

Result<FileStat> MemIoEngine::Stat(FileHandle fh) {
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  CIUIC_ASSIGN_OR_RETURN(Handle * h, FindLocked(fh));
  uint64_t size = h->inode->data.size();
  return FileStat{size, size};
}

Result<FileStat> MemIoEngine::StatPath(const std::string& raw_path) {
  std::string path = Normalize(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  if (IsDirLocked(path))
    return FileStat{};
  auto it = live_.find(path);
  if (it == live_.end())
    return Status::NotFound("stat " + path + ": no such file");
  uint64_t size = it->second.inode->data.size();
  return FileStat{size, size};
}

Status MemIoEngine::Unlink(const std::string& raw_path) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.unlink"));
  std::string path = Normalize(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  auto it = live_.find(path);
  if (it == live_.end())
    return Status::NotFound("unlink " + path + ": no such file");
  if (it->second.dir)
    return Status::IsADirectory("unlink " + path + ": is a directory");
  std::shared_ptr<Inode> inode = std::move(it->second.inode);
  live_.erase(it);
  ReleaseIfOrphanLocked(inode.get());
  return Status::OK();
}

Status MemIoEngine::Rename(const std::string& raw_from, const std::string& raw_to) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.rename"));
  std::string from = Normalize(raw_from);
  std::string to = Normalize(raw_to);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  auto it = live_.find(from);
  if (it == live_.end())
    return Status::NotFound("rename " + from + ": no such file");
  if (!IsDirLocked(Parent(to)))
    return Status::NotFound("rename to " + to + ": no parent");
  if (from == to)
    return Status::OK();
  Node node = it->second;
  auto dst = live_.find(to);
  if (!node.dir) {
    if (dst != live_.end() && dst->second.dir)
      return Status::IsADirectory("rename to " + to);
    std::shared_ptr<Inode> replaced = dst != live_.end() ? dst->second.inode : nullptr;
    live_.erase(it);
    live_[to] = node;
    if (replaced != nullptr && replaced != node.inode)
      ReleaseIfOrphanLocked(replaced.get());
    return Status::OK();
  }
  if (IsUnder(to, from))
    return Status::InvalidArgument("rename " + from + " into itself");
  if (dst != live_.end()) {
    if (!dst->second.dir)
      return Status::NotADirectory("rename to " + to);
    for (const auto& e : live_) {
      if (IsUnder(e.first, to))
        return Status::NotEmpty("rename to " + to);
    }
  }
  std::vector<std::pair<std::string, Node>> moved;
  for (auto e = live_.begin(); e != live_.end();) {
    if (e->first == from || IsUnder(e->first, from)) {
      moved.emplace_back(to + e->first.substr(from.size()), e->second);
      e = live_.erase(e);
    } else {
      ++e;
    }
  }
  for (auto& [path, n] : moved)
    live_[path] = n;
  return Status::OK();
}

Status MemIoEngine::MkdirAll(const std::string& raw_path) {
  std::string path = Normalize(raw_path);
  if (path.empty())
    return Status::InvalidArgument("empty path");
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/')
      continue;
    std::string prefix = path.substr(0, pos);
    auto it = live_.find(prefix);
    if (it == live_.end()) {
      live_[prefix] = Node{true, nullptr};
    } else if (!it->second.dir) {
      return Status::NotADirectory(prefix + " is not a directory");
    }
  }
  return Status::OK();
}

Status MemIoEngine::SyncDir(const std::string& raw_path) {
  CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("io.syncdir"));
  std::string path = Normalize(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  if (!IsDirLocked(path))
    return Status::NotFound("sync dir " + path + ": no such directory");
  for (auto e = durable_.begin(); e != durable_.end();) {
    e = Parent(e->first) == path ? durable_.erase(e) : std::next(e);
  }
  for (const auto& e : live_) {
    if (Parent(e.first) == path)
      durable_[e.first] = e.second;
  }
  return Status::OK();
}

Result<std::vector<std::string>> MemIoEngine::ListDir(const std::string& raw_path) {
  std::string path = Normalize(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  if (!IsDirLocked(path)) {
    if (live_.count(path) != 0)
      return Status::NotADirectory(path + " is not a directory");
    return Status::NotFound("list " + path + ": no such directory");
  }
  std::vector<std::string> names;
  for (const auto& e : live_) {
    if (Parent(e.first) == path)
      names.push_back(Base(e.first));
  }
  return names;
}

Result<FsStat> MemIoEngine::StatFs(const std::string& raw_path) {
  std::string path = Normalize(raw_path);
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  if (!IsDirLocked(path) && live_.count(path) == 0)
    return Status::NotFound("statfs " + path);
  FsStat out;
  out.capacity = capacity_ != 0 ? capacity_ : kDefaultCapacity;
  out.free = out.capacity > used_ ? out.capacity - used_ : 0;
  out.device_id = kMemDeviceId;
  return out;
}

Status MemIoEngine::LockFile(FileHandle fh) {
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_RETURN_IF_ERROR(PoweredLocked());
  CIUIC_ASSIGN_OR_RETURN(Handle * h, FindLocked(fh));
  auto [it, inserted] = locks_.emplace(h->inode.get(), fh);
  if (!inserted && it->second != fh)
    return Status::Busy("file is locked by another user");
  return Status::OK();
}

Status MemIoEngine::PoweredLocked() const {
  if (!powered_)
    return Status::IoError("the power is off (simulated)");
  return Status::OK();
}

void MemIoEngine::SetPowered(bool powered) {
  std::lock_guard<std::mutex> lock(mu_);
  powered_ = powered;
}

void MemIoEngine::SimulatePowerLoss() {
  std::lock_guard<std::mutex> lock(mu_);
  handles_.clear();
  locks_.clear();
  live_ = durable_;
  used_ = 0;
  std::set<Inode*> seen;
  for (auto& [path, node] : live_) {
    if (node.dir || !seen.insert(node.inode.get()).second)
      continue;
    Inode* inode = node.inode.get();
    if (inode->synced) {
      inode->data = inode->durable_data;
    } else {
      inode->data.clear();
    }
    used_ += inode->data.size();
  }
}

void MemIoEngine::SetCapacity(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = bytes;
}

uint64_t MemIoEngine::UsedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace ciuic::io
