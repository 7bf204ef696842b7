// `ciuic repo link|sync|export|status`: data repositories (docs/design.md "Data repositories").
// A directory of the cluster is linked to an object store prefix (s3://bucket/prefix or
// file:///dir); objects are plain objects named by their path under the directory.
//
// This is the CLI's own implementation: the `ciuic` binary links ciuic_objstore and lists the
// store. Objects are imported as released files (Client::HsmImport) whose bytes the OSSes
// fetch on first read, or with `copy` copied through the ordinary client API; export copies
// through the client too. The client library itself still does not link the object store. State
// lives in extended attributes of the cluster's namespace (docs/formats/repo-xattrs.md), so it is
// as durable as the files.
#pragma once

#include <functional>
#include <string>

#include "ciuic/client.h"

namespace ciuic::cli {

// `action` is "link" (needs `url`), "sync", "export" or "status"; `dir` is a cluster path.
// `copy` (link, sync): copy new and changed objects' bytes now instead of at first read.
// Prints a one-line summary on stdout, one line per failed file on stderr (naming the file and
// the reason); returns 1 if anything failed, else 0. Nothing is lost on failure: a file is
// replaced only once its new bytes are complete, and nothing changed locally is overwritten or
// removed by a sync.
// `started` (optional): set when the directory was found linked and its store opened, so a
// failure after it belongs to this pass (files, or the store away for a while) and a later pass
// may succeed; `sync --interval` ends only on a first pass that did not start.
// "export-closed" exports only the files queued at their close (export on close; with
// "export-closed-quiet" it prints a summary only when something was exported or failed); "sync"
// and "export" do so too after their own work.
int CmdRepo(Client& c,
            const std::string& action,
            const std::string& dir,
            const std::string& url,
            bool copy = false,
            bool* started = nullptr);

// Switches export on close of the linked directory `dir` on or off (the admin key only): each
// close that wrote a file below it queues the file on the MDS, and `sync` (a running
// `sync --interval` at once) exports the queue. Returns 0, or 1 after one line on stderr.
int CmdRepoExportOnClose(Client& c, const std::string& dir, bool on);

// `ciuic repo list`: one line per linked directory: path, URL, export on close, files queued.
int CmdRepoList(Client& c);

// `ciuic repo agent`: every `every_s` seconds, exports what closes queued in every linked
// directory that exports on close (`ciuic cluster up` runs one). A link that fails is tried
// again later, less often (up to once a minute); an MDS away is said once. Runs until `stop`
// returns true (never when null).
int CmdRepoAgent(Client& c, double every_s, const std::function<bool()>& stop = nullptr);

}  // namespace ciuic::cli
