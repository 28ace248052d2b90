// Prometheus text exposition (format 0.0.4) of the server's counters, gauges and histograms.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace deepinfer::server {
namespace {

// vLLM's bucket boundaries, with finer low buckets for inter-token latency on fast GPUs.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                         0.4,   0.5,    0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,   5.0,    10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, value);
}

}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto bucket = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard lock(mutex_);
  counts_[bucket]++;
  sum_ += value;
  count_++;
}

uint64_t Histogram::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mutex_);
  uint64_t cumulative = 0;
  auto it = std::back_inserter(out);
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    fmt::format_to(it, "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cumulative);
  }
  fmt::format_to(it, "{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  fmt::format_to(it, "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      labels_(fmt::format("model_name=\"{}\"", escape_label_value(model_name_))),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kE2eBuckets) {}

void ServerMetrics::observe_finished(const std::string& finish_reason, int prompt_tokens, int generation_tokens,
                                     double seconds) {
  e2e_.observe(seconds);
  std::lock_guard lock(mutex_);
  finished_by_reason_[finish_reason]++;
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
  generation_tokens_ += static_cast<uint64_t>(generation_tokens);
}

void ServerMetrics::observe_http(const std::string& handler, int status) {
  std::lock_guard lock(mutex_);
  http_requests_[{handler, status}]++;
}

std::string ServerMetrics::render(const BackendStats& stats) const {
  std::string out;
  const std::string& l = labels_;
  header(out, "deepinfer:num_requests_running", "gauge", "Sequences in the engine's running batch.");
  sample(out, "deepinfer:num_requests_running", l, stats.num_running);
  header(out, "deepinfer:num_requests_waiting", "gauge", "Sequences waiting to be scheduled.");
  sample(out, "deepinfer:num_requests_waiting", l, stats.num_waiting);
  header(out, "deepinfer:kv_cache_usage_perc", "gauge", "Fraction of KV-cache pages in use (1 = full).");
  sample(out, "deepinfer:kv_cache_usage_perc", l, stats.cache_usage);
  header(out, "deepinfer:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
  sample(out, "deepinfer:prefix_cache_queries_total", l, static_cast<double>(stats.prefix_cache_queries));
  header(out, "deepinfer:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  sample(out, "deepinfer:prefix_cache_hits_total", l, static_cast<double>(stats.prefix_cache_hits));
  header(out, "deepinfer:prefix_cache_hit_rate", "gauge", "Prefix-cache hits / queries since start.");
  sample(out, "deepinfer:prefix_cache_hit_rate", l,
         stats.prefix_cache_queries == 0
             ? 0.0
             : static_cast<double>(stats.prefix_cache_hits) / static_cast<double>(stats.prefix_cache_queries));
  header(out, "deepinfer:num_preemptions_total", "counter", "Sequences preempted (recomputed later).");
  sample(out, "deepinfer:num_preemptions_total", l, static_cast<double>(stats.num_preemptions));
  {
    std::lock_guard lock(mutex_);
    header(out, "deepinfer:prompt_tokens_total", "counter", "Prompt tokens of finished sequences.");
    sample(out, "deepinfer:prompt_tokens_total", l, static_cast<double>(prompt_tokens_));
    header(out, "deepinfer:generation_tokens_total", "counter", "Generated tokens of finished sequences.");
    sample(out, "deepinfer:generation_tokens_total", l, static_cast<double>(generation_tokens_));
    header(out, "deepinfer:request_success_total", "counter", "Finished sequences by finish reason.");
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      const auto it = finished_by_reason_.find(reason);
      sample(out, "deepinfer:request_success_total", fmt::format("{},finished_reason=\"{}\"", l, reason),
             static_cast<double>(it == finished_by_reason_.end() ? 0 : it->second));
    }
    header(out, "deepinfer:http_requests_total", "counter", "HTTP requests by handler and status.");
    for (const auto& [key, count] : http_requests_)
      sample(out, "deepinfer:http_requests_total",
             fmt::format("handler=\"{}\",status=\"{}\"", escape_label_value(key.first), key.second),
             static_cast<double>(count));
  }
  header(out, "deepinfer:time_to_first_token_seconds", "histogram", "Time from arrival to the first token.");
  ttft_.render(out, "deepinfer:time_to_first_token_seconds", l);
  header(out, "deepinfer:inter_token_latency_seconds", "histogram", "Time between consecutive tokens.");
  itl_.render(out, "deepinfer:inter_token_latency_seconds", l);
  header(out, "deepinfer:e2e_request_latency_seconds", "histogram", "Time from arrival to the last token.");
  e2e_.render(out, "deepinfer:e2e_request_latency_seconds", l);
  return out;
}

}  // namespace deepinfer::server
