// `ciuic`: the command-line tool. Cluster control (up/down/status) and file commands that talk
// to a cluster through libciuic. Every failure prints one line "ciuic: ..." and exits non-zero.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cache_cmd.h"
#include "ciuic/client.h"
#include "client_keys_cmd.h"
#include "cluster_cmd.h"
#include "common/config.h"
#include "common/fid.h"
#include "hsm_cmd.h"
#include "hsm_policy_cmd.h"
#include "mount_cmd.h"
#include "mount_path.h"
#include "pack_cmd.h"
#include "progress.h"
#include "repo_cmd.h"
#include "top_cmd.h"

namespace ciuic::cli {
namespace fs = std::filesystem;
namespace {

std::string g_cluster_file;

int Fail(const std::string& msg) {
  fmt::print(stderr, "ciuic: {}\n", msg);
  return 1;
}

int Fail(const Status& s) {
  // Messages already name the path; drop the code name except for the unusual ones.
  switch (s.code()) {
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kNotADirectory:
    case StatusCode::kIsADirectory:
    case StatusCode::kNotEmpty:
    case StatusCode::kPermissionDenied:
    case StatusCode::kInvalidArgument:
    case StatusCode::kNameTooLong:
      return Fail(s.message());
    default:
      return Fail(s.ToString());
  }
}

Result<std::unique_ptr<Client>> Connect() {
  auto path = FindClusterFile(g_cluster_file);
  if (!path.ok())
    return path.status();
  ClientOptions o;
  o.cluster_file = *path;
  auto c = Client::Connect(o);
  if (!c.ok() && c.status().code() == StatusCode::kUnavailable) {
    return Status::Unavailable(fmt::format(
        "cluster not running (cannot reach the MDS named in {}): start it with `ciuic cluster up "
        "DIR`",
        *path));
  }
  if (!c.ok() && c.status().code() == StatusCode::kPermissionDenied) {
    return Status::PermissionDenied(
        fmt::format("the MDS refused the secret in {}: wrong cluster file?", *path));
  }
  return c;
}

// Normalizes a cluster path: must be absolute; strips a "ciuic:" prefix and trailing slashes.
Result<std::string> RemotePath(std::string p) {
  if (p.rfind("ciuic:", 0) == 0)
    p = p.substr(6);
  if (p.empty() || p[0] != '/') {
    return Status::InvalidArgument(fmt::format("'{}': cluster paths must be absolute (/a/b)", p));
  }
  while (p.size() > 1 && p.back() == '/')
    p.pop_back();
  return p;
}

// A path argument of setstripe/getstripe: a cluster path, or a local path inside a ciuic FUSE
// mount (then the mount's object, checked to be the same inode on the cluster we talk to).
Result<std::string> ClusterPathArg(Client& c, const std::string& raw) {
  if (raw.rfind("ciuic:", 0) != 0) {
    if (auto m = ResolveMountedPath(raw)) {
      struct stat lst;
      if (m->cluster_path != "/" && ::lstat(raw.c_str(), &lst) == 0) {
        auto st = c.Lstat(m->cluster_path);
        if (!st.ok() || st->ino != lst.st_ino) {
          return Status::InvalidArgument(fmt::format(
              "'{}' is inside the ciuic mount at {}, which is not the cluster named by the "
              "cluster file: pass --cluster",
              raw, m->mountpoint));
        }
      }
      return m->cluster_path;
    }
  }
  return RemotePath(raw);
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string Basename(const std::string& p) {
  auto s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string ModeString(uint32_t mode) {
  std::string s = "?---------";
  switch (mode & S_IFMT) {
    case S_IFREG:
      s[0] = '-';
      break;
    case S_IFDIR:
      s[0] = 'd';
      break;
    case S_IFLNK:
      s[0] = 'l';
      break;
    case S_IFIFO:
      s[0] = 'p';
      break;
    case S_IFCHR:
      s[0] = 'c';
      break;
    case S_IFBLK:
      s[0] = 'b';
      break;
    case S_IFSOCK:
      s[0] = 's';
      break;
  }
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (mode & (1u << (8 - i)))
      s[i + 1] = rwx[i];
  }
  if (mode & S_ISUID)
    s[3] = (mode & S_IXUSR) ? 's' : 'S';
  if (mode & S_ISGID)
    s[6] = (mode & S_IXGRP) ? 's' : 'S';
  if (mode & S_ISVTX)
    s[9] = (mode & S_IXOTH) ? 't' : 'T';
  return s;
}

std::string TimeString(int64_t sec) {
  time_t t = static_cast<time_t>(sec);
  struct tm tm;
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// ------------------------------------------------------------------------------------------
// Copying.

constexpr size_t kChunk = size_t{8} << 20;

// Runs `copy_one(buf, len, offset)` over [0, size) in kChunk pieces on up to `threads` threads,
// each with its own aligned buffer. Stops at the first error and returns it.
Status CopyChunks(uint64_t size,
                  int threads,
                  Progress* progress,
                  const std::function<Status(char*, size_t, uint64_t)>& copy_one) {
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    std::unique_ptr<char, decltype(&std::free)> buf(
        static_cast<char*>(std::aligned_alloc(4096, kChunk)), &std::free);
    for (;;) {
      uint64_t off = next.fetch_add(kChunk);
      if (off >= size)
        return;
      size_t len = static_cast<size_t>(std::min<uint64_t>(kChunk, size - off));
      Status s = copy_one(buf.get(), len, off);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok())
          first = s;
        next.store(size);
        return;
      }
      if (progress)
        progress->Add(len);
    }
  };
  int n = static_cast<int>(std::min<uint64_t>(threads, std::max<uint64_t>(1, size / kChunk)));
  std::vector<std::thread> ts;
  for (int i = 1; i < n; ++i)
    ts.emplace_back(worker);
  worker();
  for (auto& t : ts)
    t.join();
  return first;
}

// Copies local file `src` to cluster path `dst` with `threads` writers in parallel.
Status PutFile(
    Client& c, const std::string& src, const std::string& dst, int threads, Progress* progress) {
  int fd = ::open(src.c_str(), O_RDONLY);
  if (fd < 0)
    return Status::FromErrno(errno, src);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, src);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format("{}: not a regular file", src));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  OpenOptions oo;
  oo.size_hint = static_cast<uint64_t>(st.st_size);
  auto f = c.Open(dst, O_CREAT | O_WRONLY | O_TRUNC, st.st_mode & 07777, oo);
  if (!f.ok()) {
    ::close(fd);
    return f.status();
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  Status first = CopyChunks(size, threads, progress, [&](char* buf, size_t len, uint64_t off) {
    ssize_t r = ::pread(fd, buf, len, static_cast<off_t>(off));
    if (r != static_cast<ssize_t>(len)) {
      return r < 0 ? Status::FromErrno(errno, src)
                   : Status::IoError(src + ": file shrank while copying");
    }
    auto w = (*f)->Pwrite(buf, len, off);
    return w.ok() ? Status::OK() : w.status();
  });
  ::close(fd);
  // put is durable when it returns: a crash of any server afterwards loses nothing.
  if (first.ok())
    first = (*f)->Fsync();
  Status cs = (*f)->Close();
  if (!first.ok())
    return first;
  return cs;
}

Status GetFile(
    Client& c, const std::string& src, const std::string& dst, int threads, Progress* progress) {
  auto f = c.Open(src, O_RDONLY);
  if (!f.ok())
    return f.status();
  auto st = (*f)->Stat();
  if (!st.ok())
    return st.status();
  if (!st->is_reg())
    return Status::InvalidArgument(src + ": not a regular file");
  int fd = ::open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC, st->mode & 0777);
  if (fd < 0)
    return Status::FromErrno(errno, dst);
  const uint64_t size = st->size;
  Status first = CopyChunks(size, threads, progress, [&](char* buf, size_t len, uint64_t off) {
    auto r = (*f)->Pread(buf, len, off);
    if (!r.ok())
      return r.status();
    if (*r != len)
      return Status::IoError(fmt::format("{}: short read at {}", src, off));
    if (::pwrite(fd, buf, len, static_cast<off_t>(off)) != static_cast<ssize_t>(len))
      return Status::FromErrno(errno, dst);
    return Status::OK();
  });
  Status cs = (*f)->Close();
  if (::close(fd) != 0 && first.ok())
    first = Status::FromErrno(errno, dst);
  if (!first.ok())
    return first;
  return cs;
}

// ------------------------------------------------------------------------------------------
// Commands.

int CmdLs(const std::vector<std::string>& paths, bool longfmt) {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  int rc = 0;
  std::vector<std::string> ps = paths.empty() ? std::vector<std::string>{"/"} : paths;
  for (const auto& raw : ps) {
    auto p = RemotePath(raw);
    if (!p.ok()) {
      rc = Fail(p.status());
      continue;
    }
    auto st = (*c)->Stat(*p);
    if (!st.ok()) {
      rc = Fail(st.status());
      continue;
    }
    auto print_one = [&](const std::string& name, const FileStat& s, const std::string& full) {
      if (!longfmt) {
        fmt::print("{}\n", name);
        return;
      }
      std::string extra;
      if ((s.mode & S_IFMT) == S_IFLNK) {
        auto t = (*c)->Readlink(full);
        if (t.ok())
          extra = " -> " + *t;
      }
      fmt::print("{} {:>3} {:>5} {:>5} {:>12} {} {}{}\n", ModeString(s.mode), s.nlink, s.uid, s.gid,
                 s.size, TimeString(s.mtime_sec), name, extra);
    };
    if (!st->is_dir()) {
      print_one(*p, *st, *p);
      continue;
    }
    if (ps.size() > 1)
      fmt::print("{}:\n", *p);
    uint64_t cookie = 0;
    std::vector<DirEntry> all;
    for (;;) {
      auto page = (*c)->ReadDirPage(*p, cookie, 4096, longfmt);
      if (!page.ok()) {
        rc = Fail(page.status());
        break;
      }
      for (auto& e : page->entries)
        all.push_back(std::move(e));
      cookie = page->next_cookie;
      if (page->eof)
        break;
    }
    std::sort(all.begin(), all.end(),
              [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    for (const auto& e : all) {
      if (longfmt) {
        FileStat s = e.attr;
        if (!e.has_attr) {
          auto l = (*c)->Lstat(Join(*p, e.name));
          if (!l.ok())
            continue;  // deleted meanwhile
          s = *l;
        }
        print_one(e.name, s, Join(*p, e.name));
      } else {
        fmt::print("{}\n", e.name);
      }
    }
  }
  return rc;
}

int CmdStat(const std::vector<std::string>& paths) {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  int rc = 0;
  for (const auto& raw : paths) {
    auto p = RemotePath(raw);
    if (!p.ok()) {
      rc = Fail(p.status());
      continue;
    }
    auto s = (*c)->Lstat(*p);
    if (!s.ok()) {
      rc = Fail(s.status());
      continue;
    }
    const char* type = s->is_dir()       ? "directory"
                       : s->is_reg()     ? "regular file"
                       : s->is_symlink() ? "symbolic link"
                                         : "special file";
    fmt::print("  File: {}\n  Size: {:<12} Blocks: {:<10} {}\n", *p, s->size, s->blocks, type);
    fmt::print("   FID: {}  Inode: {}  Links: {}  Data version: {}\n",
               Fid{s->ino, s->fid_mds, s->fid_ver}.ToString(), s->ino, s->nlink, s->data_version);
    fmt::print("Access: ({:04o}/{})  Uid: {}  Gid: {}\n", s->mode & 07777, ModeString(s->mode),
               s->uid, s->gid);
    fmt::print("Access: {}.{:09d}\nModify: {}.{:09d}\nChange: {}.{:09d}\n",
               TimeString(s->atime_sec), s->atime_nsec, TimeString(s->mtime_sec), s->mtime_nsec,
               TimeString(s->ctime_sec), s->ctime_nsec);
    if (s->no_node_cache)
      fmt::print("Node cache: excluded\n");
  }
  return rc;
}

int CmdMkdir(const std::vector<std::string>& paths, bool parents, const std::string& mode_s) {
  uint32_t mode = 0755;
  if (!mode_s.empty()) {
    char* end = nullptr;
    unsigned long m = std::strtoul(mode_s.c_str(), &end, 8);
    if (*end != '\0' || m > 07777)
      return Fail(fmt::format("bad mode '{}': expected octal like 755", mode_s));
    mode = static_cast<uint32_t>(m);
  }
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  int rc = 0;
  for (const auto& raw : paths) {
    auto p = RemotePath(raw);
    if (!p.ok()) {
      rc = Fail(p.status());
      continue;
    }
    Status s = parents ? (*c)->MkdirAll(*p, mode) : (*c)->Mkdir(*p, mode);
    if (!s.ok())
      rc = Fail(s);
  }
  return rc;
}

Status RemoveTree(Client& c, const std::string& p) {
  auto st = c.Lstat(p);
  if (!st.ok())
    return st.status();
  if (!st->is_dir())
    return c.Unlink(p);
  for (;;) {
    auto page = c.ReadDirPage(p, 0, 4096);
    if (!page.ok())
      return page.status();
    if (page->entries.empty())
      break;
    for (const auto& e : page->entries) {
      CIUIC_RETURN_IF_ERROR(RemoveTree(c, Join(p, e.name)));
    }
  }
  return c.Rmdir(p);
}

int CmdRm(const std::vector<std::string>& paths, bool recursive, bool force) {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  int rc = 0;
  for (const auto& raw : paths) {
    auto p = RemotePath(raw);
    if (!p.ok()) {
      rc = Fail(p.status());
      continue;
    }
    if (*p == "/") {
      rc = Fail("refusing to remove /");
      continue;
    }
    Status s;
    if (recursive) {
      s = RemoveTree(**c, *p);
    } else {
      auto st = (*c)->Lstat(*p);
      if (st.ok() && st->is_dir()) {
        s = Status::IsADirectory(fmt::format("{}: is a directory (use rm -r)", *p));
      } else {
        s = (*c)->Unlink(*p);
      }
    }
    if (!s.ok() && !(force && s.code() == StatusCode::kNotFound))
      rc = Fail(s);
  }
  return rc;
}

int CmdMv(const std::string& from, const std::string& to) {
  auto f = RemotePath(from);
  auto t = RemotePath(to);
  if (!f.ok())
    return Fail(f.status());
  if (!t.ok())
    return Fail(t.status());
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  std::string dst = *t;
  auto st = (*c)->Stat(dst);
  if (st.ok() && st->is_dir()) {
    auto src_st = (*c)->Lstat(*f);
    if (src_st.ok() && !(src_st->is_dir() && src_st->ino == st->ino))
      dst = Join(dst, Basename(*f));
  }
  Status s = (*c)->Rename(*f, dst);
  return s.ok() ? 0 : Fail(s);
}

int CmdLn(const std::string& target, const std::string& link, bool symbolic) {
  auto l = RemotePath(link);
  if (!l.ok())
    return Fail(l.status());
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  Status s;
  if (symbolic) {
    s = (*c)->Symlink(target, *l);
  } else {
    auto t = RemotePath(target);
    if (!t.ok())
      return Fail(t.status());
    s = (*c)->Link(*t, *l);
  }
  return s.ok() ? 0 : Fail(s);
}

int CmdPut(const std::vector<std::string>& args, bool recursive, int threads) {
  if (args.size() < 2)
    return Fail("put needs LOCAL... DEST");
  auto dest = RemotePath(args.back());
  if (!dest.ok())
    return Fail(dest.status());
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  std::vector<std::string> srcs(args.begin(), args.end() - 1);
  auto dst_st = (*c)->Stat(*dest);
  bool dest_is_dir = dst_st.ok() && dst_st->is_dir();
  if (srcs.size() > 1 && !dest_is_dir) {
    return Fail(fmt::format("{}: not a directory (several sources need a directory)", *dest));
  }
  // Plan: (local file, remote path); directories are created as found.
  std::vector<std::pair<std::string, std::string>> files;
  uint64_t total = 0;
  for (const auto& src : srcs) {
    std::error_code ec;
    auto st = fs::status(src, ec);
    if (ec || !fs::exists(st))
      return Fail(fmt::format("{}: no such file or directory", src));
    std::string base = fs::path(src).filename().string();
    if (base.empty())
      base = fs::path(src).parent_path().filename().string();
    std::string target = dest_is_dir ? Join(*dest, base) : *dest;
    if (fs::is_directory(st)) {
      if (!recursive)
        return Fail(fmt::format("{}: is a directory (use put -r)", src));
      Status s = (*c)->MkdirAll(target, 0755);
      if (!s.ok())
        return Fail(s);
      for (auto it = fs::recursive_directory_iterator(src, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::string rel = fs::relative(it->path(), src).string();
        std::string rt = Join(target, rel);
        if (it->is_directory()) {
          s = (*c)->MkdirAll(rt, 0755);
          if (!s.ok())
            return Fail(s);
        } else if (it->is_regular_file()) {
          files.emplace_back(it->path().string(), rt);
          total += it->file_size();
        }
      }
      if (ec)
        return Fail(fmt::format("{}: {}", src, ec.message()));
    } else {
      files.emplace_back(src, target);
      total += fs::file_size(src, ec);
    }
  }
  Progress progress("put", total);
  Status first;
  if (files.size() == 1) {
    first = PutFile(**c, files[0].first, files[0].second, threads, &progress);
  } else {
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; ++i) {
      ts.emplace_back([&] {
        for (size_t k; (k = next.fetch_add(1)) < files.size();) {
          Status s = PutFile(**c, files[k].first, files[k].second, 1, &progress);
          if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (first.ok())
              first = s;
          }
        }
      });
    }
    for (auto& t : ts)
      t.join();
  }
  progress.Finish();
  if (!first.ok())
    return Fail(first);
  if (!::isatty(STDERR_FILENO)) {
    fmt::print(stderr, "put: {} files, {} in {:.2f} s ({}/s)\n", files.size(),
               FormatSize(progress.bytes()), progress.Seconds(),
               FormatSize(static_cast<uint64_t>(static_cast<double>(progress.bytes()) /
                                                std::max(progress.Seconds(), 1e-6))));
  }
  return 0;
}

int CmdGet(const std::vector<std::string>& args, bool recursive, int threads) {
  if (args.size() < 2)
    return Fail("get needs REMOTE... LOCAL");
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  std::string local = args.back();
  std::error_code ec;
  bool local_is_dir = fs::is_directory(local, ec);
  std::vector<std::pair<std::string, std::string>> files;
  uint64_t total = 0;
  std::function<Status(const std::string&, const std::string&)> walk =
      [&](const std::string& rp, const std::string& lp) -> Status {
    auto st = (*c)->Stat(rp);
    if (!st.ok())
      return st.status();
    if (st->is_dir()) {
      if (!recursive)
        return Status::IsADirectory(rp + ": is a directory (use get -r)");
      fs::create_directories(lp, ec);
      if (ec)
        return Status::IoError(fmt::format("{}: {}", lp, ec.message()));
      auto entries = (*c)->ReadDir(rp);
      if (!entries.ok())
        return entries.status();
      for (const auto& e : *entries)
        CIUIC_RETURN_IF_ERROR(walk(Join(rp, e.name), (fs::path(lp) / e.name).string()));
      return Status::OK();
    }
    files.emplace_back(rp, lp);
    total += st->size;
    return Status::OK();
  };
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    auto rp = RemotePath(args[i]);
    if (!rp.ok())
      return Fail(rp.status());
    std::string lp = local_is_dir ? (fs::path(local) / Basename(*rp)).string() : local;
    Status s = walk(*rp, lp);
    if (!s.ok())
      return Fail(s);
  }
  Progress progress("get", total);
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  if (files.size() == 1) {
    first = GetFile(**c, files[0].first, files[0].second, threads, &progress);
  } else {
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; ++i) {
      ts.emplace_back([&] {
        for (size_t k; (k = next.fetch_add(1)) < files.size();) {
          Status s = GetFile(**c, files[k].first, files[k].second, 1, &progress);
          if (!s.ok()) {
            std::lock_guard<std::mutex> lock(mu);
            if (first.ok())
              first = s;
          }
        }
      });
    }
    for (auto& t : ts)
      t.join();
  }
  progress.Finish();
  return first.ok() ? 0 : Fail(first);
}

int CmdCat(const std::vector<std::string>& paths) {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  std::vector<char> buf(kChunk);
  for (const auto& raw : paths) {
    auto p = RemotePath(raw);
    if (!p.ok())
      return Fail(p.status());
    auto f = (*c)->Open(*p, O_RDONLY);
    if (!f.ok())
      return Fail(f.status());
    for (;;) {
      auto r = (*f)->Read(buf.data(), buf.size());
      if (!r.ok())
        return Fail(r.status());
      if (*r == 0)
        break;
      if (std::fwrite(buf.data(), 1, *r, stdout) != *r)
        return Fail("write to stdout failed");
    }
    (void)(*f)->Close().ok();
  }
  std::fflush(stdout);
  return 0;
}

// Parses "64M:1,1G:4,EOF:16" (component end : stripe count) into components.
Result<FileLayout> ParseComponents(const std::string& spec, uint32_t stripe_size) {
  FileLayout l;
  l.pattern = 1;
  uint64_t start = 0;
  size_t pos = 0;
  uint32_t id = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return Status::InvalidArgument(fmt::format("bad component '{}': expected END:COUNT", item));
    }
    std::string end_s = item.substr(0, colon);
    uint64_t end = kLayoutEof;
    if (end_s != "EOF" && end_s != "eof" && end_s != "-1") {
      CIUIC_ASSIGN_OR_RETURN(end, ParseSize(end_s));
    }
    const std::string count_s = item.substr(colon + 1);  // outlives `e`, which points into it
    char* e = nullptr;
    unsigned long count = std::strtoul(count_s.c_str(), &e, 10);
    if (count_s.empty() || *e != '\0' || count == 0) {
      return Status::InvalidArgument(fmt::format("bad stripe count in '{}'", item));
    }
    LayoutComponent comp;
    comp.id = id++;
    comp.start = start;
    comp.end = end;
    comp.stripe_size = stripe_size;
    comp.stripe_count = static_cast<uint32_t>(count);
    l.components.push_back(comp);
    start = end;
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  CIUIC_RETURN_IF_ERROR(l.Validate());
  return l;
}

int CmdSetstripe(const std::string& raw,
                 int count,
                 const std::string& size_s,
                 const std::string& comps,
                 int replicas) {
  if (replicas < 0 || replicas > static_cast<int>(kMaxReplicas))
    return Fail(fmt::format("-r must be 1 to {}", kMaxReplicas));
  if (replicas > 0 && count <= 0 && comps.empty())
    count = 1;
  uint32_t stripe_size = kDefaultStripeSize;
  if (!size_s.empty()) {
    auto s = ParseSize(size_s);
    if (!s.ok())
      return Fail(s.status());
    if (*s > (uint64_t{1} << 32))
      return Fail(fmt::format("bad stripe size '{}': at most 4 GiB", size_s));
    stripe_size = static_cast<uint32_t>(*s);
  }
  FileLayout layout;
  if (!comps.empty()) {
    auto l = ParseComponents(comps, stripe_size);
    if (!l.ok())
      return Fail(l.status());
    layout = *l;
  } else {
    if (count <= 0)
      return Fail("setstripe needs -c COUNT (or --components)");
    layout.pattern = 1;
    layout.components.push_back(
        LayoutComponent{0, 0, kLayoutEof, stripe_size, static_cast<uint32_t>(count), {}, 0});
    if (Status s = layout.Validate(); !s.ok())
      return Fail(s);
  }
  for (auto& comp : layout.components)
    comp.replicas = static_cast<uint32_t>(replicas);
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  auto p = ClusterPathArg(**c, raw);
  if (!p.ok())
    return Fail(p.status());
  auto st = (*c)->Stat(*p);
  if (!st.ok() && st.status().code() == StatusCode::kNotFound) {
    OpenOptions oo;
    oo.layout = &layout;
    auto f = (*c)->Open(*p, O_CREAT | O_EXCL | O_WRONLY, 0644, oo);
    if (!f.ok())
      return Fail(f.status());
    Status s = (*f)->Close();
    return s.ok() ? 0 : Fail(s);
  }
  if (!st.ok())
    return Fail(st.status());
  Status s = (*c)->SetLayout(*p, layout);
  return s.ok() ? 0 : Fail(s);
}

int CmdGetstripe(const std::vector<std::string>& paths) {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  int rc = 0;
  for (const auto& raw : paths) {
    auto p = ClusterPathArg(**c, raw);
    if (!p.ok()) {
      rc = Fail(p.status());
      continue;
    }
    auto st = (*c)->Stat(*p);
    if (!st.ok()) {
      rc = Fail(st.status());
      continue;
    }
    auto l = (*c)->GetLayout(*p);
    if (!l.ok()) {
      rc = Fail(l.status());
      continue;
    }
    fmt::print("{}\n", *p);
    if (st->is_dir()) {
      if (l->empty()) {
        fmt::print("  default layout: adaptive (no directory default set)\n");
        continue;
      }
      fmt::print("  directory default for new files:\n");
    } else {
      fmt::print("  fid: {}  size: {}  components: {}  pattern: {}\n",
                 Fid{st->ino, st->fid_mds, st->fid_ver}.ToString(), st->size, l->components.size(),
                 l->pattern == 1 ? "explicit" : "adaptive");
    }
    for (const auto& comp : l->components) {
      fmt::print("  component {}: extent [{}, {})  stripe_count {}  stripe_size {}  {}{}\n",
                 comp.id, comp.start,
                 comp.end == kLayoutEof ? std::string("EOF") : std::to_string(comp.end),
                 comp.stripe_count, FormatSize(comp.stripe_size),
                 comp.replicas == 0 ? std::string() : fmt::format("replicas {}  ", comp.replicas),
                 comp.instantiated() ? "instantiated" : "not instantiated");
      if (st->is_dir() || !comp.instantiated())
        continue;
      for (uint32_t s = 0; s < comp.stripe_count; ++s) {
        ObjectId obj{Fid{st->ino, st->fid_mds, st->fid_ver}, comp.id, s};
        if (IsChain(comp.osts[s])) {
          fmt::print("    stripe {:>3}  chain {:>3}  object {}\n", s, comp.osts[s] - kChainBase,
                     obj.FileName());
        } else {
          fmt::print("    stripe {:>3}  ost {:>3}  object {}\n", s, comp.osts[s], obj.FileName());
        }
      }
    }
  }
  return rc;
}

int CmdScrubStatus() {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  auto map = (*c)->OstMap();
  if (!map.ok())
    return Fail(map.status());
  fmt::print("{:<8} {:<6} {:>6} {:>18} {:>10} {:>6} {:>9} {:>6}  {}\n", "OST", "state", "passes",
             "this pass", "verified", "bad", "repaired", "lost", "last pass ended");
  uint64_t lost = 0;
  for (const auto& o : *map) {
    const auto& s = o.scrub;
    std::string ended = "-";
    if (s.last_pass_end_ms > 0) {
      const std::time_t t = static_cast<std::time_t>(s.last_pass_end_ms / 1000);
      std::tm tm{};
      ::localtime_r(&t, &tm);
      char buf[32];
      std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
      ended = buf;
    }
    fmt::print("{:<8} {:<6} {:>6} {:>18} {:>10} {:>6} {:>9} {:>6}  {}\n",
               fmt::format("OST{:04}", o.index), o.state, s.passes,
               fmt::format("{}/{} objects", s.objects, s.objects_total), FormatSize(s.bytes), s.bad,
               s.repaired, s.lost, ended);
    lost += s.lost;
  }
  if (lost > 0) {
    fmt::print("{} object(s) with bad blocks and no good copy: see the OSS logs (\"scrub:\")\n",
               lost);
  }
  return 0;
}

int CmdDf(bool human) {
  auto c = Connect();
  if (!c.ok())
    return Fail(c.status());
  auto map = (*c)->OstMap();
  if (!map.ok())
    return Fail(map.status());
  auto fmt_sz = [&](uint64_t v) { return human ? FormatSize(v) : std::to_string(v / 1024); };
  fmt::print("{:<10} {:>14} {:>14} {:>14} {:>5}  {:<6} {}\n", "OST", human ? "size" : "1K-blocks",
             "used", "available", "use%", "state", "served by");
  uint64_t tc = 0, tf = 0;
  for (const auto& o : *map) {
    uint64_t used = o.capacity > o.free ? o.capacity - o.free : 0;
    fmt::print("{:<10} {:>14} {:>14} {:>14} {:>4}%  {:<6} {}\n", fmt::format("OST{:04}", o.index),
               fmt_sz(o.capacity), fmt_sz(used), fmt_sz(o.free),
               o.capacity ? used * 100 / o.capacity : 0, o.state, o.addr);
  }
  auto sf = (*c)->StatfsTiers();
  if (!sf.ok())
    return Fail(sf.status());
  {
    tc = sf->total_bytes;
    tf = sf->avail_bytes;
    uint64_t used = tc > tf ? tc - tf : 0;
    fmt::print("{:<10} {:>14} {:>14} {:>14} {:>4}%  (OSTs sharing a device counted once)\n",
               "total", fmt_sz(tc), fmt_sz(used), fmt_sz(tf), tc ? used * 100 / tc : 0);
    fmt::print("inodes: {} used, {} free\n", sf->total_inodes - sf->free_inodes, sf->free_inodes);
    // Bytes per tier: the OSTs hold what is above; the cold tier holds a copy of every
    // archived file, and the only copy of released ones.
    fmt::print("{:<10} {:>14} in {} files ({} released: {}, only there; {} dirty)\n", "cold tier",
               fmt_sz(sf->cold_bytes), sf->cold_files, sf->released_files,
               fmt_sz(sf->released_bytes), sf->dirty_files);
  }
  // Replication: how many chains (and so the objects that name them) run on fewer copies.
  auto chains = (*c)->Chains();
  if (chains.ok() && !chains->empty()) {
    std::map<uint32_t, std::string> ost_state;
    for (const auto& o : *map)
      ost_state[o.index] = o.state;
    size_t degraded = 0, syncing = 0, unavailable = 0;
    for (const auto& ch : *chains) {
      bool all = true, any = false, sync = false;
      for (const auto& m : ch.members) {
        const bool up = ost_state[m.ost] != "down";
        all &= m.state == "serving" && up;
        any |= m.state == "serving" && up;
        sync |= m.state == "syncing";
      }
      degraded += all ? 0 : 1;
      syncing += sync ? 1 : 0;
      unavailable += any ? 0 : 1;
    }
    fmt::print(
        "replication: {} chains, {} degraded ({} catching up), {} without a serving copy{}\n",
        chains->size(), degraded, syncing, unavailable,
        degraded > 0 ? " (ciuic cluster status names them)" : "");
  }
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  CLI::App app{
      "ciuic: a parallel file system for AI training IO.\n"
      "Example: ciuic cluster up ~/ciuic && export CIUIC_CLUSTER=~/ciuic/cluster.conf && "
      "ciuic put -r ./data /datasets/"};
  app.require_subcommand(1);
  app.add_option("--cluster", g_cluster_file,
                 "cluster file (default: $CIUIC_CLUSTER, then ~/ciuic/cluster.conf)");
  int rc = 0;

  auto* cluster = app.add_subcommand("cluster", "start, stop or inspect a local cluster");
  cluster->require_subcommand(1);
  ClusterUpOptions up;
  auto* up_cmd = cluster->add_subcommand(
      "up",
      "start 1 MDS + OSS processes on 127.0.0.1 (restarts an existing DIR with its data)\n"
      "Example: ciuic cluster up ~/ciuic --oss 2 --osts-per-oss 2");
  up_cmd->add_option("dir", up.dir, "cluster directory (default ~/ciuic)");
  up_cmd->add_option("--oss", up.num_oss, "OSS processes (new clusters)")->check(CLI::Range(1, 64));
  up_cmd->add_option("--osts-per-oss", up.osts_per_oss, "OSTs per OSS (new clusters)")
      ->check(CLI::Range(1, 64));
  up_cmd
      ->add_option("--mds-port", up.mds_port,
                   "MDS port (default: a free one, kept across restarts)")
      ->check(CLI::Range(0, 65535));
  up_cmd->add_option("--io-engine", up.io_engine, "OSS disk IO: auto, io_uring or posix")
      ->check(CLI::IsMember({"auto", "io_uring", "posix"}));
  up_cmd->add_option("--timeout", up.timeout_s, "seconds to wait for the servers");
  up_cmd->add_option("--cold-tier", up.cold_tier,
                     "HSM cold tier of a new cluster: file:///DIR or s3://BUCKET[/PREFIX] "
                     "(default: DIR/cold)");
  up_cmd
      ->add_option("--hsm-every", up.hsm_every_s,
                   "run the HSM policy (ciuic hsm sweep) every SECONDS, releasing at once when "
                   "the OSTs pass the high watermark between passes; 0: not at all (saved; "
                   "default 0)")
      ->check(CLI::Range(0, 86400));
  up_cmd->add_option("--replicas", up.replicas,
                     "copies of each object of files whose layout does not say, each on its own "
                     "OSS (saved; 1)");
  up_cmd
      ->add_option("--resync-mbps", up.resync_mbps,
                   "bound on each OSS's copies to a returning or replaced OST, MiB/s; 0: none "
                   "(saved; 128)")
      ->check(CLI::Range(0, 1 << 20));
  up_cmd->add_option("--node-cache", up.node_cache,
                     "node cache of this machine's clients: a directory on fast local disk, or "
                     "none (saved in cluster.conf; default none)");
  up_cmd->add_option("--node-cache-size", up.node_cache_size,
                     "size cap of the node cache, e.g. 20G (saved; 8G)");
  up_cmd
      ->add_option("--node-cache-min-free", up.node_cache_min_free,
                   "% of the node cache's device always left free (saved; 10)")
      ->check(CLI::Range(0.0, 99.0));
  up_cmd->add_option("--hsm-high", up.hsm_high, "HSM high watermark, % of OST space (saved; 90)")
      ->check(CLI::Range(0.0, 100.0));
  up_cmd->add_option("--hsm-low", up.hsm_low, "HSM low watermark, % of OST space (saved; 80)")
      ->check(CLI::Range(0.0, 100.0));
  up_cmd->add_option("--hsm-default", up.hsm_default,
                     "HSM policy of directories with none: never, release-at-watermark or "
                     "archive-after=SECONDS (saved; release-at-watermark)");
  up_cmd->callback([&] {
    up.dir = DefaultClusterDir(up.dir);
    rc = ClusterUp(up);
  });
  std::string down_dir;
  int down_timeout = 20;
  auto* down_cmd = cluster->add_subcommand(
      "down", "stop the cluster's processes (data is kept)\nExample: ciuic cluster down ~/ciuic");
  down_cmd->add_option("dir", down_dir, "cluster directory");
  down_cmd->add_option("--timeout", down_timeout, "seconds before SIGKILL");
  down_cmd->callback([&] { rc = ClusterDown(DefaultClusterDir(down_dir), down_timeout); });
  std::string status_dir;
  auto* status_cmd = cluster->add_subcommand(
      "status", "processes, OSTs and free space\nExample: ciuic cluster status ~/ciuic");
  status_cmd->add_option("dir", status_dir, "cluster directory");
  status_cmd->callback([&] { rc = ClusterStatus(DefaultClusterDir(status_dir)); });
  AddClientOptions add_client;
  auto* add_client_cmd = cluster->add_subcommand(
      "add-client",
      "make a key for one client, with the identity rules the MDS enforces for it, and write "
      "a cluster file the client connects with (needs the admin cluster file)\n"
      "Example: ciuic cluster add-client trainer --uid-map 1000:2000,*:65534 --squash-root "
      "--subtree /datasets/team-a --read-only -o trainer.conf");
  add_client_cmd->add_option("name", add_client.name, "client name")->required();
  add_client_cmd->add_option("--uid-map", add_client.uid_map,
                             "CLIENT:SERVER,... uid mapping; *:SERVER maps every other uid");
  add_client_cmd->add_flag("--squash-root", add_client.squash_root,
                           "uid 0 and gid 0 act as 65534 (nobody), as NFS root_squash");
  add_client_cmd->add_flag("--read-only", add_client.read_only, "refuse every change");
  add_client_cmd->add_option("--subtree", add_client.subtree,
                             "cluster directory that is the client's / (it cannot leave it)");
  add_client_cmd->add_option("-o,--out", add_client.out,
                             "client cluster file to write (default DIR/clients/NAME.conf)");
  add_client_cmd->callback([&] { rc = AddClient(g_cluster_file, add_client); });
  std::string revoke_name;
  auto* revoke_cmd = cluster->add_subcommand(
      "revoke-client",
      "revoke a client's key: the MDS refuses it at once, OSSes within a heartbeat\n"
      "Example: ciuic cluster revoke-client trainer");
  revoke_cmd->add_option("name", revoke_name, "client name")->required();
  revoke_cmd->callback([&] { rc = RevokeClient(g_cluster_file, revoke_name); });
  auto* list_clients_cmd = cluster->add_subcommand(
      "list-clients", "client keys and their rules\nExample: ciuic cluster list-clients");
  list_clients_cmd->callback([&] { rc = ListClients(g_cluster_file); });

  TopOptions top;
  auto* top_cmd = app.add_subcommand(
      "top",
      "live IO per job and per OST from the servers' metrics endpoints (the cluster directory's "
      "run/*.metrics_port, or --url)\nExample: ciuic top ~/ciuic   or   ciuic top --once");
  top_cmd->add_option("dir", top.dir,
                      "cluster directory (default: that of --cluster, $CIUIC_CLUSTER, ~/ciuic)");
  top_cmd->add_option("--url", top.urls,
                      "a metrics endpoint, http://HOST:PORT/metrics (repeatable)");
  top_cmd->add_option("--interval", top.interval_s, "seconds between refreshes (default 1)");
  top_cmd->add_option("--iterations", top.iterations, "stop after N refreshes (default: never)");
  top_cmd->add_flag("--once", top.once, "print one snapshot (rates over one interval) and exit");
  top_cmd->callback([&] {
    if (top.dir.empty() && !g_cluster_file.empty())
      top.dir = std::filesystem::path(g_cluster_file).parent_path().string();
    top.dir = DefaultClusterDir(top.dir);
    rc = Top(top);
  });

  std::vector<std::string> paths;
  bool flag_l = false, flag_p = false, flag_r = false, flag_f = false, flag_s = false,
       flag_h = false;
  std::string mode_s;
  int threads = 4;

  auto* ls = app.add_subcommand("ls", "list directories\nExample: ciuic ls -l /datasets");
  ls->add_option("paths", paths, "cluster paths (default /)");
  ls->add_flag("-l", flag_l, "long format");
  ls->callback([&] { rc = CmdLs(paths, flag_l); });

  auto* stat = app.add_subcommand("stat", "show attributes\nExample: ciuic stat /datasets/a.bin");
  stat->add_option("paths", paths, "cluster paths")->required();
  stat->callback([&] { rc = CmdStat(paths); });

  auto* mkdir =
      app.add_subcommand("mkdir", "create directories\nExample: ciuic mkdir -p /datasets/imagenet");
  mkdir->add_option("paths", paths, "cluster paths")->required();
  mkdir->add_flag("-p,--parents", flag_p, "create parents, no error if existing");
  mkdir->add_option("-m,--mode", mode_s, "octal mode (default 755)");
  mkdir->callback([&] { rc = CmdMkdir(paths, flag_p, mode_s); });

  auto* rm = app.add_subcommand("rm", "remove files or trees\nExample: ciuic rm -r /tmp/run1");
  rm->add_option("paths", paths, "cluster paths")->required();
  rm->add_flag("-r,--recursive", flag_r, "remove directories and their contents");
  rm->add_flag("-f,--force", flag_f, "ignore missing paths");
  rm->callback([&] { rc = CmdRm(paths, flag_r, flag_f); });

  std::string src, dst;
  auto* mv = app.add_subcommand("mv", "rename or move\nExample: ciuic mv /a/x /b/");
  mv->add_option("src", src)->required();
  mv->add_option("dst", dst)->required();
  mv->callback([&] { rc = CmdMv(src, dst); });

  auto* ln = app.add_subcommand("ln", "make links\nExample: ciuic ln -s /data/v2 /data/latest");
  ln->add_option("target", src)->required();
  ln->add_option("link", dst)->required();
  ln->add_flag("-s,--symbolic", flag_s, "symbolic link");
  ln->callback([&] { rc = CmdLn(src, dst, flag_s); });

  auto* put = app.add_subcommand(
      "put",
      "copy local files into the cluster (parallel)\nExample: ciuic put -r ./imagenet /datasets/");
  put->add_option("args", paths, "LOCAL... DEST")->required();
  put->add_flag("-r,--recursive", flag_r, "copy directories");
  put->add_option("-j,--threads", threads, "parallel streams")->check(CLI::Range(1, 64));
  put->callback([&] { rc = CmdPut(paths, flag_r, threads); });

  auto* get = app.add_subcommand(
      "get", "copy files out of the cluster (parallel)\nExample: ciuic get /datasets/a.bin ./");
  get->add_option("args", paths, "REMOTE... LOCAL")->required();
  get->add_flag("-r,--recursive", flag_r, "copy directories");
  get->add_option("-j,--threads", threads, "parallel streams")->check(CLI::Range(1, 64));
  get->callback([&] { rc = CmdGet(paths, flag_r, threads); });

  auto* cat = app.add_subcommand("cat", "print files\nExample: ciuic cat /etc/notes.txt");
  cat->add_option("paths", paths, "cluster paths")->required();
  cat->callback([&] { rc = CmdCat(paths); });

  int count = 0;
  int replicas = 0;
  std::string size_s, comps;
  auto* setstripe = app.add_subcommand(
      "setstripe",
      "set the layout of a new/empty file or a directory's default\n"
      "Examples: ciuic setstripe -c 4 -S 1M /ckpt\n"
      "          ciuic setstripe --components 64M:1,1G:4,EOF:8 /data/big.bin\n"
      "          ciuic setstripe -c 2 -r 2 /important (2 copies of every object)");
  setstripe->add_option("path", src, "cluster path, or a path inside a ciuic mount")->required();
  setstripe->add_option("-c,--stripe-count", count, "stripes (OSTs) per component");
  setstripe->add_option("-S,--stripe-size", size_s, "stripe size, e.g. 1M (default 1 MiB)");
  setstripe->add_option("--components", comps, "PFL components END:COUNT,... (END may be EOF)");
  setstripe->add_option("-r,--replicas", replicas,
                        "copies of each object, on OSSes in distinct failure domains (default: "
                        "the cluster's)");
  setstripe->callback([&] { rc = CmdSetstripe(src, count, size_s, comps, replicas); });

  auto* getstripe = app.add_subcommand(
      "getstripe",
      "show layouts: components, OSTs and objects\nExample: ciuic getstripe /data/big.bin");
  getstripe->add_option("paths", paths, "cluster paths, or paths inside a ciuic mount")->required();
  getstripe->callback([&] { rc = CmdGetstripe(paths); });

  uint64_t pack_shard_mib = 64;
  auto* pack = app.add_subcommand(
      "pack",
      "pack a local directory of small files into tar shards + indexes (CiuicDataLoader's "
      "ShardDataset)\nExample: ciuic pack ./imagenet/train /datasets/imagenet-shards");
  pack->add_option("src", src, "local directory")->required();
  pack->add_option("dest", dst, "cluster directory (created)")->required();
  pack->add_option("--shard-mib", pack_shard_mib, "target shard size in MiB (default 64)");
  pack->callback([&] {
    auto c = Connect();
    if (!c.ok()) {
      rc = Fail(c.status());
      return;
    }
    auto d = RemotePath(dst);
    rc = d.ok() ? CmdPack(**c, src, *d, pack_shard_mib) : Fail(d.status());
  });

  MountOptions mount_opts;
  auto* mount = app.add_subcommand(
      "mount",
      "mount the cluster as a directory tree (FUSE)\nExample: ciuic mount ~/ciuic/cluster.conf "
      "/mnt/ciuic");
  mount->add_option("cluster_file", mount_opts.cluster_file, "cluster file")->required();
  mount->add_option("mountpoint", mount_opts.mountpoint, "an existing empty directory")->required();
  mount->add_flag("-f,--foreground", mount_opts.foreground, "serve in the foreground");
  mount->add_flag("--private", mount_opts.private_mount, "no allow_other");
  mount->add_option("--log", mount_opts.log_file, "log file of the daemon");
  mount->callback([&] { rc = Mount(mount_opts); });
  int umount_timeout = 30;
  auto* umount =
      app.add_subcommand("umount", "unmount a ciuic mount\nExample: ciuic umount /mnt/ciuic");
  umount->add_option("mountpoint", src, "mount point")->required();
  umount->add_option("--timeout", umount_timeout, "seconds to wait for the unmount");
  umount->callback([&] { rc = Umount(src, umount_timeout); });

  auto* hsm = app.add_subcommand(
      "hsm",
      "archive files to the cold tier, release their OST space, restore them, show their state");
  hsm->require_subcommand(1);
  std::vector<std::string> hsm_paths;
  bool hsm_r = false;
  for (const char* action : {"archive", "release", "restore", "state", "remove"}) {
    const std::string help =
        std::string(action) == "archive"   ? "copy files to the cold tier (done by the OSSes)"
        : std::string(action) == "release" ? "free the OST space of archived files"
        : std::string(action) == "restore" ? "bring released files back onto the OSTs"
        : std::string(action) == "state"
            ? "show none/archived/released/dirty/lost, the archived version and the backend"
            : "delete the archived copy of files that are not released";
    auto* sub = hsm->add_subcommand(
        action, fmt::format("{}\nExample: ciuic hsm {} -r /datasets/old", help, action));
    sub->add_option("paths", hsm_paths, "cluster paths, or paths inside a ciuic mount")->required();
    sub->add_flag("-r,--recursive", hsm_r, "every regular file under directories");
    sub->callback([&, name = std::string(action)] {
      auto c = Connect();
      if (!c.ok()) {
        rc = Fail(c.status());
        return;
      }
      std::vector<std::string> resolved;
      for (const auto& raw : hsm_paths) {
        auto p = ClusterPathArg(**c, raw);
        if (!p.ok()) {
          rc = Fail(p.status());
          return;
        }
        resolved.push_back(*p);
      }
      rc = CmdHsm(**c, name, resolved, hsm_r);
    });
  }

  auto* cache = app.add_subcommand(
      "cache", "the node cache of this machine: what it holds, drop it, warm it with files");
  cache->require_subcommand(1);
  std::vector<std::string> cache_paths;
  bool cache_r = false;
  // The cache this machine's clients use (cluster.conf's node_cache, or $CIUIC_NODE_CACHE).
  auto cache_options = [&] {
    std::string dir;
    uint64_t bytes = 0;
    double min_free = -1;
    if (auto path = FindClusterFile(g_cluster_file); path.ok()) {
      if (auto cf = ClusterFile::Load(*path); cf.ok()) {
        dir = cf->node_cache;
        bytes = cf->node_cache_bytes;
        min_free = cf->node_cache_min_free_pct;
      }
    }
    return client::ResolveNodeCache("", 0, dir, bytes, -1, min_free);
  };
  cache->add_subcommand("status", "the cache's directory, what it holds and its device's space")
      ->callback([&] { rc = CmdCacheStatus(cache_options()); });
  auto* cache_drop = cache->add_subcommand(
      "drop",
      "remove the cached blocks of files, or every block\nExample: ciuic cache drop -r /ckpt/old");
  cache_drop->add_option("paths", cache_paths, "cluster paths, or paths inside a ciuic mount");
  cache_drop->add_flag("-r,--recursive", cache_r, "every regular file under directories");
  cache_drop->callback([&] {
    std::unique_ptr<Client> client;
    std::vector<std::string> resolved;
    if (!cache_paths.empty()) {
      auto c = Connect();
      if (!c.ok()) {
        rc = Fail(c.status());
        return;
      }
      client = std::move(*c);
      for (const auto& raw : cache_paths) {
        auto p = ClusterPathArg(*client, raw);
        if (!p.ok()) {
          rc = Fail(p.status());
          return;
        }
        resolved.push_back(*p);
      }
    }
    rc = CmdCacheDrop(cache_options(), client.get(), resolved, cache_r);
  });
  for (const bool excluded : {true, false}) {
    auto* sub = cache->add_subcommand(
        excluded ? "exclude" : "include",
        excluded ? "keep files out of every machine's node cache (scratch data, files read "
                   "once);\nnew entries of an excluded directory are excluded too\nExample: "
                   "ciuic cache exclude -r /scratch"
                 : "let excluded files use the node cache again\nExample: ciuic cache include "
                   "-r /scratch");
    sub->add_option("paths", cache_paths, "cluster paths, or paths inside a ciuic mount")
        ->required();
    sub->add_flag("-r,--recursive", cache_r, "also every file and directory below");
    sub->callback([&, excluded] {
      auto c = Connect();
      if (!c.ok()) {
        rc = Fail(c.status());
        return;
      }
      std::vector<std::string> resolved;
      for (const auto& raw : cache_paths) {
        auto p = ClusterPathArg(**c, raw);
        if (!p.ok()) {
          rc = Fail(p.status());
          return;
        }
        resolved.push_back(*p);
      }
      rc = CmdCacheExclude(**c, resolved, cache_r, excluded);
    });
  }
  auto* cache_warm = cache->add_subcommand(
      "warm",
      "read files into the node cache before a job needs them\nExample: ciuic cache warm -r "
      "/datasets/imagenet");
  cache_warm->add_option("paths", cache_paths, "cluster paths, or paths inside a ciuic mount")
      ->required();
  cache_warm->add_flag("-r,--recursive", cache_r, "every regular file under directories");
  cache_warm->callback([&] {
    if (cache_options().dir.empty()) {
      rc = Fail(Status::InvalidArgument(
          "cache warm: no node cache is configured: `ciuic cluster up DIR --node-cache "
          "CACHE_DIR`, or CIUIC_NODE_CACHE=CACHE_DIR"));
      return;
    }
    auto c = Connect();
    if (!c.ok()) {
      rc = Fail(c.status());
      return;
    }
    std::vector<std::string> resolved;
    for (const auto& raw : cache_paths) {
      auto p = ClusterPathArg(**c, raw);
      if (!p.ok()) {
        rc = Fail(p.status());
        return;
      }
      resolved.push_back(*p);
    }
    rc = CmdCacheWarm(**c, resolved, cache_r);
  });

  std::string pol_dir;
  std::vector<std::string> pol_args;
  auto* pol = hsm->add_subcommand(
      "policy",
      "set or show a directory's HSM policy: never, archive-after DURATION (s, m, h, d) or "
      "release-at-watermark (the nearest directory with one decides)\n"
      "Example: ciuic hsm policy /datasets/old archive-after 7d");
  pol->add_option("dir", pol_dir, "cluster directory, or a directory inside a ciuic mount")
      ->required();
  pol->add_option("policy", pol_args, "never | archive-after DURATION | release-at-watermark");
  pol->callback([&] {
    auto c = Connect();
    if (!c.ok()) {
      rc = Fail(c.status());
      return;
    }
    auto p = ClusterPathArg(**c, pol_dir);
    if (!p.ok()) {
      rc = Fail(p.status());
      return;
    }
    rc = CmdHsmPolicy(**c, *p, pol_args);
  });
  SweepOptions sweep;
  std::string sweep_default = "release-at-watermark";
  auto* sw = hsm->add_subcommand(
      "sweep",
      "one pass of the HSM policy: archive cold files, release the coldest archived ones "
      "(heat, then atime) while the OSTs are above the high watermark, down to the low one\n"
      "Example: ciuic hsm sweep --high 90 --low 80");
  sw->add_option("--root", sweep.root, "directory to sweep (default /)");
  sw->add_option("--high", sweep.high_pct, "high watermark, % of OST space used (default 90)")
      ->check(CLI::Range(0.0, 100.0));
  sw->add_option("--low", sweep.low_pct, "low watermark, % of OST space used (default 80)")
      ->check(CLI::Range(0.0, 100.0));
  sw->add_option("--default", sweep_default,
                 "policy of directories with none: never, release-at-watermark or "
                 "archive-after=SECONDS");
  sw->add_option("--every", sweep.every_s, "repeat every SECONDS until killed (0: once)")
      ->check(CLI::Range(0, 86400));
  sw->add_option("--watch-ms", sweep.watch_ms,
                 "with --every: read OST use this often between passes and release at once "
                 "above the high watermark (0: off; default 1000)")
      ->check(CLI::Range(0, 3600000));
  sw->callback([&] {
    auto d = ParsePolicyValue(sweep_default);
    if (!d.ok()) {
      rc = Fail(d.status());
      return;
    }
    sweep.default_policy = *d;
    auto c = Connect();
    if (!c.ok()) {
      rc = Fail(c.status());
      return;
    }
    rc = CmdHsmSweep(**c, sweep);
  });

  auto* repo = app.add_subcommand(
      "repo", "link a directory to an object store prefix (data repository), sync, export");
  repo->require_subcommand(1);
  std::string repo_dir, repo_url;
  double repo_interval = 0;
  bool repo_copy = false;
  bool repo_export = false;
  bool repo_export_on_close = false;
  bool repo_no_export_on_close = false;
  for (const char* action : {"link", "sync", "export", "status"}) {
    const std::string a = action;
    const std::string help =
        a == "link" ? "link DIR to URL (s3://BUCKET/PREFIX or file:///DIR) and import its objects\n"
                      "Example: ciuic repo link /datasets/x s3://bucket/prefix"
        : a == "sync"   ? "import new and changed objects, remove files whose object was deleted\n"
                          "Example: ciuic repo sync /datasets/x"
        : a == "export" ? "write new and changed files back as plain objects\n"
                          "Example: ciuic repo export /datasets/x"
                        : "show the link and how many files changed here\n"
                          "Example: ciuic repo status /datasets/x";
    auto* sub = repo->add_subcommand(action, help);
    sub->add_option("dir", repo_dir, "the linked directory (cluster path or path in a mount)")
        ->required();
    if (a == "link")
      sub->add_option("url", repo_url,
                      "s3://BUCKET[/PREFIX][?endpoint=URL&region=R] or file:///DIR (the OSSes "
                      "open it too: settings they lack go in the URL)")
          ->required();
    if (a == "link" || a == "sync")
      sub->add_flag("--copy", repo_copy,
                    "copy new and changed objects' bytes now (default: import them as released "
                    "files whose bytes load on first read)");
    if (a == "link") {
      auto* on = sub->add_flag(
          "--export-on-close", repo_export_on_close,
          "export each file when a writer closes it (the MDS queues it; a running `ciuic repo "
          "sync DIR --interval S` exports it at once, any sync or export later)");
      sub->add_flag("--no-export-on-close", repo_no_export_on_close,
                    "stop exporting on close (drops the queue)")
          ->excludes(on);
    }
    if (a == "sync")
      sub->add_flag("--export", repo_export,
                    "also export new and changed files after each sync (with --interval: "
                    "automatic export, at most one interval behind)");
    if (a == "sync")
      sub->add_option("--interval", repo_interval,
                      "keep syncing, every SECONDS (until interrupted; exits on a failure)");
    sub->callback([&, a] {
      auto c = Connect();
      if (!c.ok()) {
        rc = Fail(c.status());
        return;
      }
      auto p = ClusterPathArg(**c, repo_dir);
      if (!p.ok()) {
        rc = Fail(p.status());
        return;
      }
      auto once = [&](bool* started) {
        int r = CmdRepo(**c, a, *p, repo_url, repo_copy, started);
        if (*started && a == "sync" && repo_export)
          r = std::max(r, CmdRepo(**c, "export", *p, repo_url));
        return r;
      };
      bool started = false;
      rc = once(&started);
      if (rc == 0 && a == "link" && (repo_export_on_close || repo_no_export_on_close))
        rc = CmdRepoExportOnClose(**c, *p, repo_export_on_close);
      // A first pass that could not start (not linked, no store) ends the command. Any other
      // failure has been said on stderr, and the next pass tries again: a file exported while
      // its writer still writes, a store away for a while, or one file the store refuses must
      // not end an automatic sync.
      while (a == "sync" && repo_interval > 0 && started) {
        // Between syncs, what writers close is exported within half a second (when the link
        // exports on close; otherwise the queue is empty and each look is one MDS request).
        const auto next = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(repo_interval));
        while (std::chrono::steady_clock::now() < next) {
          const auto left = next - std::chrono::steady_clock::now();
          std::this_thread::sleep_for(
              std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(500)));
          (void)CmdRepo(**c, "export-closed-quiet", *p, repo_url);
        }
        bool later = false;  // an MDS or store away now is tried again at the next pass
        (void)once(&later);
      }
    });
  }

  auto* repo_list = repo->add_subcommand(
      "list",
      "every linked directory: its URL, export on close, files queued for export\n"
      "Example: ciuic repo list");
  repo_list->callback([&] {
    auto c = Connect();
    if (!c.ok()) {
      rc = Fail(c.status());
      return;
    }
    rc = CmdRepoList(**c);
  });
  double agent_every = 0.5;
  auto* agent = repo->add_subcommand(
      "agent",
      "export what writers close in every directory linked with --export-on-close, as it "
      "happens (ciuic cluster up runs one; runs until stopped)\n"
      "Example: ciuic repo agent --every 0.5");
  agent->add_option("--every", agent_every, "seconds between looks at the queues (0.5)")
      ->check(CLI::Range(0.05, 3600.0));
  agent->callback([&] {
    auto c = Connect();
    if (!c.ok()) {
      rc = Fail(c.status());
      return;
    }
    rc = CmdRepoAgent(**c, agent_every);
  });

  auto* scrub = app.add_subcommand(
      "scrub", "the OSSes' background checksum verification\nExample: ciuic scrub status");
  scrub->set_help_flag("--help", "print this help");
  scrub->require_subcommand(1);
  auto* scrub_status = scrub->add_subcommand(
      "status", "per OST: passes, progress, bad objects found, repaired and lost");
  scrub_status->set_help_flag("--help", "print this help");
  scrub_status->callback([&] { rc = CmdScrubStatus(); });

  auto* df = app.add_subcommand("df", "space per OST and in the cold tier\nExample: ciuic df -h");
  df->set_help_flag("--help", "print this help");
  df->add_flag("-h,--human-readable", flag_h, "human-readable sizes");
  df->callback([&] { rc = CmdDf(flag_h); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    fmt::print(stderr, "ciuic: {} (see ciuic --help)\n", what);
    return 2;
  }
  return rc;
}

}  // namespace ciuic::cli

int main(int argc, char** argv) {
  try {
    return ciuic::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ciuic: internal error: %s\n", e.what());
    return 1;
  }
}
