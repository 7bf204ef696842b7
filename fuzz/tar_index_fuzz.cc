// Fuzz target: the loader's tar readers (loader/tar_index.h): the shard index text parser, and
// the tar header scanner over the same bytes. Every member found must lie inside the archive,
// and an index that parses must format back to text that parses to the same members.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "loader/tar_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ciuic::loader;  // NOLINT(google-build-using-namespace): a fuzz entry point
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ciuic::Result<std::vector<TarMember>> index = ParseIndex(bytes);
  if (index.ok()) {
    ciuic::Result<std::vector<TarMember>> again = ParseIndex(FormatIndex(*index));
    if (!again.ok() || *again != *index)
      std::abort();
  }
  ciuic::Result<std::vector<TarMember>> members = ScanTarBytes(bytes);
  if (members.ok()) {
    for (const TarMember& m : *members) {
      if (m.offset > size || m.size > size - m.offset)
        std::abort();
    }
  }
  return 0;
}
