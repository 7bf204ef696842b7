// OpenFile: one open file of a Client: the data path (striped fan-out of reads and writes with
// checksum verification), the write buffer that gathers small sequential writes into stripe-sized
// RPCs, sequential readahead, fsync, truncate and close. FileImpl is the public File over it.
//
// Ownership: FileImpl holds a shared_ptr<OpenFile>; every async operation holds one too, so a
// completion never outlives the state it touches. OpenFile holds the ClientCore and the Node.
// Threads: completions run on network threads (verification and copies of read edges happen
// there); blocking work an async path needs (instantiating layout components) goes to the core's
// pool. Thread-safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ciuic/client.h"
#include "client/client_core.h"
#include "client/readahead.h"
#include "common/buffer.h"

namespace ciuic::client {

// Records the outcome of one part of an operation split over objects (an op with `mu`, `first`
// and `left`): the first error is kept. True when it was the last part.
template <typename Op>
bool PartDone(Op* op, const Status& st) {
  std::lock_guard<std::mutex> lock(op->mu);
  if (!st.ok() && op->first.ok())
    op->first = st;
  return --op->left == 0;
}

// Readahead fetches whole 1 MiB chunks; reads of 512 KiB or more go straight to the caller.
inline constexpr uint64_t kRaChunk = 1ull << 20;
inline constexpr uint64_t kRaDirectMin = 512ull << 10;
// Writes up to this size are gathered in the write buffer; larger ones are sent from the caller.
inline constexpr size_t kSmallWriteMax = 256u << 10;
// Write-buffer flushes in flight per file (bounds memory to (1 + kMaxFlights) buffers).
inline constexpr int kMaxFlights = 4;
inline constexpr uint64_t kMaxFileSize = (1ull << 63) - 1;

// True when `layout` maps every byte of [0, end) onto instantiated components.
bool LayoutCovers(const FileLayout* layout, uint64_t end);
// Number of instantiated components.
size_t CountInstantiated(const FileLayout& layout);

// Converts the MDS's attributes to the public form.
FileStat FileStatFromAttr(const pb::Attr& attr);
// Updates `node` from attributes and layout the MDS returned (keeps local unflushed size).
void RefreshNode(Node* node, const pb::Attr& attr, const pb::Layout* layout);
// Applies truncate punches on their OSTs, then acknowledges them to the MDS.
Status ApplyPunches(ClientCore* core, const google::protobuf::RepeatedPtrField<pb::OstTask>& tasks);
// Truncates the file of `node` to `size`: publishes pending size, SetAttr, punches.
Status TruncateNode(ClientCore* core, Node* node, uint64_t size);
// Sends the extend-only size update for `node` if local writes extended it (or always when
// `sync`, to make the size durable).
Status PublishSize(ClientCore* core, Node* node, bool sync);

class OpenFile : public std::enable_shared_from_this<OpenFile> {
 public:
  OpenFile(std::shared_ptr<ClientCore> core,
           std::shared_ptr<Node> node,
           std::string path,
           int flags,
           uint64_t open_id,
           const OpenOptions& options);
  ~OpenFile();

  Result<size_t> Pread(void* buf, size_t len, uint64_t offset);
  Result<size_t> Pwrite(const void* buf, size_t len, uint64_t offset);
  Result<size_t> Read(void* buf, size_t len);
  Result<size_t> Write(const void* buf, size_t len);
  Result<uint64_t> Seek(int64_t offset, int whence);
  void PreadAsync(void* buf, size_t len, uint64_t offset, IoCallback cb);
  void PwriteAsync(const void* buf, size_t len, uint64_t offset, IoCallback cb);
  Status Fsync();
  Status Flush();
  std::optional<Status> FlushIfIdle();
  Status Truncate(uint64_t size);
  Status Allocate(uint64_t offset, uint64_t len, bool keep_size);
  Result<FileStat> Stat();
  Status Close();

  // Marks a read-only file opened from a resolved layout (Client::OpenResolved): a missing
  // object fails a read with kStale instead of reading as a hole. Call before any IO.
  void MarkResolved() { resolved_ = true; }
  // Opened while its restore by extents runs (docs/design.md "HSM"): until a restore is known
  // to have ended, a missing object means "not restored here yet", not a hole.
  void MarkRestoring() { restoring_ = true; }

  // Lets reads and writes through other handles of this file flush this handle's write buffer.
  // Call once, right after construction (needs shared_from_this).
  void RegisterFlusher();

  FileLayout layout() const;
  const std::string& path() const { return path_; }
  int flags() const { return flags_; }
  uint64_t ino() const { return node_->fid.seq; }

 private:
  struct WriteFlight;

  bool readable() const { return (flags_ & O_ACCMODE) != O_WRONLY; }
  bool writable() const { return (flags_ & O_ACCMODE) != O_RDONLY; }
  // OK when the handle is open for the access. With `cache_dv`, it is also set (in the same
  // lock) to the data version reads go through the node cache at, when they do: one is
  // configured, the handle is read-only and did not write, and the open did not opt out.
  Status CheckOpen(bool write, std::optional<uint64_t>* cache_dv = nullptr) const;
  Status LatchedError() const;
  void Latch(const Status& st);

  // Data path. `len` > 0; reads are already clipped to the file size.
  void ReadRange(uint8_t* buf, uint64_t len, uint64_t offset, IoCallback cb);
  // As ReadRange; `restore_tried`: a stale read after a restore fails instead of restoring again.
  void ReadRangeOnce(
      uint8_t* buf, uint64_t len, uint64_t offset, IoCallback cb, bool restore_tried);
  void WriteRange(const uint8_t* src,
                  uint64_t len,
                  uint64_t offset,
                  std::shared_ptr<void> keepalive,
                  IoCallback cb);
  // Records the durability epoch of a write acknowledgement (WriteResp body) for object `key`.
  void NoteWriteEpoch(const std::pair<uint32_t, ObjectId>& key, const std::string& body);
  void IssueWrite(const uint8_t* src,
                  uint64_t len,
                  uint64_t offset,
                  RangeLock::Ticket ticket,
                  std::shared_ptr<void> keepalive,
                  IoCallback cb);
  Status EnsureInstantiated(uint64_t end);
  Result<size_t> WaitIo(const std::function<void(IoCallback)>& start);

  // Throttle: at most max_inflight_per_file RPCs of this file in flight.
  void Throttled(std::function<void()> send);
  void ThrottleDone();

  // Operations in flight (Close and Fsync wait for them).
  void OpStart(bool write);
  void OpDone(bool write);
  void WaitOps(bool writes_only);

  // Write buffer.
  void FlushBufferLocked(bool partial, bool may_wait);
  void FlushBuffer(bool may_wait);
  // Sends the buffered bytes in [offset, offset+len). With !may_wait, gives up (returns false)
  // rather than wait for the buffer's lock.
  bool FlushBufferIfOverlaps(uint64_t offset, uint64_t len, bool may_wait);
  // Flushes other handles' buffered bytes in [offset, offset+len) (this file, this client).
  void FlushOthers(uint64_t offset, uint64_t len);

  // Readahead.
  Result<size_t> ReadThroughCache(uint8_t* buf, uint64_t len, uint64_t offset, uint64_t size);
  void DropReadahead();
  Result<size_t> ReadDirect(uint8_t* buf, uint64_t len, uint64_t offset);

  // Posts `cb(r)` to the pool (completions never run on the caller's stack).
  void PostCompletion(IoCallback cb, Result<size_t> r);
  // Reads [offset, offset + len) of a file of `size` bytes at `data_version` block by block from
  // the node cache, filling the blocks it misses from the OSTs (blocking).
  Result<size_t> ReadViaNodeCache(
      uint8_t* buf, uint64_t len, uint64_t offset, uint64_t size, uint64_t data_version);
  // Copies written bytes into the write-through stage, when there is one.
  void StageWrite(const uint8_t* src, size_t len, uint64_t offset);
  void DropStage();

  std::shared_ptr<ClientCore> core_;
  std::shared_ptr<Node> node_;
  const std::string path_;
  const int flags_;
  const uint64_t open_id_;
  const OpenOptions options_;
  const size_t wb_cap_;
  bool resolved_ = false;  // set before any IO (MarkResolved)
  std::atomic<bool> restoring_{false};

  std::mutex pos_mu_;      // makes Read/Write/Seek at the file position atomic
  mutable std::mutex mu_;  // state below
  // Written under mu_; atomic so that a read's checks (CheckOpen) take no lock: the threads of
  // a random-read job share one handle.
  std::atomic<bool> closed_{false};
  std::atomic<bool> wrote_{false};
  // Write-through (node cache): what this handle writes, staged until its close says under
  // which data version it may be cached; dropped by a truncate or an allocation through it.
  std::shared_ptr<NodeCache::WriteStage> stage_;
  uint64_t opened_version_ = 0;  // the data version at open
  uint64_t pos_ = 0;
  Status error_;  // first error of an async write
  int ops_ = 0;
  int write_ops_ = 0;
  std::condition_variable ops_cv_;

  std::mutex thr_mu_;
  int thr_inflight_ = 0;
  std::vector<std::function<void()>> thr_queue_;  // FIFO via thr_head_
  size_t thr_head_ = 0;

  // Write buffer: one contiguous dirty range [wb_start_, wb_start_ + wb_len_).
  std::mutex wb_mu_;
  AlignedBuffer wb_buf_;
  uint64_t wb_start_ = 0;
  size_t wb_len_ = 0;
  std::mutex flight_mu_;
  std::condition_variable flight_cv_;
  int flights_ = 0;
  std::vector<AlignedBuffer> wb_free_;

  // Readahead.
  struct Chunk {
    uint64_t gen = 0;
    AlignedBuffer buf;
    uint64_t valid = 0;
    bool done = false;
    Status st;
  };
  std::mutex ra_mu_;
  std::condition_variable ra_cv_;
  ReadaheadPolicy ra_;
  std::map<uint64_t, std::shared_ptr<Chunk>> chunks_;
  std::atomic<uint64_t> seen_data_version_{0};  // written under mu_, as closed_
  uint64_t flusher_id_ = 0;                     // set once by RegisterFlusher
};

class FileImpl : public File {
 public:
  explicit FileImpl(std::shared_ptr<OpenFile> f) : f_(std::move(f)) {}
  ~FileImpl() override;

  Result<size_t> Pread(void* buf, size_t len, uint64_t offset) override {
    return f_->Pread(buf, len, offset);
  }
  Result<size_t> Pwrite(const void* buf, size_t len, uint64_t offset) override {
    return f_->Pwrite(buf, len, offset);
  }
  Result<size_t> Read(void* buf, size_t len) override { return f_->Read(buf, len); }
  Result<size_t> Write(const void* buf, size_t len) override { return f_->Write(buf, len); }
  Result<uint64_t> Seek(int64_t offset, int whence) override { return f_->Seek(offset, whence); }
  void PreadAsync(void* buf, size_t len, uint64_t offset, IoCallback cb) override {
    f_->PreadAsync(buf, len, offset, std::move(cb));
  }
  void PwriteAsync(const void* buf, size_t len, uint64_t offset, IoCallback cb) override {
    f_->PwriteAsync(buf, len, offset, std::move(cb));
  }
  Status Fsync() override { return f_->Fsync(); }
  Status Flush() override { return f_->Flush(); }
  std::optional<Status> FlushIfIdle() override { return f_->FlushIfIdle(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Status Allocate(uint64_t offset, uint64_t len, bool keep_size) override {
    return f_->Allocate(offset, len, keep_size);
  }
  Result<FileStat> Stat() override { return f_->Stat(); }
  Status Close() override { return f_->Close(); }
  FileLayout layout() const override { return f_->layout(); }
  const std::string& path() const override { return f_->path(); }
  int flags() const override { return f_->flags(); }
  uint64_t ino() const override { return f_->ino(); }

 private:
  std::shared_ptr<OpenFile> f_;
};

}  // namespace ciuic::client
