#include "meta/rocks_kv_store.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <rocksdb/write_buffer_manager.h>

namespace ciuic::meta {
namespace {

rocksdb::Slice ToSlice(std::string_view s) {
  return rocksdb::Slice(s.data(), s.size());
}

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok())
    return Status::OK();
  std::string msg = fmt::format("{}: {}", what, s.ToString());
  if (s.IsNotFound())
    return Status::NotFound(std::move(msg));
  if (s.IsCorruption())
    return Status::Corruption(std::move(msg));
  if (s.IsNoSpace())
    return Status::NoSpace(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain() || s.IsIncomplete())
    return Status::Unavailable(std::move(msg));
  if (s.IsNotSupported())
    return Status::NotSupported(std::move(msg));
  if (s.IsInvalidArgument())
    return Status::InvalidArgument(std::move(msg));
  if (s.IsIOError()) {
    // The LOCK file: "While lock file: .../LOCK: Resource temporarily unavailable" or
    // "lock hold by current process".
    const std::string& state = s.ToString();
    if (state.find("lock") != std::string::npos &&
        (state.find("temporarily unavailable") != std::string::npos ||
         state.find("lock hold") != std::string::npos)) {
      return Status::Busy(std::move(msg));
    }
    return Status::IoError(std::move(msg));
  }
  return Status::Internal(std::move(msg));
}

class RocksIterator : public KvIterator {
 public:
  RocksIterator(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, std::string upper)
      : upper_(std::move(upper)), upper_slice_(upper_) {
    rocksdb::ReadOptions ro;
    if (!upper_.empty())
      ro.iterate_upper_bound = &upper_slice_;
    it_.reset(db->NewIterator(ro, cf));
  }
  void Seek(std::string_view key) override { it_->Seek(ToSlice(key)); }
  bool Valid() const override { return it_->Valid(); }
  void Next() override { it_->Next(); }
  std::string_view key() const override {
    auto k = it_->key();
    return {k.data(), k.size()};
  }
  std::string_view value() const override {
    auto v = it_->value();
    return {v.data(), v.size()};
  }
  Status status() const override { return FromRocks(it_->status(), "iterate"); }

 private:
  std::string upper_;
  rocksdb::Slice upper_slice_;  // points into upper_, which outlives it_
  std::unique_ptr<rocksdb::Iterator> it_;
};

rocksdb::ColumnFamilyOptions CfOptions(Cf cf, const std::shared_ptr<rocksdb::Cache>& cache) {
  rocksdb::ColumnFamilyOptions o;
  const bool big = cf == Cf::kInodes || cf == Cf::kDentries;
  o.write_buffer_size = big ? (8u << 20) : (2u << 20);
  o.max_write_buffer_number = 2;
  o.level_compaction_dynamic_level_bytes = true;
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = cache;
  t.cache_index_and_filter_blocks = true;
  t.pin_l0_filter_and_index_blocks_in_cache = true;
  t.format_version = 5;
  if (cf == Cf::kInodes || cf == Cf::kDentries || cf == Cf::kXattrs) {
    // Point lookups dominate (Lookup, GetAttr); a bloom filter spares most misses a disk read.
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  }
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

}  // namespace

Result<std::unique_ptr<RocksKvStore>> RocksKvStore::Open(const Options& options) {
  if (options.path.empty())
    return Status::InvalidArgument("no data directory given");
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  // The namespace (and the client key table) is readable by the MDS's user only.
  if (!ec)
    std::filesystem::permissions(options.path, std::filesystem::perms::owner_all, ec);
  if (ec) {
    return Status::FromErrno(ec.value(), fmt::format("cannot open data dir {}", options.path));
  }
  std::unique_ptr<RocksKvStore> store(new RocksKvStore());
  store->cache_ = rocksdb::NewLRUCache(options.cache_bytes);
  store->wbm_ =
      std::make_shared<rocksdb::WriteBufferManager>(options.write_buffer_bytes, store->cache_);

  rocksdb::DBOptions db;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  if (options.env != nullptr)
    db.env = options.env;
  db.write_buffer_manager = store->wbm_;
  db.max_background_jobs = 2;
  db.max_open_files = 512;
  db.keep_log_file_num = 3;
  db.max_log_file_size = 4u << 20;
  db.max_total_wal_size = 64u << 20;
  db.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;

  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  descs.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (size_t i = 0; i < kNumCfs; ++i) {
    Cf cf = static_cast<Cf>(i);
    descs.emplace_back(CfName(cf), CfOptions(cf, store->cache_));
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db, options.path, descs, &handles, &store->db_);
  if (!s.ok()) {
    Status st = FromRocks(s, fmt::format("cannot open data dir {}", options.path));
    if (st.code() == StatusCode::kBusy) {
      return Status::Busy(
          fmt::format("data dir {} is in use by another process (its LOCK is held)", options.path));
    }
    return st;
  }
  store->default_cf_ = handles[0];
  for (size_t i = 0; i < kNumCfs; ++i)
    store->cfs_[i] = handles[i + 1];
  CIUIC_RETURN_IF_ERROR(store->CheckFormat());
  return store;
}

Status RocksKvStore::CheckFormat() {
  std::string v;
  Status st = Get(Cf::kSystem, kFormatVersionKey, &v);
  if (st.code() == StatusCode::kNotFound) {
    // A store without the record must be brand new: any other content means it was not made
    // by us (or lost its record).
    for (size_t i = 0; i < kNumCfs; ++i) {
      auto it = NewIterator(static_cast<Cf>(i), "");
      it->Seek("");
      if (it->Valid())
        return Status::Corruption("data dir has data but no format version");
      CIUIC_RETURN_IF_ERROR(it->status());
    }
    WriteBatch b;
    b.Put(Cf::kSystem, kFormatVersionKey, std::to_string(kKvFormatVersion));
    return Write(b, true);
  }
  CIUIC_RETURN_IF_ERROR(st);
  if (v != std::to_string(kKvFormatVersion)) {
    return Status::NotSupported(
        fmt::format("data dir has format version '{}', this ciuic-mds reads {}", v.substr(0, 32),
                    kKvFormatVersion));
  }
  return Status::OK();
}

RocksKvStore::~RocksKvStore() {
  if (db_ == nullptr)
    return;
  for (auto* h : cfs_) {
    if (h != nullptr)
      db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  }
  if (default_cf_ != nullptr)
    db_->DestroyColumnFamilyHandle(default_cf_).PermitUncheckedError();
  // Close() reports a failed final WAL write; there is no one left to tell, and the WAL's
  // point-in-time recovery handles a torn tail.
  db_->Close().PermitUncheckedError();
  delete db_;
}

Status RocksKvStore::Get(Cf cf, std::string_view key, std::string* value) {
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), cfs_[static_cast<size_t>(cf)], ToSlice(key), value);
  if (s.IsNotFound())
    return Status::NotFound("key not found");
  return FromRocks(s, "get");
}

void RocksKvStore::MultiGet(Cf cf,
                            std::span<const std::string> keys,
                            std::vector<std::string>* values,
                            std::vector<Status>* statuses) {
  std::vector<rocksdb::Slice> slices;
  slices.reserve(keys.size());
  for (const auto& k : keys)
    slices.push_back(ToSlice(k));
  std::vector<rocksdb::ColumnFamilyHandle*> cfs(keys.size(), cfs_[static_cast<size_t>(cf)]);
  std::vector<rocksdb::Status> rs = db_->MultiGet(rocksdb::ReadOptions(), cfs, slices, values);
  statuses->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    (*statuses)[i] =
        rs[i].IsNotFound() ? Status::NotFound("key not found") : FromRocks(rs[i], "multiget");
  }
}

Status RocksKvStore::Write(const WriteBatch& batch, bool sync) {
  rocksdb::WriteBatch wb(batch.bytes() + batch.count() * 16 + 64);
  for (const auto& op : batch.ops()) {
    auto* h = cfs_[static_cast<size_t>(op.cf)];
    rocksdb::Status s =
        op.del ? wb.Delete(h, ToSlice(op.key)) : wb.Put(h, ToSlice(op.key), ToSlice(op.value));
    if (!s.ok())
      return FromRocks(s, "build write batch");
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!write_error_.ok())
    return write_error_;
  Status st = FromRocks(db_->Write(wo, &wb), "write");
  if (!st.ok() && st.code() != StatusCode::kInvalidArgument)
    write_error_ = st.WithContext("the MDS store stopped writing (restart the MDS)");
  return st;
}

Status RocksKvStore::SyncWal() {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!write_error_.ok())
    return write_error_;
  Status st = FromRocks(db_->SyncWAL(), "sync wal");
  if (!st.ok())
    write_error_ = st.WithContext("the MDS store stopped writing (restart the MDS)");
  return st;
}

std::unique_ptr<KvIterator> RocksKvStore::NewIterator(Cf cf, std::string upper_bound) {
  return std::make_unique<RocksIterator>(db_, cfs_[static_cast<size_t>(cf)],
                                         std::move(upper_bound));
}

Status RocksKvStore::TEST_Flush() {
  rocksdb::FlushOptions fo;
  for (auto* h : cfs_)
    CIUIC_RETURN_IF_ERROR(FromRocks(db_->Flush(fo, h), "flush"));
  return Status::OK();
}

std::vector<std::pair<std::string, uint64_t>> RocksKvStore::Properties() {
  // Aggregated over every column family; each is an in-memory read (no IO).
  static constexpr std::pair<const char*, const char*> kProps[] = {
      {"estimate_num_keys", "rocksdb.estimate-num-keys"},
      {"memtable_bytes", "rocksdb.cur-size-all-mem-tables"},
      {"live_sst_bytes", "rocksdb.live-sst-files-size"},
      {"pending_compaction_bytes", "rocksdb.estimate-pending-compaction-bytes"},
      {"running_compactions", "rocksdb.num-running-compactions"},
      {"running_flushes", "rocksdb.num-running-flushes"},
  };
  std::vector<std::pair<std::string, uint64_t>> out;
  if (db_ == nullptr)
    return out;
  for (const auto& [name, prop] : kProps) {
    uint64_t v = 0;
    if (db_->GetAggregatedIntProperty(prop, &v))
      out.emplace_back(name, v);
  }
  if (cache_ != nullptr)
    out.emplace_back("block_cache_bytes", cache_->GetUsage());
  return out;
}

}  // namespace ciuic::meta
