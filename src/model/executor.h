// The model executor behind deepinfer::LLM and `deepinfer serve`: picks the backend for
// LLMOptions::device, loads the weights (a checkpoint through pinned multi-threaded copies with a
// progress bar, or dummy weights made on the device), and on a GPU runs a profiling forward and
// plans the KV cache from --gpu-memory-utilization (model/memory_plan.h).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "deepinfer/llm.h"
#include "engine/model_runner.h"
#include "io/model_config.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v4/numerics.h"
#include "model/memory_plan.h"

namespace deepinfer::model {

// "cpu", "cuda" (= cuda:0) or "cuda:N".
struct DeviceSpec {
  bool cuda = false;
  int index = 0;
  std::string name() const;
};
DeviceSpec parse_device(const std::string& device);

// The backend for "cpu" / "cuda" / "cuda:N", after the device checks (deepinfer::Error: built
// without CUDA, no device, index out of range, not sm_90).
std::unique_ptr<ops::Backend> make_backend(const std::string& device);

// open_model(directory, mode, backend) with a GPU backend's uploads staged through pinned buffers on
// `threads` copy threads (0: min(8, cores)), a progress bar when show_progress, and a summary line
// with the GB/s reached.
v4::LoadedModel load_checkpoint(const std::filesystem::path& directory, std::optional<v4::NumericMode> mode,
                                ops::Backend& backend, bool show_progress = true, int threads = 0);

struct ExecutorModel {
  std::unique_ptr<engine::ModelRunner> runner;  // owns the backend and the weights
  const io::ModelConfig* config = nullptr;      // valid as long as runner lives
  v4::NumericMode mode = v4::NumericMode::kExact;
  std::optional<MemoryPlan> plan;               // GPU: the cache the engine must allocate
};

// Opens `model` (a checkpoint directory; with load_format "dummy", a directory or config.json) on
// options.device. GPU: device checks (deepinfer::Error: no CUDA, index out of range, not sm_90),
// weights-fit check, load, profiling forward of max_num_batched_tokens tokens, memory plan (logged
// as one line). The engine built over the runner must use plan->layout.num_pages.
ExecutorModel open_executor(const std::filesystem::path& model, const LLMOptions& options);

}  // namespace deepinfer::model
