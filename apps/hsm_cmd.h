// `ciuic hsm archive|release|restore|state|remove PATH... [-r]`: HSM by hand (docs/design.md
// "HSM"). The OSSes move the bytes; this command only asks.
#pragma once

#include <string>
#include <vector>

#include "ciuic/client.h"

namespace ciuic::cli {

// Appends the regular files at `path` (recursively under a directory when `recursive`) and
// their sizes (for a progress bar).
Status CollectFiles(Client& c,
                    const std::string& path,
                    bool recursive,
                    std::vector<std::string>* out,
                    std::vector<uint64_t>* sizes);

// Runs `action` on each of `paths` (cluster paths; directories with `recursive`, every regular
// file below them), several files at once. `state` prints one line per file: path, state,
// archived data version, backend. Each failure prints one line naming the file; returns 1 if
// any failed, else 0.
int CmdHsm(Client& c,
           const std::string& action,
           const std::vector<std::string>& paths,
           bool recursive);

}  // namespace ciuic::cli
