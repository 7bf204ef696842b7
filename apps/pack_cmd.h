// `ciuic pack SRC DEST`: local directory of small files -> tar shards + indexes on the cluster.
#pragma once

#include <cstdint>
#include <string>

#include "ciuic/client.h"

namespace ciuic::cli {

// Packs local `src` into shards of about `shard_mib` MiB under cluster directory `dest` and prints
// one summary line. Returns the exit code (one "ciuic: ..." line on stderr on failure).
int CmdPack(Client& client, const std::string& src, const std::string& dest, uint64_t shard_mib);

}  // namespace ciuic::cli
