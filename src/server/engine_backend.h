// The GenerationBackend over the real engine: one engine thread owns the Engine and runs its
// step loop; HTTP threads only append to its inbox (requests, aborts) and read a stats snapshot,
// so no HTTP work ever stalls a step. Chat goes through the DeepSeek chat encoding and its
// streaming output parser; text through the HF tokenizer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "encoding/chat_types.h"
#include "engine/detokenizer.h"
#include "engine/engine.h"
#include "server/generation_backend.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

struct EngineBackendOptions {
  std::string model_path;  // reported by /v1/models
  encoding::ChatFormat chat_format = encoding::ChatFormat::kDeepSeekV4;
  // Sequences that may wait beyond the engine's max_num_seqs running ones; more is a 503.
  int max_queued_requests = 10000;
  // The engine has a constraint factory (Engine::set_constraint_factory): requests may carry
  // response_format / regex / grammar constraints.
  bool structured_outputs = false;
  // ... and its constraints start after the end-of-thinking token (ModelInfo's field of that name).
  bool structured_outputs_after_thinking = false;
};

// The engine's Detokenizer over the tokenizer's streaming decoder (byte-level BPE needs no
// prompt context: a token's text is its bytes).
std::shared_ptr<const engine::Detokenizer> make_detokenizer(std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

// The engine's sampling parameters for a validated OpenAI request.
engine::SamplingParams to_engine_params(const SamplingOptions& options, int n);
// The engine's constraint for a request's structured-output field (SamplingOptions::
// structured_output: response_format, regex, grammar/ebnf or vLLM's structured_outputs, or the
// server's own {"tool_calls": spec} for forced tool calls; "start_after" gates it after that
// text); throws deepinfer::Error for a shape it cannot map.
engine::StructuredOutputArgs to_structured_output_args(const nlohmann::json& constraint);

class EngineBackend : public GenerationBackend {
 public:
  // The engine must have been built with make_detokenizer(tokenizer) (stop strings and text need
  // it). Starts the engine thread.
  EngineBackend(std::unique_ptr<engine::Engine> engine, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                EngineBackendOptions options);
  // Stops the engine thread; unfinished requests are reported aborted.
  ~EngineBackend() override;
  EngineBackend(const EngineBackend&) = delete;
  EngineBackend& operator=(const EngineBackend&) = delete;

  const ModelInfo& model_info() const override { return info_; }
  const TextCodec& codec() const override { return *codec_; }
  EncodedChat encode_chat(const nlohmann::ordered_json& request) const override;
  std::unique_ptr<ChatOutputParser> chat_output_parser(bool thinking, bool tool_calls) const override;
  void submit(GenerationRequest request) override;
  void abort(const std::string& request_id) override;
  BackendStats stats() const override;
  bool healthy() const override { return !failed_.load(); }

 private:
  struct Active {
    OutputCallback on_output;
    std::vector<bool> finished;
    int unfinished = 0;
  };

  void loop();
  void add(GenerationRequest& request);
  void abort_now(const std::string& request_id);
  void step_once();
  // Reports every unfinished completion of a request finished with `reason` and forgets it.
  void finish_all(const std::string& request_id, FinishReason reason, const std::string& message);
  void publish_stats();

  std::unique_ptr<engine::Engine> engine_;  // touched by the engine thread only, after start
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<TextCodec> codec_;
  EngineBackendOptions options_;
  ModelInfo info_;
  int max_in_flight_ = 0;

  // Inbox, shared with the HTTP threads.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<GenerationRequest> inbox_adds_;
  std::vector<std::string> inbox_aborts_;
  bool engine_busy_ = false;
  bool stopping_ = false;
  std::atomic<int> in_flight_{0};  // sequences submitted and not finished
  std::atomic<bool> failed_{false};

  mutable std::mutex stats_mutex_;
  BackendStats stats_;

  std::unordered_map<std::string, Active> active_;  // engine thread only
  std::thread thread_;
};

}  // namespace deepinfer::server
