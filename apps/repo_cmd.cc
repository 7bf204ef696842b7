#include "repo_cmd.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "objstore/object_store_factory.h"

namespace ciuic::cli {
namespace {

// The link's URL, on the linked directory.
constexpr char kUrlXattr[] = "user.ciuic.repo.url";
// Per file: where its bytes came from or went to (docs/formats/repo-xattrs.md).
constexpr char kObjXattr[] = "user.ciuic.repo.obj";
// Bytes copied per request: bounds the memory of a copy whatever the file's size.
constexpr size_t kChunk = 8u << 20;
// Objects per listing page: the listing is never held whole, so memory stays bounded.
constexpr uint32_t kPage = 1000;
// Queued files (export on close) listed per request.
constexpr uint32_t kQueuePage = 1000;
// `sync` holds at most this many object names of one directory to find deleted objects; a
// bigger directory is checked with a Head per file.
constexpr size_t kMaxListedPerDir = 100000;
// `repo status` counts the queue up to this many ("10000+").
constexpr uint32_t kStatusQueueMax = 10000;
// Files copied or checked at once: each is a few MDS round trips and a store request, so a few
// in flight hide the latencies; memory is at most kParallel copy buffers.
constexpr size_t kParallel = 8;

// Runs fn(0..n-1) on up to kParallel threads.
void RunParallel(size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++)
      fn(i);
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < std::min(kParallel, n); ++i)
    threads.emplace_back(worker);
  worker();
  for (auto& t : threads)
    t.join();
}

// What the cluster file was when it last matched the object: the object's etag and size, and
// the file's data version right after the copy (a different one means a local change).
struct Record {
  uint64_t data_version = 0;
  uint64_t size = 0;
  std::string etag;
  std::string key;  // the object's key; empty in v1 records (then: the file's own path)
};

std::string Encode(const Record& r) {
  return fmt::format("v2 {} {} {}\n{}", r.data_version, r.size, r.etag, r.key);
}

bool Decode(const std::string& s, Record* r) {
  std::istringstream in(s);
  std::string v;
  if (!(in >> v >> r->data_version >> r->size) || (v != "v1" && v != "v2"))
    return false;
  in.get();
  std::getline(in, r->etag);
  r->key.clear();
  if (v == "v2")
    std::getline(in, r->key);  // the rest: a key holds no newline (docs/formats)
  return true;
}

// The key a record names for the file at `rel`.
const std::string& KeyOf(const Record& r, const std::string& rel) {
  return r.key.empty() ? rel : r.key;
}

std::string Join(const std::string& dir, const std::string& rel) {
  return dir == "/" ? "/" + rel : dir + "/" + rel;
}

std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

struct Counts {
  std::atomic<uint64_t> added{0}, changed{0}, deleted{0}, unchanged{0}, exported{0};
  std::atomic<int> failed{0};
};

class Repo {
 public:
  Repo(Client& c,
       std::string action,
       std::string dir,
       std::string url,
       objstore::ObjectStore& store,
       bool copy)
      : c_(c),
        action_(std::move(action)),
        dir_(std::move(dir)),
        url_(std::move(url)),
        store_(store),
        copy_(copy) {}

  Counts& counts() { return counts_; }

  void Fail(const std::string& path, const std::string& why) {
    std::lock_guard<std::mutex> lock(print_mu_);
    fmt::print(stderr, "ciuic: repo {}: {}: {}\n", action_, path, why);
    ++counts_.failed;
  }

  // Imports every object of the store that is new or changed. Pages through the listing.
  Status Import() {
    objstore::ListOptions lo;
    lo.max_keys = kPage;
    for (;;) {
      CIUIC_ASSIGN_OR_RETURN(objstore::ListPage page, store_.List(lo));
      RunParallel(page.objects.size(), [&](size_t i) { ImportOne(page.objects[i]); });
      if (page.next.empty())
        return Status::OK();
      lo.start = page.next;
    }
  }

  // Walks the linked directory: removes files whose object is gone (sync), writes new and
  // changed files back (export), or counts (status).
  Status Walk(const std::string& rel) {
    const std::string path = rel.empty() ? dir_ : Join(dir_, rel);
    // sync: the names the repository holds in this directory (one listing request per 1,000
    // instead of a Head per file to find deleted objects).
    Listed listed;
    // A page at a time, so a directory of a million files costs one page of memory.
    uint64_t cookie = 0;
    for (;;) {
      CIUIC_ASSIGN_OR_RETURN(DirPage page, c_.ReadDirPage(path, cookie, kPage));
      if (action_ == "sync" && cookie == 0 && !page.entries.empty())
        CIUIC_RETURN_IF_ERROR(ListDir(rel, &listed));
      std::vector<std::string> files_here;
      for (const DirEntry& e : page.entries) {
        if (e.name == "." || e.name == ".." || e.name.rfind(kTmpPrefix, 0) == 0)
          continue;
        const std::string child_rel = rel.empty() ? e.name : rel + "/" + e.name;
        if ((e.type & S_IFMT) == S_IFDIR) {
          Status st = Walk(child_rel);
          if (!st.ok())
            Fail(Join(dir_, child_rel), st.message());
        } else if ((e.type & S_IFMT) == S_IFREG) {
          files_here.push_back(child_rel);
        }
      }
      RunParallel(files_here.size(), [&](size_t i) { WalkFile(files_here[i], listed); });
      if (page.eof)
        break;
      cookie = page.next_cookie;
    }
    return Status::OK();
  }

  std::atomic<uint64_t> files{0}, linked{0}, modified{0}, local_only{0};

 private:
  static constexpr char kTmpPrefix[] = ".ciuic-repo-tmp.";
  // The data version of a file Client::HsmImport made.
  static constexpr uint64_t kImportedVersion = 1;

  void ImportOne(const objstore::ObjectInfo& o) {
    if (!o.key.empty() && o.key.back() == '/') {  // an S3 "directory" marker
      const std::string d = o.key.substr(0, o.key.size() - 1);
      if (!d.empty() && objstore::ValidateKey(d).ok()) {
        Status st = c_.MkdirAll(Join(dir_, d));
        if (!st.ok())
          Fail(Join(dir_, d), st.message());
      }
      return;
    }
    const std::string path = Join(dir_, o.key);
    if (Status v = objstore::ValidateKey(o.key); !v.ok()) {
      Fail(path, fmt::format("object key '{}' cannot be a path; skipped", o.key));
      return;
    }
    Result<FileStat> st = c_.Lstat(path);
    if (st.ok()) {
      if (!st->is_reg()) {
        Fail(path,
             fmt::format("exists and is not a regular file; object '{}' not imported", o.key));
        return;
      }
      Record r;
      Result<std::string> x = c_.GetXattr(path, kObjXattr);
      if (!x.ok() || !Decode(*x, &r)) {
        Fail(path, fmt::format("exists and did not come from the repository; object '{}' not "
                               "imported (nothing changed)",
                               o.key));
        return;
      }
      if (KeyOf(r, o.key) != o.key) {
        Fail(path, fmt::format("was renamed here from '{}' and the repository has an object '{}' "
                               "too; kept the local file, export or remove it first",
                               r.key, o.key));
        return;
      }
      if (r.etag == o.etag && r.size == o.size) {
        ++counts_.unchanged;
        return;
      }
      if (r.data_version != st->data_version) {
        Fail(path, fmt::format("changed both here and in the repository (object '{}'); kept "
                               "the local file, export or remove it first",
                               o.key));
        return;
      }
      if (Status s = copy_ ? Copy(o, path) : Import(o, path, true); !s.ok()) {
        Fail(path, s.message());
        return;
      }
      ++counts_.changed;
      return;
    }
    if (st.status().code() != StatusCode::kNotFound) {
      Fail(path, st.status().message());
      return;
    }
    if (Status s = copy_ ? Copy(o, path) : Import(o, path, false); !s.ok()) {
      Fail(path, s.message());
      return;
    }
    ++counts_.added;
  }

  // Makes `path` a released file backed by the object (no byte moves until a read). A changed
  // object is imported beside the file and renamed over it, so a failure keeps the old one.
  Status Import(const objstore::ObjectInfo& o, const std::string& path, bool replace) {
    const std::string parent = Parent(path);
    CIUIC_RETURN_IF_ERROR(c_.MkdirAll(parent));
    RepoImport spec;
    spec.url = url_;
    spec.key = o.key;
    spec.etag = o.etag;
    spec.size = o.size;
    spec.mtime_ms = o.mtime_ms;
    spec.xattr_name = kObjXattr;
    spec.xattr_value = Encode(Record{kImportedVersion, o.size, o.etag, o.key});
    if (!replace)
      return c_.HsmImport(path, spec);
    const std::string tmp = Join(parent, kTmpPrefix + path.substr(path.rfind('/') + 1));
    (void)c_.Unlink(tmp);  // what an import cut short left
    CIUIC_RETURN_IF_ERROR(c_.HsmImport(tmp, spec));
    Status st = c_.Rename(tmp, path);
    if (!st.ok())
      (void)c_.Unlink(tmp);
    return st;
  }

  // Copies the object into a temporary file beside `path` and renames it over `path` once it
  // is complete, so a failed copy leaves the old file (or none) as it was.
  Status Copy(const objstore::ObjectInfo& o, const std::string& path) {
    const std::string parent = Parent(path);
    CIUIC_RETURN_IF_ERROR(c_.MkdirAll(parent));
    const std::string tmp = Join(parent, kTmpPrefix + path.substr(path.rfind('/') + 1));
    Status st = CopyTo(o, tmp, path);
    if (!st.ok()) {
      (void)c_.Unlink(tmp);
      return st;
    }
    st = c_.Rename(tmp, path);
    if (!st.ok())
      (void)c_.Unlink(tmp);
    return st;
  }

  Status CopyTo(const objstore::ObjectInfo& o, const std::string& tmp, const std::string& path) {
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                           c_.Open(tmp, O_CREAT | O_WRONLY | O_TRUNC, 0644));
    std::vector<char> buf(std::min<uint64_t>(kChunk, std::max<uint64_t>(o.size, 1)));
    uint64_t off = 0;
    while (off < o.size) {
      const size_t want = std::min<uint64_t>(buf.size(), o.size - off);
      Result<size_t> n = store_.Get(o.key, off, std::span<char>(buf.data(), want));
      if (!n.ok()) {
        if (n.status().code() == StatusCode::kNotFound)
          return Status::NotFound(fmt::format("object '{}' of {} was deleted while importing",
                                              o.key, store_.Describe()));
        return n.status();
      }
      if (*n != want)
        return Status::Corruption(
            fmt::format("object '{}' of {} changed while importing (listed {} bytes, read {})",
                        o.key, store_.Describe(), o.size, off + *n));
      CIUIC_RETURN_IF_ERROR(f->Pwrite(buf.data(), want, off).status());
      off += want;
    }
    CIUIC_RETURN_IF_ERROR(f->Fsync());  // the rename over the old file must not outrun it
    CIUIC_RETURN_IF_ERROR(f->Close());
    struct timespec t;
    t.tv_sec = o.mtime_ms / 1000;
    t.tv_nsec = (o.mtime_ms % 1000) * 1000000;
    CIUIC_RETURN_IF_ERROR(c_.Utimens(tmp, t, t));
    CIUIC_ASSIGN_OR_RETURN(FileStat st, c_.Stat(tmp));
    Record r{st.data_version, o.size, o.etag, o.key};
    (void)path;
    return c_.SetXattr(tmp, kObjXattr, Encode(r));
  }

  // The object names of one directory of the repository, as `sync` saw them.
  struct Listed {
    bool complete = false;  // false: too many to hold (or not listed): each file is Headed
    std::unordered_set<std::string> names;
  };

  // Lists the repository's directory `rel` (keys "rel/NAME", not deeper) into *out, up to
  // kMaxListedPerDir names; past that *out stays incomplete, so memory stays bounded.
  Status ListDir(const std::string& rel, Listed* out) {
    out->complete = false;
    out->names.clear();
    objstore::ListOptions lo;
    lo.prefix = rel.empty() ? "" : rel + "/";
    lo.delimiter = "/";
    lo.max_keys = kPage;
    for (;;) {
      CIUIC_ASSIGN_OR_RETURN(objstore::ListPage page, store_.List(lo));
      for (const objstore::ObjectInfo& o : page.objects)
        out->names.insert(o.key.substr(lo.prefix.size()));
      if (out->names.size() > kMaxListedPerDir) {
        out->names.clear();
        return Status::OK();
      }
      if (page.next.empty())
        break;
      lo.start = page.next;
    }
    out->complete = true;
    return Status::OK();
  }

  void WalkFile(const std::string& rel, const Listed& listed) {
    const std::string path = Join(dir_, rel);
    ++files;
    Result<FileStat> st = c_.Stat(path);
    if (!st.ok()) {
      Fail(path, st.status().message());
      return;
    }
    Record r;
    Result<std::string> x = c_.GetXattr(path, kObjXattr);
    const bool has = x.ok() && Decode(*x, &r);
    // Renamed here: its object is still under the old key until an export moves it.
    const bool renamed = has && KeyOf(r, rel) != rel;
    const bool local_change = !has || r.data_version != st->data_version || renamed;
    if (has)
      ++linked;
    if (has && local_change)
      ++modified;
    if (!has)
      ++local_only;
    if (action_ == "sync") {
      if (!has || renamed)
        return;  // made or renamed here: sync leaves it to export
      if (listed.complete && listed.names.count(rel.substr(rel.rfind('/') + 1)) > 0)
        return;  // still in the repository
      // Not listed (or too many to list): a Head says, and catches an object put back since
      // the listing.
      Result<objstore::ObjectInfo> h = store_.Head(rel);
      if (h.ok())
        return;
      if (h.status().code() != StatusCode::kNotFound) {
        Fail(path, h.status().message());
        return;
      }
      if (local_change) {
        Fail(path, fmt::format("object '{}' was deleted from {} but the file changed here; kept",
                               rel, store_.Describe()));
        return;
      }
      if (Status s = c_.Unlink(path); !s.ok()) {
        Fail(path, s.message());
        return;
      }
      ++counts_.deleted;
    } else if (action_ == "export") {
      if (Status s = ExportChanged(rel, path, *st, has ? &r : nullptr); !s.ok())
        Fail(path, s.message());
    }
  }

 public:
  // Exports the files the MDS queued at their close (export on close), a page at a time, and
  // drops each from the queue once exported (or found unchanged, or gone). A file that fails is
  // reported and stays queued for the next drain.
  Status DrainQueue() {
    std::unordered_set<uint64_t> failed;  // by FID sequence, this drain only
    for (;;) {
      CIUIC_ASSIGN_OR_RETURN(RepoQueue q, c_.RepoListQueue(dir_, kQueuePage));
      std::vector<RepoQueued> todo;
      for (RepoQueued& e : q.entries) {
        if (failed.count(e.id.seq) == 0)
          todo.push_back(std::move(e));
      }
      if (todo.empty())
        return Status::OK();
      std::vector<char> ok(todo.size(), 0);
      RunParallel(todo.size(), [&](size_t i) {
        RepoQueued& e = todo[i];
        const std::string base = e.path.substr(e.path.rfind('/') + 1);
        if (e.path.empty() || base.rfind(kTmpPrefix, 0) == 0) {
          ok[i] = 1;  // removed or moved out (nothing to export), or an import's temp file
          return;
        }
        uint64_t version = 0;
        Status s = ExportIfChanged(e.path, &version);
        if (!s.ok()) {
          Fail(Join(dir_, e.path), s.message());
          return;
        }
        // Done up to what was exported: a close after the stat queued a newer version, which
        // stays.
        e.version = version;
        ok[i] = 1;
      });
      std::vector<RepoQueued> done;
      for (size_t i = 0; i < todo.size(); ++i) {
        if (ok[i])
          done.push_back(std::move(todo[i]));
        else
          failed.insert(todo[i].id.seq);
      }
      if (!done.empty())
        CIUIC_RETURN_IF_ERROR(c_.RepoQueueDone(dir_, done));
    }
  }

 private:
  // Exports `rel` if it changed here; *version: its data version when looked at.
  Status ExportIfChanged(const std::string& rel, uint64_t* version) {
    const std::string path = Join(dir_, rel);
    Result<FileStat> st = c_.Lstat(path);
    if (!st.ok()) {
      if (st.status().code() == StatusCode::kNotFound)
        return Status::OK();  // removed since its close: nothing to export
      return st.status();
    }
    *version = st->data_version;
    if (!st->is_reg())
      return Status::OK();
    Record r;
    Result<std::string> x = c_.GetXattr(path, kObjXattr);
    const bool has = x.ok() && Decode(*x, &r);
    return ExportChanged(rel, path, *st, has ? &r : nullptr);
  }

  // Export's step for one file: writes it when it was made, changed or renamed here since its
  // record `r` (null: none).
  Status ExportChanged(const std::string& rel,
                       const std::string& path,
                       const FileStat& st,
                       const Record* r) {
    const bool renamed = r != nullptr && KeyOf(*r, rel) != rel;
    if (r != nullptr && r->data_version == st.data_version && !renamed) {
      ++counts_.unchanged;
      return Status::OK();
    }
    CIUIC_RETURN_IF_ERROR(Export(rel, path, st));
    ++counts_.exported;
    if (renamed) {
      // The object under the old name goes, unless someone changed it since: then it is not
      // this file's any more.
      const std::string& old_key = KeyOf(*r, rel);
      Result<objstore::ObjectInfo> h = store_.Head(old_key);
      if (h.ok() && h->etag == r->etag) {
        if (Status d = store_.Delete(old_key); !d.ok())
          return Status::IoError(fmt::format("renamed from '{}': {}", old_key, d.message()));
      }
    }
    return Status::OK();
  }

  // Writes the file as the plain object `rel`, then records the object's etag.
  Status Export(const std::string& rel, const std::string& path, const FileStat& st) {
    if (Status v = objstore::ValidateKey(rel); !v.ok())
      return v;
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<File> f, c_.Open(path, O_RDONLY));
    objstore::PutSource src = [&](uint64_t off, std::span<char> dst) -> Status {
      size_t done = 0;
      while (done < dst.size()) {
        CIUIC_ASSIGN_OR_RETURN(size_t n,
                               f->Pread(dst.data() + done, dst.size() - done, off + done));
        if (n == 0)
          return Status::IoError(
              fmt::format("{} became shorter while exporting; nothing replaced", path));
        done += n;
      }
      return Status::OK();
    };
    CIUIC_RETURN_IF_ERROR(store_.PutStream(rel, st.size, src));
    CIUIC_RETURN_IF_ERROR(f->Close());
    CIUIC_ASSIGN_OR_RETURN(objstore::ObjectInfo h, store_.Head(rel));
    CIUIC_ASSIGN_OR_RETURN(FileStat now, c_.Stat(path));
    if (now.data_version != st.data_version)
      return Status::Aborted(fmt::format("changed while exporting; run export again"));
    Record r{now.data_version, h.size, h.etag, rel};
    return c_.SetXattr(path, kObjXattr, Encode(r));
  }

  Client& c_;
  std::string action_;
  std::string dir_;
  std::string url_;
  objstore::ObjectStore& store_;
  const bool copy_;  // copy bytes now (--copy) instead of importing released files
  Counts counts_;
  std::mutex print_mu_;
};

Result<std::unique_ptr<objstore::ObjectStore>> OpenStore(const std::string& url) {
  objstore::ObjectStoreConfig cfg;
  cfg.create_local_root = false;  // a repository must exist already
  return objstore::OpenObjectStore(url, cfg);
}

// Exports what closes queued below `dir`. Prints a summary when something was exported or
// failed, or always unless `quiet`.
int Drain(Client& c,
          const std::string& dir,
          const std::string& url,
          objstore::ObjectStore& store,
          bool quiet) {
  Repo repo(c, "export", dir, url, store, false);
  Status st = repo.DrainQueue();
  if (!st.ok()) {
    fmt::print(stderr, "ciuic: repo export: {}: {}\n", dir, st.message());
    return 1;
  }
  const Counts& n = repo.counts();
  if (!quiet || n.exported > 0 || n.failed > 0) {
    fmt::print("{} -> {}: {} exported on close, {} unchanged, {} failed\n", dir, url,
               n.exported.load(), n.unchanged.load(), n.failed.load());
    std::fflush(stdout);
  }
  return n.failed > 0 ? 1 : 0;
}

}  // namespace

int CmdRepo(Client& c,
            const std::string& action,
            const std::string& dir,
            const std::string& url,
            bool copy,
            bool* started) {
  if (started != nullptr)
    *started = false;
  auto fail = [&](const std::string& what, const std::string& why) {
    // Messages that name the path already are not prefixed with it again.
    if (why.find(what + ":") != std::string::npos) {
      fmt::print(stderr, "ciuic: repo {}: {}\n", action, why);
    } else {
      fmt::print(stderr, "ciuic: repo {}: {}: {}\n", action, what, why);
    }
    return 1;
  };
  std::string link_url = url;
  if (action == "link") {
    Result<FileStat> st = c.Stat(dir);
    if (st.ok()) {
      if (!st->is_dir())
        return fail(dir, "not a directory");
      Result<std::string> old = c.GetXattr(dir, kUrlXattr);
      if (old.ok() && *old != url)
        return fail(dir, fmt::format("already linked to {}", *old));
    }
  } else {
    Result<FileStat> st = c.Stat(dir);
    if (!st.ok())
      return fail(dir, st.status().message());
    Result<std::string> u = c.GetXattr(dir, kUrlXattr);
    if (!u.ok())
      return fail(dir, u.status().code() == StatusCode::kNotFound
                           ? "not linked to a data repository (ciuic repo link DIR URL)"
                           : u.status().message());
    link_url = *u;
  }
  Result<std::unique_ptr<objstore::ObjectStore>> store = OpenStore(link_url);
  if (!store.ok())
    return fail(link_url, store.status().message());
  if (action == "link") {
    // Reach the store before changing anything, so a bad URL or credentials change nothing.
    objstore::ListOptions probe;
    probe.max_keys = 1;
    Result<objstore::ListPage> p = (*store)->List(probe);
    if (!p.ok())
      return fail(link_url, p.status().message());
    if (Status s = c.MkdirAll(dir); !s.ok())
      return fail(dir, s.message());
    if (Status s = c.SetXattr(dir, kUrlXattr, link_url); !s.ok())
      return fail(dir, s.message());
  }
  if (action == "link" || action == "sync") {
    // Listed by `ciuic repo list` (links made before the MDS kept this are recorded by a sync).
    if (Status s = c.RepoRecordLink(dir); !s.ok())
      return fail(dir, s.message());
  }
  if (started != nullptr)
    *started = true;  // linked and the store opened: what fails from here on is this pass's
  if (action == "export-closed" || action == "export-closed-quiet")
    return Drain(c, dir, link_url, **store, action == "export-closed-quiet");
  Repo repo(c, action, dir, link_url, **store, copy);
  Status st;
  if (action == "link" || action == "sync") {
    st = repo.Import();
    if (st.ok() && action == "sync")
      st = repo.Walk("");
  } else {
    st = repo.Walk("");
  }
  if (st.ok() && action != "status" && action != "export") {
    // Durable before it says so: the MDS's WAL is synced up to every import and removal above.
    st = c.FsyncDir(dir);
  }
  if (!st.ok())
    return fail(link_url, st.message());
  const Counts& n = repo.counts();
  if (action == "status") {
    Result<RepoQueue> q = c.RepoListQueue(dir, kStatusQueueMax);
    if (!q.ok())
      return fail(dir, q.status().message());
    fmt::print(
        "{} {} files {} from-repository {} changed-here {} new-here {} export-on-close {} "
        "queued {}{}\n",
        dir, link_url, repo.files.load(), repo.linked.load(), repo.modified.load(),
        repo.local_only.load(), q->export_on_close ? "on" : "off", q->entries.size(),
        q->entries.size() >= kStatusQueueMax ? "+" : "");
  } else if (action == "export") {
    fmt::print("{} -> {}: {} exported, {} unchanged, {} failed\n", dir, link_url, n.exported.load(),
               n.unchanged.load(), n.failed.load());
  } else {
    fmt::print("{} <- {}: {} new, {} changed, {} deleted, {} unchanged, {} failed\n", dir, link_url,
               n.added.load(), n.changed.load(), n.deleted.load(), n.unchanged.load(),
               n.failed.load());
  }
  std::fflush(stdout);  // `sync --interval` runs until killed
  int rc = n.failed > 0 ? 1 : 0;
  // Sync and export also export what closes queued: a sync is the export-on-close agent.
  if (action == "sync" || action == "export") {
    if (Drain(c, dir, link_url, **store, true) != 0)
      rc = 1;
  }
  return rc;
}

int CmdRepoAgent(Client& c, double every_s, const std::function<bool()>& stop) {
  using Clock = std::chrono::steady_clock;
  struct Backoff {
    int fails = 0;
    Clock::time_point next{};
  };
  std::map<std::string, Backoff> links;
  const auto every = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::max(every_s, 0.05)));
  std::string last_error;
  fmt::print("ciuic repo agent: exporting what closes queue, every {} s\n", every_s);
  std::fflush(stdout);
  while (!stop || !stop()) {
    Result<std::vector<RepoLink>> dirs = c.RepoLinks();
    if (!dirs.ok()) {
      // The MDS away: said once, and asked again at the next tick.
      if (dirs.status().message() != last_error) {
        last_error = dirs.status().message();
        fmt::print(stderr, "ciuic: repo agent: {}\n", last_error);
      }
    } else {
      last_error.clear();
      std::map<std::string, Backoff> now_links;
      for (const RepoLink& l : *dirs) {
        if (!l.export_on_close)
          continue;
        auto it = links.find(l.path);
        now_links[l.path] = it == links.end() ? Backoff{} : it->second;
      }
      links.swap(now_links);
      for (auto& [dir, b] : links) {
        const Clock::time_point now = Clock::now();
        if (now < b.next)
          continue;
        if (CmdRepo(c, "export-closed-quiet", dir, "") == 0) {
          b = Backoff{};
        } else {
          // Failed files stay queued; a failing link is tried less often, up to once a minute.
          ++b.fails;
          b.next = now + std::min<Clock::duration>(every * (int64_t{1} << std::min(b.fails, 10)),
                                                   std::chrono::seconds(60));
        }
      }
    }
    std::this_thread::sleep_for(every);
  }
  return 0;
}

int CmdRepoList(Client& c) {
  Result<std::vector<RepoLink>> links = c.RepoLinks();
  if (!links.ok()) {
    fmt::print(stderr, "ciuic: repo list: {}\n", links.status().message());
    return 1;
  }
  int rc = 0;
  for (const RepoLink& l : *links) {
    Result<std::string> url = c.GetXattr(l.path, kUrlXattr);
    Result<RepoQueue> q = c.RepoListQueue(l.path, kStatusQueueMax);
    if (!url.ok() || !q.ok()) {
      fmt::print(stderr, "ciuic: repo list: {}: {}\n", l.path,
                 (!url.ok() ? url.status() : q.status()).message());
      rc = 1;
      continue;
    }
    fmt::print("{} {} export-on-close {} queued {}{}\n", l.path, *url,
               l.export_on_close ? "on" : "off", q->entries.size(),
               q->entries.size() >= kStatusQueueMax ? "+" : "");
  }
  std::fflush(stdout);
  return rc;
}

int CmdRepoExportOnClose(Client& c, const std::string& dir, bool on) {
  Result<std::string> u = c.GetXattr(dir, kUrlXattr);
  if (!u.ok()) {
    fmt::print(stderr, "ciuic: repo: {}: {}\n", dir,
               u.status().code() == StatusCode::kNotFound
                   ? "not linked to a data repository (ciuic repo link DIR URL)"
                   : u.status().message());
    return 1;
  }
  if (Status s = c.RepoSetExportOnClose(dir, on); !s.ok()) {
    fmt::print(stderr, "ciuic: repo: {}: {}\n", dir, s.message());
    return 1;
  }
  fmt::print("{}: export on close {}\n", dir, on ? "on" : "off");
  std::fflush(stdout);
  return 0;
}

}  // namespace ciuic::cli
