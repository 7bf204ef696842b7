// `ciuic cluster add-client|revoke-client|list-clients`: per-client keys (tenants,
// docs/design.md "Tenants and capabilities"), managed on the MDS with the admin key.
#pragma once

#include <string>

namespace ciuic::cli {

struct AddClientOptions {
  std::string name;
  std::string uid_map;  // "CLIENT:SERVER,...", "*:SERVER" for every other uid
  bool squash_root = false;
  bool read_only = false;
  std::string subtree;  // absolute cluster path: the client's "/"
  std::string out;      // client cluster file to write (default: DIR/clients/NAME.conf)
};

// Each takes the admin cluster file (`cluster_file`, or the usual search), returns the exit code
// and prints one clear line on failure.
int AddClient(const std::string& cluster_file, const AddClientOptions& options);
int RevokeClient(const std::string& cluster_file, const std::string& name);
int ListClients(const std::string& cluster_file);

}  // namespace ciuic::cli
