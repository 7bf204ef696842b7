// Internal state of OstStore shared by its .cc files. Not part of any public API.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "oss/ost_format.h"
#include "oss/ost_store.h"

namespace ciuic::oss {

// One slot page of a checksum file: 512 blocks x (slot 0, slot 1), stored values (XORed with
// ZeroBlockCrc, so 0 means "zero block").
struct OstStore::SlotPage {
  SlotPage() { live.fetch_add(1, std::memory_order_relaxed); }
  ~SlotPage() { live.fetch_sub(1, std::memory_order_relaxed); }
  SlotPage(const SlotPage&) = delete;
  SlotPage& operator=(const SlotPage&) = delete;

  // Pages in memory in this process, over every store (OstStore::crc_pages_in_memory()).
  static inline std::atomic<int64_t> live{0};
  uint32_t v[kBlocksPerCrcPage * 2] = {};
};

// An open object. The shared_ptr is held by the cache and by every operation using it; the
// file handles close when the last holder lets go, so IO in flight never sees a reused fd.
struct OstStore::Object {
  Object(io::IoEngine* e, const ObjectId& i) : engine(e), id(i) {}
  ~Object() {
    if (data_fh >= 0)
      engine->Close(data_fh).IgnoreError();  // read-only use from here on
    if (crc_fh >= 0)
      engine->Close(crc_fh).IgnoreError();
  }

  io::IoEngine* const engine;
  const ObjectId id;
  io::FileHandle data_fh = -1;  // O_DIRECT where supported
  io::FileHandle crc_fh = -1;   // buffered

  std::mutex mu;
  std::condition_variable cv;  // writes_in_epoch changes
  uint64_t length = 0;         // exact length; equals the checksum header once written
  uint32_t chain = 0;          // chain it was created under (checksum header)
  uint64_t physical_size = 0;  // data file size: >= what was written, extended ahead of writes
  uint64_t crc_pages_on_disk = 0;
  std::unordered_map<uint64_t, std::unique_ptr<SlotPage>> pages;  // loaded slot pages
  bool destroyed = false;
  bool created_unsynced = false;  // its directory entry still needs a SyncDir

  // Dirty tracking (see SyncObjects): regions durably marked in the current epoch, and how many
  // writes counted in each of the last two epochs are still in flight.
  uint64_t epoch = 0;
  std::vector<uint32_t> marked_regions;
  uint64_t last_mark_seq = 0;
  int writes_in_epoch[2] = {0, 0};
  std::chrono::steady_clock::time_point last_write{};  // start of the latest write

  // Exclusive access for writes with partial blocks, punch and destroy: a FIFO of waiters.
  bool excl_held = false;
  std::deque<std::function<void()>> excl_waiters;

  std::mutex sync_mu;  // serializes syncs of this object

  // Its place in the store's LRU list while cached (guarded by OstStore::cache_mu_).
  std::list<Object*>::iterator lru_pos;

  // Stored slot `s` of `block`; 0 when its page is not loaded (callers load first; pages past
  // the end are dropped by punch and read as 0, i.e. zero blocks).
  uint32_t Slot(uint64_t block, int s) const {
    auto it = pages.find(block / kBlocksPerCrcPage);
    return it == pages.end() ? 0 : it->second->v[(block % kBlocksPerCrcPage) * 2 + s];
  }
  uint32_t& SlotRef(uint64_t block, int s) {
    std::unique_ptr<SlotPage>& p = pages[block / kBlocksPerCrcPage];
    if (p == nullptr)
      p = std::make_unique<SlotPage>();
    return p->v[(block % kBlocksPerCrcPage) * 2 + s];
  }
};

}  // namespace ciuic::oss
