// Prometheus exposition: cumulative histogram buckets, counters by label, engine gauges.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace deepinfer::server {
namespace {

bool contains(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.125, 1.0});
  h.observe(0.0625);
  h.observe(0.125);  // on the bound: counted in le="0.125"
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render(out, "x", "m=\"a\"");
  EXPECT_TRUE(contains(out, "x_bucket{m=\"a\",le=\"0.125\"} 2\n"));
  EXPECT_TRUE(contains(out, "x_bucket{m=\"a\",le=\"1\"} 3\n"));
  EXPECT_TRUE(contains(out, "x_bucket{m=\"a\",le=\"+Inf\"} 4\n"));
  EXPECT_TRUE(contains(out, "x_sum{m=\"a\"} 7.6875\n"));
  EXPECT_TRUE(contains(out, "x_count{m=\"a\"} 4\n"));
}

TEST(Metrics, RenderHasTokensLatenciesAndEngineGauges) {
  ServerMetrics m("my \"model\"");
  m.observe_time_to_first_token(0.02);
  m.observe_inter_token_latency(0.004);
  m.observe_finished("stop", 10, 5, 0.2);
  m.observe_finished("length", 3, 7, 0.4);
  m.observe_http("/v1/completions", 200);
  BackendStats stats;
  stats.num_running = 3;
  stats.num_waiting = 2;
  stats.cache_usage = 0.5;
  stats.prefix_cache_queries = 200;
  stats.prefix_cache_hits = 50;
  const std::string out = m.render(stats);
  const std::string l = "model_name=\"my \\\"model\\\"\"";
  EXPECT_TRUE(contains(out, "deepinfer:num_requests_running{" + l + "} 3\n"));
  EXPECT_TRUE(contains(out, "deepinfer:num_requests_waiting{" + l + "} 2\n"));
  EXPECT_TRUE(contains(out, "deepinfer:kv_cache_usage_perc{" + l + "} 0.5\n"));
  EXPECT_TRUE(contains(out, "deepinfer:prefix_cache_hit_rate{" + l + "} 0.25\n"));
  EXPECT_TRUE(contains(out, "deepinfer:prompt_tokens_total{" + l + "} 13\n"));
  EXPECT_TRUE(contains(out, "deepinfer:generation_tokens_total{" + l + "} 12\n"));
  EXPECT_TRUE(contains(out, "deepinfer:request_success_total{" + l + ",finished_reason=\"length\"} 1\n"));
  EXPECT_TRUE(contains(out, "deepinfer:time_to_first_token_seconds_count{" + l + "} 1\n"));
  EXPECT_TRUE(contains(out, "deepinfer:inter_token_latency_seconds_bucket{" + l + ",le=\"0.005\"} 1\n"));
  EXPECT_TRUE(contains(out, "deepinfer:http_requests_total{handler=\"/v1/completions\",status=\"200\"} 1\n"));
  EXPECT_TRUE(contains(out, "# TYPE deepinfer:e2e_request_latency_seconds histogram\n"));
}

}  // namespace
}  // namespace deepinfer::server
