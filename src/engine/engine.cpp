// The engine step loop: schedule, forward, sample and verify, stop checks, commit.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <optional>

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

// The outputs of one step, one per request that changed, with the requests' add order.
struct Engine::StepOutputs {
  std::vector<RequestOutput> outputs;
  std::vector<std::uint64_t> order;
  std::unordered_map<Request*, std::size_t> index;
};

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
  ops::Backend* device = runner_->device_backend();
  if (device != nullptr && config_.device_sampling) {
    device_sampler_ = std::make_unique<DeviceSampler>(*device, vocab_size_, config_.max_logprobs,
                                                      config_.unsampleable_token_ids);
  }
  overlap_ = config_.overlap == EngineConfig::Overlap::kOn ||
             (config_.overlap == EngineConfig::Overlap::kAuto && device != nullptr);
}

Engine::~Engine() {
  // Launched steps may still run: their mask tasks point into requests, their device work into
  // buffers this engine owns.
  for (InFlight& f : inflight_) {
    for (std::future<void>& m : f.masks) {
      if (m.valid()) m.wait();
    }
    try {
      if (f.device) {
        runner_->collect({});
      } else {
        logits_.resize(static_cast<std::size_t>(f.batch.forward.num_logit_rows()) * static_cast<std::size_t>(vocab_size_));
        runner_->collect(logits_);
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to report to at destruction
    }
  }
  inflight_.clear();
  device_sampler_.reset();  // waits for its queued read-backs
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
    const auto ref_it = seq_refs_.find(ss.id);
    if (ref_it == seq_refs_.end()) continue;  // finished after scheduling: its row is not read
    const SeqRef& ref = ref_it->second;
    TokenConstraint* constraint = ref.request->completions[static_cast<std::size_t>(ref.index)].constraint.get();
    // A constraint at its end finished its sequence in the step before (launching ahead schedules
    // it once more): that row is never read, and a finished matcher need not fill masks.
    if (constraint == nullptr || constraint->is_terminated()) continue;
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

void Engine::abandon_newest() {
  for (std::future<void>& m : inflight_.back().masks) {
    if (m.valid()) m.wait();
  }
  fail_batch(inflight_.back().batch);
  inflight_.pop_back();
}

void Engine::abandon_all() {
  while (!inflight_.empty()) abandon_newest();
}

void Engine::release_retired() {
  // Mask tasks are the only launched work that points at requests.
  if (std::all_of(inflight_.begin(), inflight_.end(), [](const InFlight& f) { return f.masks.empty(); })) {
    retired_.clear();
  }
}

bool Engine::launches_ahead() const {
  return overlap_ && config_.launch_ahead && device_sampler_ != nullptr && runner_->can_launch_ahead() &&
         (proposer_ == nullptr || config_.scheduler.max_draft_tokens == 0);
}

void Engine::launch_step(ScheduledBatch batch, bool ahead) {
  // The previous step's device samples, before this step's packing takes the other frame. A
  // previous step without logits rows (prefill chunks only) left no placeholders to resolve.
  const bool from_samples = ahead && inflight_.back().device;
  Tensor sampled;
  if (from_samples) sampled = device_sampler_->output();
  // In place (a deque keeps addresses): the runner may keep a pointer to the ForwardBatch until
  // collect().
  InFlight& f = inflight_.emplace_back();
  f.batch = std::move(batch);
  const std::int32_t rows = f.batch.forward.num_logit_rows();
  f.device = device_sampler_ != nullptr && rows > 0;
  f.masks = start_masks(f.batch);
  const Clock::time_point start = Clock::now();
  try {
    if (f.device) {
      pack_device_rows(f.batch);
      device_sampler_->upload(from_samples ? &sampled : nullptr);  // staged: queued on the device stream, no wait
    }
    if (from_samples) {
      runner_->launch_ahead(f.batch.forward, sampled);
    } else {
      runner_->launch(f.batch.forward);
    }
    if (ahead) ++stats_.steps_launched_ahead;
    // Without structured-output masks the sampling is queued right behind the forward.
    if (f.device && f.masks.empty() &&
        std::none_of(row_has_mask_.begin(), row_has_mask_.end(), [](std::uint8_t m) { return m != 0; })) {
      device_sampler_->queue(runner_->device_logits(), {});
      f.device_queued = true;
    }
  } catch (...) {
    abandon_newest();
    throw;
  }
  launch_seconds_ = seconds_since(start);
}

Engine::Decided Engine::collect_step() {
  InFlight& f = inflight_.front();
  const std::int32_t rows = f.batch.forward.num_logit_rows();
  const Clock::time_point start = Clock::now();
  try {
    if (f.device) {
      if (!f.device_queued) {
        for (std::future<void>& m : f.masks) m.get();
        f.masks.clear();
        const std::size_t words = (static_cast<std::size_t>(vocab_size_) + 31) / 32;
        device_sampler_->queue(runner_->device_logits(),
                               std::span<const std::uint32_t>(masks_).first(static_cast<std::size_t>(rows) * words));
      }
      runner_->collect({});
      device_sampler_->read();
    } else {
      logits_.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab_size_));
      runner_->collect(logits_);
    }
    for (std::future<void>& m : f.masks) m.get();
  } catch (...) {
    abandon_all();  // a step launched ahead read this one's outputs
    throw;
  }
  stats_.model_seconds += launch_seconds_ + seconds_since(start);
  const bool device = f.device;
  Decided d;
  d.batch = std::move(f.batch);
  d.tentative = f.tentative;
  inflight_.pop_front();
  release_retired();
  if (!device) mask_unsampleable(rows);
  if (device) {
    d.row_tokens.resize(static_cast<std::size_t>(rows));
    for (std::int32_t r = 0; r < rows; ++r) d.row_tokens[static_cast<std::size_t>(r)] = device_sampler_->result(r, false).token;
  }
  stats_.prefill_tokens += d.batch.num_prefill_tokens;
  stats_.decode_tokens += d.batch.num_decode_tokens;
  if (device) stats_.device_sampled_rows += rows;
  d.seqs.resize(d.batch.seqs.size());
  for (std::size_t i = 0; i < d.batch.seqs.size(); ++i) {
    d.seqs[i].commit.id = d.batch.seqs[i].id;
    if (d.batch.seqs[i].num_logits > 0) d.jobs.push_back(i);
  }
  run_parallel(d.jobs, [&](std::size_t part, std::size_t i) {
    decide_sequence(d.batch.seqs[i], device ? nullptr : &samplers_[part], d.seqs[i]);
  });
  for (std::size_t i : d.jobs) {
    if (!d.seqs[i].live) stats_.wasted_rows += d.batch.seqs[i].num_logits;
  }
  return d;
}

void Engine::emit_step(Decided& d, bool committed, StepOutputs& step, std::vector<Request*>& done) {
  std::vector<std::size_t> live;
  for (std::size_t i : d.jobs) {
    if (d.seqs[i].live && seq_refs_.count(d.batch.seqs[i].id) != 0) live.push_back(i);
  }
  std::vector<CompletionOutput> outs(d.batch.seqs.size());
  run_parallel(live, [&](std::size_t, std::size_t i) { emit_sequence(d.batch.seqs[i], d.seqs[i], outs[i]); });
  for (std::size_t i : live) {
    const ScheduledSeq& ss = d.batch.seqs[i];
    SeqDecision& sd = d.seqs[i];
    const SeqRef ref = seq_refs_.at(ss.id);
    Request& req = *ref.request;
    RequestOutput& out = output_for(req, step);
    if (sd.finish != FinishReason::kNone) {
      // A completion ends at its last kept token; a draft counts only if accepted before it.
      sd.commit.num_accepted_drafts = std::min(sd.accepted, static_cast<std::int32_t>(sd.keep) - 1);
      if (!committed) {
        sd.commit.new_tokens.resize(sd.keep);
        sd.commit.finish = sd.finish;
      } else if (d.tentative || sd.commit.finish == FinishReason::kNone) {
        // A stop string (or, committed with a placeholder, any finish) ended it after the next
        // step was launched: that step's row for it is dropped at collection.
        scheduler_->abort(ss.id);
      }
    }
    stats_.generated_tokens += static_cast<std::int64_t>(sd.keep);
    stats_.draft_tokens += ss.num_drafts;
    stats_.accepted_draft_tokens += sd.commit.num_accepted_drafts;
    out.completions.push_back(std::move(outs[i]));
    if (sd.finish != FinishReason::kNone) {
      req.completions[static_cast<std::size_t>(ref.index)].finished = true;
      seq_refs_.erase(ss.id);
      if (--req.unfinished == 0) {
        out.finished = true;
        done.push_back(&req);
      }
    }
  }
}

void Engine::retire(std::span<Request* const> done) {
  for (Request* req : done) {
    const auto it = requests_.find(req->id);
    if (it == requests_.end()) continue;
    retired_.push_back(std::move(it->second));
    requests_.erase(it);
  }
  release_retired();
}

void Engine::stash_outputs(StepOutputs& step) { unreported_ = std::make_unique<StepOutputs>(std::move(step)); }

void Engine::commit_decided(Decided& d) {
  std::vector<SeqCommit> commits;
  commits.reserve(d.seqs.size());
  for (SeqDecision& sd : d.seqs) commits.push_back(std::move(sd.commit));
  scheduler_->commit(d.batch, commits);
  for (std::size_t i = 0; i < commits.size(); ++i) d.seqs[i].commit = std::move(commits[i]);
}

std::vector<RequestOutput> Engine::step() {
  const Clock::time_point start = Clock::now();
  const double model_before = stats_.model_seconds;
  StepOutputs step;
  if (unreported_) {
    step = std::move(*unreported_);
    unreported_.reset();
  }
  for (auto& req : aborted_) {
    RequestOutput& out = output_for(*req, step);
    for (std::size_t i = 0; i < req->completions.size(); ++i) {
      if (req->completions[i].finished) continue;
      CompletionOutput co;
      co.index = static_cast<std::int32_t>(i);
      co.finish_reason = req->abort_reason;
      out.completions.push_back(std::move(co));
    }
    out.finished = true;
    retired_.push_back(std::move(req));
  }
  aborted_.clear();
  release_retired();

  std::vector<Request*> done;
  const bool tentative_in_flight = !inflight_.empty() && inflight_.front().tentative;
  if (tentative_in_flight || (inflight_.empty() && launches_ahead())) {
    step_ahead(step, done);
  } else if (overlap_) {
    // Collect step N and commit its tokens, launch step N + 1, then do N's text and outputs
    // while the device runs N + 1 (docs/ENGINE.md §8).
    std::optional<Decided> d;
    if (!inflight_.empty()) {
      d = collect_step();
      commit_decided(*d);
    }
    propose_drafts();
    ScheduledBatch next = scheduler_->schedule();
    try {
      if (!next.empty()) launch_step(std::move(next));
    } catch (...) {
      // The launch failed (its own batch is ended already): step N's outputs go out next time.
      if (d) emit_step(*d, /*committed=*/true, step, done);
      retire(done);
      stash_outputs(step);
      throw;
    }
    if (d) emit_step(*d, /*committed=*/true, step, done);
  } else {
    ScheduledBatch batch = scheduler_->schedule();
    if (!batch.empty()) {
      launch_step(std::move(batch));
      Decided d = collect_step();
      emit_step(d, /*committed=*/false, step, done);
      commit_decided(d);
    }
    propose_drafts();
  }
  retire(done);
  ++stats_.steps;
  stats_.engine_seconds += seconds_since(start) - (stats_.model_seconds - model_before);
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
