// Fuzz target: the checkpoint manifest and part-record parser (checkpoint/manifest.h). What
// decodes must pass its own checks again after encoding (EncodeManifest, DecodeManifest), and
// the derived sizes must not overflow.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ciuic::checkpoint::DecodeManifest;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ciuic::Result<ciuic::checkpoint::Manifest> m = DecodeManifest(text, "fuzz");
  if (!m.ok())
    return 0;
  for (const auto& t : m->tensors) {
    (void)t.numel();
    (void)t.stored_bytes();
  }
  const std::string again = ciuic::checkpoint::EncodeManifest(*m);
  ciuic::Result<ciuic::checkpoint::Manifest> m2 = DecodeManifest(again, "fuzz re-encoded");
  if (!m2.ok() || m2->tensors.size() != m->tensors.size() || m2->chunk_bytes != m->chunk_bytes ||
      m2->world_size != m->world_size)
    std::abort();
  return 0;
}
