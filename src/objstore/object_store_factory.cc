#include "objstore/object_store_factory.h"

#include <memory>
#include <mutex>

#include "objstore/local_dir_store.h"
#include "objstore/mem_object_store.h"
#include "objstore/sigv4.h"

namespace ciuic::objstore {
namespace {

Result<std::unique_ptr<ObjectStore>> OpenS3(const ObjectStoreUrl& u, const ObjectStoreConfig& cfg) {
  S3Options opts = cfg.s3;
  opts.bucket = u.authority;
  opts.root_prefix = u.path;
  if (!u.endpoint.empty())
    opts.endpoint = u.endpoint;
  if (!u.region.empty())
    opts.region = u.region;
  if (u.addressing == "path")
    opts.addressing = S3Options::Addressing::kPath;
  else if (u.addressing == "virtual")
    opts.addressing = S3Options::Addressing::kVirtualHosted;
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<S3Store> store, S3Store::Open(std::move(opts), cfg.env));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

Result<std::unique_ptr<ObjectStore>> OpenFile(const ObjectStoreUrl& u,
                                              const ObjectStoreConfig& cfg) {
  LocalDirStore::Options opts;
  opts.create = cfg.create_local_root;
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<LocalDirStore> store, LocalDirStore::Open(u.path, opts));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

// mem://NAME: one MemObjectStore per name in the process, so a test's servers and the test
// itself see the same objects. Each open returns a handle that forwards to it.
class SharedMemStore final : public ObjectStore {
 public:
  explicit SharedMemStore(std::shared_ptr<MemObjectStore> s) : s_(std::move(s)) {}
  Status Put(std::string_view key, std::string_view data, const PutOptions& opts) override {
    return s_->Put(key, data, opts);
  }
  Status PutStream(std::string_view key,
                   uint64_t size,
                   const PutSource& source,
                   const PutOptions& opts) override {
    return s_->PutStream(key, size, source, opts);
  }
  Result<size_t> Get(std::string_view key, uint64_t offset, std::span<char> dst) override {
    return s_->Get(key, offset, dst);
  }
  Result<ObjectInfo> Head(std::string_view key) override { return s_->Head(key); }
  Result<ListPage> List(const ListOptions& opts) override { return s_->List(opts); }
  Status Delete(std::string_view key) override { return s_->Delete(key); }
  std::string Describe() const override { return s_->Describe(); }

 private:
  std::shared_ptr<MemObjectStore> s_;
};

Result<std::unique_ptr<ObjectStore>> OpenMem(const ObjectStoreUrl& u,
                                             const ObjectStoreConfig& /*cfg*/) {
  return std::unique_ptr<ObjectStore>(
      std::make_unique<SharedMemStore>(SharedMemObjectStore(u.authority)));
}

}  // namespace

std::shared_ptr<MemObjectStore> SharedMemObjectStore(const std::string& name) {
  static std::mutex mu;
  static auto* stores = new std::map<std::string, std::shared_ptr<MemObjectStore>>();
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<MemObjectStore>& s = (*stores)[name];
  if (s == nullptr) {
    MemObjectStore::Options opts;
    opts.name = name;
    s = std::make_shared<MemObjectStore>(opts);
  }
  return s;
}

Result<ObjectStoreUrl> ParseObjectStoreUrl(std::string_view url) {
  auto bad = [url](const std::string& why) {
    return Status::InvalidArgument("object store URL \"" + std::string(url) + "\": " + why);
  };
  size_t sep = url.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    return bad("expected s3://bucket/prefix, file:///dir or mem://name");
  }
  ObjectStoreUrl out;
  out.scheme = std::string(url.substr(0, sep));
  for (char& c : out.scheme) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  std::string_view rest = url.substr(sep + 3);
  // s3 parameters follow the first '?' (an endpoint holds slashes of its own).
  std::string_view query;
  if (out.scheme == "s3" && rest.find('?') != std::string_view::npos) {
    query = rest.substr(rest.find('?') + 1);
    rest = rest.substr(0, rest.find('?'));
  }
  size_t slash = rest.find('/');
  out.authority = std::string(rest.substr(0, slash));
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (out.scheme == "s3") {
    if (out.authority.empty()) {
      return bad("no bucket");
    }
    {
      while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view item = query.substr(0, amp);
        query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
        const size_t eq = item.find('=');
        const std::string_view name = item.substr(0, eq);
        const std::string value =
            eq == std::string_view::npos ? "" : sigv4::UriDecode(item.substr(eq + 1));
        if (value.empty())
          return bad("parameter \"" + std::string(name) + "\" has no value");
        if (name == "endpoint") {
          if (value.rfind("http://", 0) != 0 && value.rfind("https://", 0) != 0)
            return bad("endpoint must start with http:// or https://");
          out.endpoint = value;
        } else if (name == "region") {
          out.region = value;
        } else if (name == "addressing") {
          if (value != "path" && value != "virtual")
            return bad("addressing is path or virtual");
          out.addressing = value;
        } else {
          return bad("unknown parameter \"" + std::string(name) +
                     "\" (endpoint, region, addressing; credentials never go in a URL)");
        }
      }
    }
    while (!path.empty() && path.front() == '/') {
      path.remove_prefix(1);
    }
    while (!path.empty() && path.back() == '/') {
      path.remove_suffix(1);
    }
    out.path = std::string(path);  // S3 keys are written as they are in s3:// URLs
    return out;
  }
  if (out.scheme == "file") {
    if (!out.authority.empty() && out.authority != "localhost") {
      return bad("a file URL names no other host (file:///dir)");
    }
    if (path.empty()) {
      return bad("no directory (file:///absolute/dir)");
    }
    out.path = sigv4::UriDecode(path);
    return out;
  }
  if (out.scheme == "mem") {
    if (out.authority.empty()) {
      return bad("no name (mem://name)");
    }
    if (!path.empty() && path != "/") {
      return bad("a mem URL has no path");
    }
    return out;
  }
  return bad("unknown scheme \"" + out.scheme + "\" (s3, file or mem)");
}

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(std::string_view url,
                                                     const ObjectStoreConfig& cfg) {
  CIUIC_ASSIGN_OR_RETURN(ObjectStoreUrl u, ParseObjectStoreUrl(url));
  if (u.scheme == "s3") {
    return OpenS3(u, cfg);
  }
  if (u.scheme == "file") {
    return OpenFile(u, cfg);
  }
  return OpenMem(u, cfg);
}

}  // namespace ciuic::objstore
