// Options shared by the commands that run a model: --model and --mode (exact | reference-qat).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "deepinfer/llm.h"
#include "model/deepseek_v4/numerics.h"

namespace deepinfer::cli {

struct ModelOptions {
  std::string model_dir;
  std::string mode;  // empty: the checkpoint's default

  // Adds --model (required) and --mode to `sub`.
  void add_to(CLI::App* sub) {
    sub->add_option("--model", model_dir, "Model directory (config.json + safetensors)")->required();
    sub->add_option("--mode", mode,
                    "Numerics: exact (HF transformers, fp32 activations) or reference-qat (DeepSeek's quantise-"
                    "dequantise steps); default: reference-qat for a quantised checkpoint, else exact")
        ->check(CLI::IsMember({"exact", "reference-qat"}));
  }
  std::optional<model::v4::NumericMode> numeric_mode() const {
    if (mode.empty()) return std::nullopt;
    return model::v4::parse_numeric_mode(mode);
  }
};

// The executor flags of the commands that run the engine (generate, serve): device, GPU memory
// plan and weight loading, under vLLM's names where they mean the same.
inline void add_executor_flags(CLI::App* sub, LLMOptions& o) {
  sub->add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                  "GPU: share of the device's memory for weights, activations and KV cache (the cache gets the rest)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_option("--cache-memory-bytes", o.cache_memory_bytes,
                  "Bytes for the KV cache and per-sequence state, instead of what --gpu-memory-utilization leaves "
                  "(GPU) or four max-model-len sequences (CPU)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--load-format", o.load_format,
                  "auto: the checkpoint in --model; dummy: random weights of its geometry (--model may be a "
                  "config.json), generated on the GPU, for benchmarks")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  sub->add_option("--num-layers", o.num_layers, "dummy: keep the first N layers (0 = all)")->check(CLI::Range(0, 4096));
  sub->add_option("--load-threads", o.load_threads, "GPU: weight-copy threads (0: min(8, cores))")
      ->check(CLI::Range(0, 32));
}

}  // namespace deepinfer::cli
