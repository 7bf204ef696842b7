// Opens an ObjectStore from a URL:
//   s3://bucket[/prefix]   S3Store (s3_store.h): the bucket, rooted at the prefix;
//   file:///absolute/dir   the local directory backend;
//   mem://name             the in-memory backend (tests): one store per name in the process,
//                          shared by every open of that name (SharedMemObjectStore).
// Thread-safety: OpenObjectStore is reentrant.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "objstore/mem_object_store.h"
#include "objstore/object_store.h"
#include "objstore/s3_store.h"

namespace ciuic::objstore {

struct ObjectStoreConfig {
  // Settings of s3:// stores: endpoint, region, credentials, addressing, part size,
  // parallelism, retries, timeouts. The URL gives the bucket and root prefix (they replace
  // s3.bucket and s3.root_prefix); what is left empty resolves from the environment
  // (s3_credentials.h).
  S3Options s3;
  EnvLookup env = ProcessEnv();
  // file:// stores: create the directory if it is missing (the cold tier); false for a data
  // repository, whose directory must already exist (kNotFound otherwise).
  bool create_local_root = true;
};

// The parts of an object store URL, as OpenObjectStore reads them.
struct ObjectStoreUrl {
  std::string scheme;     // "s3", "file", "mem" (lower-cased)
  std::string authority;  // the bucket; "" or "localhost" for file; the name for mem
  std::string path;       // s3: the root prefix without slashes around it; file: "/abs/dir"
  // s3 only, from "?endpoint=URL&region=R&addressing=path|virtual": settings every process
  // that opens the URL uses (a data repository's URL reaches the OSSes, whose environment may
  // not name the endpoint). Empty: from the environment. Credentials never go in a URL.
  std::string endpoint;
  std::string region;
  std::string addressing;
};

// Splits `url` into its parts. kInvalidArgument, quoting the URL, for an unknown scheme, an s3
// URL without a bucket, a file URL that is not absolute or names another host, a mem URL with
// a path.
Result<ObjectStoreUrl> ParseObjectStoreUrl(std::string_view url);

// Opens the store `url` names. Returns kInvalidArgument for a bad URL or option, and whatever
// the backend's Open returns; does no IO beyond what that Open does (none for S3 but reading
// the shared credentials file).
Result<std::unique_ptr<ObjectStore>> OpenObjectStore(std::string_view url,
                                                     const ObjectStoreConfig& cfg);

// Returns the process's in-memory store called `name`, made empty on first use; mem://name
// opens the same one.
std::shared_ptr<MemObjectStore> SharedMemObjectStore(const std::string& name);

}  // namespace ciuic::objstore
