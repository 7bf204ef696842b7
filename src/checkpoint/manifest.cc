#include "checkpoint/manifest.h"

#include <fcntl.h>

#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ciuic::checkpoint {

using nlohmann::json;

size_t DTypeSize(const std::string& dtype) {
  static const std::pair<const char*, size_t> kSizes[] = {
      {"float32", 4},   {"float64", 8},     {"float16", 2},   {"bfloat16", 2}, {"int8", 1},
      {"uint8", 1},     {"int16", 2},       {"int32", 4},     {"int64", 8},    {"bool", 1},
      {"complex64", 8}, {"complex128", 16}, {"complex32", 4}, {"uint16", 2},   {"uint32", 4},
      {"uint64", 8},    {"quint8", 1},      {"qint8", 1},     {"qint32", 4},   {"quint4x2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name)
      return size;
  }
  return 0;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return -1;
    n *= d;
  }
  return n;
}

uint64_t TensorInfo::numel() const {
  const int64_t n = NumElements(shape);
  return n < 0 ? 0 : static_cast<uint64_t>(n);
}

uint64_t TensorInfo::stored_bytes() const {
  return numel() * DTypeSize(stored_dtype);
}

const TensorInfo* Manifest::Find(const std::string& name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name)
      return &t;
  }
  return nullptr;
}

std::string DataFileName(const std::string& save_id, int rank) {
  return fmt::format("data-{}-r{}.bin", save_id, rank);
}

std::string PartFileName(const std::string& save_id, int rank) {
  return fmt::format(".part-{}-r{}.json", save_id, rank);
}

std::string SaveIdOfFile(const std::string& name) {
  std::string rest;
  if (name.rfind("data-", 0) == 0)
    rest = name.substr(5);
  else if (name.rfind(".part-", 0) == 0)
    rest = name.substr(6);
  else
    return "";
  const size_t dash = rest.rfind("-r");
  return dash == std::string::npos ? "" : rest.substr(0, dash);
}

bool ValidSaveId(const std::string& id) {
  if (id.empty() || id.size() > 64)
    return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok)
      return false;
  }
  return true;
}

std::string EncodeManifest(const Manifest& m, int rank) {
  json j;
  j["format"] = rank >= 0 ? "ciuic-checkpoint-part" : "ciuic-checkpoint";
  j["version"] = kFormatVersion;
  j["save_id"] = m.save_id;
  j["world_size"] = m.world_size;
  if (rank >= 0)
    j["rank"] = rank;
  j["chunk_bytes"] = m.chunk_bytes;
  j["extra"] = m.extra_json.empty() ? json(nullptr) : json::parse(m.extra_json);
  json tensors = json::array();
  for (const TensorInfo& t : m.tensors) {
    json jt;
    jt["name"] = t.name;
    jt["dtype"] = t.dtype;
    jt["stored_dtype"] = t.stored_dtype;
    jt["shape"] = t.shape;
    json shards = json::array();
    for (const ShardInfo& s : t.shards) {
      shards.push_back({{"file", s.file},
                        {"offset", s.offset},
                        {"length", s.length},
                        {"shape", s.shape},
                        {"offsets", s.offsets},
                        {"crc32c", s.crc32c}});
    }
    jt["shards"] = std::move(shards);
    tensors.push_back(std::move(jt));
  }
  j["tensors"] = std::move(tensors);
  return j.dump(1) + "\n";
}

namespace {

constexpr int kMaxJsonDepth = 64;

// Exact integer getters: nlohmann's get<int>() and get<uint64_t>() convert whatever number is
// there, so 2^32 + 1 read as world_size 1, -1 as a huge uint64_t, and a float out of range was
// undefined behaviour. These accept only integers in range and throw (caught below) otherwise.
int64_t GetInt(const json& j, int64_t lo, int64_t hi) {
  if (!j.is_number_integer())
    throw std::invalid_argument(fmt::format("expected an integer, got {}", j.type_name()));
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi))
      throw std::out_of_range(fmt::format("{} is over {}", u, hi));
    return static_cast<int64_t>(u);
  }
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi)
    throw std::out_of_range(fmt::format("{} is outside [{}, {}]", v, lo, hi));
  return v;
}

uint64_t GetUint(const json& j, uint64_t hi) {
  if (!j.is_number_integer() || (!j.is_number_unsigned() && j.get<int64_t>() < 0))
    throw std::invalid_argument(fmt::format("expected an unsigned integer, got {}", j.dump()));
  const uint64_t v = j.get<uint64_t>();
  if (v > hi)
    throw std::out_of_range(fmt::format("{} is over {}", v, hi));
  return v;
}

template <typename T>
std::vector<T> GetInts(const json& j, int64_t lo, int64_t hi) {
  if (!j.is_array())
    throw std::invalid_argument(fmt::format("expected an array, got {}", j.type_name()));
  std::vector<T> v;
  v.reserve(j.size());
  for (const json& e : j)
    v.push_back(static_cast<T>(GetInt(e, lo, hi)));
  return v;
}

Status CheckTensor(const TensorInfo& t, uint64_t chunk_bytes) {
  if (t.name.empty())
    return Status::Corruption("tensor with an empty name");
  const size_t stored = DTypeSize(t.stored_dtype);
  if (stored == 0 || DTypeSize(t.dtype) == 0)
    return Status::Corruption(fmt::format("tensor '{}': unknown dtype", t.name));
  if (NumElements(t.shape) < 0)
    return Status::Corruption(fmt::format("tensor '{}': bad shape", t.name));
  for (const ShardInfo& s : t.shards) {
    const int64_t n = NumElements(s.shape);
    // The byte count must not wrap: n * stored did for n near 2^62, so a shard of a huge shape
    // could claim a small length and pass.
    if (n < 0 || s.shape.size() != t.shape.size() || s.offsets.size() != t.shape.size() ||
        static_cast<uint64_t>(n) > std::numeric_limits<uint64_t>::max() / stored ||
        s.length != static_cast<uint64_t>(n) * stored)
      return Status::Corruption(fmt::format("tensor '{}': bad shard in {}", t.name, s.file));
    // Loads read [offset, offset + length) with a signed file offset.
    if (s.offset > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - s.length)
      return Status::Corruption(
          fmt::format("tensor '{}': shard in {} ends past the largest file", t.name, s.file));
    for (size_t d = 0; d < t.shape.size(); ++d) {
      // shape[d] >= 0 (NumElements checked it); subtract instead of adding, which overflowed.
      if (s.offsets[d] < 0 || s.offsets[d] > t.shape[d] || s.shape[d] > t.shape[d] - s.offsets[d])
        return Status::Corruption(
            fmt::format("tensor '{}': shard in {} lies outside the tensor", t.name, s.file));
    }
    const uint64_t chunks = chunk_bytes == 0 ? 0 : (s.length + chunk_bytes - 1) / chunk_bytes;
    if (s.crc32c.size() != chunks)
      return Status::Corruption(
          fmt::format("tensor '{}': {} checksums for {} chunks", t.name, s.crc32c.size(), chunks));
    if (s.file.empty() || s.file.find('/') != std::string::npos)
      return Status::Corruption(fmt::format("tensor '{}': bad file name", t.name));
  }
  return Status::OK();
}

}  // namespace

Result<Manifest> DecodeManifest(const std::string& text, const std::string& what) {
  Manifest m;
  try {
    // Nesting is bounded: dump() of the "extra" value recurses once per level.
    const json j = json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw std::out_of_range("JSON nested too deeply");
      return true;
    });
    const std::string format = j.at("format").get<std::string>();
    if (format != "ciuic-checkpoint" && format != "ciuic-checkpoint-part")
      return Status::Corruption(fmt::format("{}: not a ciuic checkpoint manifest", what));
    if (!j.at("version").is_number_integer() || j.at("version") != kFormatVersion)
      return Status::Corruption(
          fmt::format("{}: unsupported version {}", what, j.at("version").dump()));
    m.save_id = j.at("save_id").get<std::string>();
    m.world_size = static_cast<int>(GetInt(j.at("world_size"), 1, INT32_MAX));
    m.chunk_bytes = GetUint(j.at("chunk_bytes"), uint64_t{1} << 40);
    if (!j.at("extra").is_null())
      m.extra_json = j.at("extra").dump();
    for (const json& jt : j.at("tensors")) {
      TensorInfo t;
      t.name = jt.at("name").get<std::string>();
      t.dtype = jt.at("dtype").get<std::string>();
      t.stored_dtype = jt.at("stored_dtype").get<std::string>();
      t.shape = GetInts<int64_t>(jt.at("shape"), 0, INT64_MAX);
      for (const json& js : jt.at("shards")) {
        ShardInfo s;
        s.file = js.at("file").get<std::string>();
        s.offset = GetUint(js.at("offset"), UINT64_MAX);
        s.length = GetUint(js.at("length"), UINT64_MAX);
        s.shape = GetInts<int64_t>(js.at("shape"), 0, INT64_MAX);
        s.offsets = GetInts<int64_t>(js.at("offsets"), 0, INT64_MAX);
        s.crc32c = GetInts<uint32_t>(js.at("crc32c"), 0, UINT32_MAX);
        t.shards.push_back(std::move(s));
      }
      Status st = CheckTensor(t, m.chunk_bytes);
      if (!st.ok())
        return st.WithContext(what);
      m.tensors.push_back(std::move(t));
    }
  } catch (const std::exception& e) {
    return Status::Corruption(fmt::format("{}: bad manifest: {}", what, e.what()));
  }
  if (m.chunk_bytes == 0 || m.chunk_bytes % 4096 != 0 || m.world_size < 1)
    return Status::Corruption(fmt::format("{}: bad chunk_bytes or world_size", what));
  return m;
}

Status WriteDurable(Client& client, const std::string& path, const std::string& data) {
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                         client.Open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644));
  Result<size_t> w = f->Pwrite(data.data(), data.size(), 0);
  Status st = w.ok() ? f->Fsync() : w.status();
  Status closed = f->Close();
  CIUIC_RETURN_IF_ERROR(st);
  return closed;
}

Status SyncNamespace(Client& client, const std::string& dir) {
  return client.FsyncDir(dir);
}

void Inflight::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return n_ < max_; });
  ++n_;
}

void Inflight::Release(const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok() && first_.ok())
    first_ = st;
  --n_;
  cv_.notify_all();
}

Status Inflight::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return n_ == 0; });
  return first_;
}

bool Inflight::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return !first_.ok();
}

}  // namespace ciuic::checkpoint
