// RpcMetrics: what an RpcServer counts per message type and per job (internal to ciuic_net).
//
// Per request: one steady_clock read at dispatch and one at reply, and relaxed atomic adds on
// counters looked up once per message type (at Start) and once per connection (the job).
// Jobs are bounded: the first `max_jobs` job ids seen get their own series, later ones are
// counted under job="other". Lives as long as the longest of its server and its registry (the
// registry's callbacks hold it).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/metrics.h"
#include "common/status.h"

namespace ciuic::net::detail {

// Per job: operations per message type (indexed like OpMetrics::index), data bytes.
struct JobStats {
  JobStats(std::string name, size_t num_ops)
      : job(std::move(name)), ops(new std::atomic<uint64_t>[num_ops]()) {}
  const std::string job;
  std::unique_ptr<std::atomic<uint64_t>[]> ops;
  std::atomic<uint64_t> read_bytes{0};   // reply data segments (data read from the server)
  std::atomic<uint64_t> write_bytes{0};  // data segments of requests answered OK
};

struct OpMetrics {
  std::string op;  // the message type's name, the `op` label
  size_t index = 0;
  metrics::Counter* requests = nullptr;
  metrics::Counter* request_bytes = nullptr;
  metrics::Counter* reply_bytes = nullptr;
  metrics::Histogram* latency = nullptr;
};

class RpcMetrics : public std::enable_shared_from_this<RpcMetrics> {
 public:
  // The job label of connections whose peer sent no job id.
  static constexpr std::string_view kNoJob = "";
  static constexpr std::string_view kOtherJob = "other";
  static constexpr size_t kMaxJobIdBytes = 128;

  RpcMetrics(metrics::Registry* registry, size_t max_jobs);

  // Adds the series of one served message type; call before Register() and Freeze().
  OpMetrics* AddOp(uint16_t type);
  // Registers the scrape-time callbacks (jobs, connections). Call once, after the last AddOp.
  void Freeze(std::function<size_t()> connections_open, std::function<uint64_t()> rejected);
  // Returns the stats of `job_id` (truncated to kMaxJobIdBytes), or of "other" when the table
  // is full. Takes a mutex: call once per connection.
  JobStats* Job(std::string_view job_id);
  // Counts an error reply of `op` with `code`. Takes a mutex (errors are rare).
  void CountError(const std::string& op, StatusCode code);

  metrics::Gauge* inflight() const { return inflight_; }

 private:
  metrics::Registry* const registry_;
  const size_t max_jobs_;
  metrics::Family<metrics::Counter>* requests_;
  metrics::Family<metrics::Counter>* request_bytes_;
  metrics::Family<metrics::Counter>* reply_bytes_;
  metrics::Family<metrics::Histogram>* latency_;
  metrics::Family<metrics::Counter>* errors_;
  metrics::Gauge* inflight_;
  std::deque<OpMetrics> ops_;  // fixed after Freeze

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<JobStats>, std::less<>> jobs_;            // guarded by mu_
  std::map<std::pair<std::string, StatusCode>, metrics::Counter*> error_series_;  // guarded
};

}  // namespace ciuic::net::detail
