// The engine's per-sequence work around a step: sampling rows for the device, sampling and draft
// verification with token-id stop checks (decide), then text, stop strings and outputs (emit).
#include <algorithm>
#include <exception>
#include <limits>
#include <map>
#include <unordered_set>

#include "common/error.h"
#include "engine/engine.h"

namespace deepinfer::engine {
namespace {

bool contains(std::span<const std::int32_t> ids, std::int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

void Engine::run_parallel(std::span<const std::size_t> jobs, const std::function<void(std::size_t, std::size_t)>& fn) {
  // Sequences are independent here (each touches only its own completion state), so contiguous
  // slices go to the workers; `part` picks the worker's sampler scratch.
  if (jobs.empty()) return;
  const std::size_t parts = workers_ ? std::min(samplers_.size(), jobs.size()) : 1;
  auto run = [&](std::size_t part) {
    for (std::size_t j = jobs.size() * part / parts; j < jobs.size() * (part + 1) / parts; ++j) fn(part, jobs[j]);
  };
  std::vector<std::future<void>> tasks;
  for (std::size_t part = 1; part < parts; ++part) tasks.push_back(workers_->submit([&run, part] { run(part); }));
  std::exception_ptr error;
  try {
    run(0);
  } catch (...) {
    error = std::current_exception();
  }
  for (std::future<void>& t : tasks) {
    try {
      t.get();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void Engine::pack_device_rows(const ScheduledBatch& batch) {
  DeviceSampler& ds = *device_sampler_;
  ds.begin(batch.forward.num_logit_rows());
  std::vector<ops::SampleEntry> list;
  for (const ScheduledSeq& ss : batch.seqs) {
    if (ss.num_logits == 0) continue;
    const auto ref_it = seq_refs_.find(ss.id);
    if (ref_it == seq_refs_.end()) {
      // Finished after this batch was scheduled (launching ahead): a greedy row nobody reads.
      for (std::int32_t r = 0; r < ss.num_logits; ++r) ds.row(ss.logits_offset + r).temperature = 0.0f;
      continue;
    }
    const SeqRef& ref = ref_it->second;
    const Request& req = *ref.request;
    const Completion& comp = req.completions[static_cast<std::size_t>(ref.index)];
    const SamplingParams& p = req.params;
    const Sequence& seq = *scheduler_->find(ss.id);
    const auto len = static_cast<std::uint32_t>(seq.tokens.size());
    // Launched ahead, the last token is a placeholder for a sampled one: an output already.
    const std::int32_t pending = !seq.tokens.empty() && seq.tokens.back() < 0 ? 1 : 0;
    list.clear();
    for (const auto& [id, bias] : p.logit_bias) list.push_back({id, bias});
    const auto bias = ds.add(list);
    std::pair<std::int32_t, std::int32_t> bans{0, 0};
    const bool repetition = p.repetition_penalty != 1.0f;
    const bool frequency = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    for (std::int32_t r = 0; r < ss.num_logits; ++r) {
      // Row r is only used if drafts 0..r-1 were accepted: its history includes them.
      const std::span<const std::int32_t> drafts(seq.drafts.data(), static_cast<std::size_t>(r));
      ops::SampleRow& row = ds.row(ss.logits_offset + r);
      row.temperature = p.temperature;
      row.top_p = p.top_p;
      row.min_p = p.min_p;
      row.top_k = p.top_k;
      row.repetition_penalty = p.repetition_penalty;
      row.frequency_penalty = p.frequency_penalty;
      row.presence_penalty = p.presence_penalty;
      row.seed_lo = static_cast<std::uint32_t>(comp.seed);
      row.seed_hi = static_cast<std::uint32_t>(comp.seed >> 32);
      row.position = len + static_cast<std::uint32_t>(r);
      row.num_top_logprobs = p.logprobs ? *p.logprobs : -1;
      row.mask_row = row_has_mask_[static_cast<std::size_t>(ss.logits_offset + r)] != 0 ? ss.logits_offset + r : -1;
      std::tie(row.raw_ban_begin, row.raw_ban_end) = ds.raw_bans();
      std::tie(row.bias_begin, row.bias_end) = bias;
      if (comp.num_output + pending + r < p.min_tokens) {
        if (bans.second == 0) {
          list.clear();
          for (std::int32_t id : req.banned_until_min) list.push_back({id, 0.0f});
          bans = ds.add(list);
        }
        std::tie(row.ban_begin, row.ban_end) = bans;
      }
      if (repetition) {
        list.clear();
        for (std::int32_t id : comp.history.seen()) list.push_back({id, 0.0f});
        std::unordered_set<std::int32_t> extra;
        for (std::int32_t id : drafts) {
          if (comp.history.seen().count(id) == 0 && extra.insert(id).second) list.push_back({id, 0.0f});
        }
        if (pending != 0) list.push_back({-1, 0.0f});  // reserved for the token being sampled on the device
        std::tie(row.seen_begin, row.seen_end) = ds.add(list);
      }
      if (frequency) {
        std::map<std::int32_t, std::int32_t> counts(comp.history.output_counts().begin(),
                                                    comp.history.output_counts().end());
        for (std::int32_t id : drafts) ++counts[id];
        list.clear();
        for (const auto& [id, count] : counts) list.push_back({id, static_cast<float>(count)});
        if (pending != 0) list.push_back({-1, 0.0f});
        std::tie(row.count_begin, row.count_end) = ds.add(list);
      }
      // Launched ahead: the previous step's token for this sequence joins its history on the device.
      if (pending != 0 && (repetition || frequency)) ds.set_source(ss.logits_offset + r, -1 - seq.tokens.back());
    }
  }
}

Engine::TokenFate Engine::token_fate(const Request& req, Completion& comp, std::int32_t token,
                                     std::int32_t seq_len) const {
  const SamplingParams& p = req.params;
  ++comp.num_output;
  comp.history.add_output(token);
  // As vLLM: no stop condition but length applies before min_tokens outputs exist.
  const bool may_stop = comp.num_output >= p.min_tokens;
  TokenFate fate;
  if (may_stop && !p.ignore_eos && contains(config_.eos_token_ids, token)) {
    fate = {TextStop::kEos, FinishReason::kStop};
  } else if (may_stop && contains(p.stop_token_ids, token)) {
    fate = {TextStop::kStopToken, FinishReason::kStop};
  }
  if (comp.constraint) {
    // Sampling only picks allowed tokens, so a refusal means the constraint and its mask disagree.
    if (!comp.constraint->accept_token(token)) {
      fate.finish = FinishReason::kError;
      return fate;
    }
    if (fate.finish == FinishReason::kNone && comp.constraint->is_terminated()) fate.finish = FinishReason::kStop;
  }
  if (fate.finish == FinishReason::kNone &&
      ((p.max_tokens && comp.num_output >= *p.max_tokens) || seq_len >= config_.scheduler.max_model_len)) {
    fate.finish = FinishReason::kLength;
  }
  return fate;
}

void Engine::decide_sequence(const ScheduledSeq& ss, Sampler* sampler, SeqDecision& d) {
  const auto it = seq_refs_.find(ss.id);
  if (it == seq_refs_.end()) return;  // aborted or finished while the step was in flight
  d.live = true;
  Request& req = *it->second.request;
  Completion& comp = req.completions[static_cast<std::size_t>(it->second.index)];
  // The sequence's length before this step's sampled tokens (committed ahead, the scheduler
  // holds a placeholder for them, or has let a sequence at its length limit go already).
  const std::int32_t len = ss.start_pos + ss.num_tokens - ss.num_drafts;
  const Sequence* seq = ss.num_drafts > 0 ? scheduler_->find(ss.id) : nullptr;
  DI_CHECK(ss.num_drafts == 0 || seq != nullptr, "engine: sequence {} with drafts left the scheduler", ss.id);
  const SamplingParams& p = req.params;
  d.outputs_before = comp.num_output;
  for (std::int32_t r = 0; r < ss.num_logits; ++r) {
    const std::int32_t logits_row = ss.logits_offset + r;
    SampleResult res;
    if (sampler != nullptr) {
      SampleContext ctx;
      ctx.params = &p;
      ctx.seed = comp.seed;
      ctx.position = static_cast<std::uint32_t>(len + r);
      ctx.history = &comp.history;
      if (comp.num_output < p.min_tokens) ctx.banned = req.banned_until_min;
      if (row_has_mask_[static_cast<std::size_t>(logits_row)] != 0) {
        const std::size_t words = (static_cast<std::size_t>(vocab_size_) + 31) / 32;
        ctx.allowed = std::span<const std::uint32_t>(masks_).subspan(static_cast<std::size_t>(logits_row) * words, words);
      }
      const auto row = static_cast<std::size_t>(logits_row) * static_cast<std::size_t>(vocab_size_);
      res = sampler->sample(std::span<const float>(logits_).subspan(row, static_cast<std::size_t>(vocab_size_)), ctx);
    } else {
      res = device_sampler_->result(logits_row, p.logprobs.has_value());
    }
    const std::int32_t token = res.token;
    d.commit.new_tokens.push_back(token);
    if (p.logprobs) d.results.push_back(std::move(res));
    const TokenFate fate = token_fate(req, comp, token, len + r + 1);
    d.fates.push_back(fate);
    if (fate.finish != FinishReason::kNone) {
      d.commit.finish = fate.finish;
      break;
    }
    // Verification: a draft is accepted iff it equals the target's own seeded sample at that
    // position, so the output is exactly what decoding without drafts gives.
    if (r < ss.num_drafts && token == seq->drafts[static_cast<std::size_t>(r)]) {
      ++d.accepted;
      continue;
    }
    break;
  }
  d.commit.num_accepted_drafts = std::min(d.accepted, static_cast<std::int32_t>(d.commit.new_tokens.size()));
}

void Engine::finish_text(Completion& comp, FinishReason reason, CompletionOutput& out) {
  out.finish_reason = reason;
  if (comp.stops.stopped()) return;  // the text after a stop string is dropped
  out.text += comp.stops.flush();
  if (comp.detok) out.text += comp.detok->finish();
}

void Engine::emit_sequence(const ScheduledSeq& ss, SeqDecision& d, CompletionOutput& out) {
  const SeqRef& ref = seq_refs_.at(ss.id);
  Request& req = *ref.request;
  Completion& comp = req.completions[static_cast<std::size_t>(ref.index)];
  const SamplingParams& p = req.params;
  out.index = ref.index;
  d.keep = d.commit.new_tokens.size();
  for (std::size_t i = 0; i < d.commit.new_tokens.size(); ++i) {
    const std::int32_t token = d.commit.new_tokens[i];
    const TokenFate& fate = d.fates[i];
    const bool may_stop = d.outputs_before + static_cast<std::int32_t>(i) + 1 >= p.min_tokens;
    const std::string piece = comp.detok ? comp.detok->push(token) : std::string();
    FinishReason finish = fate.finish;
    if (fate.text != TextStop::kNone) {
      out.text += piece;
      if (fate.text == TextStop::kStopToken) out.stop_token = token;
    } else if (may_stop && !comp.stops.empty()) {
      StopStringMatcher::Result r = comp.stops.push(piece);
      out.text += r.text;
      if (r.stop_index >= 0) {
        out.stop_string = p.stop[static_cast<std::size_t>(r.stop_index)];
        if (finish != FinishReason::kError) finish = FinishReason::kStop;
      }
    } else {
      out.text += piece;
    }
    out.token_ids.push_back(token);
    if (p.logprobs) out.logprobs.push_back(d.results[i]);
    if (finish != FinishReason::kNone) {
      d.keep = i + 1;
      d.finish = finish;
      finish_text(comp, finish, out);
      return;
    }
  }
}

}  // namespace deepinfer::engine
