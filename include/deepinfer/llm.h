// The offline API: deepinfer::LLM opens a model directory, runs the engine over a list of prompts
// (text or token ids, one SamplingParams each or one for all) and returns the outputs in input
// order, vLLM-style. The CLI's `generate` and the Python bindings are thin layers over it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace deepinfer {

using engine::SamplingParams;

struct LLMOptions {
  std::string device = "cpu";        // cpu, cuda, cuda:N
  std::optional<std::string> mode;   // exact | reference-qat; unset: the checkpoint's default
  std::string tokenizer;             // tokenizer.json or its directory; empty: the model dir if it has one
  std::int32_t max_num_seqs = 64;
  std::int32_t max_num_batched_tokens = 2048;
  std::int32_t max_model_len = 0;    // 0: min(max_position_embeddings, 8192)
  // KV-cache pages. 0: on a GPU, planned from gpu_memory_utilization (model/memory_plan.h); on the
  // CPU, cache_memory_bytes' worth when set, else room for four sequences of max_model_len.
  std::int32_t num_pages = 0;
  // GPU: share of the device's total memory this engine may use (weights + activations + cache),
  // vLLM's meaning; the cache gets what the weights and a profiling forward leave.
  double gpu_memory_utilization = 0.9;
  // > 0: the cache (pages + per-sequence state slots) gets exactly this many bytes, instead of the
  // utilization's rest (GPU) or four sequences' worth (CPU).
  std::int64_t cache_memory_bytes = 0;
  std::string load_format = "auto";  // auto: the checkpoint; dummy: random weights of its geometry (benchmarks)
  std::int32_t num_layers = 0;       // dummy: keep the first N layers (0: all)
  std::int32_t load_threads = 0;     // GPU weight-copy threads (0: min(8, cores))
  // GPU: a weight-loading progress bar on stderr (one updating line on a terminal, a few lines
  // otherwise) and the memory-plan line whatever DEEPINFER_LOG_LEVEL says.
  bool show_progress = true;
  bool enable_prefix_caching = true;
  std::uint64_t seed = 0;            // seeds requests without seq_seed
  std::int32_t worker_threads = 0;
};

// A prompt as text (needs a tokenizer) or as token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<std::int32_t> token_ids;

  static Prompt from_text(std::string text) { return {std::move(text), {}}; }
  static Prompt from_ids(std::vector<std::int32_t> ids) { return {std::nullopt, std::move(ids)}; }
};

struct CompletionResult {
  std::int32_t index = 0;
  std::vector<std::int32_t> token_ids;
  std::optional<std::string> text;  // unset when there is no tokenizer
  std::string finish_reason;        // stop | length | abort | error
  std::optional<std::string> stop_reason;  // the stop string that ended it
  std::vector<engine::SampleResult> logprobs;  // one per token when SamplingParams::logprobs is set
};

struct RequestResult {
  std::optional<std::string> prompt;        // the prompt text, if given as text
  std::vector<std::int32_t> prompt_token_ids;
  std::vector<CompletionResult> outputs;    // n of them (none when error is set)
  std::optional<std::string> error;         // the request was rejected (bad prompt or params)
};

// Called after every engine step: requests finished so far, total.
using ProgressCallback = std::function<void(std::size_t finished, std::size_t total)>;

class LLM {
 public:
  explicit LLM(const std::string& model_dir, LLMOptions options = {});
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // params: one per prompt, or a single one for all. A request the engine rejects (ids outside
  // the vocabulary, bad sampling fields, too long) gets its error and no outputs; the others run.
  // With throw_on_rejected the first rejection is thrown instead, before any model work (the
  // Python API's behaviour, as vLLM's). Whatever throws (a rejection, the model, `progress`),
  // the requests of this call are aborted first, so the LLM stays usable.
  std::vector<RequestResult> generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                                      const ProgressCallback& progress = nullptr, bool throw_on_rejected = false);

  bool has_tokenizer() const;
  std::vector<std::int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
  std::int32_t vocab_size() const;
  std::string numeric_mode() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
