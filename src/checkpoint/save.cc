// Save side: data files written with many async writes in flight, part records, the atomic
// commit of MANIFEST.json and the `latest` pointer, and cleanup of files no manifest names.
#include <fcntl.h>
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "checkpoint/manifest.h"
#include "common/crc32c.h"

namespace ciuic::checkpoint {
namespace {

std::string Join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string Parent(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0)
    return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string Trim(std::string path) {
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  return path;
}

uint64_t RoundUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}

const ConvertRule* RuleFor(const SaveOptions& o, const TensorToSave& t) {
  if (t.dtype != "float32")
    return nullptr;
  for (const ConvertRule& r : o.convert) {
    if (::fnmatch(r.pattern.c_str(), t.name.c_str(), 0) == 0)
      return &r;
  }
  return nullptr;
}

Status CheckOptions(const SaveOptions& o) {
  if (o.chunk_bytes == 0 || o.chunk_bytes % 4096 != 0)
    return Status::InvalidArgument("chunk_bytes must be a positive multiple of 4096");
  if (!o.extra_json.empty()) {
    Result<Manifest> probe = DecodeManifest(
        fmt::format(R"({{"format":"ciuic-checkpoint","version":1,"save_id":"x","world_size":1,)"
                    R"("chunk_bytes":4096,"extra":{},"tensors":[]}})",
                    o.extra_json),
        "extra_json");
    if (!probe.ok())
      return Status::InvalidArgument("extra_json is not valid JSON");
  }
  return Status::OK();
}

// Pool of at most `max` conversion buffers, allocated on first use (a save without conversion
// needs none) and not zeroed (always overwritten). Few buffers on purpose: each new one costs
// page faults, and 8 converted writes in flight keep every OST busy. Take blocks (caller thread)
// until a buffer is free; Give never blocks (write completions call it).
class BufferPool {
 public:
  BufferPool(size_t bytes, size_t max) : values_(bytes / 2), max_(max < 1 ? 1 : max) {}
  std::unique_ptr<uint16_t[]> Take() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !free_.empty() || made_ < max_; });
    if (!free_.empty()) {
      auto b = std::move(free_.back());
      free_.pop_back();
      return b;
    }
    ++made_;
    lock.unlock();
    return std::make_unique_for_overwrite<uint16_t[]>(values_);
  }
  void Give(std::unique_ptr<uint16_t[]> b) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(b));
    cv_.notify_one();
  }

 private:
  size_t values_;
  size_t max_;
  size_t made_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<uint16_t[]>> free_;
};

Result<FileLayout> WideLayout(Client& client, const SaveOptions& o, uint64_t total) {
  uint32_t count = o.stripe_count;
  if (count == 0) {
    CIUIC_ASSIGN_OR_RETURN(std::vector<OstStatus> osts, client.OstMap());
    for (const OstStatus& s : osts)
      count += s.state == "up" ? 1 : 0;
  }
  const uint64_t stripes_needed =
      std::max<uint64_t>(1, (total + o.stripe_size - 1) / o.stripe_size);
  count = static_cast<uint32_t>(
      std::clamp<uint64_t>(std::min<uint64_t>(count, stripes_needed), 1, kMaxStripeCount));
  FileLayout layout;
  LayoutComponent c;
  c.id = 1;
  c.start = 0;
  c.end = kLayoutEof;
  c.stripe_size = o.stripe_size;
  c.stripe_count = count;
  layout.components.push_back(c);
  layout.pattern = 1;
  CIUIC_RETURN_IF_ERROR(layout.Validate());
  return layout;
}

}  // namespace

Result<size_t> WriteConverted(
    File& file, uint64_t offset, const float* src, size_t count, HalfKind kind, int threads) {
  constexpr size_t kValues = size_t{1} << 20;  // 2 MiB written per chunk
  constexpr int kDepth = 4;
  BufferPool pool(kValues * 2, kDepth);
  Inflight inflight(kDepth);
  for (size_t done = 0; done < count && !inflight.failed(); done += kValues) {
    const size_t n = std::min(kValues, count - done);
    inflight.Acquire();
    std::shared_ptr<uint16_t[]> buf(
        pool.Take().release(), [&pool](uint16_t* p) { pool.Give(std::unique_ptr<uint16_t[]>(p)); });
    NarrowFloat32(src + done, buf.get(), n, kind, threads);
    file.PwriteAsync(buf.get(), n * 2, offset + done * 2,
                     [&inflight, buf, n](Result<size_t> r) mutable {
                       Status st = r.ok() ? Status::OK() : r.status();
                       if (r.ok() && *r != n * 2)
                         st = Status::IoError("short write");
                       buf.reset();
                       inflight.Release(st);
                     });
  }
  CIUIC_RETURN_IF_ERROR(inflight.Wait());
  return count * 2;
}

namespace {

// Writes one rank's data file. With `part_out`, hands the part record to the caller (a single
// writer commits it from memory); otherwise writes it durably for the committer.
Result<SaveStats> SaveShardImpl(Client& client,
                                const std::string& path_in,
                                const std::string& save_id,
                                int rank,
                                const std::vector<TensorToSave>& tensors,
                                const SaveOptions& o,
                                Manifest* part_out) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = Trim(path_in);
  if (!ValidSaveId(save_id))
    return Status::InvalidArgument(fmt::format("bad save id '{}'", save_id));
  if (rank < 0)
    return Status::InvalidArgument("rank must be >= 0");
  CIUIC_RETURN_IF_ERROR(CheckOptions(o));

  // Plan: stored dtype, size and offset of every tensor in this rank's data file.
  Manifest part;
  part.save_id = save_id;
  part.chunk_bytes = o.chunk_bytes;
  part.extra_json = o.extra_json;
  std::vector<const ConvertRule*> rules;
  std::set<std::string> names;
  uint64_t end = 0;
  SaveStats stats;
  const std::string data_name = DataFileName(save_id, rank);
  for (const TensorToSave& t : tensors) {
    const size_t esize = DTypeSize(t.dtype);
    if (esize == 0)
      return Status::InvalidArgument(
          fmt::format("tensor '{}': unknown dtype '{}'", t.name, t.dtype));
    if (t.name.empty() || !names.insert(t.name).second)
      return Status::InvalidArgument(fmt::format("tensor name '{}' empty or repeated", t.name));
    const int64_t numel = NumElements(t.shape);
    if (numel < 0 || static_cast<uint64_t>(numel) * esize != t.nbytes)
      return Status::InvalidArgument(
          fmt::format("tensor '{}': {} bytes do not match its shape and dtype", t.name, t.nbytes));
    if (t.nbytes > 0 && t.data == nullptr)
      return Status::InvalidArgument(fmt::format("tensor '{}': no data", t.name));
    TensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.global_shape.empty() ? t.shape : t.global_shape;
    ShardInfo s;
    s.file = data_name;
    s.shape = t.shape;
    s.offsets = t.offsets.empty() ? std::vector<int64_t>(t.shape.size(), 0) : t.offsets;
    if (info.shape.size() != t.shape.size() || s.offsets.size() != t.shape.size())
      return Status::InvalidArgument(
          fmt::format("tensor '{}': global shape or offsets do not match its rank", t.name));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (s.offsets[d] < 0 || s.offsets[d] + t.shape[d] > info.shape[d])
        return Status::InvalidArgument(
            fmt::format("tensor '{}': shard lies outside the global shape", t.name));
    }
    const ConvertRule* rule = RuleFor(o, t);
    rules.push_back(rule);
    info.stored_dtype =
        rule == nullptr ? t.dtype : (rule->to == HalfKind::kFloat16 ? "float16" : "bfloat16");
    s.length = rule == nullptr ? t.nbytes : t.nbytes / 2;
    // Big tensors start on a stripe boundary (full-stripe writes); small ones on a 4 KiB block.
    s.offset = RoundUp(end, s.length >= (1u << 20) ? o.stripe_size : 4096);
    end = s.offset + s.length;
    stats.bytes_in += t.nbytes;
    stats.bytes_written += s.length;
    info.shards.push_back(std::move(s));
    part.tensors.push_back(std::move(info));
  }
  stats.tensors = tensors.size();

  CIUIC_RETURN_IF_ERROR(client.MkdirAll(path));
  CIUIC_ASSIGN_OR_RETURN(FileLayout layout, WideLayout(client, o, end));
  OpenOptions oo;
  oo.size_hint = end;
  oo.layout = &layout;
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<File> file,
                         client.Open(Join(path, data_name), O_CREAT | O_EXCL | O_WRONLY, 0644, oo));

  Inflight inflight(o.max_inflight);
  BufferPool pool(o.chunk_bytes, 8);
  for (size_t i = 0; i < tensors.size() && !inflight.failed(); ++i) {
    const TensorToSave& t = tensors[i];
    ShardInfo& s = part.tensors[i].shards[0];
    const bool convert = rules[i] != nullptr;
    for (uint64_t pos = 0; pos < s.length && !inflight.failed(); pos += o.chunk_bytes) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(o.chunk_bytes, s.length - pos));
      inflight.Acquire();
      const void* src;
      std::shared_ptr<uint16_t[]> buf;
      if (convert) {
        buf = std::shared_ptr<uint16_t[]>(pool.Take().release(), [&pool](uint16_t* p) {
          pool.Give(std::unique_ptr<uint16_t[]>(p));
        });
        NarrowFloat32(static_cast<const float*>(t.data) + pos / 2, buf.get(), len / 2, rules[i]->to,
                      o.convert_threads);
        src = buf.get();
      } else {
        src = static_cast<const char*>(t.data) + pos;
      }
      s.crc32c.push_back(Crc32c(src, len));
      file->PwriteAsync(src, len, s.offset + pos, [&inflight, buf, len](Result<size_t> r) mutable {
        Status st = r.ok() ? Status::OK() : r.status();
        if (r.ok() && *r != len)
          st = Status::IoError("short write");
        buf.reset();
        inflight.Release(st);
      });
    }
  }
  Status st = inflight.Wait();
  if (st.ok())
    st = file->Fsync();
  Status closed = file->Close();
  if (st.ok())
    st = closed;
  if (!st.ok())
    return st.WithContext(fmt::format("checkpoint {} rank {}", path, rank));
  if (part_out != nullptr) {
    *part_out = std::move(part);
  } else {
    CIUIC_RETURN_IF_ERROR(
        WriteDurable(client, Join(path, PartFileName(save_id, rank)), EncodeManifest(part, rank)));
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

// Commits save `save_id`: the parts come from `memory_part` (world size 1) or from the part files.
Status CommitImpl(Client& client,
                  const std::string& path_in,
                  const std::string& save_id,
                  int world_size,
                  const SaveOptions& o,
                  Manifest* memory_part) {
  const std::string path = Trim(path_in);
  if (!ValidSaveId(save_id) || world_size < 1)
    return Status::InvalidArgument("bad save id or world size");
  Manifest m;
  m.save_id = save_id;
  m.world_size = world_size;
  m.chunk_bytes = o.chunk_bytes;
  m.extra_json = o.extra_json;
  std::map<std::string, size_t> index;
  for (int r = 0; r < world_size; ++r) {
    const std::string part_path = Join(path, PartFileName(save_id, r));
    Manifest part;
    if (memory_part != nullptr) {
      part = std::move(*memory_part);
    } else {
      Result<std::string> text = client.ReadFile(part_path);
      if (!text.ok())
        return text.status().WithContext(fmt::format("commit of {}: part of rank {}", path, r));
      CIUIC_ASSIGN_OR_RETURN(part, DecodeManifest(*text, part_path));
    }
    if (part.save_id != save_id || part.chunk_bytes != m.chunk_bytes)
      return Status::InvalidArgument(
          fmt::format("{}: part disagrees on save id or chunk size", part_path));
    for (TensorInfo& t : part.tensors) {
      auto it = index.find(t.name);
      if (it == index.end()) {
        index.emplace(t.name, m.tensors.size());
        m.tensors.push_back(std::move(t));
        continue;
      }
      TensorInfo& have = m.tensors[it->second];
      if (have.dtype != t.dtype || have.stored_dtype != t.stored_dtype || have.shape != t.shape)
        return Status::InvalidArgument(
            fmt::format("tensor '{}': ranks disagree on dtype or global shape", t.name));
      for (ShardInfo& s : t.shards)
        have.shards.push_back(std::move(s));
    }
  }
  // Shards must tile each tensor: no overlap (checked along dim 0) and full coverage.
  for (TensorInfo& t : m.tensors) {
    uint64_t covered = 0;
    for (const ShardInfo& s : t.shards)
      covered += static_cast<uint64_t>(NumElements(s.shape));
    if (covered != t.numel())
      return Status::InvalidArgument(
          fmt::format("tensor '{}': shards hold {} of {} elements (saved twice or missing)", t.name,
                      covered, t.numel()));
    std::sort(t.shards.begin(), t.shards.end(),
              [](const ShardInfo& a, const ShardInfo& b) { return a.offsets < b.offsets; });
  }

  // Every data file must still be there and long enough (a concurrent cleanup, or an operator,
  // may have removed an uncommitted save's files): never commit a manifest that cannot load.
  std::map<std::string, uint64_t> file_ends;
  for (const TensorInfo& t : m.tensors) {
    for (const ShardInfo& s : t.shards) {
      if (s.length > 0)  // an empty tensor's offset may lie past the end of the file
        file_ends[s.file] = std::max(file_ends[s.file], s.offset + s.length);
    }
  }
  for (const auto& [name, need] : file_ends) {
    Result<FileStat> fs = client.Stat(Join(path, name));
    if (!fs.ok())
      return fs.status().WithContext(fmt::format("commit of {}: data file", path));
    if (fs->size < need)
      return Status::Corruption(
          fmt::format("commit of {}: data file {} has {} of {} bytes", path, name, fs->size, need));
  }

  // The commit point: temp manifest made durable, renamed over MANIFEST.json, rename made durable.
  const std::string tmp = Join(path, fmt::format(".{}.tmp-{}", kManifestName, save_id));
  CIUIC_RETURN_IF_ERROR(WriteDurable(client, tmp, EncodeManifest(m)));
  CIUIC_RETURN_IF_ERROR(client.Rename(tmp, Join(path, kManifestName)));
  const std::string parent = Parent(path);
  if (o.update_latest) {
    // The synced write of the new pointer also makes the manifest rename durable.
    const std::string ltmp = Join(parent, fmt::format(".{}.tmp-{}", kLatestName, save_id));
    CIUIC_RETURN_IF_ERROR(WriteDurable(client, ltmp, BaseName(path) + "\n"));
    CIUIC_RETURN_IF_ERROR(client.Rename(ltmp, Join(parent, kLatestName)));
  }
  CIUIC_RETURN_IF_ERROR(SyncNamespace(client, path));

  // Committed. Remove parts of this save and files of older saves at this path.
  CIUIC_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, client.ReadDir(path));
  for (const DirEntry& e : entries) {
    const std::string id = SaveIdOfFile(e.name);
    const bool part_file = e.name.rfind(".part-", 0) == 0;
    if ((!id.empty() && id != save_id) || (id == save_id && part_file))
      client.Unlink(Join(path, e.name))
          .IgnoreError();  // best effort; ListIncomplete shows leftovers
  }
  if (o.clean_incomplete)
    CleanIncomplete(client, parent, path, o.clean_min_age_s).IgnoreError();  // best effort
  return Status::OK();
}

}  // namespace

Result<SaveStats> SaveShard(Client& client,
                            const std::string& path,
                            const std::string& save_id,
                            int rank,
                            const std::vector<TensorToSave>& tensors,
                            const SaveOptions& o) {
  return SaveShardImpl(client, path, save_id, rank, tensors, o, nullptr);
}

Status Commit(Client& client,
              const std::string& path,
              const std::string& save_id,
              int world_size,
              const SaveOptions& o) {
  return CommitImpl(client, path, save_id, world_size, o, nullptr);
}

Result<SaveStats> Save(Client& client,
                       const std::string& path,
                       const std::vector<TensorToSave>& tensors,
                       const SaveOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string save_id = fmt::format("{:016x}", rng());
  Manifest part;
  Result<SaveStats> stats = SaveShardImpl(client, path, save_id, 0, tensors, options, &part);
  if (!stats.ok()) {
    Abort(client, path, save_id).IgnoreError();  // best effort; the error matters more
    return stats;
  }
  Status st = CommitImpl(client, path, save_id, 1, options, &part);
  if (!st.ok()) {
    Abort(client, path, save_id).IgnoreError();
    return st;
  }
  stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

Status Abort(Client& client, const std::string& path_in, const std::string& save_id) {
  const std::string path = Trim(path_in);
  Result<std::vector<DirEntry>> entries = client.ReadDir(path);
  if (!entries.ok())
    return entries.status().code() == StatusCode::kNotFound ? Status::OK() : entries.status();
  Status first;
  for (const DirEntry& e : *entries) {
    if (SaveIdOfFile(e.name) == save_id) {
      Status st = client.Unlink(Join(path, e.name));
      if (!st.ok() && first.ok())
        first = st;
    }
  }
  return first;
}

Result<std::string> Latest(Client& client, const std::string& root) {
  Result<std::string> text = client.ReadFile(Join(Trim(root), kLatestName));
  if (!text.ok())
    return text.status().code() == StatusCode::kNotFound ? Result<std::string>(std::string())
                                                         : text.status();
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' '))
    name.pop_back();
  if (name.find('/') != std::string::npos)
    return Status::Corruption(fmt::format("{}/latest: bad checkpoint name", root));
  return name;
}

Result<Manifest> ReadManifest(Client& client, const std::string& path_in) {
  std::string path = Trim(path_in);
  Result<std::string> text = client.ReadFile(Join(path, kManifestName));
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    CIUIC_ASSIGN_OR_RETURN(std::string latest, Latest(client, path));
    if (latest.empty())
      return Status::NotFound(fmt::format("{}: no complete checkpoint (no {} and no {})", path,
                                          kManifestName, kLatestName));
    path = Join(path, latest);
    text = client.ReadFile(Join(path, kManifestName));
  }
  if (!text.ok())
    return text.status().WithContext("checkpoint manifest");
  CIUIC_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(*text, Join(path, kManifestName)));
  m.dir = path;
  return m;
}

Result<std::vector<std::string>> ListIncomplete(Client& client, const std::string& root_in) {
  const std::string root = Trim(root_in);
  std::vector<std::string> out;
  CIUIC_ASSIGN_OR_RETURN(std::vector<DirEntry> subdirs, client.ReadDir(root));
  for (const DirEntry& d : subdirs) {
    if (d.type != S_IFDIR)
      continue;
    const std::string dir = Join(root, d.name);
    Result<std::vector<DirEntry>> entries = client.ReadDir(dir);
    if (!entries.ok())
      continue;  // removed meanwhile, or not ours to read
    std::string committed_id;
    bool has_manifest = false;
    bool has_part = false;
    std::set<std::string> ids;
    for (const DirEntry& e : *entries) {
      has_manifest |= e.name == kManifestName;
      has_part |= e.name.rfind(".part-", 0) == 0;
      const std::string id = SaveIdOfFile(e.name);
      if (!id.empty())
        ids.insert(id);
    }
    // A committed checkpoint with the files of one save and no part records is complete: no need
    // to read its (possibly large) manifest.
    if (has_manifest && ids.size() <= 1 && !has_part)
      continue;
    if (has_manifest) {
      Result<std::string> text = client.ReadFile(Join(dir, kManifestName));
      if (!text.ok())
        continue;
      Result<Manifest> m = DecodeManifest(*text, dir);
      if (!m.ok())
        continue;  // not ours to judge
      committed_id = m->save_id;
    }
    bool listed_dir = false;
    for (const DirEntry& e : *entries) {
      const std::string id = SaveIdOfFile(e.name);
      if (id.empty() || id == committed_id)
        continue;
      if (!has_manifest) {
        if (!listed_dir)
          out.push_back(dir);
        listed_dir = true;
      } else {
        out.push_back(Join(dir, e.name));
      }
    }
  }
  return out;
}

Status CleanIncomplete(Client& client,
                       const std::string& root,
                       const std::string& keep_in,
                       int min_age_s) {
  const std::string keep = Trim(keep_in);
  CIUIC_ASSIGN_OR_RETURN(std::vector<std::string> list, ListIncomplete(client, root));
  Status first;
  auto note = [&first](Status st) {
    if (!st.ok() && st.code() != StatusCode::kNotFound && first.ok())
      first = st;
  };
  for (const std::string& p : list) {
    if (!keep.empty() && (p == keep || p.rfind(keep + "/", 0) == 0))
      continue;
    Result<FileStat> st = client.Lstat(p);
    if (!st.ok())
      continue;
    const int64_t now = static_cast<int64_t>(::time(nullptr));
    if (!st->is_dir()) {
      if (min_age_s <= 0 || now - st->mtime_sec >= min_age_s)
        note(client.Unlink(p));
      continue;
    }
    Result<std::vector<DirEntry>> entries = client.ReadDir(p);
    if (!entries.ok())
      continue;
    if (min_age_s > 0) {
      int64_t newest = st->mtime_sec;
      for (const DirEntry& e : *entries) {
        Result<FileStat> fs = client.Lstat(Join(p, e.name));
        if (fs.ok())
          newest = std::max(newest, fs->mtime_sec);
      }
      if (now - newest < min_age_s)
        continue;  // maybe a save in progress
    }
    for (const DirEntry& e : *entries) {
      if (!SaveIdOfFile(e.name).empty() || e.name.rfind(".MANIFEST.json.tmp-", 0) == 0)
        note(client.Unlink(Join(p, e.name)));
    }
    // Leaves the directory if it holds anything else (not ours to remove).
    client.Rmdir(p).IgnoreError();
  }
  return first;
}

}  // namespace ciuic::checkpoint
