// Server metrics in the Prometheus text format, named like vLLM's (prefix "deepinfer:" for
// "vllm:") so existing dashboards carry over: request counts, token counts, TTFT / inter-token /
// end-to-end latency histograms, and the engine's running/waiting/cache gauges.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/generation_backend.h"

namespace deepinfer::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends the _bucket/_sum/_count lines of metric `name` with the given label text
  // (`model_name="x"`, without braces).
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void observe_time_to_first_token(double seconds) { ttft_.observe(seconds); }
  void observe_inter_token_latency(double seconds) { itl_.observe(seconds); }
  // A sequence ended: its finish reason ("stop", "length", "abort", "error"), token counts and
  // end-to-end latency.
  void observe_finished(const std::string& finish_reason, int prompt_tokens, int generation_tokens, double seconds);
  void observe_http(const std::string& handler, int status);

  // The full exposition, with the engine's gauges from `stats`.
  std::string render(const BackendStats& stats) const;

 private:
  std::string model_name_;
  std::string labels_;  // model_name="..."
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> finished_by_reason_;
  std::map<std::pair<std::string, int>, uint64_t> http_requests_;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
};

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string escape_label_value(const std::string& value);

}  // namespace deepinfer::server
