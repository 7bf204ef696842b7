#include "common/fault.h"

#include <atomic>
#include <map>
#include <mutex>

namespace ciuic {
namespace {

struct Armed {
  Status status;
  int remaining;
  int hits = 0;
};

std::mutex g_mu;
std::map<std::string, Armed, std::less<>>& Points() {
  static std::map<std::string, Armed, std::less<>> points;
  return points;
}
std::atomic<int> g_armed{0};

}  // namespace

Status FaultCheck(const char* name) {
  if (g_armed.load(std::memory_order_relaxed) == 0)
    return Status::OK();
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Points().find(std::string_view(name));
  if (it == Points().end() || it->second.remaining == 0)
    return Status::OK();
  if (it->second.remaining > 0)
    --it->second.remaining;
  ++it->second.hits;
  return it->second.status;
}

ScopedFault::ScopedFault(std::string name, Status status, int count) : name_(std::move(name)) {
  std::lock_guard<std::mutex> lock(g_mu);
  Points()[name_] = Armed{std::move(status), count};
  g_armed.fetch_add(1);
}

ScopedFault::~ScopedFault() {
  std::lock_guard<std::mutex> lock(g_mu);
  Points().erase(name_);
  g_armed.fetch_sub(1);
}

int ScopedFault::hits() const {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Points().find(name_);
  return it == Points().end() ? 0 : it->second.hits;
}

}  // namespace ciuic
