#include "hsm_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "progress.h"

namespace ciuic::cli {
namespace {

// Files handled at once: each is a round of requests to the MDS and the OSSes, which do the
// copying; a few in flight keep every OSS busy without flooding the MDS.
constexpr size_t kParallel = 8;

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

}  // namespace

Status CollectFiles(Client& c,
                    const std::string& path,
                    bool recursive,
                    std::vector<std::string>* out,
                    std::vector<uint64_t>* sizes) {
  CIUIC_ASSIGN_OR_RETURN(FileStat st, c.Stat(path));
  if (st.is_reg()) {
    out->push_back(path);
    sizes->push_back(st.size);
    return Status::OK();
  }
  if (!st.is_dir())
    return Status::InvalidArgument(fmt::format("{}: not a regular file", path));
  if (!recursive)
    return Status::IsADirectory(fmt::format("{}: is a directory (use -r)", path));
  CIUIC_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, c.ReadDir(path));
  std::sort(entries.begin(), entries.end(),
            [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  for (const DirEntry& e : entries) {
    if (e.name == "." || e.name == "..")
      continue;
    const std::string child = JoinPath(path, e.name);
    if ((e.type & S_IFMT) == S_IFDIR) {
      CIUIC_RETURN_IF_ERROR(CollectFiles(c, child, true, out, sizes));
    } else if ((e.type & S_IFMT) == S_IFREG) {
      CIUIC_ASSIGN_OR_RETURN(FileStat fs, c.Stat(child));
      out->push_back(child);
      sizes->push_back(fs.size);
    }
  }
  return Status::OK();
}

namespace {

Status RunOne(Client& c, const std::string& action, const std::string& path, std::string* line) {
  if (action == "archive")
    return c.HsmArchive(path);
  if (action == "release")
    return c.HsmRelease(path);
  if (action == "restore")
    return c.HsmRestore(path);
  if (action == "remove")
    return c.HsmRemove(path);
  CIUIC_ASSIGN_OR_RETURN(HsmStatus s, c.HsmGetState(path));
  const std::string heat = s.has_heat ? fmt::format("{:.2f}", s.heat) : std::string("-");
  if (s.state == HsmState::kNone) {
    *line = fmt::format("{}: none, heat {}", path, heat);
  } else {
    *line = fmt::format("{}: {} (archived data version {}, current {}) backend {}, heat {}", path,
                        HsmStateName(s.state), s.archived_version, s.data_version,
                        s.backend.empty() ? "-" : s.backend, heat);
  }
  return Status::OK();
}

}  // namespace

int CmdHsm(Client& c,
           const std::string& action,
           const std::vector<std::string>& paths,
           bool recursive) {
  int rc = 0;
  std::vector<std::string> files;
  std::vector<uint64_t> sizes;
  for (const std::string& p : paths) {
    Status st = CollectFiles(c, p, recursive, &files, &sizes);
    if (!st.ok()) {
      fmt::print(stderr, "ciuic: hsm {}: {}\n", action, st.message());
      rc = 1;
    }
  }
  // Results are printed in the order of `files`, whatever order they finish in.
  std::vector<std::string> lines(files.size());
  std::vector<Status> results(files.size());
  std::atomic<size_t> next{0};
  // Bytes of the files handled (their sizes: the OSSes move them, this process sees no byte).
  std::optional<Progress> progress;
  if (action != "state" && files.size() > 1) {
    uint64_t total = 0;
    for (uint64_t n : sizes)
      total += n;
    progress.emplace("hsm " + action, total, files.size());
  }
  auto worker = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      results[i] = RunOne(c, action, files[i], &lines[i]);
      if (progress) {
        progress->Add(sizes[i]);
        progress->AddItem();
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < std::min(kParallel, files.size()); ++i)
    threads.emplace_back(worker);
  for (auto& t : threads)
    t.join();
  if (progress)
    progress->Finish();
  for (size_t i = 0; i < files.size(); ++i) {
    if (!results[i].ok()) {
      const std::string& m = results[i].message();
      // Messages name the file already; add it when one does not.
      if (m.find(files[i]) == std::string::npos) {
        fmt::print(stderr, "ciuic: hsm {}: {}: {}\n", action, files[i], m);
      } else {
        fmt::print(stderr, "ciuic: hsm {}: {}\n", action, m);
      }
      rc = 1;
    } else if (!lines[i].empty()) {
      fmt::print("{}\n", lines[i]);
    }
  }
  return rc;
}

}  // namespace ciuic::cli
