// The engine-facing half of one HTTP request: submits its prompts (each with n choices) to the
// backend, receives their outputs through a queue the engine thread only pushes into, feeds the
// latency metrics, and aborts whatever is unfinished when the HTTP side goes away.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/generation_backend.h"

namespace deepinfer::server {

class ServerMetrics;

// Outputs of one choice (index into the session's sequences) as the HTTP thread receives them.
struct ChoiceOutput {
  std::size_t choice = 0;
  GenerationOutput output;
};

// Many producers (the engine thread, via callbacks), one consumer (the HTTP thread).
class OutputQueue {
 public:
  void push(std::size_t choice, GenerationOutput&& output);
  // Everything queued, waiting up to `timeout` for the first item.
  std::vector<ChoiceOutput> pop_all(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<ChoiceOutput> items_;
};

class GenerationSession {
 public:
  GenerationSession(GenerationBackend& backend, ServerMetrics& metrics, std::string request_id);
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Submits a prompt whose n completions become the next n choices; throws what
  // backend.submit throws.
  void submit(std::vector<int32_t> prompt_token_ids, SamplingOptions sampling, int n);

  // Outputs that arrived, waiting up to `timeout` for one. Updates the per-choice counters.
  std::vector<ChoiceOutput> wait(std::chrono::milliseconds timeout);
  bool all_finished() const { return num_finished_ == choices_.size(); }
  // Aborts every unfinished choice (the client went away or the server is stopping).
  void abort_unfinished();

  std::size_t num_choices() const { return choices_.size(); }
  int prompt_tokens(std::size_t choice) const { return choices_[choice].prompt_tokens; }
  int completion_tokens(std::size_t choice) const { return choices_[choice].completion_tokens; }
  int cached_tokens(std::size_t choice) const { return choices_[choice].cached_tokens; }
  const std::string& request_id() const { return request_id_; }

 private:
  struct Choice {
    std::size_t backend_request = 0;  // index into backend_ids_
    int prompt_tokens = 0;
    int completion_tokens = 0;
    int cached_tokens = 0;
    bool finished = false;
    std::chrono::steady_clock::time_point last_token_time{};
  };

  // Updates counters and metrics; false for an output that arrived after its choice ended.
  bool account(ChoiceOutput& item);

  GenerationBackend& backend_;
  ServerMetrics& metrics_;
  std::string request_id_;
  std::chrono::steady_clock::time_point arrival_;
  std::shared_ptr<OutputQueue> queue_ = std::make_shared<OutputQueue>();
  std::vector<std::string> backend_ids_;  // one per submitted prompt
  std::vector<Choice> choices_;
  std::size_t num_finished_ = 0;
};

}  // namespace deepinfer::server
