// RpcMetrics: the families an RpcServer exports (names in docs/design.md, "Observability").
#include "net/rpc_metrics.h"

#include "net/frame.h"

namespace ciuic::net::detail {

RpcMetrics::RpcMetrics(metrics::Registry* registry, size_t max_jobs)
    : registry_(registry), max_jobs_(max_jobs) {
  requests_ = registry->AddCounter("ciuic_rpc_requests_total",
                                   "RPC requests received, by message type.", {"op"});
  request_bytes_ = registry->AddCounter(
      "ciuic_rpc_request_bytes_total",
      "Bytes of RPC requests received (header, body and data segment), by message type.", {"op"});
  reply_bytes_ = registry->AddCounter(
      "ciuic_rpc_reply_bytes_total",
      "Bytes of RPC replies sent (header, body and data segment), by message type.", {"op"});
  latency_ = registry->AddHistogram(
      "ciuic_rpc_latency_seconds",
      "Time from a request fully received to its reply handed to the connection's send queue.",
      metrics::kLatencyMicros, {"op"});
  errors_ =
      registry->AddCounter("ciuic_rpc_errors_total",
                           "RPC error replies, by message type and status code.", {"op", "code"});
  inflight_ = registry
                  ->AddGauge("ciuic_rpc_inflight_requests",
                             "Requests handed to handlers and not answered yet.")
                  ->Get();
}

OpMetrics* RpcMetrics::AddOp(uint16_t type) {
  OpMetrics& m = ops_.emplace_back();
  m.op = MsgTypeName(type);
  m.index = ops_.size() - 1;
  m.requests = requests_->WithLabels({m.op});
  m.request_bytes = request_bytes_->WithLabels({m.op});
  m.reply_bytes = reply_bytes_->WithLabels({m.op});
  m.latency = latency_->WithLabels({m.op});
  return &m;
}

void RpcMetrics::Freeze(std::function<size_t()> connections_open,
                        std::function<uint64_t()> rejected) {
  registry_->AddCallback("ciuic_rpc_connections_open", "Open RPC connections.",
                         metrics::Type::kGauge, {},
                         [f = std::move(connections_open)](metrics::Emitter& e) {
                           e.Add({}, static_cast<double>(f()));
                         });
  registry_->AddCallback(
      "ciuic_rpc_frames_rejected_total",
      "Connections closed for a protocol violation (bad frame, failed handshake).",
      metrics::Type::kCounter, {},
      [f = std::move(rejected)](metrics::Emitter& e) { e.Add({}, static_cast<double>(f())); });
  std::weak_ptr<RpcMetrics> weak = weak_from_this();
  registry_->AddCallback(
      "ciuic_job_ops_total",
      "RPC requests per job (the client's CIUIC_JOBID, SLURM_JOB_ID or TORCHELASTIC_RUN_ID) and "
      "message type; jobs beyond the table's size count as job=\"other\".",
      metrics::Type::kCounter, {"job", "op"}, [weak](metrics::Emitter& e) {
        auto self = weak.lock();
        if (self == nullptr)
          return;
        std::lock_guard<std::mutex> lock(self->mu_);
        for (const auto& [name, j] : self->jobs_) {
          for (const auto& op : self->ops_) {
            uint64_t n = j->ops[op.index].load(std::memory_order_relaxed);
            if (n > 0)
              e.Add({name, op.op}, static_cast<double>(n));
          }
        }
      });
  registry_->AddCallback("ciuic_job_read_bytes_total",
                         "Data bytes read from this server per job (reply data segments).",
                         metrics::Type::kCounter, {"job"}, [weak](metrics::Emitter& e) {
                           auto self = weak.lock();
                           if (self == nullptr)
                             return;
                           std::lock_guard<std::mutex> lock(self->mu_);
                           for (const auto& [name, j] : self->jobs_)
                             e.Add({name}, static_cast<double>(j->read_bytes.load()));
                         });
  registry_->AddCallback(
      "ciuic_job_write_bytes_total",
      "Data bytes written to this server per job (data segments of requests answered OK).",
      metrics::Type::kCounter, {"job"}, [weak](metrics::Emitter& e) {
        auto self = weak.lock();
        if (self == nullptr)
          return;
        std::lock_guard<std::mutex> lock(self->mu_);
        for (const auto& [name, j] : self->jobs_)
          e.Add({name}, static_cast<double>(j->write_bytes.load()));
      });
}

JobStats* RpcMetrics::Job(std::string_view job_id) {
  if (job_id.size() > kMaxJobIdBytes)
    job_id = job_id.substr(0, kMaxJobIdBytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  if (it != jobs_.end())
    return it->second.get();
  // The table holds max_jobs named jobs plus "other".
  size_t named = jobs_.size() - (jobs_.count(kOtherJob) ? 1 : 0);
  std::string key(named < max_jobs_ ? job_id : kOtherJob);
  auto& slot = jobs_[key];
  if (slot == nullptr)
    slot = std::make_unique<JobStats>(key, ops_.size());
  return slot.get();
}

void RpcMetrics::CountError(const std::string& op, StatusCode code) {
  metrics::Counter* c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = error_series_[{op, code}];
    if (slot == nullptr)
      slot = errors_->WithLabels({op, StatusCodeName(code)});
    c = slot;
  }
  c->Inc();
}

}  // namespace ciuic::net::detail
