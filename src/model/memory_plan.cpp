// The GPU executor's memory arithmetic and its error messages.
#include "model/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace deepinfer::model {
namespace {

std::int64_t budget_of(const DeviceMemory& device, double utilization) {
  DI_CHECK(utilization > 0.0 && utilization <= 1.0, "--gpu-memory-utilization {} must be in (0, 1]", utilization);
  DI_CHECK(device.total_bytes > 0, "{}: reports {} bytes of memory", device.label, device.total_bytes);
  return static_cast<std::int64_t>(std::floor(utilization * static_cast<double>(device.total_bytes)));
}

}  // namespace

std::string gib(std::int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

void check_weights_fit(const DeviceMemory& device, double utilization, std::int64_t weight_bytes) {
  const std::int64_t budget = budget_of(device, utilization);
  // vLLM's start-up check: the budget must be free now (other processes' memory is not ours to use).
  DI_CHECK(device.free_at_start >= budget,
           "{}: --gpu-memory-utilization {:.2f} asks for {} of its {}, but only {} are free (other processes hold the "
           "rest); lower --gpu-memory-utilization or free the device",
           device.label, utilization, gib(budget), gib(device.total_bytes), gib(device.free_at_start));
  DI_CHECK(weight_bytes < budget,
           "{}: the weights need {}, but --gpu-memory-utilization {:.2f} of its {} allows {} in all (weights, "
           "activations and KV cache); raise --gpu-memory-utilization, use a device with more memory, or load fewer "
           "layers (--load-format dummy --num-layers N)",
           device.label, gib(weight_bytes), utilization, gib(device.total_bytes), gib(budget));
}

MemoryPlan plan_device_memory(const DeviceMemory& device, const MemoryRequest& request, const cache::CacheSpec& spec,
                              const cache::CacheConfig& config, std::int32_t max_num_seqs, std::int32_t max_model_len) {
  MemoryPlan plan;
  plan.device_label = device.label;
  plan.request = request;
  plan.max_model_len = max_model_len;
  plan.budget_bytes = budget_of(device, request.gpu_memory_utilization);
  const std::int64_t used = request.weight_bytes + request.activation_bytes + std::max<std::int64_t>(request.other_bytes, 0);
  if (request.cache_memory_bytes > 0) {
    plan.cache_bytes = request.cache_memory_bytes;
    DI_CHECK(request.free_now < 0 || plan.cache_bytes <= request.free_now,
             "{}: cache_memory_bytes asks for {} of KV cache, but only {} are free after the weights ({}) and "
             "activations ({})",
             device.label, gib(plan.cache_bytes), gib(request.free_now), gib(request.weight_bytes),
             gib(request.activation_bytes));
  } else {
    plan.cache_bytes = plan.budget_bytes - used;
    DI_CHECK(plan.cache_bytes > 0,
             "{}: no memory left for the KV cache: --gpu-memory-utilization {:.2f} gives {}, and the weights take {}, "
             "the activations of a forward of the batch-token limit {}, other runtime memory {}; raise "
             "--gpu-memory-utilization or lower --max-num-batched-tokens",
             device.label, request.gpu_memory_utilization, gib(plan.budget_bytes), gib(request.weight_bytes),
             gib(request.activation_bytes), gib(request.other_bytes));
  }
  // Per-sequence fixed state (windows, compressor groups) of every state and snapshot slot comes first.
  cache::CacheConfig sized = config;
  cache::CacheLayout probe = cache::CacheLayout::make(spec, [&] {
    cache::CacheConfig one = config;
    one.num_pages = 1;
    return one;
  }(), max_num_seqs);
  const std::int64_t fixed =
      spec.fixed_state_bytes() * (probe.num_state_slots + probe.num_snapshot_slots);
  const std::int64_t page_bytes = std::max<std::int64_t>(probe.page_bytes(), 1);
  DI_CHECK(plan.cache_bytes - fixed >= page_bytes,
           "{}: the KV cache's {} hold only the per-sequence state of {} slots ({}: {} running sequences and {} "
           "snapshots), no page of {}; lower --max-num-seqs or give the cache more memory",
           device.label, gib(plan.cache_bytes), probe.num_state_slots + probe.num_snapshot_slots, gib(fixed),
           probe.num_state_slots, probe.num_snapshot_slots, gib(page_bytes));
  if (config.num_pages > 0) {
    plan.layout = cache::CacheLayout::make(spec, config, max_num_seqs);
    DI_CHECK(plan.layout.total_bytes() <= plan.cache_bytes,
             "{}: --num-cache-pages {} need {} with the state slots, but the cache may use {}", device.label,
             config.num_pages, gib(plan.layout.total_bytes()), gib(plan.cache_bytes));
  } else {
    sized.num_pages = 0;
    sized.memory_bytes = plan.cache_bytes;
    plan.layout = cache::CacheLayout::make(spec, sized, max_num_seqs);
  }
  plan.max_tokens = std::int64_t{plan.layout.num_pages} * plan.layout.page_size;
  const std::int32_t need = plan.layout.pages_for_tokens(max_model_len);
  DI_CHECK(need <= plan.layout.num_pages,
           "{}: one sequence of max_model_len {} needs {} pages ({}), but the KV cache holds {} pages ({}, {} tokens); "
           "lower --max-model-len to at most {} or raise --gpu-memory-utilization",
           device.label, max_model_len, need, gib(std::int64_t{need} * page_bytes), plan.layout.num_pages,
           gib(std::int64_t{plan.layout.num_pages} * page_bytes), plan.max_tokens, plan.max_tokens);
  return plan;
}

std::string MemoryPlan::summary() const {
  const std::string budget =
      request.cache_memory_bytes > 0
          ? fmt::format("cache_memory_bytes {}", gib(request.cache_memory_bytes))
          : fmt::format("{:.2f} x total = {}", request.gpu_memory_utilization, gib(budget_bytes));
  return fmt::format(
      "memory plan {}: {}; weights {}, activations {}, other {} -> cache {} -> {} pages of {} tokens ({:.1f} MiB "
      "each) -> {} tokens (max_model_len {}: {:.1f} sequences at once)",
      device_label, budget, gib(request.weight_bytes), gib(request.activation_bytes), gib(request.other_bytes),
      gib(cache_bytes), layout.num_pages, layout.page_size, static_cast<double>(layout.page_bytes()) / (1 << 20),
      max_tokens, max_model_len, static_cast<double>(max_tokens) / std::max(max_model_len, 1));
}

}  // namespace deepinfer::model
