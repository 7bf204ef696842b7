// OssServer's metrics: per-OST operations, errors, data bytes and space, the IO queue, and the
// HTTP endpoint that serves them with the RPC server's own (names in docs/design.md,
// "Observability").
#include <string>

#include "common/logging.h"
#include "common/metrics.h"
#include "net/http_server.h"
#include "net/rpc.h"
#include "oss/oss_server.h"
#include "oss/ost_format.h"
#include "oss/ost_store.h"
#include "oss/read_buffer_pool.h"

namespace ciuic::oss {
namespace {

constexpr const char* kOpNames[] = {"read",    "write",   "sync",  "punch",
                                    "destroy", "objstat", "statfs"};

}  // namespace

void OssServer::RegisterMetrics() {
  metrics::Registry& r = *metrics_;
  auto* ops =
      r.AddCounter("ciuic_ost_ops_total",
                   "Operations submitted to an OST's object store, by operation.", {"ost", "op"});
  auto* errors =
      r.AddCounter("ciuic_ost_errors_total",
                   "OST operations that failed in the object store, by operation.", {"ost", "op"});
  auto* read = r.AddCounter("ciuic_ost_read_bytes_total", "Bytes read from an OST.", {"ost"});
  auto* written = r.AddCounter("ciuic_ost_write_bytes_total", "Bytes written to an OST.", {"ost"});
  for (const auto& [index, dir] : options_.osts) {
    std::string ost = std::to_string(index);
    OstCounters& c = ost_counters_[index];
    for (int i = 0; i < kNumOstOps; ++i) {
      c.ops[i] = ops->WithLabels({ost, kOpNames[i]});
      c.errors[i] = errors->WithLabels({ost, kOpNames[i]});
    }
    c.read_bytes = read->WithLabels({ost});
    c.write_bytes = written->WithLabels({ost});
  }
  // Space is read at scrape time (statvfs of each OST directory, on the HTTP thread).
  auto space = [this](bool want_free, bool used) {
    return [this, want_free, used](metrics::Emitter& e) {
      for (const auto& [index, store] : osts_) {
        Result<io::FsStat> fs = store->Statfs();
        if (!fs.ok())
          continue;
        uint64_t v = used ? fs->capacity - fs->free : want_free ? fs->free : fs->capacity;
        e.Add({std::to_string(index)}, static_cast<double>(v));
      }
    };
  };
  r.AddCallback("ciuic_ost_capacity_bytes", "Size of the file system holding an OST.",
                metrics::Type::kGauge, {"ost"}, space(false, false));
  r.AddCallback("ciuic_ost_free_bytes", "Free bytes of the file system holding an OST.",
                metrics::Type::kGauge, {"ost"}, space(true, false));
  r.AddCallback("ciuic_ost_used_bytes", "Used bytes of the file system holding an OST.",
                metrics::Type::kGauge, {"ost"}, space(false, true));
  r.AddCallback("ciuic_oss_io_queue_depth",
                "OST operations submitted to the object stores and not completed.",
                metrics::Type::kGauge, {}, [this](metrics::Emitter& e) {
                  e.Add({}, static_cast<double>(io_queue_.load(std::memory_order_relaxed)));
                });
  r.AddCallback("ciuic_oss_inflight_bytes",
                "Request and reply data bytes in flight (the budget that answers kUnavailable "
                "when spent).",
                metrics::Type::kGauge, {}, [this](metrics::Emitter& e) {
                  e.Add({}, static_cast<double>(inflight_bytes_.load(std::memory_order_relaxed)));
                });
  // Memory kept between requests (docs/design.md, "OSS memory"): each is bounded by an option.
  r.AddCallback("ciuic_oss_pool_idle_bytes",
                "Idle buffers kept for reuse: reads land in `read`, request data in `write`.",
                metrics::Type::kGauge, {"pool"}, [this](metrics::Emitter& e) {
                  e.Add({"read"}, static_cast<double>(read_pool_ ? read_pool_->idle_bytes() : 0));
                  e.Add({"write"}, static_cast<double>(rpc_ ? rpc_->buffer_pool_idle_bytes() : 0));
                });
  r.AddCallback("ciuic_ost_cached_objects", "Objects an OST keeps open (two fds each).",
                metrics::Type::kGauge, {"ost"}, [this](metrics::Emitter& e) {
                  for (const auto& [index, store] : osts_)
                    e.Add({std::to_string(index)}, static_cast<double>(store->cached_objects()));
                });
  r.AddCallback("ciuic_oss_crc_page_bytes",
                "Checksum pages of open objects held in memory (4 KiB per 2 MiB touched).",
                metrics::Type::kGauge, {}, [](metrics::Emitter& e) {
                  e.Add({}, static_cast<double>(OstStore::crc_pages_in_memory() * kCrcPageSize));
                });
  r.AddCallback("ciuic_oss_shm_reads_total", "Reads answered into a co-located client's memory.",
                metrics::Type::kCounter, {},
                [this](metrics::Emitter& e) { e.Add({}, static_cast<double>(shm_reads())); });
  r.AddCallback("ciuic_oss_shm_writes_total",
                "Writes whose bytes came from a co-located client's memory.",
                metrics::Type::kCounter, {},
                [this](metrics::Emitter& e) { e.Add({}, static_cast<double>(shm_writes())); });
}

Status OssServer::StartMetricsHttp() {
  if (options_.metrics_port < 0)
    return Status::OK();
  http_ = std::make_unique<net::HttpServer>(
      net::HttpServer::Options{.host = options_.host,
                               .port = static_cast<uint16_t>(options_.metrics_port),
                               .name = "oss-metrics"});
  http_->Handle("/metrics", net::kPrometheusContentType,
                [r = metrics_.get()] { return r->Render(); });
  Status st = http_->Start();
  if (!st.ok()) {
    http_.reset();
    return st.WithContext("cannot serve metrics");
  }
  return Status::OK();
}

uint16_t OssServer::metrics_port() const {
  return http_ ? http_->port() : 0;
}

OssServer::OstCounters* OssServer::CountersOf(uint32_t ost) const {
  auto it = ost_counters_.find(ost);
  return it == ost_counters_.end() ? nullptr : const_cast<OstCounters*>(&it->second);
}

void OssServer::OpBegin(OstCounters* c, OstOp op) {
  if (c == nullptr)
    return;
  c->ops[static_cast<int>(op)]->Inc();
  io_queue_.fetch_add(1, std::memory_order_relaxed);
}

void OssServer::OpEnd(
    OstCounters* c, OstOp op, bool ok, uint64_t read_bytes, uint64_t write_bytes) {
  if (c == nullptr)
    return;
  io_queue_.fetch_sub(1, std::memory_order_relaxed);
  if (!ok) {
    c->errors[static_cast<int>(op)]->Inc();
    return;
  }
  if (read_bytes > 0)
    c->read_bytes->Inc(read_bytes);
  if (write_bytes > 0)
    c->write_bytes->Inc(write_bytes);
}

}  // namespace ciuic::oss
