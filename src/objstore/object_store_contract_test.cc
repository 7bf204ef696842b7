// Runs the ObjectStore contract suite against LocalDirStore and MemObjectStore.
#include "objstore/object_store_contract.h"

#include <memory>

#include "objstore/local_dir_store.h"
#include "objstore/mem_object_store.h"

namespace ciuic::objstore::testing {
namespace {

constexpr uint64_t kLocalChunk = 1 << 20;
constexpr uint64_t kMemPart = 256 << 10;

ContractBackend LocalBackend() {
  return ContractBackend{
      .name = "LocalDir",
      .caps = {.key_and_children_coexist = false,
               .max_component_bytes = 255,
               .stream_piece_bytes = kLocalChunk},
      .open = []() -> Result<std::shared_ptr<ObjectStore>> {
        auto dir = std::make_shared<TempDir>();
        if (dir->path().empty()) {
          return Status::IoError("cannot make a temp directory");
        }
        // A root the store creates itself, below the temp directory.
        LocalDirStore::Options opts;
        opts.stream_chunk_bytes = kLocalChunk;
        CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<LocalDirStore> store,
                               LocalDirStore::Open(dir->path() + "/store", opts));
        // The deleter keeps the directory until the store is gone, then removes it.
        return std::shared_ptr<ObjectStore>(store.release(), [dir](ObjectStore* s) { delete s; });
      }};
}

ContractBackend MemBackend() {
  return ContractBackend{
      .name = "Mem",
      .caps = {.key_and_children_coexist = true,
               .max_component_bytes = 1024,
               .stream_piece_bytes = kMemPart},
      .open = []() -> Result<std::shared_ptr<ObjectStore>> {
        MemObjectStore::Options opts;
        opts.name = "contract";
        opts.part_bytes = kMemPart;
        return std::shared_ptr<ObjectStore>(std::make_shared<MemObjectStore>(opts));
      }};
}

INSTANTIATE_TEST_SUITE_P(Backends,
                         ObjectStoreContractTest,
                         ::testing::Values(LocalBackend(), MemBackend()),
                         ContractBackendName);

}  // namespace
}  // namespace ciuic::objstore::testing
