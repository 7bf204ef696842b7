#include "meta/kv_store.h"

namespace ciuic::meta {

const char* CfName(Cf cf) {
  switch (cf) {
    case Cf::kInodes:
      return "inodes";
    case Cf::kDentries:
      return "dentries";
    case Cf::kXattrs:
      return "xattrs";
    case Cf::kSessions:
      return "sessions";
    case Cf::kOstLog:
      return "ostlog";
    case Cf::kSystem:
      return "system";
  }
  return "unknown";
}

void KvStore::MultiGet(Cf cf,
                       std::span<const std::string> keys,
                       std::vector<std::string>* values,
                       std::vector<Status>* statuses) {
  values->resize(keys.size());
  statuses->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i)
    (*statuses)[i] = Get(cf, keys[i], &(*values)[i]);
}

}  // namespace ciuic::meta
