// Fan-out of one HTTP request into backend sequences and fan-in of their outputs.
#include "server/generation_session.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/metrics.h"

namespace deepinfer::server {
namespace {

const char* finish_reason_label(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void OutputQueue::push(std::size_t choice, GenerationOutput&& output) {
  output.time = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    items_.push_back({choice, std::move(output)});
  }
  ready_.notify_one();
}

std::vector<ChoiceOutput> OutputQueue::pop_all(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [this] { return !items_.empty(); });
  std::vector<ChoiceOutput> result;
  result.swap(items_);
  return result;
}

GenerationSession::GenerationSession(GenerationBackend& backend, ServerMetrics& metrics, std::string request_id)
    : backend_(backend),
      metrics_(metrics),
      request_id_(std::move(request_id)),
      arrival_(std::chrono::steady_clock::now()) {}

GenerationSession::~GenerationSession() { abort_unfinished(); }

void GenerationSession::submit(std::vector<int32_t> prompt_token_ids, SamplingOptions sampling, int n) {
  const std::size_t base = choices_.size();
  GenerationRequest request;
  request.request_id = fmt::format("{}-{}", request_id_, backend_ids_.size());
  request.prompt_token_ids = std::move(prompt_token_ids);
  request.sampling = std::move(sampling);
  request.n = n;
  const auto count = static_cast<std::size_t>(n);
  // The callback holds the queue, not the session: the engine may still report after the HTTP
  // side has gone (an abort's final output).
  request.on_output = [queue = queue_, base, count](GenerationOutput&& output) {
    const auto index = static_cast<std::size_t>(output.index);
    if (index < count) queue->push(base + index, std::move(output));
  };
  Choice choice;
  choice.backend_request = backend_ids_.size();
  choice.prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  const std::string id = request.request_id;
  backend_.submit(std::move(request));
  backend_ids_.push_back(id);
  choices_.insert(choices_.end(), count, choice);
}

std::vector<ChoiceOutput> GenerationSession::wait(std::chrono::milliseconds timeout) {
  auto items = queue_->pop_all(timeout);
  std::vector<ChoiceOutput> fresh;
  fresh.reserve(items.size());
  // Outputs after a choice's end (an abort's acknowledgement) are dropped here.
  for (auto& item : items)
    if (account(item)) fresh.push_back(std::move(item));
  return fresh;
}

bool GenerationSession::account(ChoiceOutput& item) {
  if (item.choice >= choices_.size()) return false;
  Choice& choice = choices_[item.choice];
  if (choice.finished) return false;
  const auto& output = item.output;
  const auto new_tokens = static_cast<int>(output.token_ids.size());
  if (new_tokens > 0) {
    if (choice.completion_tokens == 0) {
      metrics_.observe_time_to_first_token(seconds_between(arrival_, output.time));
    } else {
      const double gap = seconds_between(choice.last_token_time, output.time) / new_tokens;
      for (int i = 0; i < new_tokens; ++i) metrics_.observe_inter_token_latency(gap);
    }
    choice.last_token_time = output.time;
    choice.completion_tokens += new_tokens;
  }
  if (output.num_prompt_tokens > 0) choice.prompt_tokens = output.num_prompt_tokens;
  choice.cached_tokens = std::max(choice.cached_tokens, output.num_cached_prompt_tokens);
  if (output.finished) {
    choice.finished = true;
    num_finished_++;
    metrics_.observe_finished(finish_reason_label(output.finish_reason), choice.prompt_tokens,
                              choice.completion_tokens, seconds_between(arrival_, output.time));
  }
  return true;
}

void GenerationSession::abort_unfinished() {
  std::vector<bool> aborted(backend_ids_.size(), false);
  for (auto& choice : choices_) {
    if (choice.finished) continue;
    if (!aborted[choice.backend_request]) backend_.abort(backend_ids_[choice.backend_request]);
    aborted[choice.backend_request] = true;
    choice.finished = true;
    num_finished_++;
    metrics_.observe_finished("abort", choice.prompt_tokens, choice.completion_tokens,
                              seconds_between(arrival_, std::chrono::steady_clock::now()));
  }
}

}  // namespace deepinfer::server
