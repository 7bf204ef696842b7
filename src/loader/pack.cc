#include "loader/pack.h"

#include <fcntl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "loader/tar_index.h"

namespace ciuic::loader {
namespace {

namespace fs = std::filesystem;

// A packed data set is written once and read for many epochs: each file is durable (fsynced)
// before the next starts, so no later reader pays for syncing it and a crash never leaves a
// shard whose index promises bytes it lost.
Status WriteDurable(Client& client, const std::string& path, const std::string& data) {
  CIUIC_ASSIGN_OR_RETURN(auto f, client.Open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644));
  size_t done = 0;
  while (done < data.size()) {
    CIUIC_ASSIGN_OR_RETURN(size_t n, f->Write(data.data() + done, data.size() - done));
    if (n == 0)
      return Status::IoError(fmt::format("{}: short write", path));
    done += n;
  }
  CIUIC_RETURN_IF_ERROR(f->Fsync());
  return f->Close();
}

Status WriteShard(Client& client, const std::string& dest, uint64_t n, TarWriter& w) {
  std::string name = fmt::format("{}/shard-{:06d}.tar", dest, n);
  std::string index = FormatIndex(w.members());
  std::string tar = w.Finish();
  CIUIC_RETURN_IF_ERROR(WriteDurable(client, name, tar));
  return WriteDurable(client, name + ".idx", index);
}

}  // namespace

Result<PackResult> PackDirectory(Client& client,
                                 const std::string& src,
                                 const std::string& dest,
                                 const PackOptions& options) {
  std::error_code ec;
  if (!fs::exists(src, ec)) {
    return Status::NotFound(fmt::format("{}: no such directory", src));
  }
  if (!fs::is_directory(src, ec)) {
    return Status::NotADirectory(fmt::format("{}: not a directory", src));
  }
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(src, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) {
      files.push_back(fs::relative(it->path(), src, ec).generic_string());
    }
  }
  if (ec) {
    return Status::FromErrno(ec.value(), src);
  }
  if (files.empty()) {
    return Status::InvalidArgument(fmt::format("{}: no files to pack", src));
  }
  std::sort(files.begin(), files.end());
  CIUIC_RETURN_IF_ERROR(client.MkdirAll(dest));
  PackResult res;
  TarWriter w;
  for (const auto& rel : files) {
    std::ifstream in(fs::path(src) / rel, std::ios::binary);
    if (!in) {
      return Status::IoError(fmt::format("{}/{}: cannot read", src, rel));
    }
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) {
      return Status::IoError(fmt::format("{}/{}: read failed", src, rel));
    }
    CIUIC_RETURN_IF_ERROR(w.Add(rel, data));
    ++res.files;
    res.bytes += data.size();
    if (w.size() >= options.shard_bytes) {
      CIUIC_RETURN_IF_ERROR(WriteShard(client, dest, res.shards++, w));
    }
  }
  if (!w.members().empty()) {
    CIUIC_RETURN_IF_ERROR(WriteShard(client, dest, res.shards++, w));
  }
  return res;
}

}  // namespace ciuic::loader
