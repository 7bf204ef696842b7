#include "oss/dirty_log.h"

#include <fcntl.h>
#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "common/crc32c.h"
#include "common/logging.h"

namespace ciuic::oss {
namespace {

constexpr size_t kRecordSize = 48;
constexpr uint32_t kRecordMagic = 0x524c4443;  // "CDLR"
constexpr uint32_t kTypeMark = 1;
constexpr uint32_t kTypeClean = 2;

struct Record {
  uint32_t type = 0;
  uint64_t seq = 0;
  ObjectId id;
  uint32_t region = 0;
};

void EncodeRecord(const Record& r, uint8_t* out) {
  std::memset(out, 0, kRecordSize);
  auto put32 = [&](size_t off, uint32_t v) { std::memcpy(out + off, &v, 4); };
  put32(0, kRecordMagic);
  put32(4, r.type);
  std::memcpy(out + 8, &r.seq, 8);
  std::memcpy(out + 16, &r.id.fid.seq, 8);
  put32(24, r.id.fid.mds);
  put32(28, r.id.fid.ver);
  put32(32, r.id.comp);
  put32(36, r.id.stripe);
  put32(40, r.region);
  put32(44, Crc32c(out, 44));
}

bool DecodeRecord(const uint8_t* in, Record* r) {
  auto get32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, in + off, 4);
    return v;
  };
  if (get32(0) != kRecordMagic || get32(44) != Crc32c(in, 44))
    return false;
  r->type = get32(4);
  if (r->type != kTypeMark && r->type != kTypeClean)
    return false;
  std::memcpy(&r->seq, in + 8, 8);
  std::memcpy(&r->id.fid.seq, in + 16, 8);
  r->id.fid.mds = get32(24);
  r->id.fid.ver = get32(28);
  r->id.comp = get32(32);
  r->id.stripe = get32(36);
  r->region = get32(40);
  return true;
}

}  // namespace

Result<std::unique_ptr<DirtyLog>> DirtyLog::Open(io::IoEngine* engine,
                                                 std::string path,
                                                 std::vector<Region>* dirty) {
  CIUIC_ASSIGN_OR_RETURN(io::FileHandle fh, engine->Open(path, O_RDWR | O_CREAT));
  std::unique_ptr<DirtyLog> log(new DirtyLog(engine, std::move(path), fh));
  Result<io::FileStat> st = engine->Stat(fh);
  if (!st.ok())
    return st.status();

  // Replay: a region is dirty when its object has a mark newer than the object's last clean.
  // Torn or stale records fail their CRC and are skipped.
  std::map<ObjectId, std::map<uint32_t, uint64_t>> marks;
  std::map<ObjectId, uint64_t> cleans;
  uint64_t max_seq = 0;
  std::vector<uint8_t> buf(kRecordSize * 4096);
  for (uint64_t off = 0; off < st->size;) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), st->size - off));
    Result<size_t> n = engine->RunSync(io::IoOp{io::IoKind::kRead, fh, off, buf.data(), want});
    if (!n.ok())
      return n.status();
    if (*n < kRecordSize)
      break;
    size_t whole = *n / kRecordSize * kRecordSize;
    for (size_t i = 0; i < whole; i += kRecordSize) {
      Record r;
      if (!DecodeRecord(buf.data() + i, &r))
        continue;
      max_seq = std::max(max_seq, r.seq);
      if (r.type == kTypeMark) {
        uint64_t& s = marks[r.id][r.region];
        s = std::max(s, r.seq);
      } else {
        uint64_t& c = cleans[r.id];
        c = std::max(c, r.seq);
      }
    }
    off += whole;
  }
  dirty->clear();
  for (const auto& [id, regions] : marks) {
    uint64_t cleaned = cleans.count(id) ? cleans[id] : 0;
    for (const auto& [region, seq] : regions) {
      if (seq > cleaned)
        dirty->push_back(Region{id, region});
    }
  }
  std::lock_guard<std::mutex> lock(log->mu_);
  log->next_seq_ = max_seq + 1;
  log->size_ = (st->size + kRecordSize - 1) / kRecordSize * kRecordSize;
  return log;
}

DirtyLog::DirtyLog(io::IoEngine* engine, std::string path, io::FileHandle fh)
    : engine_(engine), path_(std::move(path)), fh_(fh) {
  flusher_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "dirty-log");
    FlushLoop();
  });
}

DirtyLog::~DirtyLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  flusher_.join();
  engine_->Close(fh_).IgnoreError();  // nothing left to lose: every mark was synced
}

void DirtyLog::MarkAsync(const ObjectId& id, std::vector<uint32_t> regions, MarkCallback cb) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) {
      pending_.push_back(Pending{id, std::move(regions), std::move(cb)});
      cv_.notify_all();
      return;
    }
  }
  cb(Status::Unavailable("dirty log closed"));
}

Result<uint64_t> DirtyLog::Mark(const ObjectId& id, std::vector<uint32_t> regions) {
  std::promise<Result<uint64_t>> done;
  MarkAsync(id, std::move(regions), [&](Result<uint64_t> r) { done.set_value(std::move(r)); });
  return done.get_future().get();
}

void DirtyLog::TrackLocked(const ObjectId& id, uint64_t mark_seq, uint64_t clean_seq) {
  ObjMarks& m = live_[id];
  m.max_mark = std::max(m.max_mark, mark_seq);
  m.max_clean = std::max(m.max_clean, clean_seq);
  if (m.max_mark <= m.max_clean)
    live_.erase(id);
}

void DirtyLog::FlushLoop() {
  std::vector<uint8_t> buf;
  for (;;) {
    std::deque<Pending> batch;
    uint64_t offset, seq;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty())
        return;
      batch.swap(pending_);
      flushing_ = true;
      // One sequence number for the whole batch: a clean covering it covers all its marks.
      seq = next_seq_++;
      size_t n = 0;
      for (const Pending& p : batch)
        n += p.regions.size();
      offset = size_;
      size_ += n * kRecordSize;
      buf.assign(n * kRecordSize, 0);
      size_t i = 0;
      for (const Pending& p : batch) {
        for (uint32_t region : p.regions) {
          EncodeRecord(Record{kTypeMark, seq, p.id, region}, buf.data() + i);
          i += kRecordSize;
        }
      }
    }
    Status st = engine_->RunSync(io::IoOp{io::IoKind::kWrite, fh_, offset, buf.data(), buf.size()})
                    .status();
    if (st.ok())
      st = engine_->Fdatasync(fh_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      flushing_ = false;
      if (st.ok()) {
        for (const Pending& p : batch)
          TrackLocked(p.id, seq, 0);
      }
    }
    if (!st.ok())
      LOG_ERROR("dirty log {}: {}", path_, st.ToString());
    for (Pending& p : batch) {
      if (st.ok()) {
        p.cb(seq);
      } else {
        p.cb(st);
      }
    }
  }
}

Status DirtyLog::Clean(const ObjectId& id, uint64_t upto_seq) {
  uint8_t rec[kRecordSize];
  uint64_t offset;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(id);
    if (it == live_.end() || it->second.max_clean >= upto_seq)
      return Status::OK();
    TrackLocked(id, 0, upto_seq);
    if (live_.empty() && pending_.empty() && !flushing_) {
      // Nothing is marked: start over. Unsynced: if the truncation is lost, the surviving old
      // records are a suffix of the old log whose cleans follow their marks.
      size_ = 0;
      return engine_->Truncate(fh_, 0);
    }
    EncodeRecord(Record{kTypeClean, upto_seq, id, 0}, rec);
    offset = size_;
    size_ += kRecordSize;
  }
  return engine_->RunSync(io::IoOp{io::IoKind::kWrite, fh_, offset, rec, kRecordSize}).status();
}

Status DirtyLog::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pending_.empty() || flushing_)
    return Status::Busy("dirty log has marks in flight");
  live_.clear();
  size_ = 0;
  CIUIC_RETURN_IF_ERROR(engine_->Truncate(fh_, 0));
  return engine_->Fdatasync(fh_);
}

size_t DirtyLog::marked_objects() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

}  // namespace ciuic::oss
