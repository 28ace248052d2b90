// Device memory planning for the GPU executor (vLLM's --gpu-memory-utilization): of the device's
// total memory, the fraction given is this process's budget; weights, the activations of a
// profiling forward and other runtime memory come off it, and the rest holds KV-cache pages and the
// per-sequence state slots. Pure arithmetic over reported numbers, so it is tested without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "cache/cache_spec.h"

namespace deepinfer::model {

// What the device reported when the backend started.
struct DeviceMemory {
  std::string label;                // "cuda:0 (NVIDIA H200)"
  std::int64_t total_bytes = 0;
  std::int64_t free_at_start = 0;   // free once this process's CUDA context existed
};

struct MemoryRequest {
  double gpu_memory_utilization = 0.9;  // share of total_bytes this process may use, (0, 1]
  std::int64_t cache_memory_bytes = 0;  // > 0: exactly this for the cache, instead of the budget's rest
  std::int64_t weight_bytes = 0;        // device bytes the loaded weights hold
  std::int64_t activation_bytes = 0;    // peak above the weights during the profiling forward
  std::int64_t other_bytes = 0;         // device memory taken beyond tensors (library workspaces, ...)
  std::int64_t free_now = -1;           // device free after loading and profiling (-1: unknown)
};

struct MemoryPlan {
  std::int64_t budget_bytes = 0;  // utilization x total
  std::int64_t cache_bytes = 0;   // pages + state slots + snapshot slots
  cache::CacheLayout layout;      // num_pages resolved
  std::int64_t max_tokens = 0;    // num_pages x page_size: tokens the cache holds over all sequences
  std::int32_t max_model_len = 0;
  std::string device_label;
  MemoryRequest request;

  // The one log line: budget, weights / activations / other GiB, cache GiB -> pages -> max tokens.
  std::string summary() const;
};

// Before loading: the utilization is in (0, 1], the device has the budget free, and `weight_bytes`
// (expected from the checkpoint) fit in it. Throws deepinfer::Error with the numbers otherwise.
void check_weights_fit(const DeviceMemory& device, double utilization, std::int64_t weight_bytes);

// After loading and profiling: the cache gets budget - weights - activations - other (or
// cache_memory_bytes), resolved into pages by cache::CacheLayout::make with `config` (page size,
// snapshot slots; config.num_pages > 0 is checked against the budget instead). Throws
// deepinfer::Error when nothing is left for the cache or one sequence of max_model_len does not fit.
MemoryPlan plan_device_memory(const DeviceMemory& device, const MemoryRequest& request, const cache::CacheSpec& spec,
                              const cache::CacheConfig& config, std::int32_t max_num_seqs, std::int32_t max_model_len);

// Bytes as GiB with two decimals ("16.41 GiB").
std::string gib(std::int64_t bytes);

}  // namespace deepinfer::model
