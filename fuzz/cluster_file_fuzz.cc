// Fuzz target: the cluster-file parser (common/config.h, ClusterFile::Parse) and the address and
// hex parsers it uses. What parses must parse again, to the same values, after Save's format.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "common/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ciuic::Result<ciuic::ClusterFile> cf = ciuic::ClusterFile::Parse(text, "fuzz");
  if (!cf.ok())
    return 0;
  // The same lines ClusterFile::Save writes.
  const std::string saved =
      fmt::format("cluster_uuid = {}\nmds = {}\nkey_id = {}\nsecret = {}\n", cf->cluster_uuid,
                  cf->mds.ToString(), cf->key_id, cf->secret_hex);
  ciuic::Result<ciuic::ClusterFile> again = ciuic::ClusterFile::Parse(saved, "fuzz saved");
  if (!again.ok() || again->mds.host != cf->mds.host || again->mds.port != cf->mds.port ||
      again->key_id != cf->key_id || again->SecretBytes() != cf->SecretBytes())
    std::abort();
  return 0;
}
