// Manifest and part records of a checkpoint as JSON (docs/formats/checkpoint-manifest.md), file
// names within a checkpoint directory, and small IO helpers shared by save and load.
// Thread-safety: pure functions, except the IO helpers, which block on the client.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic/checkpoint.h"

namespace ciuic::checkpoint {

inline constexpr const char* kManifestName = "MANIFEST.json";
inline constexpr const char* kLatestName = "latest";
inline constexpr int kFormatVersion = 1;

std::string DataFileName(const std::string& save_id, int rank);
std::string PartFileName(const std::string& save_id, int rank);
// The save id a data or part file name belongs to; "" for other names.
std::string SaveIdOfFile(const std::string& name);
bool ValidSaveId(const std::string& id);

// Encodes a manifest (or, with `rank` >= 0, one rank's part record).
std::string EncodeManifest(const Manifest& m, int rank = -1);
// Decodes and checks a manifest or part record. kCorruption naming `what` on bad input.
Result<Manifest> DecodeManifest(const std::string& text, const std::string& what);

// Product of the dimensions (1 for a 0-d shape); -1 if one is negative or it overflows.
int64_t NumElements(const std::vector<int64_t>& shape);

// Writes `data` to `path` (created or truncated), fsyncs and closes it.
Status WriteDurable(Client& client, const std::string& path, const std::string& data);
// Makes the namespace changes before it durable (Client::FsyncDir of `dir`: the MDS log is
// ordered, so every earlier change, such as the manifest's rename, is durable once it is synced).
Status SyncNamespace(Client& client, const std::string& dir);

// Bounds the async IOs in flight and keeps the first error. Acquire blocks (caller thread);
// Release never blocks (async completion callbacks call it).
class Inflight {
 public:
  explicit Inflight(int max) : max_(max < 1 ? 1 : max) {}
  void Acquire();
  void Release(const Status& st);
  // Waits until nothing is in flight; returns the first error.
  Status Wait();
  bool failed();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int max_;
  int n_ = 0;
  Status first_;
};

}  // namespace ciuic::checkpoint
