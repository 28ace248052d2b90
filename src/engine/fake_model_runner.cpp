// The fake model: cache-backed, self-checking, with logits that are a pure function of history.
#include "engine/fake_model_runner.h"

#include <algorithm>

#include "cache/hash.h"
#include "common/error.h"

namespace deepinfer::engine {
namespace {

using cache::mix64;

// The compressed row of a group: a sum that cannot be zero, so an unwritten row is visible.
std::uint64_t group_term(std::int32_t token) { return static_cast<std::uint64_t>(token) + 1; }

}  // namespace

FakeModelRunner::FakeModelRunner(FakeModelConfig config) : config_(config) {
  DI_CHECK(config_.vocab_size >= 2, "fake model: vocab_size {} must be >= 2", config_.vocab_size);
  if (config_.device_logits) backend_ = ops::make_cpu_backend();
  DI_CHECK(config_.window >= 1 && config_.ratio >= 1 && config_.max_rollback_tokens >= 0,
           "fake model: window {}, ratio {}, max_rollback_tokens {} out of range", config_.window, config_.ratio,
           config_.max_rollback_tokens);
}

cache::CacheSpec FakeModelRunner::cache_spec() const {
  cache::CacheSpec spec;
  spec.model_identity = "fake-model/v" + std::to_string(config_.vocab_size) + "/salt" + std::to_string(config_.salt);
  spec.paged.push_back({"tokens", -1, 1, 4});
  if (config_.fixed_state) {
    spec.paged.push_back({"groups", -1, config_.ratio, 8});
    const auto ring_rows = static_cast<std::int64_t>(config_.window + config_.max_rollback_tokens);
    spec.fixed.push_back({"ring", -1, ring_rows * 4});
    spec.fixed.push_back({"partial_group", -1, 8});
    spec.max_rollback_tokens = config_.max_rollback_tokens;
  }
  return spec;
}

void FakeModelRunner::launch(const ForwardBatch& batch) {
  if (!backend_) {
    ModelRunner::launch(batch);
    return;
  }
  DI_CHECK(launched_ < 2, "fake model: a third step launched before the first was collected");
  device_logits_ = Tensor::empty(Shape{batch.num_logit_rows(), config_.vocab_size}, DType::kF32);
  forward(batch, std::span<float>(device_logits_.data<float>(), static_cast<std::size_t>(device_logits_.numel())));
  ++launched_;  // a launch that throws launched nothing
}

void FakeModelRunner::launch_ahead(const ForwardBatch& batch, const Tensor& sampled) {
  DI_CHECK(backend_ != nullptr && launched_ == 1, "fake model: launch_ahead() needs device logits and one launched step");
  resolved_ = batch;
  Tensor ids = Tensor::view_of(resolved_.token_ids.data(), Shape{resolved_.num_tokens()}, DType::kI32, nullptr);
  backend_->resolve_sampled_ids(ids, sampled);
  for (std::int32_t id : resolved_.token_ids) {
    DI_CHECK(id >= 0 && id < config_.vocab_size, "fake model: a placeholder resolved to {} (vocab {})", id,
             config_.vocab_size);
  }
  launch(resolved_);
}

void FakeModelRunner::collect(std::span<float> logits) {
  if (!backend_) {
    ModelRunner::collect(logits);
    return;
  }
  DI_CHECK(launched_ > 0, "fake model: collect() without launch()");
  --launched_;
  if (logits.empty()) return;
  DI_CHECK(launched_ == 0 && logits.size() == static_cast<std::size_t>(device_logits_.numel()),
           "fake model: {} host logits for {} (with {} steps still launched)", logits.size(), device_logits_.numel(),
           launched_);
  std::copy_n(device_logits_.data<float>(), logits.size(), logits.begin());
}

void FakeModelRunner::allocate_cache(const cache::CacheLayout& layout) {
  layout_ = layout;
  token_store_.assign(static_cast<std::size_t>(layout.num_pages) * static_cast<std::size_t>(layout.page_size), -1);
  if (config_.fixed_state) {
    group_store_.assign(static_cast<std::size_t>(layout.num_pages) * static_cast<std::size_t>(layout.rows_per_page(1)), 0);
  }
  slots_.assign(static_cast<std::size_t>(layout.num_state_slots), State{});
  snapshots_.assign(static_cast<std::size_t>(layout.num_snapshot_slots), State{});
}

void FakeModelRunner::reference_logits(std::span<const std::int32_t> history, std::span<float> out) const {
  std::uint64_t h = mix64(config_.salt ^ 0xA5A5A5A5ull);
  for (std::int32_t t : history) h = mix64(h ^ static_cast<std::uint32_t>(t));
  for (std::size_t v = 0; v < out.size(); ++v) {
    const double u = static_cast<double>(mix64(h ^ (v * 0x9E3779B97F4A7C15ull)) >> 40) * 0x1p-24;
    out[v] = static_cast<float>((2.0 * u - 1.0) * config_.logit_scale);
  }
}

std::int32_t FakeModelRunner::token_at(std::span<const std::int32_t> pages, std::int64_t pos) const {
  return token_store_[static_cast<std::size_t>(layout_.row_index(0, pages, pos))];
}

void FakeModelRunner::rebuild_partial(std::span<const std::int32_t> pages, State& state) {
  state.partial = 0;
  for (std::int64_t p = state.absorbed - state.absorbed % config_.ratio; p < state.absorbed; ++p) {
    state.partial += group_term(token_at(pages, p));
  }
}

void FakeModelRunner::prepare_state(const ForwardBatch& batch, const ForwardSeq& s, State& state) {
  (void)batch;
  const std::span<const std::int32_t> pages(batch.page_table.data() + s.page_table_offset,
                                            static_cast<std::size_t>(s.num_pages));
  switch (s.state_init) {
    case StateInit::kReset:
      DI_CHECK(s.start_pos == 0 || !config_.fixed_state, "fake model: seq {} resets its state at position {}",
               s.seq_id, s.start_pos);
      state = State{};
      state.absorbed = s.start_pos;
      state.ring.assign(static_cast<std::size_t>(config_.window + config_.max_rollback_tokens), -1);
      return;
    case StateInit::kRestore:
      state = snapshots_.at(static_cast<std::size_t>(s.restore_snapshot));
      DI_CHECK(state.absorbed == s.start_pos, "fake model: seq {} restores snapshot {} taken at {} to resume at {}",
               s.seq_id, s.restore_snapshot, state.absorbed, s.start_pos);
      return;
    case StateInit::kContinue:
      DI_CHECK(state.absorbed == s.start_pos + s.rollback_tokens,
               "fake model: seq {} slot {} absorbed {} tokens, batch continues at {} with rollback {}", s.seq_id,
               s.state_slot, state.absorbed, s.start_pos, s.rollback_tokens);
      DI_CHECK(s.rollback_tokens <= config_.max_rollback_tokens, "fake model: seq {} rolls back {} tokens (max {})",
               s.seq_id, s.rollback_tokens, config_.max_rollback_tokens);
      if (s.rollback_tokens > 0) {
        // A real model restores its compressor's pre-draft partial group; the fake re-reads it.
        state.absorbed = s.start_pos;
        if (config_.fixed_state) rebuild_partial(pages, state);
      }
      return;
  }
}

void FakeModelRunner::absorb(std::span<const std::int32_t> pages, State& state, std::int32_t pos,
                             std::int32_t token) {
  token_store_[static_cast<std::size_t>(layout_.row_index(0, pages, pos))] = token;
  state.absorbed = pos + 1;
  if (!config_.fixed_state) return;
  state.partial += group_term(token);
  if ((pos + 1) % config_.ratio == 0) {
    group_store_[static_cast<std::size_t>(layout_.row_index(1, pages, pos / config_.ratio))] = state.partial;
    state.partial = 0;
  }
  state.ring[static_cast<std::size_t>(pos) % state.ring.size()] = token;
}

std::vector<std::int32_t> FakeModelRunner::read_history(std::span<const std::int32_t> pages, const State& state,
                                                        std::int64_t end, SeqId seq) const {
  std::vector<std::int32_t> history(static_cast<std::size_t>(end));
  for (std::int64_t p = 0; p < end; ++p) {
    history[static_cast<std::size_t>(p)] = token_at(pages, p);
    DI_CHECK(history[static_cast<std::size_t>(p)] >= 0, "fake model: seq {} reads unwritten position {}", seq, p);
  }
  if (!config_.fixed_state) return history;
  for (std::int64_t p = std::max<std::int64_t>(0, end - config_.window); p < end; ++p) {
    const std::int32_t in_ring = state.ring[static_cast<std::size_t>(p) % state.ring.size()];
    DI_CHECK(in_ring == history[static_cast<std::size_t>(p)],
             "fake model: seq {} ring holds {} for position {} but the pages hold {}", seq, in_ring, p,
             history[static_cast<std::size_t>(p)]);
  }
  std::uint64_t group = 0;
  for (std::int64_t p = 0; p < end; ++p) {
    group += group_term(history[static_cast<std::size_t>(p)]);
    if ((p + 1) % config_.ratio == 0) {
      const std::int64_t j = p / config_.ratio;
      const std::uint64_t stored = group_store_[static_cast<std::size_t>(layout_.row_index(1, pages, j))];
      DI_CHECK(stored == group, "fake model: seq {} compressed row {} holds {}, its tokens give {}", seq, j, stored,
               group);
      group = 0;
    }
  }
  DI_CHECK(state.partial == group, "fake model: seq {} partial group {} but its tokens give {}", seq, state.partial,
           group);
  return history;
}

void FakeModelRunner::forward(const ForwardBatch& batch, std::span<float> logits) {
  batch.validate(layout_);
  DI_CHECK(logits.size() == static_cast<std::size_t>(batch.num_logit_rows()) * static_cast<std::size_t>(config_.vocab_size),
           "fake model: logits buffer of {} floats for {} rows", logits.size(), batch.num_logit_rows());
  ++num_forward_calls_;
  if (num_forward_calls_ == config_.fail_at_forward) throw Error("device lost");
  num_forward_tokens_ += batch.num_tokens();
  for (const ForwardSeq& s : batch.seqs) {
    const std::span<const std::int32_t> pages(batch.page_table.data() + s.page_table_offset,
                                              static_cast<std::size_t>(s.num_pages));
    State& state = slots_[static_cast<std::size_t>(s.state_slot)];
    prepare_state(batch, s, state);
    const std::int32_t first_logit = s.num_tokens - s.num_logits;
    for (std::int32_t i = 0; i < s.num_tokens; ++i) {
      const std::int32_t token = batch.token_ids[static_cast<std::size_t>(s.token_offset + i)];
      DI_CHECK(token >= 0 && token < config_.vocab_size, "fake model: seq {} token {} outside the vocabulary", s.seq_id,
               token);
      absorb(pages, state, s.start_pos + i, token);
      if (i < first_logit) continue;
      const std::vector<std::int32_t> history = read_history(pages, state, s.start_pos + i + 1, s.seq_id);
      const auto row = static_cast<std::size_t>(s.logits_offset + i - first_logit);
      reference_logits(history, logits.subspan(row * static_cast<std::size_t>(config_.vocab_size),
                                               static_cast<std::size_t>(config_.vocab_size)));
    }
    if (s.save_snapshot >= 0) snapshots_[static_cast<std::size_t>(s.save_snapshot)] = state;
  }
}

}  // namespace deepinfer::engine
