#include "testing/acked_workload.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "tests/integration/test_util.h"

namespace ciuic::testing {
namespace {

constexpr uint64_t kBlock = 4096;

// The bytes in [from, to) of `got` are the pattern or zeros, 4 KiB block by block (a block whose
// write was not synced comes back as it was: zeros for a file's new range).
bool BlocksArePatternOrZero(const std::string& got, const std::string& pattern, uint64_t from) {
  for (uint64_t b = from; b < got.size();) {
    const uint64_t end = std::min<uint64_t>(got.size(), (b / kBlock + 1) * kBlock);
    const bool same = got.compare(b, end - b, pattern, b, end - b) == 0;
    bool zero = true;
    for (uint64_t i = b; i < end && zero; ++i)
      zero = got[i] == '\0';
    if (!same && !zero)
      return false;
    b = end;
  }
  return true;
}

}  // namespace

AckedWorkload::AckedWorkload(AckedWorkloadOptions options) : options_(std::move(options)) {
  state_.resize(static_cast<size_t>(std::max(1, options_.threads)));
}

size_t AckedWorkload::durable_files() const {
  size_t n = 0;
  for (const auto& t : state_) {
    for (const auto& [path, e] : t.present)
      n += e.dir ? 0 : 1;
  }
  return n;
}

std::map<std::string, uint64_t> AckedWorkload::AcknowledgedFiles() const {
  std::map<std::string, uint64_t> out;
  for (const auto& t : state_) {
    for (const auto& [path, e] : t.present) {
      if (!e.dir)
        out[path] = e.acked_size;
    }
  }
  return out;
}

void AckedWorkload::Problem(AckedWorkloadStats* stats, std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stats->problems.size() < 20)
    stats->problems.push_back(std::move(line));
}

AckedWorkloadStats AckedWorkload::Run(Client& client) {
  AckedWorkloadStats total;
  stop_.store(false);
  ++round_;
  for (size_t t = 0; t < state_.size(); ++t) {
    Status st = client.MkdirAll(fmt::format("{}/t{}", options_.root, t));
    if (st.ok())
      st = client.FsyncDir(options_.root);
    if (!st.ok()) {
      ++total.failed;
      Problem(&total, "set-up: " + st.ToString());
      return total;
    }
  }
  std::vector<AckedWorkloadStats> per(state_.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < state_.size(); ++t)
    threads.emplace_back(&AckedWorkload::Worker, this, &client, static_cast<int>(t), &per[t]);
  for (auto& th : threads)
    th.join();
  for (const auto& p : per) {
    total.ops += p.ops;
    total.acked += p.acked;
    total.failed += p.failed;
    for (const auto& line : p.problems) {
      if (total.problems.size() < 20)
        total.problems.push_back(line);
    }
  }
  return total;
}

void AckedWorkload::Worker(Client* client, int t, AckedWorkloadStats* stats) {
  ThreadState& st = state_[static_cast<size_t>(t)];
  std::mt19937_64 rng(options_.seed * 1000003 + round_ * 7919 + static_cast<uint64_t>(t));
  const std::string dir = fmt::format("{}/t{}", options_.root, t);
  auto pick_file = [&](bool fully_known) -> std::string {
    std::vector<const std::string*> files;
    for (const auto& [path, e] : st.present) {
      if (!e.dir && (!fully_known || e.acked_size == e.max_size))
        files.push_back(&path);
    }
    return files.empty() ? std::string() : *files[rng() % files.size()];
  };
  // Writes Pattern(..., seed)[from, to) to `f` at `from` and, with `sync`, fsyncs it.
  auto write = [&](File& f, uint64_t seed, uint64_t from, uint64_t to, bool sync) -> Status {
    const std::string data = Pattern(to, seed);
    if (to > from) {
      Result<size_t> w = f.Pwrite(data.data() + from, to - from, from);
      if (!w.ok())
        return w.status();
    }
    return sync ? f.Fsync() : Status::OK();
  };

  const bool process = options_.process_crash;
  // Whether an append, rename, unlink or mkdir is followed by its fsync: always, unless a
  // process crash (which keeps the page cache) is what the test survives.
  auto sync_next = [&] { return !process || rng() % 2 == 0; };
  while (!stop_.load()) {
    const uint64_t n = st.next++;
    const int choice = static_cast<int>(rng() % 100);
    ++stats->ops;
    Status s;
    std::vector<Either> pending;
    // Applied when the cluster acknowledged durability.
    std::function<void()> on_ack;
    bool acked_op = true;
    if (choice < 45 || st.present.size() < 3) {
      // A new file, fsynced (or, one time in five, only closed: never acknowledged).
      const std::string path = fmt::format("{}/f{}", dir, n);
      const uint64_t seed = rng();
      const uint64_t size = rng() % (options_.max_file_bytes + 1);
      const bool sync = rng() % 5 != 0;
      acked_op = sync || process;
      Expect e{false, seed, size, size};
      pending.push_back(Either{path, Entry{}, Entry{true, Expect{false, seed, 0, size}}, ""});
      st.maybe.push_back(pending.back());
      auto f = client->Open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
      s = f.ok() ? write(**f, seed, 0, size, sync) : f.status();
      if (f.ok()) {
        Status c = (*f)->Close();
        if (s.ok() && !sync)
          s = c;  // an unsynced file's outcome stays unknown (unless process) either way
      }
      on_ack = [&st, path, e] { st.present[path] = e; };
    } else if (choice < 65) {
      // Append to a file and fsync.
      const std::string path = pick_file(true);
      if (path.empty())
        continue;
      const Expect cur = st.present[path];
      const uint64_t to = cur.max_size + 1 + rng() % (options_.max_file_bytes / 4 + 1);
      pending.push_back(Either{path, Entry{true, cur},
                               Entry{true, Expect{false, cur.seed, cur.acked_size, to}}, ""});
      st.maybe.push_back(pending.back());
      const bool sync = sync_next();
      auto f = client->Open(path, O_WRONLY, 0644);
      s = f.ok() ? write(**f, cur.seed, cur.max_size, to, sync) : f.status();
      if (f.ok()) {
        Status c = (*f)->Close();
        if (s.ok() && !sync)
          s = c;  // with a sync, the fsync decided the outcome
      }
      on_ack = [&st, path, cur, to] { st.present[path] = Expect{false, cur.seed, to, to}; };
    } else if (choice < 80) {
      // Rename a file to a new name and fsync the directory.
      const std::string from = pick_file(false);
      if (from.empty())
        continue;
      const std::string to = fmt::format("{}/r{}", dir, n);
      const Expect cur = st.present[from];
      pending.push_back(Either{from, Entry{true, cur}, Entry{}, to});
      pending.push_back(Either{to, Entry{}, Entry{true, cur}, ""});
      st.maybe.insert(st.maybe.end(), pending.begin(), pending.end());
      s = client->Rename(from, to);
      if (s.ok() && sync_next())
        s = client->FsyncDir(dir);
      on_ack = [&st, from, to, cur] {
        st.present.erase(from);
        st.present[to] = cur;
        st.absent.push_back(from);
      };
    } else if (choice < 90) {
      // Unlink a file and fsync the directory.
      const std::string path = pick_file(false);
      if (path.empty())
        continue;
      const Expect cur = st.present[path];
      pending.push_back(Either{path, Entry{true, cur}, Entry{}, ""});
      st.maybe.push_back(pending.back());
      s = client->Unlink(path);
      if (s.ok() && sync_next())
        s = client->FsyncDir(dir);
      on_ack = [&st, path] {
        st.present.erase(path);
        st.absent.push_back(path);
      };
    } else {
      // A directory, fsynced.
      const std::string path = fmt::format("{}/d{}", dir, n);
      pending.push_back(Either{path, Entry{}, Entry{true, Expect{true, 0, 0, 0}}, ""});
      st.maybe.push_back(pending.back());
      s = client->Mkdir(path, 0755);
      if (s.ok() && sync_next())
        s = client->FsyncDir(dir);
      on_ack = [&st, path] { st.present[path] = Expect{true, 0, 0, 0}; };
    }
    if (!s.ok()) {
      ++stats->failed;
      if (!stop_.load())
        Problem(stats, fmt::format("thread {} stops at its first error: {}", t, s.ToString()));
      return;  // the crash: this change stays in `maybe`
    }
    if (acked_op) {
      st.maybe.resize(st.maybe.size() - pending.size());
      on_ack();
      ++stats->acked;
      acked_.fetch_add(1);
    }
  }
}

bool AckedWorkload::Check(Client& client,
                          const std::string& path,
                          const Entry& want,
                          Entry* seen,
                          bool report,
                          AckedWorkloadStats* stats) {
  auto fail = [&](const std::string& why) {
    if (report)
      Problem(stats, fmt::format("{}: {}", path, why));
    return false;
  };
  Result<FileStat> a = client.Lstat(path);
  if (!a.ok()) {
    if (a.status().code() == StatusCode::kNotFound) {
      *seen = Entry{};
      return !want.exists || fail("missing");
    }
    if (a.status().code() == StatusCode::kCorruption)
      ++stats->false_corruptions;
    return fail("stat: " + a.status().ToString());
  }
  seen->exists = true;
  seen->e.dir = a->is_dir();
  if (!want.exists)
    return fail("present, expected absent");
  if (want.e.dir)
    return a->is_dir() || fail("not a directory");
  if (!a->is_reg())
    return fail("not a regular file");
  Result<std::string> got = client.ReadFile(path);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kCorruption) {
      ++stats->false_corruptions;
      return fail("FALSE CORRUPTION: " + got.status().ToString());
    }
    return fail("read: " + got.status().ToString());
  }
  seen->e = Expect{false, want.e.seed, got->size(), got->size()};
  if (got->size() < want.e.acked_size || got->size() > want.e.max_size) {
    return fail(fmt::format("size {} outside the acknowledged {} .. written {}", got->size(),
                            want.e.acked_size, want.e.max_size));
  }
  const std::string pattern = Pattern(got->size(), want.e.seed);
  if (got->compare(0, want.e.acked_size, pattern, 0, want.e.acked_size) != 0)
    return fail(fmt::format("acknowledged bytes [0, {}) differ", want.e.acked_size));
  if (!BlocksArePatternOrZero(*got, pattern, want.e.acked_size))
    return fail("bytes past the acknowledged size are neither written nor zeros");
  seen->e.acked_size = want.e.acked_size;
  seen->e.max_size = want.e.max_size;
  return true;
}

AckedWorkloadStats AckedWorkload::Verify(Client& client) {
  AckedWorkloadStats stats;
  for (ThreadState& st : state_) {
    // A path with a change cut short is checked against both of its states below only.
    std::set<std::string> pending;
    for (const Either& m : st.maybe)
      pending.insert(m.path);
    // A loss is counted once: the path is not tracked after it (names are never reused), so a
    // crash loop does not report the same loss again every cycle.
    std::vector<std::string> lost;
    for (const auto& [path, e] : st.present) {
      if (pending.count(path))
        continue;
      Entry seen;
      stats.files += e.dir ? 0 : 1;
      if (Check(client, path, Entry{true, e}, &seen, true, &stats)) {
        stats.bytes_verified += e.acked_size;
      } else {
        ++stats.losses;
        lost.push_back(path);
      }
    }
    for (const std::string& path : st.absent) {
      if (pending.count(path))
        continue;
      Entry seen;
      if (!Check(client, path, Entry{}, &seen, true, &stats)) {
        ++stats.losses;
        lost.push_back(path);
      }
    }
    for (const std::string& path : lost) {
      st.present.erase(path);
      std::erase(st.absent, path);
    }
    // Changes cut short: either state is fine; adopt what is there.
    std::map<std::string, bool> exists;
    for (const Either& m : st.maybe) {
      Entry seen;
      AckedWorkloadStats quiet;
      Entry adopt;
      if (Check(client, m.path, m.before, &seen, false, &quiet)) {
        adopt = m.before;
      } else if (Check(client, m.path, m.after, &seen, false, &quiet)) {
        adopt = m.after;
      } else {
        ++stats.losses;
        Problem(&stats, fmt::format("{}: neither the state before nor after an unacknowledged "
                                    "change (exists: {})",
                                    m.path, seen.exists));
        adopt = seen;
      }
      stats.false_corruptions += quiet.false_corruptions;
      exists[m.path] = adopt.exists;
      if (adopt.exists) {
        if (!adopt.e.dir && seen.exists) {
          // A file whose writes were not acknowledged keeps its old acknowledged bytes; what it
          // holds beyond them is checked as "written or zeros" from now on.
          adopt.e.max_size = std::max(adopt.e.max_size, seen.e.max_size);
        }
        st.present[m.path] = adopt.e;
        std::erase(st.absent, m.path);
      } else {
        st.present.erase(m.path);
        st.absent.push_back(m.path);
      }
    }
    for (const Either& m : st.maybe) {
      if (!m.twin.empty() && exists.count(m.twin) && exists[m.path] == exists[m.twin]) {
        ++stats.losses;
        Problem(&stats, fmt::format("rename {} -> {} not atomic: both {}", m.path, m.twin,
                                    exists[m.path] ? "exist" : "are missing"));
      }
    }
    st.maybe.clear();
  }
  return stats;
}

}  // namespace ciuic::testing
