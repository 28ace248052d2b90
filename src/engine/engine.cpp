// The engine step loop: schedule, forward, sample and verify, stop checks, commit.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>

#include "common/error.h"
#include "engine/philox.h"

namespace deepinfer::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ModelRunner& checked(const std::unique_ptr<ModelRunner>& runner) {
  DI_CHECK(runner != nullptr, "engine: no model runner");
  return *runner;
}

bool contains(std::span<const std::int32_t> ids, std::int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

void EngineConfig::validate() const {
  scheduler.validate();
  cache.validate();
  DI_CHECK(dp_rank >= 0, "engine config: dp_rank {} must be >= 0", dp_rank);
  DI_CHECK(max_logprobs >= 0, "engine config: max_logprobs {} must be >= 0", max_logprobs);
  DI_CHECK(worker_threads >= 0, "engine config: worker_threads {} must be >= 0", worker_threads);
}

Engine::Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner, std::shared_ptr<const Detokenizer> detokenizer)
    : config_(std::move(config)),
      runner_(std::move(runner)),
      detokenizer_(std::move(detokenizer)),
      vocab_size_(checked(runner_).vocab_size()),
      // Each rank gets its own stream of seeds for unseeded requests.
      seed_rng_(derive_seed(config_.seed ^ 0x6A09E667F3BCC909ull, static_cast<std::uint32_t>(config_.dp_rank) + 1)) {
  config_.validate();
  for (std::int32_t id : config_.eos_token_ids) {
    DI_CHECK(id >= 0 && id < vocab_size_, "engine config: eos token id {} is outside the vocabulary [0, {})", id,
             vocab_size_);
  }
  for (std::int32_t id : config_.unsampleable_token_ids) {
    DI_CHECK(id >= 0 && id < vocab_size_, "engine config: unsampleable token id {} is outside the vocabulary [0, {})", id,
             vocab_size_);
    DI_CHECK(!contains(config_.eos_token_ids, id), "engine config: eos token id {} is also listed as unsampleable", id);
  }
  const cache::CacheLayout layout =
      cache::CacheLayout::make(runner_->cache_spec(), config_.cache, config_.scheduler.max_num_seqs);
  runner_->allocate_cache(layout);
  scheduler_ = std::make_unique<Scheduler>(config_.scheduler, layout, config_.cache);
  if (config_.worker_threads > 0) workers_ = std::make_unique<ThreadPool>(static_cast<std::size_t>(config_.worker_threads));
  samplers_.assign(static_cast<std::size_t>(config_.worker_threads) + 1, Sampler(vocab_size_));
}

void Engine::validate_request(const std::string& id, std::span<const std::int32_t> prompt,
                              const SamplingParams& params) const {
  DI_CHECK(!id.empty(), "request: the request id is empty");
  DI_CHECK(requests_.count(id) == 0, "request {}: a request with this id is already running", id);
  DI_CHECK(!prompt.empty(), "request {}: the prompt is empty", id);
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    DI_CHECK(prompt[i] >= 0 && prompt[i] < vocab_size_,
             "request {}: prompt token {} at index {} is outside the vocabulary [0, {})", id, prompt[i], i, vocab_size_);
  }
  try {
    runner_->check_prompt(prompt);
  } catch (const Error& e) {
    throw_error("request {}: {}", id, e.what());
  }
  DI_CHECK(static_cast<std::int64_t>(prompt.size()) < config_.scheduler.max_model_len,
           "request {}: the prompt has {} tokens, max_model_len is {}", id, prompt.size(),
           config_.scheduler.max_model_len);
  try {
    params.validate(vocab_size_, config_.max_logprobs);
  } catch (const Error& e) {
    throw_error("request {}: {}", id, e.what());
  }
  DI_CHECK(params.stop.empty() || detokenizer_ != nullptr, "request {}: stop strings need a tokenizer; this model has none",
           id);
  DI_CHECK(!params.so_args || constraints_ != nullptr, "request {}: so_args given but no structured-output backend is set",
           id);
}

void Engine::add_request(const std::string& request_id, std::vector<std::int32_t> prompt, SamplingParams params,
                         std::uint64_t cache_salt) {
  validate_request(request_id, prompt, params);
  auto req = std::make_unique<Request>();
  req->id = request_id;
  req->order = next_order_++;
  req->prompt_len = static_cast<std::int32_t>(prompt.size());
  if (params.min_tokens > 0) {
    req->banned_until_min = params.stop_token_ids;
    if (!params.ignore_eos) {
      req->banned_until_min.insert(req->banned_until_min.end(), config_.eos_token_ids.begin(),
                                   config_.eos_token_ids.end());
    }
  }
  const std::uint64_t seed = params.seq_seed ? *params.seq_seed : seed_rng_();
  const std::int64_t wanted = params.max_tokens ? req->prompt_len + static_cast<std::int64_t>(*params.max_tokens)
                                                : config_.scheduler.max_model_len;
  const auto max_len = static_cast<std::int32_t>(std::min<std::int64_t>(wanted, config_.scheduler.max_model_len));
  req->completions.resize(static_cast<std::size_t>(params.n));
  if (params.so_args) {
    // Compile first: an invalid schema must fail the request before anything is queued.
    try {
      for (Completion& c : req->completions) c.constraint = constraints_->create(*params.so_args);
    } catch (const Error& e) {
      throw_error("request {}: so_args: {}", request_id, e.what());
    }
  }
  for (std::int32_t i = 0; i < params.n; ++i) {
    Completion& c = req->completions[static_cast<std::size_t>(i)];
    c.seed = derive_seed(seed, static_cast<std::uint32_t>(i));
    c.history.reset(prompt);
    if (detokenizer_) c.detok = detokenizer_->open(prompt, params.skip_special_tokens);
    c.stops = StopStringMatcher(params.stop, params.include_stop_str_in_output);
  }
  // Queue the sequences last, and all or none, so a failure leaves the engine unchanged.
  std::int32_t queued = 0;
  try {
    for (; queued < params.n; ++queued) {
      SequenceInit init;
      init.tokens = prompt;
      init.max_len = max_len;
      init.cache_key = cache_salt;
      init.arrival = req->order;
      if (queued > 0) init.fork_from = req->completions[0].seq;
      req->completions[static_cast<std::size_t>(queued)].seq = scheduler_->add(std::move(init));
    }
  } catch (...) {
    for (std::int32_t i = 0; i < queued; ++i) scheduler_->abort(req->completions[static_cast<std::size_t>(i)].seq);
    throw;
  }
  for (std::int32_t i = 0; i < params.n; ++i) seq_refs_[req->completions[static_cast<std::size_t>(i)].seq] = {req.get(), i};
  req->unfinished = params.n;
  req->params = std::move(params);
  requests_.emplace(request_id, std::move(req));
}

void Engine::abort(const std::string& request_id) { abort_with(request_id, FinishReason::kAbort); }

void Engine::abort_with(const std::string& request_id, FinishReason reason) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  it->second->abort_reason = reason;
  for (Completion& c : it->second->completions) {
    if (c.finished) continue;
    scheduler_->abort(c.seq);
    seq_refs_.erase(c.seq);
  }
  aborted_.push_back(std::move(it->second));
  requests_.erase(it);
}

// The outputs of one step, one per request that changed, with the requests' add order.
struct Engine::StepOutputs {
  std::vector<RequestOutput> outputs;
  std::vector<std::uint64_t> order;
  std::unordered_map<Request*, std::size_t> index;
};

RequestOutput& Engine::output_for(Request& req, StepOutputs& step) {
  const auto [it, inserted] = step.index.emplace(&req, step.outputs.size());
  if (inserted) {
    step.order.push_back(req.order);
    RequestOutput& out = step.outputs.emplace_back();
    out.request_id = req.id;
    out.num_prompt_tokens = req.prompt_len;
    if (const Sequence* s = scheduler_->find(req.completions[0].seq)) out.num_cached_tokens = s->num_cached_tokens;
  }
  return step.outputs[it->second];
}

FinishReason Engine::accept_token(Request& req, Completion& comp, std::int32_t token, std::int32_t seq_len,
                                  CompletionOutput& out) {
  const SamplingParams& p = req.params;
  ++comp.num_output;
  comp.history.add_output(token);
  // As vLLM: no stop condition but length applies before min_tokens outputs exist.
  const bool may_stop = comp.num_output >= p.min_tokens;
  const std::string piece = comp.detok ? comp.detok->push(token) : std::string();
  FinishReason finish = FinishReason::kNone;
  if (may_stop && !p.ignore_eos && contains(config_.eos_token_ids, token)) {
    finish = FinishReason::kStop;
    out.text += piece;
  } else if (may_stop && contains(p.stop_token_ids, token)) {
    finish = FinishReason::kStop;
    out.stop_token = token;
    out.text += piece;
  } else if (may_stop && !comp.stops.empty()) {
    StopStringMatcher::Result r = comp.stops.push(piece);
    out.text += r.text;
    if (r.stop_index >= 0) {
      finish = FinishReason::kStop;
      out.stop_string = p.stop[static_cast<std::size_t>(r.stop_index)];
    }
  } else {
    out.text += piece;
  }
  if (comp.constraint) {
    // Sampling only picks allowed tokens, so a refusal means the constraint and its mask disagree.
    if (!comp.constraint->accept_token(token)) return FinishReason::kError;
    if (finish == FinishReason::kNone && comp.constraint->is_terminated()) finish = FinishReason::kStop;
  }
  if (finish == FinishReason::kNone &&
      ((p.max_tokens && comp.num_output >= *p.max_tokens) || seq_len >= config_.scheduler.max_model_len)) {
    finish = FinishReason::kLength;
  }
  return finish;
}

void Engine::finish_text(Completion& comp, FinishReason reason, CompletionOutput& out) {
  out.finish_reason = reason;
  if (comp.stops.stopped()) return;  // the text after a stop string is dropped
  out.text += comp.stops.flush();
  if (comp.detok) out.text += comp.detok->finish();
}

void Engine::sample_sequence(const ScheduledSeq& ss, Sampler& sampler, SeqCommit& commit, CompletionOutput& out) {
  const SeqRef ref = seq_refs_.at(ss.id);
  Request& req = *ref.request;
  Completion& comp = req.completions[static_cast<std::size_t>(ref.index)];
  const Sequence& seq = *scheduler_->find(ss.id);
  const SamplingParams& p = req.params;
  out.index = ref.index;
  const auto len = static_cast<std::int32_t>(seq.tokens.size());
  std::int32_t accepted = 0;
  for (std::int32_t r = 0; r < ss.num_logits; ++r) {
    SampleContext ctx;
    ctx.params = &p;
    ctx.seed = comp.seed;
    ctx.position = static_cast<std::uint32_t>(len + r);
    ctx.history = &comp.history;
    if (comp.num_output < p.min_tokens) ctx.banned = req.banned_until_min;
    if (row_has_mask_[static_cast<std::size_t>(ss.logits_offset + r)] != 0) {
      const std::size_t words = (static_cast<std::size_t>(vocab_size_) + 31) / 32;
      ctx.allowed = std::span<const std::uint32_t>(masks_).subspan(static_cast<std::size_t>(ss.logits_offset + r) * words, words);
    }
    const auto row = static_cast<std::size_t>(ss.logits_offset + r) * static_cast<std::size_t>(vocab_size_);
    SampleResult res = sampler.sample(std::span<const float>(logits_).subspan(row, static_cast<std::size_t>(vocab_size_)), ctx);
    const std::int32_t token = res.token;
    commit.new_tokens.push_back(token);
    out.token_ids.push_back(token);
    if (p.logprobs) out.logprobs.push_back(std::move(res));
    const FinishReason finish = accept_token(req, comp, token, len + r + 1, out);
    if (finish != FinishReason::kNone) {
      commit.finish = finish;
      finish_text(comp, finish, out);
      break;
    }
    // Verification: a draft is accepted iff it equals the target's own seeded sample at that
    // position, so the output is exactly what decoding without drafts gives.
    if (r < ss.num_drafts && token == seq.drafts[static_cast<std::size_t>(r)]) {
      ++accepted;
      continue;
    }
    break;
  }
  commit.num_accepted_drafts = std::min(accepted, static_cast<std::int32_t>(commit.new_tokens.size()));
}

void Engine::sample_all(const ScheduledBatch& batch, std::span<const std::size_t> jobs, std::vector<SeqCommit>& commits,
                        std::vector<CompletionOutput>& outs) {
  // Sequences are independent here (each touches only its own completion state), so contiguous
  // slices go to the workers, each with its own sampler scratch. A step of prefill chunks only
  // has nothing to sample.
  if (jobs.empty()) return;
  const std::size_t parts = workers_ ? std::min(samplers_.size(), jobs.size()) : 1;
  auto run = [&](std::size_t part) {
    for (std::size_t j = jobs.size() * part / parts; j < jobs.size() * (part + 1) / parts; ++j) {
      const std::size_t i = jobs[j];
      sample_sequence(batch.seqs[i], samplers_[part], commits[i], outs[i]);
    }
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

void Engine::fail_batch(const ScheduledBatch& batch) {
  std::vector<std::string> ids;
  for (const ScheduledSeq& ss : batch.seqs) {
    const auto it = seq_refs_.find(ss.id);
    if (it != seq_refs_.end()) ids.push_back(it->second.request->id);
  }
  for (const std::string& id : ids) abort_with(id, FinishReason::kError);
}

void Engine::mask_unsampleable(std::int32_t rows) {
  if (config_.unsampleable_token_ids.empty()) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (std::int32_t r = 0; r < rows; ++r) {
    float* row = logits_.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(vocab_size_);
    for (std::int32_t id : config_.unsampleable_token_ids) row[id] = kNegInf;
  }
}

std::vector<std::future<void>> Engine::start_masks(const ScheduledBatch& batch) {
  const auto rows = static_cast<std::size_t>(batch.forward.num_logit_rows());
  const std::size_t words = (static_cast<std::size_t>(vocab_size_) + 31) / 32;
  row_has_mask_.assign(rows, 0);
  std::vector<std::future<void>> tasks;
  if (!constraints_) return tasks;
  masks_.resize(rows * words);
  for (const ScheduledSeq& ss : batch.seqs) {
    if (ss.num_logits == 0) continue;
    const SeqRef& ref = seq_refs_.at(ss.id);
    TokenConstraint* constraint = ref.request->completions[static_cast<std::size_t>(ref.index)].constraint.get();
    if (constraint == nullptr) continue;
    const Sequence& seq = *scheduler_->find(ss.id);
    std::vector<std::int32_t> drafts(seq.drafts.begin(), seq.drafts.begin() + ss.num_drafts);
    for (std::int32_t r = 0; r < ss.num_logits; ++r) row_has_mask_[static_cast<std::size_t>(ss.logits_offset + r)] = 1;
    // Row r's mask assumes drafts 0..r-1 were accepted; the tentative advances are undone after.
    auto fill = [this, constraint, drafts = std::move(drafts), first = static_cast<std::size_t>(ss.logits_offset), words] {
      int advanced = 0;
      for (std::size_t r = 0; r <= drafts.size(); ++r) {
        constraint->fill_next_token_bitmask(std::span<std::uint32_t>(masks_).subspan((first + r) * words, words));
        // A draft the constraint refuses is rejected at its own row, so later rows are never read.
        if (r == drafts.size() || !constraint->accept_token(drafts[r])) break;
        ++advanced;
      }
      if (advanced > 0) constraint->rollback(advanced);
    };
    if (workers_) {
      tasks.push_back(workers_->submit(std::move(fill)));
    } else {
      fill();
    }
  }
  return tasks;
}

void Engine::propose_drafts() {
  if (!proposer_ || config_.scheduler.max_draft_tokens == 0) return;
  for (const auto& [id, ref] : seq_refs_) {
    const Sequence* seq = scheduler_->find(id);
    if (seq == nullptr || seq->status != SeqStatus::kRunning || seq->num_known_remaining() != 1) continue;
    std::vector<std::int32_t> drafts = proposer_->propose(id, seq->tokens, config_.scheduler.max_draft_tokens);
    if (static_cast<std::int32_t>(drafts.size()) > config_.scheduler.max_draft_tokens) {
      drafts.resize(static_cast<std::size_t>(config_.scheduler.max_draft_tokens));
    }
    for (std::int32_t t : drafts) {
      DI_CHECK(t >= 0 && t < vocab_size_, "engine: draft proposer returned token {} outside the vocabulary", t);
    }
    scheduler_->set_drafts(id, std::move(drafts));
  }
}

std::vector<RequestOutput> Engine::step() {
  const Clock::time_point start = Clock::now();
  double model_seconds = 0.0;
  StepOutputs step;
  for (const auto& req : aborted_) {
    RequestOutput& out = output_for(*req, step);
    for (std::size_t i = 0; i < req->completions.size(); ++i) {
      if (req->completions[i].finished) continue;
      CompletionOutput co;
      co.index = static_cast<std::int32_t>(i);
      co.finish_reason = req->abort_reason;
      out.completions.push_back(std::move(co));
    }
    out.finished = true;
  }
  aborted_.clear();

  ScheduledBatch batch = scheduler_->schedule();
  std::vector<Request*> done;
  if (!batch.empty()) {
    logits_.resize(static_cast<std::size_t>(batch.forward.num_logit_rows()) * static_cast<std::size_t>(vocab_size_));
    std::vector<std::future<void>> masks = start_masks(batch);
    const Clock::time_point model_start = Clock::now();
    try {
      runner_->forward(batch.forward, logits_);
    } catch (...) {
      for (std::future<void>& m : masks) m.wait();
      fail_batch(batch);
      throw;
    }
    model_seconds = seconds_since(model_start);
    mask_unsampleable(batch.forward.num_logit_rows());
    for (std::future<void>& m : masks) m.get();
    stats_.prefill_tokens += batch.num_prefill_tokens;
    stats_.decode_tokens += batch.num_decode_tokens;
    std::vector<SeqCommit> commits(batch.seqs.size());
    std::vector<CompletionOutput> outs(batch.seqs.size());
    std::vector<std::size_t> jobs;
    for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
      commits[i].id = batch.seqs[i].id;
      if (batch.seqs[i].num_logits > 0) jobs.push_back(i);
    }
    sample_all(batch, jobs, commits, outs);
    for (std::size_t i : jobs) {
      const ScheduledSeq& ss = batch.seqs[i];
      Request& req = *seq_refs_.at(ss.id).request;
      RequestOutput& out = output_for(req, step);
      stats_.generated_tokens += static_cast<std::int64_t>(commits[i].new_tokens.size());
      stats_.draft_tokens += ss.num_drafts;
      stats_.accepted_draft_tokens += commits[i].num_accepted_drafts;
      out.completions.push_back(std::move(outs[i]));
      if (commits[i].finish != FinishReason::kNone) {
        req.completions[static_cast<std::size_t>(seq_refs_.at(ss.id).index)].finished = true;
        seq_refs_.erase(ss.id);
        if (--req.unfinished == 0) {
          out.finished = true;
          done.push_back(&req);
        }
      }
    }
    scheduler_->commit(batch, commits);
  }
  for (Request* req : done) requests_.erase(req->id);
  propose_drafts();
  ++stats_.steps;
  stats_.model_seconds += model_seconds;
  stats_.engine_seconds += seconds_since(start) - model_seconds;
  // Report in the order requests were added, whatever order the batch had.
  std::vector<std::size_t> perm(step.outputs.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::sort(perm.begin(), perm.end(), [&](std::size_t a, std::size_t b) { return step.order[a] < step.order[b]; });
  std::vector<RequestOutput> sorted;
  sorted.reserve(step.outputs.size());
  for (std::size_t i : perm) sorted.push_back(std::move(step.outputs[i]));
  return sorted;
}

}  // namespace deepinfer::engine
