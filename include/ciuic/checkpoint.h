// ciuic checkpoints: parallel, atomic save and load of named tensors, with opt-in fp32 -> fp16 /
// bf16 conversion while writing.
//
// A checkpoint is a directory in the cluster: data files (one per rank and save, striped over
// all OSTs) and MANIFEST.json, written last and committed atomically (temp name, fsync, rename,
// synced metadata write), so a crash leaves either the previous complete checkpoint or the new
// one, never a partial one that loads. A `latest` file in the parent directory names the newest
// committed checkpoint. Format: docs/formats/checkpoint-manifest.md. Guide: docs/checkpoint.md.
//
// Thread-safety: the functions are thread-safe; saving two checkpoints to one path at the same
// time is not (the last commit wins and may delete the other's files). Blocking: every function
// blocks until its IO is done; IO runs on the client's network threads, many requests in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic::checkpoint {

// ---- dtype conversion -------------------------------------------------------------------------

enum class HalfKind : uint8_t { kFloat16, kBFloat16 };

// Converts `n` fp32 values to fp16/bf16 (round to nearest even, bit-identical to torch 1.13's
// cast including NaN, infinity and subnormals). Vectorized (F16C/AVX2, AVX-512, chosen at run
// time) and, with `threads` != 1, multi-threaded (0: OpenMP's default team size).
void NarrowFloat32(const float* src, uint16_t* dst, size_t n, HalfKind kind, int threads = 1);
// Converts `n` fp16/bf16 values to fp32 (exact).
void WidenToFloat32(const uint16_t* src, float* dst, size_t n, HalfKind kind, int threads = 1);

// Writes `count` fp32 values from `src` to `file` at `offset` as `kind` (2 bytes each),
// converting in chunks while earlier chunks are on the wire (the seed's ciuic_write(fp32, fp16,
// len)). Returns the bytes written (2 * count). Errors: those of File::PwriteAsync.
Result<size_t> WriteConverted(
    File& file, uint64_t offset, const float* src, size_t count, HalfKind kind, int threads = 1);

// ---- dtypes -----------------------------------------------------------------------------------

// Size in bytes of one element of `dtype` ("float32", "bfloat16", "int64", "bool", "complex64",
// ...; the names torch uses without the "torch." prefix), or 0 for an unknown name.
size_t DTypeSize(const std::string& dtype);

// ---- save -------------------------------------------------------------------------------------

// One tensor (or one shard of a tensor) to save. `data` must stay valid until the save returns.
struct TensorToSave {
  std::string name;
  std::string dtype;           // element type of `data`
  std::vector<int64_t> shape;  // shape of this piece (row-major, contiguous)
  const void* data = nullptr;
  size_t nbytes = 0;  // must equal product(shape) * DTypeSize(dtype)
  // For a shard of a larger tensor: the global shape and where this piece starts in it (one
  // offset per dimension). Empty: the piece is the whole tensor.
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};

struct ConvertRule {
  std::string pattern;  // glob over tensor names ('*' any run, '?' one char), first match wins
  HalfKind to = HalfKind::kFloat16;
};

struct SaveOptions {
  // fp32 tensors whose name matches a rule are stored as the rule's type; others as given.
  std::vector<ConvertRule> convert;
  int convert_threads = 1;  // 0: OpenMP default
  uint32_t stripe_size = 4u << 20;
  uint32_t stripe_count = 0;             // 0: every OST that is up
  size_t chunk_bytes = size_t{4} << 20;  // unit of one write and of one stored CRC32C
  int max_inflight = 32;                 // writes in flight per rank
  // Free-form JSON object text stored in the manifest under "extra" (Python keeps non-tensor
  // leaves there). Empty: none.
  std::string extra_json;
  bool update_latest = true;  // point <parent>/latest at this checkpoint after the commit
  // After the commit, remove incomplete siblings (ListIncomplete) whose files are older than
  // `clean_min_age_s` (a younger one may be a save in progress, e.g. an async save).
  bool clean_incomplete = true;
  int clean_min_age_s = 600;
};

struct SaveStats {
  uint64_t bytes_in = 0;       // tensor bytes given
  uint64_t bytes_written = 0;  // data bytes written (after conversion)
  uint64_t tensors = 0;
  double seconds = 0;
};

// Saves `tensors` as checkpoint `path` in one step (single writer): SaveShard(rank 0) + Commit.
// Replaces an existing checkpoint at `path` atomically. Errors: kInvalidArgument (bad tensor
// spec, duplicate name), and any client error (kNoSpace, kUnavailable, ...).
Result<SaveStats> Save(Client& client,
                       const std::string& path,
                       const std::vector<TensorToSave>& tensors,
                       const SaveOptions& options = {});

// Multi-writer save, step 1 (every rank): writes this rank's tensors into data files under
// `path` named after `save_id` (the same string on every rank, [A-Za-z0-9_-]{1,64}) and a
// durable part record. Nothing is visible to loaders yet.
Result<SaveStats> SaveShard(Client& client,
                            const std::string& path,
                            const std::string& save_id,
                            int rank,
                            const std::vector<TensorToSave>& tensors,
                            const SaveOptions& options = {});
// Step 2 (one rank, after every rank's SaveShard returned OK): merges the `world_size` part
// records of `save_id` into MANIFEST.json and commits it atomically, then updates `latest`,
// removes files of older saves at `path` and (options) incomplete siblings. kNotFound when a
// part is missing, kInvalidArgument when parts disagree (a tensor saved twice, shards that do
// not tile).
Status Commit(Client& client,
              const std::string& path,
              const std::string& save_id,
              int world_size,
              const SaveOptions& options = {});
// Removes the data and part files of an aborted save `save_id` (best effort).
Status Abort(Client& client, const std::string& path, const std::string& save_id);

// ---- inspect ----------------------------------------------------------------------------------

struct ShardInfo {
  std::string file;  // data file name within the checkpoint directory
  uint64_t offset = 0;
  uint64_t length = 0;  // stored bytes
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets;  // position in the global tensor
  std::vector<uint32_t> crc32c;  // one per `chunk_bytes` of stored bytes
};

struct TensorInfo {
  std::string name;
  std::string dtype;           // as given to save
  std::string stored_dtype;    // as stored ("float16"/"bfloat16" when converted)
  std::vector<int64_t> shape;  // global shape
  std::vector<ShardInfo> shards;
  uint64_t stored_bytes() const;
  uint64_t numel() const;
};

struct Manifest {
  std::string dir;  // the checkpoint directory this manifest was read from
  std::string save_id;
  int world_size = 1;
  uint64_t chunk_bytes = 0;
  std::string extra_json;  // "" when none
  std::vector<TensorInfo> tensors;
  const TensorInfo* Find(const std::string& name) const;
};

// Reads and checks the manifest of checkpoint `path` (or, when `path` names a directory that
// holds a `latest` file and no manifest, of the checkpoint `latest` names). kNotFound when there
// is no complete checkpoint, kCorruption when the manifest does not parse.
Result<Manifest> ReadManifest(Client& client, const std::string& path);
// Name of the checkpoint `<root>/latest` points at ("" when none).
Result<std::string> Latest(Client& client, const std::string& root);
// Sub-directories of `root` that are incomplete checkpoints (no MANIFEST.json, but data or part
// files of a save), and, per committed checkpoint, data files no manifest names. Full paths.
Result<std::vector<std::string>> ListIncomplete(Client& client, const std::string& root);
// Removes what ListIncomplete lists, except entries under `keep` (a checkpoint being saved) and
// entries whose newest file was modified less than `min_age_s` seconds ago.
Status CleanIncomplete(Client& client,
                       const std::string& root,
                       const std::string& keep = "",
                       int min_age_s = 0);

// ---- load -------------------------------------------------------------------------------------

struct TensorToLoad {
  std::string name;
  void* dst = nullptr;  // receives rows [row_begin, row_end) of the global tensor, contiguous
  size_t dst_len = 0;   // must equal the bytes of those rows in the returned dtype
  // Rows along dimension 0 (row_end -1: to the end). 0-d tensors: leave 0/-1.
  int64_t row_begin = 0;
  int64_t row_end = -1;
  bool upcast_fp32 = false;  // return fp16/bf16-stored tensors as fp32
  // `dst` is GPU memory: each chunk is read and verified (and upcast) on the host, then copied
  // to the device through pinned staging on two streams (cuda::DeviceCopier); no host tensor
  // is ever made. Needs a CUDA runtime (include/ciuic/cuda.h), else kNotSupported.
  bool dst_on_device = false;
};

struct LoadOptions {
  int max_inflight = 32;
  int convert_threads = 1;
  size_t device_chunk_bytes = 8u << 20;  // staging per stream for device destinations
};

// Reads tensors of the checkpoint with manifest `m` (from ReadManifest) straight into the callers'
// buffers, many reads in flight, and verifies every CRC32C it covers. Errors: kNotFound (no such
// tensor), kInvalidArgument (bad rows or dst_len), kCorruption naming the tensor on a checksum
// mismatch, client errors.
Status Load(Client& client,
            const Manifest& m,
            const std::vector<TensorToLoad>& tensors,
            const LoadOptions& options = {});

}  // namespace ciuic::checkpoint
