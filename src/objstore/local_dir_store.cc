#include "objstore/local_dir_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "common/fault.h"
#include "objstore/local_dir_internal.h"

namespace ciuic::objstore {

using internal::QuoteKey;
using internal::UniqueFd;

namespace {

constexpr std::string_view kXattrPrefix = "user.ciuic.";
constexpr size_t kMaxNameBytes = 255;  // NAME_MAX of the common Linux file systems
// Puts retry this often when a concurrent Delete removes a directory they are creating in.
constexpr int kMaxAttempts = 16;

// Returns a random 64-bit value for temp file names (uniqueness, not secrecy).
uint64_t RandomU64() {
  thread_local std::mt19937_64 rng = [] {
    uint64_t seed = 0;
    if (::getrandom(&seed, sizeof(seed), 0) != sizeof(seed)) {
      seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
             static_cast<uint64_t>(::gettid());
    }
    return std::mt19937_64(seed);
  }();
  return rng();
}

std::string TempName(std::string_view name) {
  // Part of the name, so a stray temp file says what it was for, within NAME_MAX.
  return fmt::format("{}{}.{:016x}", internal::kTempPrefix, name.substr(0, 64), RandomU64());
}

std::vector<std::string_view> Components(std::string_view key) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (;;) {
    size_t end = key.find('/', begin);
    parts.push_back(key.substr(begin, end == std::string_view::npos ? end : end - begin));
    if (end == std::string_view::npos) {
      return parts;
    }
    begin = end + 1;
  }
}

std::string_view LastComponent(std::string_view key) {
  size_t slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(slash + 1);
}

// Writes all of `data` at `offset`, retrying short writes.
int WriteAll(int fd, const char* data, size_t size, uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace

// The directories on the way to a key's parent, from the root (chain[0], a duplicate of the
// root's descriptor) to the parent (chain.back()). created[i] says chain[i] was made by this
// put, so a failed put removes it again.
struct LocalDirStore::Parents {
  std::vector<UniqueFd> chain;
  std::vector<std::string> names;  // names[i]: the name of chain[i] in chain[i - 1]
  std::vector<bool> created;

  // Removes the directories this put created, deepest first, if still empty.
  void RemoveCreated() {
    for (size_t i = chain.size(); i-- > 1;) {
      if (created[i]) {
        ::unlinkat(chain[i - 1].get(), names[i].c_str(), AT_REMOVEDIR);
      }
    }
  }
};

LocalDirStore::LocalDirStore(std::string root, int root_fd, Options opts)
    : root_(std::move(root)), root_fd_(root_fd), opts_(opts) {}

LocalDirStore::~LocalDirStore() {
  ::close(root_fd_);
}

Result<std::unique_ptr<LocalDirStore>> LocalDirStore::Open(const std::string& root, Options opts) {
  if (root.empty()) {
    return Status::InvalidArgument("file://: empty directory name for a local object store");
  }
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(root, ec).lexically_normal();
  if (ec) {
    return Status::FromErrno(ec.value(), fmt::format("file://{}: open", root));
  }
  std::string path = abs.string();
  while (path.size() > 1 && path.back() == '/') {
    path.pop_back();
  }
  const std::string describe = "file://" + path;
  if (opts.create) {
    // mkdir -p, syncing each new directory's parent so the root survives a crash.
    size_t pos = 0;
    while (pos != std::string::npos) {
      pos = path.find('/', pos + 1);
      std::string sub = path.substr(0, pos);
      if (::mkdir(sub.c_str(), opts.dir_mode) == 0) {
        std::string parent = sub.substr(0, std::max<size_t>(sub.rfind('/'), 1));
        UniqueFd pfd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (pfd.valid() && ::fsync(pfd.get()) != 0) {
          return Status(internal::LocalErrnoCode(errno),
                        fmt::format("{}: sync new directory: {}", describe, std::strerror(errno)));
        }
      } else if (errno != EEXIST) {
        return Status(
            internal::LocalErrnoCode(errno),
            fmt::format("{}: create directory {}: {}", describe, sub, std::strerror(errno)));
      }
    }
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    StatusCode code = err == ENOTDIR ? StatusCode::kNotADirectory : internal::LocalErrnoCode(err);
    return Status(code,
                  fmt::format("{}: open the store's directory: {}", describe, std::strerror(err)));
  }
  return std::unique_ptr<LocalDirStore>(new LocalDirStore(std::move(path), fd, opts));
}

std::string LocalDirStore::Describe() const {
  return "file://" + root_;
}

Status LocalDirStore::Errno(int err, std::string_view op, std::string_view key) const {
  return Status(internal::LocalErrnoCode(err),
                fmt::format("{}: {} {}: {}", Describe(), op, QuoteKey(key), std::strerror(err)));
}

Status LocalDirStore::CheckKey(std::string_view key) const {
  CIUIC_RETURN_IF_ERROR(ValidateKey(key).WithContext(Describe()));
  size_t begin = 0;
  while (begin < key.size()) {
    size_t end = std::min(key.find('/', begin), key.size());
    std::string_view part = key.substr(begin, end - begin);
    if (part.starts_with(internal::kTempPrefix)) {
      return Status::InvalidArgument(fmt::format(
          "{}: invalid object key {}: a name starting with '{}' is reserved for temp files",
          Describe(), QuoteKey(key), internal::kTempPrefix));
    }
    if (part.size() > kMaxNameBytes) {
      return Status::InvalidArgument(
          fmt::format("{}: invalid object key {}: a component of {} bytes, more than the {} a "
                      "file name may have",
                      Describe(), QuoteKey(key), part.size(), kMaxNameBytes));
    }
    begin = end + 1;
  }
  return Status::OK();
}

Status LocalDirStore::OpenChain(std::string_view key, std::vector<UniqueFd>* chain) const {
  chain->clear();
  int root = ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0);
  if (root < 0) {
    return Errno(errno, "open", key);
  }
  chain->emplace_back(root);
  size_t begin = 0;
  for (size_t end = key.find('/'); end != std::string_view::npos; end = key.find('/', begin)) {
    std::string name(key.substr(begin, end - begin));
    int fd = ::openat(chain->back().get(), name.c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR || err == ELOOP) {
        return Status::NotFound(fmt::format("{}: no object {}", Describe(), QuoteKey(key)));
      }
      return Errno(err, "open directory for", key);
    }
    chain->emplace_back(fd);
    begin = end + 1;
  }
  return Status::OK();
}

Result<UniqueFd> LocalDirStore::OpenObject(std::string_view key,
                                           std::string_view op,
                                           struct stat* st) const {
  std::vector<UniqueFd> chain;
  CIUIC_RETURN_IF_ERROR(OpenChain(key, &chain));
  const std::string name(LastComponent(key));
  auto not_regular = [&] {
    return Status::NotFound(fmt::format("{}: no object {} (the file is not a regular file)",
                                        Describe(), QuoteKey(key)));
  };
  // Look before opening: opening a device or socket may fail oddly or do something.
  if (::fstatat(chain.back().get(), name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 &&
      !S_ISREG(st->st_mode)) {
    return not_regular();
  }
  // O_NONBLOCK: should a FIFO replace the file meanwhile, opening it must not hang.
  UniqueFd fd(
      ::openat(chain.back().get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid() || ::fstat(fd.get(), st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR || err == ELOOP) {
      return Status::NotFound(fmt::format("{}: no object {}", Describe(), QuoteKey(key)));
    }
    return Errno(err, op, key);
  }
  if (!S_ISREG(st->st_mode)) {
    return not_regular();
  }
  return fd;
}

Result<LocalDirStore::Parents> LocalDirStore::MakeParents(std::string_view key) {
  // A concurrent Delete may remove a directory it emptied while this walk is inside it; then
  // making a directory in it fails with ENOENT, and the walk starts again from the root.
  for (int attempt = 0;; ++attempt) {
    Parents p;
    int root = ::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0);
    if (root < 0) {
      return Errno(errno, "put", key);
    }
    p.chain.emplace_back(root);
    p.names.emplace_back();
    p.created.push_back(false);
    bool restart = false;
    size_t begin = 0;
    for (size_t end = key.find('/'); end != std::string_view::npos && !restart;
         end = key.find('/', begin)) {
      std::string name(key.substr(begin, end - begin));
      std::string_view walked = key.substr(0, end);
      const int parent = p.chain.back().get();
      bool created = false;
      int fd = -1;
      for (int tries = 0; fd < 0 && !restart; ++tries) {
        fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
          break;
        }
        int err = errno;
        if (err == ENOENT && tries < kMaxAttempts) {
          if (::mkdirat(parent, name.c_str(), opts_.dir_mode) == 0) {
            created = true;
            continue;  // open what was just made
          }
          if (errno == EEXIST) {
            continue;  // a concurrent put made it
          }
          if (errno == ENOENT && attempt < kMaxAttempts) {
            restart = true;  // `parent` itself was removed
            continue;
          }
          err = errno;
        }
        Status s;
        struct stat st;
        if ((err == ENOTDIR || err == ELOOP) &&
            ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
          if (S_ISREG(st.st_mode)) {
            s = Status::AlreadyExists(fmt::format(
                "{}: cannot put {}: key {} exists, and a local directory store cannot hold both "
                "a key and keys below it ({} would have to be a file and a directory)",
                Describe(), QuoteKey(key), QuoteKey(walked), QuoteKey(walked)));
          } else {
            s = Status::AlreadyExists(
                fmt::format("{}: cannot put {}: {} is a symbolic link or special file, not a "
                            "directory",
                            Describe(), QuoteKey(key), QuoteKey(walked)));
          }
        } else {
          s = Errno(err, "create directory for", key);
        }
        p.RemoveCreated();
        return s;
      }
      if (restart) {
        break;
      }
      p.chain.emplace_back(fd);
      p.names.push_back(std::move(name));
      p.created.push_back(created);
      begin = end + 1;
    }
    if (!restart) {
      return p;
    }
  }
}

Status LocalDirStore::ConflictBelow(std::string_view key, int dir_fd, const std::string& name) {
  ListOptions opts;
  opts.prefix = std::string(key) + "/";
  opts.max_keys = 1;
  Result<ListPage> page = List(opts);
  if (page.ok() && !page->objects.empty()) {
    return Status::AlreadyExists(fmt::format(
        "{}: cannot put {}: key {} exists, and a local directory store cannot hold both a key "
        "and keys below it ({} would have to be a file and a directory)",
        Describe(), QuoteKey(key), QuoteKey(page->objects[0].key), QuoteKey(key)));
  }
  // No keys below: an empty directory (left by a crash, or by a put that is creating keys
  // there right now) is in the way. Removing it is safe: rmdir fails if it is not empty, and
  // a put that loses its directory this way retries.
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) {
    return Status::OK();
  }
  return Status::AlreadyExists(
      fmt::format("{}: cannot put {}: a directory of that name is in the way (it holds files "
                  "that are not objects)",
                  Describe(), QuoteKey(key)));
}

Status LocalDirStore::PutImpl(std::string_view key,
                              uint64_t size,
                              const std::function<Status(int fd)>& fill,
                              const PutOptions& opts) {
  CIUIC_RETURN_IF_ERROR(CheckKey(key));
  CIUIC_RETURN_IF_ERROR(
      internal::ValidateMetadata(opts, fmt::format("{}: put {}", Describe(), QuoteKey(key))));
  const std::string name(LastComponent(key));
  for (int attempt = 0;; ++attempt) {
    CIUIC_ASSIGN_OR_RETURN(Parents parents, MakeParents(key));
    const int dir = parents.chain.back().get();
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
      // Refuse before writing what may be gigabytes (the rename would refuse too).
      Status s = ConflictBelow(key, dir, name);
      if (!s.ok()) {
        parents.RemoveCreated();
        return s;
      }
    }
    const std::string tmp = TempName(name);
    UniqueFd fd(
        ::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, opts_.file_mode));
    if (!fd.valid()) {
      int err = errno;
      if (err == ENOENT && attempt < kMaxAttempts) {
        continue;  // a concurrent Delete removed the (empty) directory: make it again
      }
      parents.RemoveCreated();
      return Errno(err, "put", key);
    }
    Status s;
    // Reserving the space first finds a full file system before the data is produced (a
    // stream may be gigabytes); where the file system cannot reserve, the writes will tell.
    if (size > 0 && ::fallocate(fd.get(), 0, 0, static_cast<off_t>(size)) != 0 &&
        (errno == ENOSPC || errno == EDQUOT)) {
      s = Errno(errno, "reserve space for", key);
    }
    if (s.ok()) {
      s = fill(fd.get());
    }
    for (auto it = opts.metadata.begin(); s.ok() && it != opts.metadata.end(); ++it) {
      const std::string xname = std::string(kXattrPrefix) + it->first;
      Status fault = CIUIC_FAULT("objstore.local.setxattr");
      int rc = fault.ok()
                   ? ::fsetxattr(fd.get(), xname.c_str(), it->second.data(), it->second.size(), 0)
                   : (errno = fault.ToErrno(), -1);
      if (rc != 0) {
        int err = errno;
        if (err == EOPNOTSUPP) {
          s = Status::NotSupported(fmt::format(
              "{}: put {}: the file system does not support user extended attributes, where "
              "this store keeps metadata ({}*); put without metadata or use another directory",
              Describe(), QuoteKey(key), kXattrPrefix));
        } else if (err == ENOSPC || err == E2BIG || err == ERANGE) {
          s = Status::InvalidArgument(
              fmt::format("{}: put {}: metadata {} does not fit the file's extended attributes",
                          Describe(), QuoteKey(key), QuoteKey(it->first)));
        } else {
          s = Errno(err, "set metadata of", key);
        }
      }
    }
    if (s.ok() && ::fsync(fd.get()) != 0) {
      s = Errno(errno, "sync", key);
    }
    fd.reset();
    if (s.ok()) {
      s = CIUIC_FAULT("objstore.local.before_rename");
    }
    for (int tries = 0; s.ok(); ++tries) {
      if (::renameat(dir, tmp.c_str(), dir, name.c_str()) == 0) {
        break;
      }
      int err = errno;
      if ((err == EISDIR || err == ENOTEMPTY || err == EEXIST) && tries < kMaxAttempts) {
        s = ConflictBelow(key, dir, name);  // OK if it removed an empty directory: rename again
      } else {
        s = Errno(err, "put", key);
      }
    }
    if (!s.ok()) {
      ::unlinkat(dir, tmp.c_str(), 0);
      parents.RemoveCreated();
      return s;
    }
    // The new name, and each directory on the way, must survive a crash. Syncing the whole
    // chain, not only the directories this put created, covers one that a concurrent put
    // created and has not synced yet; syncing an unchanged directory is cheap.
    for (size_t i = parents.chain.size(); i-- > 0;) {
      if (::fsync(parents.chain[i].get()) != 0) {
        return Errno(errno, "sync directory of", key);
      }
    }
    return Status::OK();
  }
}

Status LocalDirStore::Put(std::string_view key, std::string_view data, const PutOptions& opts) {
  auto fill = [&](int fd) -> Status {
    CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("objstore.local.write"));
    int err = WriteAll(fd, data.data(), data.size(), 0);
    return err == 0 ? Status::OK() : Errno(err, "write", key);
  };
  return PutImpl(key, data.size(), fill, opts);
}

Status LocalDirStore::PutStream(std::string_view key,
                                uint64_t size,
                                const PutSource& source,
                                const PutOptions& opts) {
  auto fill = [&](int fd) -> Status {
    const uint64_t chunk =
        std::min<uint64_t>(size, std::max<uint64_t>(opts_.stream_chunk_bytes, 1));
    std::vector<char> buf;
    try {
      buf.resize(chunk);
    } catch (const std::bad_alloc&) {
      return Status::Unavailable(fmt::format("{}: put {}: no memory for a {} byte buffer",
                                             Describe(), QuoteKey(key), chunk));
    }
    for (uint64_t offset = 0; offset < size; offset += chunk) {
      const size_t n = std::min(chunk, size - offset);
      Status s;
      try {
        s = source(offset, std::span<char>(buf.data(), n));
      } catch (const std::exception& e) {
        s = Status::Internal(fmt::format("put source threw: {}", e.what()));
      }
      CIUIC_RETURN_IF_ERROR(s.WithContext(fmt::format("{}: put {}", Describe(), QuoteKey(key))));
      CIUIC_RETURN_IF_ERROR(CIUIC_FAULT("objstore.local.write"));
      int err = WriteAll(fd, buf.data(), n, offset);
      if (err != 0) {
        return Errno(err, "write", key);
      }
    }
    return Status::OK();
  };
  return PutImpl(key, size, fill, opts);
}

Result<size_t> LocalDirStore::Get(std::string_view key, uint64_t offset, std::span<char> dst) {
  CIUIC_RETURN_IF_ERROR(CheckKey(key));
  struct stat st;
  CIUIC_ASSIGN_OR_RETURN(UniqueFd fd, OpenObject(key, "get", &st));
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (offset >= file_size) {
    return size_t{0};
  }
  size_t got = 0;
  while (got < dst.size()) {
    ssize_t n =
        ::pread(fd.get(), dst.data() + got, dst.size() - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Errno(errno, "read", key);
    }
    if (n == 0) {
      break;
    }
    got += static_cast<size_t>(n);
  }
  return got;
}

Result<ObjectInfo> LocalDirStore::Head(std::string_view key) {
  CIUIC_RETURN_IF_ERROR(CheckKey(key));
  struct stat st;
  CIUIC_ASSIGN_OR_RETURN(UniqueFd fd, OpenObject(key, "head", &st));
  ObjectInfo info = internal::LocalObjectInfo(std::string(key), st);
  // The names list may grow between the two calls; retry with the new size.
  std::vector<char> names;
  for (int tries = 0;; ++tries) {
    ssize_t len = ::flistxattr(fd.get(), nullptr, 0);
    if (len < 0) {
      if (errno == EOPNOTSUPP) {
        return info;  // no metadata can exist here
      }
      return Errno(errno, "read metadata of", key);
    }
    names.resize(static_cast<size_t>(len));
    len = ::flistxattr(fd.get(), names.data(), names.size());
    if (len >= 0) {
      names.resize(static_cast<size_t>(len));
      break;
    }
    if (errno != ERANGE || tries == kMaxAttempts) {
      return Errno(errno, "read metadata of", key);
    }
  }
  for (size_t i = 0; i < names.size();) {
    std::string xname(names.data() + i);
    i += xname.size() + 1;
    if (!xname.starts_with(kXattrPrefix)) {
      continue;
    }
    std::string value;
    for (int tries = 0;; ++tries) {
      ssize_t len = ::fgetxattr(fd.get(), xname.c_str(), nullptr, 0);
      if (len >= 0) {
        value.resize(static_cast<size_t>(len));
        len = ::fgetxattr(fd.get(), xname.c_str(), value.data(), value.size());
      }
      if (len >= 0) {
        value.resize(static_cast<size_t>(len));
        break;
      }
      if (errno != ERANGE || tries == kMaxAttempts) {
        return Errno(errno, "read metadata of", key);
      }
    }
    info.metadata.emplace(xname.substr(kXattrPrefix.size()), std::move(value));
  }
  return info;
}

Result<ListPage> LocalDirStore::List(const ListOptions& opts) {
  CIUIC_RETURN_IF_ERROR(internal::ValidateListOptions(opts, Describe()));
  // Every key under the prefix lies below the prefix's directory part; start the walk there.
  const size_t slash = opts.prefix.rfind('/');
  std::string dir = slash == std::string::npos ? "" : opts.prefix.substr(0, slash + 1);
  if (!dir.empty() && !ValidateKey(std::string_view(dir).substr(0, dir.size() - 1)).ok()) {
    return ListPage{};  // no valid key starts with it (and "../" must not leave the root)
  }
  std::string name_prefix = opts.prefix.substr(dir.size());
  internal::LocalDirCursor cursor(root_fd_, Describe(), std::move(dir), std::move(name_prefix),
                                  opts.max_keys + 1);
  return internal::ListWithCursor(opts, cursor);
}

Status LocalDirStore::Delete(std::string_view key) {
  CIUIC_RETURN_IF_ERROR(CheckKey(key));
  std::vector<UniqueFd> chain;
  Status s = OpenChain(key, &chain);
  if (s.code() == StatusCode::kNotFound) {
    return Status::OK();  // no directory of it, so no object
  }
  CIUIC_RETURN_IF_ERROR(s);
  const std::vector<std::string_view> parts = Components(key);
  if (::unlinkat(chain.back().get(), std::string(parts.back()).c_str(), 0) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR || err == EISDIR) {
      return Status::OK();  // no such object (a directory of keys below it is not one)
    }
    return Errno(err, "delete", key);
  }
  // Remove the directories the object leaves empty, so the tree mirrors the keys; stop at the
  // first that is not (ENOTEMPTY), or that a concurrent Delete removed. chain[i] is the
  // directory parts[i - 1].
  size_t i = chain.size() - 1;
  while (i > 0 &&
         ::unlinkat(chain[i - 1].get(), std::string(parts[i - 1]).c_str(), AT_REMOVEDIR) == 0) {
    --i;
  }
  // Make the removal durable: sync the directory that lost the last entry.
  if (::fsync(chain[i].get()) != 0) {
    return Errno(errno, "sync directory of deleted", key);
  }
  return Status::OK();
}

Result<uint64_t> LocalDirStore::RemoveTempFiles(std::chrono::seconds min_age) {
  const auto now = std::chrono::system_clock::now();
  uint64_t removed = 0;
  // Depth-first over directories; a stack of (descriptor, key prefix) keeps no recursion.
  std::vector<std::pair<UniqueFd, std::string>> stack;
  stack.emplace_back(UniqueFd(::fcntl(root_fd_, F_DUPFD_CLOEXEC, 0)), "");
  while (!stack.empty()) {
    auto [fd, base] = std::move(stack.back());
    stack.pop_back();
    if (!fd.valid()) {
      continue;
    }
    int dfd = ::openat(fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = dfd < 0 ? nullptr : ::fdopendir(dfd);
    if (d == nullptr) {
      if (dfd >= 0) {
        ::close(dfd);
      }
      continue;  // vanished meanwhile
    }
    while (struct dirent* de = ::readdir(d)) {
      std::string_view name = de->d_name;
      if (name == "." || name == "..") {
        continue;
      }
      struct stat st;
      if (::fstatat(fd.get(), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        stack.emplace_back(UniqueFd(::openat(fd.get(), de->d_name,
                                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)),
                           base + std::string(name) + "/");
        continue;
      }
      if (!S_ISREG(st.st_mode) || !name.starts_with(internal::kTempPrefix)) {
        continue;
      }
      auto mtime = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(st.st_mtim.tv_sec) +
              std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
      if (now - mtime < min_age) {
        continue;
      }
      if (::unlinkat(fd.get(), de->d_name, 0) == 0) {
        ++removed;
      } else if (errno != ENOENT) {
        int err = errno;
        ::closedir(d);
        return Errno(err, "remove temp file", base + std::string(name));
      }
    }
    ::closedir(d);
  }
  return removed;
}

}  // namespace ciuic::objstore
