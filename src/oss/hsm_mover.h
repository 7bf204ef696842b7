// HsmMover: copies one OST's stripe objects to and from the cold tier (an objstore::ObjectStore)
// for HSM (docs/design.md "HSM", ARCHITECTURE Decision 11, docs/formats/hsm-archive.md).
//
// An archived object is two store objects under `<cluster uuid>/<FID>/<data_version>/`:
// `<comp>.<stripe>` holds the object's bytes, `<comp>.<stripe>.crc` its length and one CRC32C
// per 4 KiB block (the last block zero-padded), written after the data: a copy is complete when
// its .crc object exists and agrees with the data object's size. Copies are written once; a
// leftover of an archive cut short (never recorded by the MDS) is checked and replaced.
//
// Every step verifies what it moves: Archive checks each block it reads against the OST's
// stored checksums; Verify compares the archived CRCs with the OST object's blocks; Restore
// checks every block it gets from the store against the archived CRCs before writing it to the
// OST (kCorruption naming the key otherwise: never wrong bytes).
//
// Blocking (OST reads and writes, store requests): call from a thread that may block, never an
// engine, blocking-pool or network thread. Thread-safety: all methods may be called concurrently
// for different objects.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ciuic/layout.h"
#include "common/fid.h"
#include "common/status.h"
#include "objstore/object_store.h"
#include "oss/hsm_fill.h"
#include "oss/ost_store.h"

namespace ciuic::oss {

// The parsed `.crc` object of an archived stripe object.
struct ArchivedCrcs {
  uint64_t length = 0;         // object bytes
  uint64_t data_version = 0;   // the file version archived
  std::vector<uint32_t> crcs;  // CRC32C of each 4 KiB block, the last one zero-padded
};

// A restore writes the object under this name (the FID's version with its top bit set, which
// no file has), then adopts it whole (OstStore::Adopt).
inline constexpr uint32_t kHsmStagingVer = kBufferedVerBit;
ObjectId HsmStagingId(const ObjectId& id);

// "<uuid>/<mds>:<seq>:<ver>/<data_version>/<comp>.<stripe>" (FID parts in hex with 0x).
std::string HsmObjectKey(std::string_view cluster_uuid, const ObjectId& id, uint64_t version);
// The key of the object's CRCs: HsmObjectKey + ".crc".
std::string HsmCrcKey(std::string_view cluster_uuid, const ObjectId& id, uint64_t version);

// Encodes / decodes the .crc object (docs/formats/hsm-archive.md). Decode returns kCorruption
// naming `key` for anything malformed (bad magic, size, trailing CRC).
std::string EncodeArchivedCrcs(const ArchivedCrcs& c);
Result<ArchivedCrcs> DecodeArchivedCrcs(std::string_view bytes, std::string_view key);

// A file imported from a data repository (HsmRecord.source_*): its bytes are the plain object
// `key` of the store at `url`, `file_size` bytes, as it was when its ETag was `etag`. `comp` is
// the layout component of the stripe object asked for (its mapping of file to object offsets).
struct RepoSource {
  std::string url;
  std::string key;
  std::string etag;
  uint64_t file_size = 0;
  LayoutComponent comp;
};

class HsmMover {
 public:
  // `store` is not owned and must outlive the mover.
  // `fill_threads` fetch the chunks (`fill_chunk` bytes) of every restore of the OSS.
  HsmMover(objstore::ObjectStore* store,
           std::string cluster_uuid,
           int fill_threads = 8,
           uint64_t fill_chunk = kFillChunk)
      : store_(store), uuid_(std::move(cluster_uuid)), fills_(fill_threads, fill_chunk) {}

  // Copies object `id` of `ost` to the store as version `version`, then its CRCs. An existing
  // complete copy that matches the object is kept (a retried archive). Returns the object's
  // length. kCorruption when the OST object fails its checksums; store errors as they come.
  Result<uint64_t> Archive(OstStore* ost, const ObjectId& id, uint64_t version);
  // Checks that the archived copy of `version` is complete and that its CRCs match the OST
  // object's blocks now. kCorruption "... differs from its archived copy" on a mismatch,
  // kNotFound when the copy is missing.
  Result<uint64_t> Verify(OstStore* ost, const ObjectId& id, uint64_t version);
  // Replaces the OST object with the archived copy of `version`, verifying every block: written
  // and synced under HsmStagingId(id), then adopted whole, so nobody ever reads a half-restored
  // object. kCorruption naming the key on a bad block, kNotFound when the copy is missing.
  Result<uint64_t> Restore(OstStore* ost, const ObjectId& id, uint64_t version);
  // Restore by extents: starts restoring `id` in the background (or joins the restore of it in
  // progress) and returns once readers may wait on it (FillEngine). Reads of the object then
  // go through fills().Find. The archived CRCs are loaded first: a missing copy fails here.
  Result<std::shared_ptr<ObjectFill>> StartRestore(OstStore* ost,
                                                   const ObjectId& id,
                                                   uint64_t version);
  // Deletes the archived copy of `version` (CRCs first, so a half-removed copy is incomplete).
  Status Remove(const ObjectId& id, uint64_t version);

  // Data repositories. RestoreFromRepo fills object `id` with the bytes of `src`'s object that
  // the component maps to it (ranged GETs of the imported version only: GetVersion), staged
  // and adopted whole as Restore does: kNotFound "... was deleted" or kCorruption "... changed
  // since it was imported" name the key, never wrong bytes. VerifyRepo is a Head check of
  // the ETag and size (a release of an imported file). Both return the bytes of `id`.
  Result<uint64_t> RestoreFromRepo(OstStore* ost, const ObjectId& id, const RepoSource& src);
  Result<std::shared_ptr<ObjectFill>> StartRepoRestore(OstStore* ost,
                                                       const ObjectId& id,
                                                       const RepoSource& src);
  Result<uint64_t> VerifyRepo(const RepoSource& src);

  std::string Describe() const { return store_->Describe(); }
  FillEngine& fills() { return fills_; }

 private:
  // Reads the object's blocks [offset, offset + len) from the OST, checks them against its
  // stored checksums and returns their CRC32Cs in `crcs` (one per block); `dst` (optional, size
  // len rounded up to blocks) gets the bytes.
  Status ReadBlocks(OstStore* ost,
                    const ObjectId& id,
                    uint64_t offset,
                    uint64_t len,
                    std::vector<uint32_t>* crcs,
                    std::string* dst);
  Result<ArchivedCrcs> LoadCrcs(const ObjectId& id, uint64_t version);

  // The store of a repository URL, opened on first use and kept.
  Result<objstore::ObjectStore*> RepoStore(const std::string& url);
  // Head of the source object, checked against what the import recorded.
  Status CheckSource(objstore::ObjectStore* store, const RepoSource& src, const char* when);

  objstore::ObjectStore* const store_;
  const std::string uuid_;
  std::mutex repo_mu_;
  std::map<std::string, std::unique_ptr<objstore::ObjectStore>> repos_;
  FillEngine fills_;  // last: its workers use the stores above
};

}  // namespace ciuic::oss
