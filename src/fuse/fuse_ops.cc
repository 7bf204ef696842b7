// The FUSE request handlers. Each sends exactly one reply: metadata handlers from the metadata
// pool (Impl::Meta), reads and large writes from the client's async completions.
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "fuse/fuse_impl.h"

namespace ciuic::fuse {
namespace {

using Impl = FuseServer::Impl;

// Writes up to this size go through the client's write buffer (gathered into stripe-sized RPCs)
// on the libfuse thread; larger ones are copied and sent asynchronously.
constexpr size_t kBufferedWriteMax = 128 * 1024;
// Entries asked of the MDS per readdir page.
constexpr uint32_t kReadDirBatch = 512;
// A virtual xattr showing a file's layout (docs/fuse.md).
constexpr const char* kLayoutXattr = "user.ciuic.layout";

Impl* Self(fuse_req_t req) {
  return static_cast<Impl*>(fuse_req_userdata(req));
}

int Errno(const Status& st) {
  const int e = st.ToErrno();
  return e == 0 ? EIO : e;
}

void ReplyErr(fuse_req_t req, const Status& st) {
  // The kernel passes on only ENOSPC: say which server cap was hit ("too many open files in
  // this session (cap 65536)") where the operator can see it.
  if (st.code() == StatusCode::kNoSpace && st.message().find("(cap ") != std::string::npos)
    LOG_WARN("fuse: {}", st.ToString());
  fuse_reply_err(req, Errno(st));
}

void FillStat(const FileStat& s, fuse_ino_t ino, struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = ino;
  st->st_mode = s.mode;
  st->st_nlink = s.nlink;
  st->st_uid = s.uid;
  st->st_gid = s.gid;
  st->st_rdev = s.rdev;
  st->st_size = static_cast<off_t>(s.size);
  st->st_blocks = static_cast<blkcnt_t>(s.blocks);
  st->st_blksize = 1 << 20;
  st->st_atim.tv_sec = s.atime_sec;
  st->st_atim.tv_nsec = s.atime_nsec;
  st->st_mtim.tv_sec = s.mtime_sec;
  st->st_mtim.tv_nsec = s.mtime_nsec;
  st->st_ctim.tv_sec = s.ctime_sec;
  st->st_ctim.tv_nsec = s.ctime_nsec;
}

void ReplyAttr(Impl* self, fuse_req_t req, const FileStat& s) {
  struct stat st;
  FillStat(s, self->InoOf(s), &st);
  fuse_reply_attr(req, &st, self->opts().attr_timeout_s);
}

fuse_entry_param Entry(Impl* self, const FileStat& s) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = self->InoOf(s);
  e.generation = 1;
  FillStat(s, e.ino, &e.attr);
  e.attr_timeout = self->opts().attr_timeout_s;
  e.entry_timeout = self->opts().entry_timeout_s;
  return e;
}

void ReplyEntry(Impl* self, fuse_req_t req, const FileStat& s) {
  fuse_entry_param e = Entry(self, s);
  self->Ref(s);
  if (fuse_reply_entry(req, &e) != 0)
    self->Forget(e.ino, 1);  // the kernel never saw it
}

void ReplyEntryOrErr(Impl* self, fuse_req_t req, const Result<FileStat>& r) {
  if (r.ok()) {
    ReplyEntry(self, req, *r);
  } else {
    ReplyErr(req, r.status());
  }
}

// Flags the client is given for a kernel open: access mode, O_TRUNC, O_APPEND, O_DIRECT.
// The kernel passes explicit offsets for every write (also with O_APPEND).
int ClientFlags(int kflags) {
  return kflags & (O_ACCMODE | O_TRUNC | O_APPEND | O_DIRECT | O_NOATIME);
}

// ---------------------------------------------------------------------------------------------
// Handlers

void OpInit(void* userdata, struct fuse_conn_info* conn) {
  auto* self = static_cast<Impl*>(userdata);
  const uint32_t io = self->opts().max_io_bytes;
  conn->max_write = io;
  conn->max_read = io;  // must equal the -o max_read given to fuse_session_new
  // Background requests (readahead, async direct IO) the kernel keeps in flight: the default
  // 12 starves a queue depth of 32; replies come from async completions, so more cost nothing.
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  conn->max_readahead = std::max<uint32_t>(conn->max_readahead, io);
  // Decision 9: the kernel must not own size and mtime.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
    conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_ASYNC_READ)
    conn->want |= FUSE_CAP_ASYNC_READ;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
    conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // Locks go to the daemon (and the MDS), not the kernel's local lock table.
  if (conn->capable & FUSE_CAP_POSIX_LOCKS)
    conn->want |= FUSE_CAP_POSIX_LOCKS;
  if (conn->capable & FUSE_CAP_FLOCK_LOCKS)
    conn->want |= FUSE_CAP_FLOCK_LOCKS;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  self->Meta(req, [self, req, p, n] {
    auto r = self->client().LookupAt(p, n);
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
      // A negative entry, cached like a positive one for entry_timeout (a create through this
      // mount replaces it at once; other mounts' creates are seen after the timeout).
      fuse_entry_param e;
      std::memset(&e, 0, sizeof(e));
      e.entry_timeout = self->opts().entry_timeout_s;
      fuse_reply_entry(req, &e);
      return;
    }
    ReplyEntryOrErr(self, req, r);
  });
}

void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Self(req)->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  Impl* self = Self(req);
  for (size_t i = 0; i < count; ++i)
    self->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  Impl::Handle* h = fi != nullptr ? Impl::HandleOf(fi) : nullptr;
  if (h == nullptr) {
    // A directory's attributes as this mount's own create/unlink in it left them: no round trip.
    if (auto cached = self->client().CachedAttrAt(id)) {
      ReplyAttr(self, req, *cached);
      return;
    }
  }
  self->Meta(req, [self, req, id, h] {
    auto r = h != nullptr ? h->file->Stat() : self->client().GetAttrAt(id);
    if (r.ok()) {
      ReplyAttr(self, req, *r);
    } else {
      ReplyErr(req, r.status());
    }
  });
}

void OpSetattr(
    fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  Impl::Handle* h = fi != nullptr ? Impl::HandleOf(fi) : nullptr;
  SetAttrRequest r;
  if (to_set & FUSE_SET_ATTR_MODE) {
    r.set_mode = true;
    r.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    r.set_uid = true;
    r.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    r.set_gid = true;
    r.gid = attr->st_gid;
  }
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    r.atime.tv_nsec = UTIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    r.atime = attr->st_atim;
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    r.mtime.tv_nsec = UTIME_NOW;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    r.mtime = attr->st_mtim;
  }
  const bool set_size = to_set & FUSE_SET_ATTR_SIZE;
  const uint64_t size = static_cast<uint64_t>(attr->st_size);
  // ftruncate(2) of an open handle: the kernel checked the handle's access mode.
  // (The kernel adds the mtime of a truncate; setting it as root is what the caller may do.)
  constexpr int kTruncateBits =
      FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
  const bool by_handle_only =
      h != nullptr && (to_set & FUSE_SET_ATTR_SIZE) && (to_set & ~kTruncateBits) == 0;
  self->Meta(
      req,
      [self, req, id, h, r, set_size, size, ino]() mutable {
        if (set_size) {
          if (h != nullptr) {
            Status st = h->file->Truncate(size);
            if (!st.ok())
              return ReplyErr(req, st);
          } else {
            r.set_size = true;
            r.size = size;
          }
          self->ForgetVersion(ino);
        }
        auto res = self->client().SetAttrAt(id, r);
        if (!res.ok())
          return ReplyErr(req, res.status());
        FileStat s = *res;
        if (h != nullptr) {
          auto fs = h->file->Stat();  // with this handle's unflushed size
          if (fs.ok())
            s = *fs;
        }
        ReplyAttr(self, req, s);
      },
      !by_handle_only);
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  self->Meta(req, [self, req, id] {
    auto r = self->client().ReadlinkAt(id);
    if (r.ok()) {
      fuse_reply_readlink(req, r->c_str());
    } else {
      ReplyErr(req, r.status());
    }
  });
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  self->Meta(req, [self, req, p, n, mode, rdev] {
    ReplyEntryOrErr(self, req, self->client().MknodAt(p, n, mode, rdev));
  });
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  self->Meta(req, [self, req, p, n, mode] {
    ReplyEntryOrErr(self, req, self->client().MkdirAt(p, n, mode));
  });
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  self->Meta(req,
             [self, req, p, n] { fuse_reply_err(req, self->client().UnlinkAt(p, n).ToErrno()); });
}

void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  self->Meta(req,
             [self, req, p, n] { fuse_reply_err(req, self->client().RmdirAt(p, n).ToErrno()); });
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  std::string target(link);
  self->Meta(req, [self, req, p, n, target] {
    ReplyEntryOrErr(self, req, self->client().SymlinkAt(target, p, n));
  });
}

void OpRename(fuse_req_t req,
              fuse_ino_t parent,
              const char* name,
              fuse_ino_t newparent,
              const char* newname,
              unsigned int flags) {
  Impl* self = Self(req);
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    fuse_reply_err(req, EINVAL);
    return;
  }
  const FileId p = self->IdOf(parent);
  const FileId np = self->IdOf(newparent);
  std::string n(name);
  std::string nn(newname);
  self->Meta(req, [self, req, p, n, np, nn, flags] {
    fuse_reply_err(req, self->client().RenameAt(p, n, np, nn, flags).ToErrno());
  });
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  const FileId np = self->IdOf(newparent);
  std::string nn(newname);
  self->Meta(req, [self, req, id, np, nn] {
    ReplyEntryOrErr(self, req, self->client().LinkAt(id, np, nn));
  });
}

// Sets the open reply's cache flags and handle.
void FinishOpen(Impl* self,
                fuse_ino_t ino,
                const FileStat& attr,
                std::unique_ptr<File> file,
                struct fuse_file_info* fi) {
  if (fi->flags & O_DIRECT) {
    fi->direct_io = 1;
  } else {
    fi->keep_cache = self->KeepCache(ino, attr.data_version) ? 1 : 0;
  }
  fi->fh = self->AddHandle(std::move(file), ino);
}

void OpOpen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  struct fuse_file_info copy = *fi;
  self->Meta(req, [self, req, id, ino, copy]() mutable {
    FileStat attr;
    auto r = self->client().OpenAt(id, ClientFlags(copy.flags), &attr);
    // The inode the kernel's (cached) dentry named is gone, e.g. unlinked through another
    // mount: ESTALE makes the kernel redo the path walk with a fresh lookup (LOOKUP_REVAL), so
    // open(O_CREAT) of a name deleted and re-created elsewhere works.
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
      fuse_reply_err(req, ESTALE);
      return;
    }
    if (!r.ok())
      return ReplyErr(req, r.status());
    if (copy.flags & O_TRUNC)
      self->ForgetVersion(ino);
    FinishOpen(self, ino, attr, std::move(*r), &copy);
    if (fuse_reply_open(req, &copy) != 0) {
      // Interrupted: the kernel will not release this handle.
      auto h = self->TakeHandle(copy.fh);
      if (h)
        h->file->Close().IgnoreError();  // nobody to report to
    }
  });
}

void OpCreate(
    fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  const FileId p = self->IdOf(parent);
  std::string n(name);
  struct fuse_file_info copy = *fi;
  self->Meta(req, [self, req, p, n, mode, copy]() mutable {
    FileStat attr;
    auto r =
        self->client().CreateAt(p, n, ClientFlags(copy.flags) | (copy.flags & O_EXCL), mode, &attr);
    if (!r.ok())
      return ReplyErr(req, r.status());
    const fuse_ino_t ino = self->InoOf(attr);
    fuse_entry_param e = Entry(self, attr);
    self->Ref(attr);
    self->ForgetVersion(ino);
    FinishOpen(self, ino, attr, std::move(*r), &copy);
    if (fuse_reply_create(req, &e, &copy) != 0) {
      self->Forget(ino, 1);
      auto h = self->TakeHandle(copy.fh);
      if (h)
        h->file->Close().IgnoreError();  // nobody to report to
    }
  });
}

void OpRead(fuse_req_t req, fuse_ino_t, size_t size, off_t off, struct fuse_file_info* fi) {
  Impl::Handle* h = Impl::HandleOf(fi);
  char* buf = new (std::nothrow) char[size];
  if (buf == nullptr) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  h->file->PreadAsync(buf, size, static_cast<uint64_t>(off), [req, buf](Result<size_t> r) {
    if (r.ok()) {
      fuse_reply_buf(req, buf, *r);
    } else {
      ReplyErr(req, r.status());
    }
    delete[] buf;
  });
}

void OpWrite(fuse_req_t req,
             fuse_ino_t,
             const char* data,
             size_t size,
             off_t off,
             struct fuse_file_info* fi) {
  Impl::Handle* h = Impl::HandleOf(fi);
  if (size <= kBufferedWriteMax) {
    auto r = h->file->Pwrite(data, size, static_cast<uint64_t>(off));
    if (r.ok()) {
      fuse_reply_write(req, *r);
    } else {
      ReplyErr(req, r.status());
    }
    return;
  }
  // `data` lives in libfuse's receive buffer only until we return: the async write needs a copy.
  char* copy = new (std::nothrow) char[size];
  if (copy == nullptr) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  std::memcpy(copy, data, size);
  h->file->PwriteAsync(copy, size, static_cast<uint64_t>(off), [req, copy](Result<size_t> r) {
    if (r.ok()) {
      fuse_reply_write(req, *r);
    } else {
      ReplyErr(req, r.status());
    }
    delete[] copy;
  });
}

void OpFlush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  Impl::Handle* h = Impl::HandleOf(fi);
  // close(2) drops the closing process's fcntl locks on the file (POSIX).
  const bool unlock = self->TakeLockOwner(LockKind::kPosix, ino, fi->lock_owner);
  const uint64_t owner = fi->lock_owner;
  if (!unlock) {
    // Most closes have nothing to send: answer here rather than hand the request to the pool.
    if (auto st = h->file->FlushIfIdle()) {
      fuse_reply_err(req, st->ToErrno());
      return;
    }
  }
  self->Meta(
      req,
      [self, req, h, ino, unlock, owner] {
        if (unlock) {
          auto r = self->client().LockAt(self->IdOf(ino), LockKind::kPosix, owner,
                                         LockRange{LockType::kUnlock, 0, UINT64_MAX, 0}, nullptr);
          if (!r.ok())
            LOG_WARN("fuse: unlock at close: {}", r.status().ToString());
        }
        fuse_reply_err(req, h->file->Flush().ToErrno());
      },
      false);
}

void OpRelease(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  const uint64_t fh = fi->fh;
  // The last close of an open file description drops its flock lock.
  const bool unlock =
      fi->flock_release != 0 && self->TakeLockOwner(LockKind::kFlock, ino, fi->lock_owner);
  const uint64_t owner = fi->lock_owner;
  self->Meta(
      req,
      [self, req, fh, ino, unlock, owner] {
        if (unlock) {
          auto r = self->client().LockAt(self->IdOf(ino), LockKind::kFlock, owner,
                                         LockRange{LockType::kUnlock, 0, UINT64_MAX, 0}, nullptr);
          if (!r.ok())
            LOG_WARN("fuse: flock release: {}", r.status().ToString());
        }
        auto h = self->TakeHandle(fh);
        Status st = h ? h->file->Close() : Status::OK();
        if (!st.ok())
          LOG_WARN("fuse: close: {}", st.ToString());
        fuse_reply_err(req, 0);  // release errors cannot reach the application
      },
      false);
}

void OpFsync(fuse_req_t req, fuse_ino_t, int, struct fuse_file_info* fi) {
  Impl* self = Self(req);
  Impl::Handle* h = Impl::HandleOf(fi);
  self->Meta(
      req, [req, h] { fuse_reply_err(req, h->file->Fsync().ToErrno()); }, false);
}

void OpFallocate(fuse_req_t req,
                 fuse_ino_t ino,
                 int mode,
                 off_t offset,
                 off_t length,
                 struct fuse_file_info* fi) {
  Impl* self = Self(req);
  if (mode & ~FALLOC_FL_KEEP_SIZE) {
    fuse_reply_err(req, EOPNOTSUPP);
    return;
  }
  Impl::Handle* h = Impl::HandleOf(fi);
  self->Meta(
      req,
      [self, req, h, ino, mode, offset, length] {
        Status st = h->file->Allocate(static_cast<uint64_t>(offset), static_cast<uint64_t>(length),
                                      mode & FALLOC_FL_KEEP_SIZE);
        if (st.ok())
          self->ForgetVersion(ino);
        fuse_reply_err(req, st.ToErrno());
      },
      false);
}

void OpOpendir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  fi->fh = 0;
  fuse_reply_open(req, fi);
}

// readdir and readdirplus. With `plus` every entry but "." and ".." carries its attributes and
// counts as a lookup (the kernel will forget it).
void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  self->Meta(req, [self, req, id, size, off, plus] {
    // The MDS sends "." (cookie 1) and ".." (cookie 2) first.
    auto page = self->client().ReadDirAt(
        id, static_cast<uint64_t>(off),
        std::min<uint32_t>(kReadDirBatch, static_cast<uint32_t>(size / (plus ? 160 : 24) + 1)),
        plus);
    if (!page.ok())
      return ReplyErr(req, page.status());
    std::vector<char> buf(size);
    size_t used = 0;
    const uint64_t root_seq = self->IdOf(FUSE_ROOT_ID).seq;
    // Adds one entry; false when it does not fit.
    auto add = [&](const DirEntry& e) {
      const uint64_t ino_no = e.ino == root_seq ? FUSE_ROOT_ID : e.ino;
      const off_t next = static_cast<off_t>(e.cookie);
      size_t need;
      if (!plus) {
        struct stat st;
        std::memset(&st, 0, sizeof(st));
        st.st_ino = ino_no;
        st.st_mode = e.type;
        need = fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(), &st, next);
      } else {
        fuse_entry_param ep;
        std::memset(&ep, 0, sizeof(ep));
        const bool dot = e.name == "." || e.name == "..";
        if (dot || !e.has_attr) {
          ep.attr.st_ino = ino_no;  // ino 0: the kernel makes no dentry of it
          ep.attr.st_mode = e.type;
        } else {
          ep = Entry(self, e.attr);
        }
        need =
            fuse_add_direntry_plus(req, buf.data() + used, size - used, e.name.c_str(), &ep, next);
        if (need <= size - used && ep.ino != 0)
          self->Ref(e.attr);
      }
      if (need > size - used)
        return false;
      used += need;
      return true;
    };
    // Entries whose names share a hash share a cookie, and the MDS resumes after a whole
    // cookie: never end a reply inside such a group (drop the group's start instead).
    uint64_t last_cookie = 0;
    size_t group_start = 0;
    size_t group_first = 0;  // index of the group's first entry
    const auto& entries = page->entries;
    for (size_t k = 0; k < entries.size(); ++k) {
      const DirEntry& e = entries[k];
      if (e.cookie != last_cookie) {
        group_start = used;
        group_first = k;
      }
      if (!add(e)) {
        if (e.cookie == last_cookie && group_start > 0) {
          used = group_start;
          for (size_t u = group_first; plus && u < k; ++u) {
            if (entries[u].has_attr && entries[u].name != "." && entries[u].name != "..")
              self->Forget(self->InoOf(entries[u].attr), 1);
          }
        }
        break;
      }
      last_cookie = e.cookie;
    }
    fuse_reply_buf(req, buf.data(), used);
  });
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  Readdir(req, ino, size, off, false);
}

void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info*) {
  Readdir(req, ino, size, off, true);
}

void OpReleasedir(fuse_req_t req, fuse_ino_t, struct fuse_file_info*) {
  fuse_reply_err(req, 0);
}

void OpFsyncdir(fuse_req_t req, fuse_ino_t ino, int, struct fuse_file_info*) {
  // The MDS acknowledges namespace changes before its log is synced (in groups); fsync of a
  // directory asks for that sync, which makes this and every earlier change durable.
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  self->Meta(req,
             [self, req, id] { fuse_reply_err(req, self->client().FsyncDirAt(id).ToErrno()); });
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  Impl* self = Self(req);
  self->Meta(req, [self, req] {
    auto r = self->client().Statfs();
    if (!r.ok())
      return ReplyErr(req, r.status());
    struct statvfs v;
    std::memset(&v, 0, sizeof(v));
    const uint64_t bs = r->block_size == 0 ? 4096 : r->block_size;
    v.f_bsize = bs;
    v.f_frsize = bs;
    v.f_blocks = r->total_bytes / bs;
    v.f_bfree = r->free_bytes / bs;
    v.f_bavail = r->avail_bytes / bs;
    v.f_files = r->total_inodes;
    v.f_ffree = r->free_inodes;
    v.f_favail = r->free_inodes;
    v.f_namemax = r->name_max;
    fuse_reply_statfs(req, &v);
  });
}

// security.capability is asked for on every write (to drop file capabilities): answer it here.
bool IsCapability(const std::string& name) {
  return name == "security.capability";
}

void OpSetxattr(
    fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  Impl* self = Self(req);
  std::string n(name);
  if (IsCapability(n)) {
    fuse_reply_err(req, EOPNOTSUPP);
    return;
  }
  const FileId id = self->IdOf(ino);
  std::string v(value, size);
  if (n == kLayoutXattr) {
    // Sets the layout of an empty file or a directory's default, as `ciuic setstripe`.
    auto layout = ParseLayoutXattr(v);
    if (!layout.ok())
      return (void)fuse_reply_err(req, EINVAL);
    FileLayout l = *layout;
    self->Meta(req, [self, req, id, l] {
      fuse_reply_err(req, self->client().SetLayoutAt(id, l).ToErrno());
    });
    return;
  }
  self->Meta(req, [self, req, id, n, v, flags] {
    Status st = self->client().SetXattrAt(id, n, v, flags);
    if (st.code() == StatusCode::kNotFound && (flags & XATTR_REPLACE))
      return (void)fuse_reply_err(req, ENODATA);
    fuse_reply_err(req, st.ToErrno());
  });
}

void ReplyXattr(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Impl* self = Self(req);
  std::string n(name);
  if (IsCapability(n)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  const FileId id = self->IdOf(ino);
  self->Meta(req, [self, req, id, n, size] {
    if (n == kLayoutXattr) {
      auto l = self->client().GetLayoutAt(id);
      if (!l.ok())
        return ReplyErr(req, l.status());
      if (l->empty())
        return (void)fuse_reply_err(req, ENODATA);
      return ReplyXattr(req, l->ToString(), size);
    }
    auto r = self->client().GetXattrAt(id, n);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kNotFound)
        return (void)fuse_reply_err(req, ENODATA);
      return ReplyErr(req, r.status());
    }
    ReplyXattr(req, *r, size);
  });
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Impl* self = Self(req);
  const FileId id = self->IdOf(ino);
  self->Meta(req, [self, req, id, size] {
    auto r = self->client().ListXattrAt(id);
    if (!r.ok())
      return ReplyErr(req, r.status());
    std::string all;
    for (const std::string& n : *r) {
      all += n;
      all.push_back('\0');
    }
    ReplyXattr(req, all, size);
  });
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Impl* self = Self(req);
  std::string n(name);
  if (IsCapability(n)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  const FileId id = self->IdOf(ino);
  self->Meta(req, [self, req, id, n] {
    Status st = self->client().RemoveXattrAt(id, n);
    if (st.code() == StatusCode::kNotFound)
      return (void)fuse_reply_err(req, ENODATA);
    fuse_reply_err(req, st.ToErrno());
  });
}

}  // namespace

Result<FileLayout> ParseLayoutXattr(std::string v) {
  while (!v.empty() && (v.back() == '\n' || v.back() == '\0' || v.back() == ' '))
    v.pop_back();
  uint64_t count = 0;
  uint64_t stripe_size = 1 << 20;
  size_t pos = 0;
  while (pos < v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos)
      comma = v.size();
    const std::string item = v.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return Status::InvalidArgument("layout: want count=N[,size=S]");
    const std::string key = item.substr(0, eq);
    CIUIC_ASSIGN_OR_RETURN(uint64_t num, ParseSize(item.substr(eq + 1)));
    if (key == "count") {
      count = num;
    } else if (key == "size") {
      stripe_size = num;
    } else {
      return Status::InvalidArgument("layout: unknown key " + key);
    }
  }
  if (count == 0 || count > 64 || stripe_size == 0 || stripe_size > (uint64_t{1} << 31))
    return Status::InvalidArgument("layout: bad count or size");
  FileLayout l;
  l.pattern = 1;
  l.components.push_back(LayoutComponent{
      0, 0, kLayoutEof, static_cast<uint32_t>(stripe_size), static_cast<uint32_t>(count), {}, 0});
  return l;
}

void FuseServer::Impl::Meta(fuse_req_t req, std::function<void()> fn, bool as_caller) {
  if (!as_caller) {
    if (!pool_->Submit(std::move(fn)))
      fuse_reply_err(req, EIO);
    return;
  }
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const uint32_t uid = ctx->uid;
  const uint32_t gid = ctx->gid;
  const bool ok = pool_->Submit([req, uid, gid, fn = std::move(fn)] {
    std::vector<uint32_t> groups;
    if (uid != 0) {
      gid_t list[64];
      const int n = fuse_req_getgroups(req, 64, list);
      for (int i = 0; i < n && i < 64; ++i)
        groups.push_back(list[i]);
    }
    ScopedCaller who(uid, gid, std::move(groups));
    fn();
  });
  if (!ok)
    fuse_reply_err(req, EIO);
}

fuse_lowlevel_ops FuseServer::Impl::Ops() {
  fuse_lowlevel_ops ops;
  std::memset(&ops, 0, sizeof(ops));
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.forget_multi = OpForgetMulti;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mknod = OpMknod;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.link = OpLink;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.statfs = OpStatfs;
  ops.setxattr = OpSetxattr;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  ops.create = OpCreate;
  ops.fallocate = OpFallocate;
  ops.getlk = OpGetlk;
  ops.setlk = OpSetlk;
  ops.flock = OpFlock;
  return ops;
}

}  // namespace ciuic::fuse
