#include "pack_cmd.h"

#include <cstdio>

#include <fmt/format.h>

#include "loader/pack.h"

namespace ciuic::cli {

int CmdPack(Client& client, const std::string& src, const std::string& dest, uint64_t shard_mib) {
  if (shard_mib == 0) {
    fmt::print(stderr, "ciuic: pack: --shard-mib must be at least 1\n");
    return 1;
  }
  loader::PackOptions o;
  o.shard_bytes = shard_mib << 20;
  auto r = loader::PackDirectory(client, src, dest, o);
  if (!r.ok()) {
    fmt::print(stderr, "ciuic: pack: {}\n", r.status().ToString());
    return 1;
  }
  fmt::print("packed {} files ({} bytes) into {} shards under {}\n", r->files, r->bytes, r->shards,
             dest);
  return 0;
}

}  // namespace ciuic::cli
