// `ciuic cache status|drop|warm`: the node cache of this machine (docs/design.md "Node cache").
#pragma once

#include <string>
#include <vector>

#include "ciuic/client.h"
#include "client/node_cache.h"

namespace ciuic::cli {

// The cache's directory, size and device space. Returns the exit code.
int CmdCacheStatus(const client::NodeCacheOptions& o);
// Removes the cached blocks of `paths` (cluster paths; directories with `recursive`), or every
// block when `paths` is empty (then `c` may be null).
int CmdCacheDrop(const client::NodeCacheOptions& o,
                 Client* c,
                 const std::vector<std::string>& paths,
                 bool recursive);
// Reads `paths` through `c`, whose reads go through the node cache, so their blocks are cached
// (a data set or a checkpoint before a job); a progress bar on a terminal.
int CmdCacheWarm(Client& c, const std::vector<std::string>& paths, bool recursive);
// Excludes `paths` from every machine's node cache (`excluded`), or includes them again: each
// path, and with `recursive` everything below a directory (symbolic links are left alone). New
// entries of an excluded directory are excluded. One line per failure; returns the exit code.
int CmdCacheExclude(Client& c,
                    const std::vector<std::string>& paths,
                    bool recursive,
                    bool excluded);

}  // namespace ciuic::cli
