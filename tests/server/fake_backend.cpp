// The fake backend's tokenizer, chat template, output parser and engine thread.
#include "server/fake_backend.h"

#include <fmt/format.h>

#include "common/error.h"

namespace deepinfer::server::testing {
namespace {

// Toy reasoning/tool syntax: reasoning up to "</think>", tool calls as "<tool>name|{args}</tool>".
class FakeChatParser : public ChatOutputParser {
 public:
  FakeChatParser(bool thinking, bool tool_calls) : reasoning_(thinking), tool_calls_(tool_calls) {}

  ChatDelta feed(std::string_view text) override {
    pending_ += text;
    return drain(false);
  }
  ChatDelta finish() override { return drain(true); }
  bool saw_tool_calls() const override { return num_calls_ > 0; }

 private:
  // Length of the longest suffix of `text` that is a proper prefix of `marker`.
  static std::size_t partial(const std::string& text, std::string_view marker) {
    for (std::size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
      if (text.compare(text.size() - n, n, marker.substr(0, n)) == 0) return n;
    return 0;
  }

  ChatDelta drain(bool at_end) {
    ChatDelta delta;
    while (!pending_.empty()) {
      const std::string_view marker = reasoning_ ? "</think>" : in_tool_ ? "</tool>" : "<tool>";
      const auto at = pending_.find(marker);
      if (at == std::string::npos) {
        if (in_tool_ && !at_end) break;
        const std::size_t keep = at_end ? 0 : partial(pending_, marker);
        std::string out = pending_.substr(0, pending_.size() - keep);
        pending_.erase(0, out.size());
        (reasoning_ ? delta.reasoning : delta.content) += out;
        break;
      }
      const std::string before = pending_.substr(0, at);
      pending_.erase(0, at + marker.size());
      if (reasoning_) {
        delta.reasoning += before;
        reasoning_ = false;
      } else if (!in_tool_) {
        delta.content += before;
        if (tool_calls_) in_tool_ = true;
        else delta.content += marker;
      } else {
        const auto bar = before.find('|');
        delta.tool_calls.push_back({num_calls_++, "", before.substr(0, bar),
                                    bar == std::string::npos ? "{}" : before.substr(bar + 1)});
        in_tool_ = false;
      }
    }
    return delta;
  }

  bool reasoning_;
  bool tool_calls_;
  bool in_tool_ = false;
  int num_calls_ = 0;
  std::string pending_;
};

}  // namespace

std::vector<int32_t> FakeCodec::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids.push_back(kBos);
  for (const unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + kOffset);
  return ids;
}

std::string FakeCodec::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string text;
  for (const auto id : ids)
    if (id >= kOffset || !skip_special_tokens) text += token_bytes(id);
  return text;
}

std::string FakeCodec::token_bytes(int32_t id) const {
  if (id == kBos) return "<s>";
  if (id == kEos) return "</s>";
  if (id < kOffset) return "<pad>";
  return std::string(1, static_cast<char>(id - kOffset));
}

FakeBackend::FakeBackend(FakeBackendOptions options) : options_(std::move(options)) {
  info_.model_path = "fake-model";
  info_.max_model_len = options_.max_model_len;
  info_.supports_structured_output = options_.supports_structured_output;
  info_.structured_output_after_thinking = options_.structured_output_after_thinking;
  if (options_.forced_tool_calls) info_.tool_call_tags = {{"block_open", "<calls>"}, {"block_close", "</calls>"}};
  thread_ = std::thread([this] { loop(); });
}

FakeBackend::~FakeBackend() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

EncodedChat FakeBackend::encode_chat(const nlohmann::ordered_json& request) const {
  std::string prompt;
  for (const auto& message : request.at("messages")) {
    const auto& role = message.at("role").get_ref<const std::string&>();
    DI_CHECK(role != "latest_reminder", "fake chat template: role '{}' is not supported", role);
    prompt += role + ": " + (message.contains("content") && message["content"].is_string()
                                 ? message["content"].get<std::string>() : std::string()) + "\n";
  }
  const auto& kwargs = request.at("chat_template_kwargs");
  const bool thinking = kwargs.value("thinking", false);
  prompt += thinking ? "assistant: <think>" : "assistant: ";
  return {codec_.encode(prompt, true), thinking};
}

std::unique_ptr<ChatOutputParser> FakeBackend::chat_output_parser(bool thinking, bool tool_calls) const {
  return std::make_unique<FakeChatParser>(thinking, tool_calls);
}

int32_t FakeBackend::token_at(uint64_t seed, int index, int position) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) * 0xBF58476D1CE4E5B9ull +
               static_cast<uint64_t>(position) * 0x94D049BB133111EBull;
  z ^= z >> 29;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 32;
  return static_cast<int32_t>('a' + z % 26) + FakeCodec::kOffset;
}

void FakeBackend::submit(GenerationRequest request) {
  std::lock_guard lock(mutex_);
  if (static_cast<int>(active_.size()) >= options_.max_waiting)
    throw QueueFullError(fmt::format("{} requests are waiting", active_.size()));
  DI_CHECK(request.sampling.max_tokens >= 1, "sampling params: max_tokens {} must be >= 1", request.sampling.max_tokens);
  GenerationRequest copy = request;
  copy.on_output = nullptr;
  submitted_.push_back(std::move(copy));
  Active active;
  active.seed = request.sampling.seed.value_or(next_seed_++);
  active.completions.resize(static_cast<std::size_t>(request.n));
  active.request = std::move(request);
  const std::string id = active.request.request_id;
  active_.emplace(id, std::move(active));
  wake_.notify_all();
}

void FakeBackend::abort(const std::string& request_id) {
  std::lock_guard lock(mutex_);
  const auto it = active_.find(request_id);
  if (it == active_.end()) return;
  it->second.aborted = true;
  aborted_.push_back(request_id);
  wake_.notify_all();
}

BackendStats FakeBackend::stats() const {
  std::lock_guard lock(mutex_);
  BackendStats stats;
  stats.num_running = static_cast<int>(active_.size());
  stats.prefix_cache_queries = 100;
  stats.prefix_cache_hits = 25;
  return stats;
}

void FakeBackend::set_paused(bool paused) {
  std::lock_guard lock(mutex_);
  paused_ = paused;
  wake_.notify_all();
}

std::vector<std::string> FakeBackend::aborted_ids() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

std::vector<GenerationRequest> FakeBackend::submitted() const {
  std::lock_guard lock(mutex_);
  return submitted_;
}

int FakeBackend::num_unfinished() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(active_.size());
}

// One token for every unfinished completion; true when the request is done.
bool FakeBackend::step_request(Active& active) {
  const auto& request = active.request;
  const int prompt_len = static_cast<int>(request.prompt_token_ids.size());
  bool all_done = true;
  for (std::size_t i = 0; i < active.completions.size(); ++i) {
    auto& c = active.completions[i];
    if (c.finished) continue;
    GenerationOutput out;
    out.index = static_cast<int>(i);
    out.num_prompt_tokens = prompt_len;
    if (active.aborted) {
      out.finished = true;
      out.finish_reason = FinishReason::kAbort;
    } else {
      int32_t token = 0;
      if (!options_.script.empty()) {
        token = c.emitted < static_cast<int>(options_.script.size())
                    ? static_cast<unsigned char>(options_.script[static_cast<std::size_t>(c.emitted)]) + FakeCodec::kOffset
                    : FakeCodec::kEos;
      } else {
        token = token_at(active.seed, static_cast<int>(i), c.emitted);
      }
      c.emitted++;
      out.token_ids = {token};
      if (token != FakeCodec::kEos) out.text = codec_.token_bytes(token);
      if (request.sampling.logprobs >= 0) {
        TokenLogprobs lp{token, -0.25f, {}};
        for (int k = 0; k < request.sampling.logprobs; ++k) lp.top.push_back({FakeCodec::kOffset + 'a' + k, -1.0f - k});
        out.logprobs.push_back(lp);
      }
      if (token == FakeCodec::kEos) out.finished = true;
      else if (c.emitted >= request.sampling.max_tokens) out.finished = true, out.finish_reason = FinishReason::kLength;
    }
    c.finished = out.finished;
    all_done = all_done && c.finished;
    request.on_output(std::move(out));
  }
  return all_done;
}

void FakeBackend::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (active_.empty() || paused_) {
      // Aborts still complete while paused, so a cancelled request always gets its final output.
      bool any_aborted = false;
      for (const auto& [id, a] : active_) any_aborted = any_aborted || a.aborted;
      if (!any_aborted) {
        wake_.wait(lock);
        continue;
      }
    }
    for (auto it = active_.begin(); it != active_.end();) {
      if (paused_ && !it->second.aborted) {
        ++it;
        continue;
      }
      it = step_request(it->second) ? active_.erase(it) : std::next(it);
    }
    lock.unlock();
    std::this_thread::sleep_for(options_.step_interval);
    lock.lock();
  }
}

}  // namespace deepinfer::server::testing
