// `ciuic pack`: turns a local directory of small files into size-targeted tar shards plus their
// member indexes on the cluster (docs/formats/shard-index.md). Blocking; one thread.
#pragma once

#include <cstdint>
#include <string>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic::loader {

struct PackOptions {
  uint64_t shard_bytes = uint64_t{64} << 20;  // a shard is closed once it reaches this size
};

struct PackResult {
  uint64_t files = 0;
  uint64_t shards = 0;
  uint64_t bytes = 0;  // of member data
};

// Packs every regular file under local directory `src` (walked in sorted order; member names are
// paths relative to `src`, so "class/x.jpg" keeps its class directory) into
// `dest`/shard-NNNNNN.tar with `dest`/shard-NNNNNN.tar.idx beside each; `dest` is created.
// kNotFound / kNotADirectory for a bad `src`, kInvalidArgument for an empty one, client errors.
Result<PackResult> PackDirectory(Client& client,
                                 const std::string& src,
                                 const std::string& dest,
                                 const PackOptions& options);

}  // namespace ciuic::loader
