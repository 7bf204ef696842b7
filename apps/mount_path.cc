#include "mount_path.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

namespace ciuic::cli {
namespace fs = std::filesystem;

std::string UnescapeMountField(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string oct = field.substr(i + 1, 3);
      if (oct.size() == 3 && oct.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(oct, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

namespace {

// Absolute, symlink-free form of `p`; the last component need not exist (setstripe creates it).
std::optional<fs::path> Canonical(const std::string& p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec)
    return std::nullopt;
  fs::path c = fs::canonical(abs, ec);
  if (!ec)
    return c;
  fs::path parent = fs::canonical(abs.parent_path(), ec);
  if (ec || abs.filename().empty())
    return std::nullopt;
  return parent / abs.filename();
}

// True when `dir` is `p` or one of its ancestors (component-wise, not as a string prefix).
bool Contains(const fs::path& dir, const fs::path& p) {
  auto d = dir.begin();
  auto q = p.begin();
  for (; d != dir.end(); ++d, ++q) {
    if (d->empty())
      continue;  // a trailing separator
    if (q == p.end() || *d != *q)
      return false;
  }
  return true;
}

}  // namespace

std::optional<MountedPath> ResolveMountedPath(const std::string& local,
                                              const std::string& mountinfo_file) {
  auto target = Canonical(local);
  if (!target)
    return std::nullopt;
  std::ifstream in(mountinfo_file);
  std::string line;
  std::optional<MountedPath> best;
  size_t best_len = 0;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional fields...] - fstype source super
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;)
      f.push_back(w);
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-")
      ++dash;
    if (f.size() < 5 || dash + 1 >= f.size() || f[dash + 1] != "fuse.ciuic")
      continue;
    fs::path mp = UnescapeMountField(f[4]);
    if (!Contains(mp, *target) || mp.string().size() < best_len)
      continue;
    std::string rel = target->lexically_relative(mp).generic_string();
    if (rel == ".")
      rel.clear();
    best = MountedPath{mp.string(), "/" + rel};
    best_len = mp.string().size();
  }
  return best;
}

}  // namespace ciuic::cli
