// A GenerationBackend for server unit tests: a byte-level "tokenizer" (id = byte + 3), a toy chat
// template, and an engine thread that emits either a scripted text or seeded pseudo-random
// letters one token per step. Lets tests drive every protocol path without a model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/generation_backend.h"

namespace deepinfer::server::testing {

class FakeCodec : public TextCodec {
 public:
  static constexpr int32_t kBos = 0;
  static constexpr int32_t kEos = 1;
  static constexpr int32_t kOffset = 3;
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return 256 + kOffset; }
};

struct FakeBackendOptions {
  int max_model_len = 256;
  int max_waiting = 1000;              // submit() beyond this many unfinished requests: queue full
  std::string script;                  // when set, every completion emits exactly this text, then EOS
  std::chrono::microseconds step_interval{200};
  bool supports_structured_output = false;
  bool structured_output_after_thinking = false;
  bool forced_tool_calls = false;  // reports DSML tags (ModelInfo::tool_call_tags)
};

class FakeBackend : public GenerationBackend {
 public:
  explicit FakeBackend(FakeBackendOptions options = {});
  ~FakeBackend() override;

  const ModelInfo& model_info() const override { return info_; }
  const TextCodec& codec() const override { return codec_; }
  EncodedChat encode_chat(const nlohmann::ordered_json& request) const override;
  std::unique_ptr<ChatOutputParser> chat_output_parser(bool thinking, bool tool_calls) const override;
  void submit(GenerationRequest request) override;
  void abort(const std::string& request_id) override;
  BackendStats stats() const override;
  bool healthy() const override { return true; }

  // Holds every request where it is (no new tokens) until resumed.
  void set_paused(bool paused);
  std::vector<std::string> aborted_ids() const;
  std::vector<GenerationRequest> submitted() const;  // copies without callbacks
  int num_unfinished() const;

  // The token a seeded completion emits at `position` (what the engine thread does).
  static int32_t token_at(uint64_t seed, int index, int position);

 private:
  struct Completion {
    int emitted = 0;
    bool finished = false;
  };
  struct Active {
    GenerationRequest request;
    uint64_t seed = 0;
    std::vector<Completion> completions;
    bool aborted = false;
  };

  void loop();
  bool step_request(Active& active);

  FakeBackendOptions options_;
  ModelInfo info_;
  FakeCodec codec_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, Active> active_;
  std::vector<GenerationRequest> submitted_;
  std::vector<std::string> aborted_;
  uint64_t next_seed_ = 12345;
  bool paused_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace deepinfer::server::testing
