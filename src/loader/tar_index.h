// Tar shards read sample by sample: the member-offset index of a tar file (POSIX ustar, GNU and
// pax headers, as Python's tarfile writes them), its text form (docs/formats/shard-index.md), and
// a ustar writer for `ciuic pack`. Pure data functions except where a Client/File is passed.
// Thread-safety: stateless functions; a TarWriter is used by one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ciuic/client.h"
#include "ciuic/status.h"

namespace ciuic::loader {

// One regular-file member: its name and where its data lies in the tar file.
struct TarMember {
  std::string name;
  uint64_t offset = 0;  // of the data (past the header blocks)
  uint64_t size = 0;
  bool operator==(const TarMember&) const = default;
};

// Scans the headers of the tar file `file` (of `file_size` bytes): reads only the header blocks,
// never the members' data. Regular files are returned in archive order; directories, links and
// other types are skipped. kCorruption (naming the offset) for a bad header checksum, a bad size
// field or a member running past the end of the file.
Result<std::vector<TarMember>> ScanTar(File& file, uint64_t file_size);

// Same, over tar bytes in memory (tests, local files).
Result<std::vector<TarMember>> ScanTarBytes(std::string_view tar);

// The index as text: "ciuic-shard-index 1 <count>\n" then "<offset> <size> <name>\n" per member.
std::string FormatIndex(const std::vector<TarMember>& members);
// Parses FormatIndex's output; kCorruption on any malformed line or a count mismatch.
Result<std::vector<TarMember>> ParseIndex(std::string_view text);

// Builds a tar archive in memory member by member (ustar, with a pax header for names longer than
// ustar allows), recording each member's offset.
class TarWriter {
 public:
  // Appends a regular file; kInvalidArgument for an empty name.
  Status Add(const std::string& name, std::string_view data, int64_t mtime_sec = 0);
  // Appends the two zero end blocks; returns the archive. The writer is then empty again.
  std::string Finish();
  size_t size() const { return out_.size(); }
  const std::vector<TarMember>& members() const { return members_; }
  void Reset();

 private:
  void Header(std::string_view name, uint64_t size, char type, int64_t mtime_sec);
  std::string out_;
  std::vector<TarMember> members_;
};

}  // namespace ciuic::loader
