// The engine: requests in, per-step outputs out. One step = schedule -> model forward ->
// sample / verify -> stop checks -> commit (docs/ENGINE.md states the contract). One Engine is
// one data-parallel rank: it owns its scheduler, cache pools, sampler and seed generator, and
// nothing is global, so several run side by side.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/cache_spec.h"
#include "common/thread_pool.h"
#include "engine/detokenizer.h"
#include "engine/device_sampler.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/stop_strings.h"
#include "engine/token_constraint.h"

namespace deepinfer::engine {

struct EngineConfig {
  SchedulerConfig scheduler;
  cache::CacheConfig cache;
  std::uint64_t seed = 0;     // seeds the generator that gives unseeded requests their seed
  std::int32_t dp_rank = 0;   // mixed into that generator, so ranks draw different seeds
  std::vector<std::int32_t> eos_token_ids;  // finish a sequence unless ignore_eos
  std::int32_t max_logprobs = 20;
  // Ids the model can output that have no token (a vocabulary padded past the tokenizer's, e.g.
  // 128,815..129,279 for DeepSeek): their logits are set to -inf before sampling, so no request
  // samples one, whatever its parameters.
  std::vector<std::int32_t> unsampleable_token_ids;
  // Worker threads for host-side per-sequence work: structured-output masks while the model
  // runs, sampling / stop checks / detokenization after it. 0: all on the engine thread.
  std::int32_t worker_threads = 0;
  // The overlapped step loop (docs/ENGINE.md §8): step() launches the next batch before it
  // detokenises, checks stop strings and builds the outputs of the batch it just collected, so
  // that host work runs while the device computes. kAuto: on when the runner's logits live on a
  // device. Outputs are the same either way; only step boundaries of finishing requests move.
  enum class Overlap : std::uint8_t { kAuto, kOff, kOn };
  Overlap overlap = Overlap::kAuto;
  // Sample on the runner's device (Backend::sample_tokens, bit-identical to the host Sampler)
  // when it has one; off: copy logits back and sample on the host.
  bool device_sampling = true;
  // Overlapped loop with device sampling on a runner that can_launch_ahead(): launch step N+1
  // before step N's tokens reach the host, its input ids taken on the device from N's samples
  // (docs/ENGINE.md §10), so the device never waits for the host between steps. Steps whose
  // sampling needs N's tokens on the host (penalties, structured outputs, drafts) are launched
  // after N is collected instead. Outputs are the same either way.
  bool launch_ahead = true;

  void validate() const;
};

// Proposes speculative tokens for a sequence in decode (a stand-in for the model's own drafter,
// e.g. prompt lookup). The engine verifies them against the target's seeded samples.
class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Up to max_tokens guesses for the tokens following `tokens` (prompt + output so far).
  virtual std::vector<std::int32_t> propose(SeqId seq, std::span<const std::int32_t> tokens,
                                            std::int32_t max_tokens) = 0;
};

// What one completion of a request produced in one step.
struct CompletionOutput {
  std::int32_t index = 0;                 // 0 .. n-1
  std::vector<std::int32_t> token_ids;    // new tokens this step
  std::string text;                       // new text safe to show (empty without a detokenizer)
  std::vector<SampleResult> logprobs;     // one per new token, if the request asked for logprobs
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<std::string> stop_string;   // the stop string that finished it
  std::optional<std::int32_t> stop_token;   // the stop_token_ids entry that finished it
};

struct RequestOutput {
  std::string request_id;
  std::vector<CompletionOutput> completions;  // only the completions that changed this step
  bool finished = false;                      // every completion has finished
  std::int32_t num_prompt_tokens = 0;
  std::int32_t num_cached_tokens = 0;         // prompt tokens reused from the cache (first completion)
};

struct EngineStats {
  std::int64_t steps = 0;
  std::int64_t prefill_tokens = 0;    // prompt (and recomputed) tokens run through the model
  std::int64_t decode_tokens = 0;     // decode and verification tokens run through the model
  std::int64_t generated_tokens = 0;  // tokens appended to sequences
  std::int64_t draft_tokens = 0, accepted_draft_tokens = 0;
  double model_seconds = 0.0;   // in ModelRunner launch/collect and waiting for device sampling
  double engine_seconds = 0.0;  // the rest of step(): scheduling, sampling, stop checks, commit
  std::int64_t device_sampled_rows = 0;  // logits rows sampled on the runner's device
  std::int64_t steps_launched_ahead = 0;  // steps launched before the previous step's tokens were known
  std::int64_t wasted_rows = 0;           // rows of sequences that had finished in the step before
};

class Engine {
 public:
  Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner,
         std::shared_ptr<const Detokenizer> detokenizer = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (prompt ids, length, every sampling field) and queues it; throws
  // deepinfer::Error naming the problem and leaves the engine unchanged. `cache_salt` keeps the
  // request from sharing prefix-cache pages with requests of another salt.
  void add_request(const std::string& request_id, std::vector<std::int32_t> prompt, SamplingParams params,
                   std::uint64_t cache_salt = 0);
  // Stops a request now and frees its pages; the next step() reports it finished with kAbort.
  // Unknown ids are ignored.
  void abort(const std::string& request_id);
  // Runs one step and returns what changed, in the order requests were added. If the model
  // throws, the requests of that batch are ended (reported with kError by the next step) and
  // the exception propagates.
  std::vector<RequestOutput> step();
  bool has_unfinished() const { return !requests_.empty(); }
  std::int32_t num_unfinished() const { return static_cast<std::int32_t>(requests_.size()); }

  // Whether step() overlaps host work with the device (EngineConfig::overlap resolved).
  bool overlapped() const { return overlap_; }
  // Whether a launched step is waiting to be collected by the next step() (overlapped loop).
  bool has_in_flight() const { return !inflight_.empty(); }
  // Whether step() launches the next step before collecting the last (EngineConfig::launch_ahead
  // resolved for this runner; steps with drafts never are).
  bool launches_ahead() const;

  void set_draft_proposer(std::shared_ptr<DraftProposer> proposer) { proposer_ = std::move(proposer); }
  // Enables SamplingParams::so_args: each constrained sequence gets a constraint from `factory`.
  void set_constraint_factory(std::shared_ptr<const TokenConstraintFactory> factory) {
    constraints_ = std::move(factory);
  }

  std::int32_t vocab_size() const { return vocab_size_; }
  const EngineConfig& config() const { return config_; }
  const EngineStats& stats() const { return stats_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  ModelRunner& runner() { return *runner_; }

 private:
  struct Completion {
    SeqId seq = 0;
    std::uint64_t seed = 0;
    PenaltyState history;
    std::unique_ptr<DetokenizerStream> detok;
    StopStringMatcher stops;
    std::unique_ptr<TokenConstraint> constraint;
    std::int32_t num_output = 0;
    bool finished = false;
  };
  struct Request {
    std::string id;
    std::uint64_t order = 0;
    SamplingParams params;
    std::int32_t prompt_len = 0;
    std::vector<std::int32_t> banned_until_min;  // stop ids and EOS while min_tokens is unmet
    std::vector<Completion> completions;
    std::int32_t unfinished = 0;
    FinishReason abort_reason = FinishReason::kAbort;
  };
  struct SeqRef {
    Request* request = nullptr;
    std::int32_t index = 0;
  };

  struct StepOutputs;
  // What token ids alone say about a committed token (stop strings need the text).
  enum class TextStop : std::uint8_t { kNone, kEos, kStopToken };
  struct TokenFate {
    TextStop text = TextStop::kNone;
    FinishReason finish = FinishReason::kNone;  // EOS / stop id / constraint / length
  };
  // One scheduled sequence after sampling: its commit plus what emit_sequence needs.
  struct SeqDecision {
    bool live = false;                  // the sequence still had a completion when collected
    SeqCommit commit;
    std::vector<SampleResult> results;  // one per committed token when logprobs were asked
    std::vector<TokenFate> fates;       // one per committed token
    std::int32_t accepted = 0;          // drafts accepted before any finish
    std::int32_t outputs_before = 0;    // the completion's num_output before this step
    // Filled by emit_sequence: tokens that count and the completion's finish (kNone: goes on).
    std::size_t keep = 0;
    FinishReason finish = FinishReason::kNone;
  };
  // A launched step: its batch, the mask tasks, where it is sampled.
  struct InFlight {
    // Written out: clang cannot use a nested class's default member initializers inside
    // emplace() of the enclosing class.
    InFlight() : device(false), device_queued(false), tentative(false) {}
    ScheduledBatch batch;
    std::vector<std::future<void>> masks;
    bool device;         // sampled on the runner's device
    bool device_queued;  // its sampling is queued already (no masks to wait for)
    bool tentative;      // committed with placeholder tokens (launching ahead)
  };
  // A collected step: sampled and decided, not yet turned into outputs.
  struct Decided {
    ScheduledBatch batch;
    std::vector<SeqDecision> seqs;  // one per batch sequence
    std::vector<std::size_t> jobs;  // indices of the sequences with logits rows
    bool tentative = false;         // the scheduler took placeholders for its tokens
    std::vector<std::int32_t> row_tokens;  // the sampled token of every logits row (device sampling)
  };

  void abort_with(const std::string& request_id, FinishReason reason);
  // The model failed on this batch: its requests end with kError (reported by the next step).
  void fail_batch(const ScheduledBatch& batch);
  void validate_request(const std::string& id, std::span<const std::int32_t> prompt, const SamplingParams& params) const;
  // Starts the masks and the forward of `batch` (and its device sampling) as the newest in-flight
  // step; `ahead`: while the previous step runs, its placeholder ids taken from that step's samples.
  void launch_step(ScheduledBatch batch, bool ahead = false);
  // Waits for the oldest in-flight step, samples and decides every sequence (token ids only, no text).
  Decided collect_step();
  // The newest launched step failed (runner, device sampler or a mask task threw): its requests
  // end with kError once its mask tasks are done.
  void abandon_newest();
  // Every in-flight step is dropped after a failure: mask tasks awaited, requests ended with kError.
  void abandon_all();
  // One step() of the loop that launches ahead (docs/ENGINE.md §10).
  void step_ahead(StepOutputs& step, std::vector<Request*>& done);
  // Whether `next` can be launched before the in-flight step's tokens are on the host: every row
  // waiting for such a token must be sampleable without it.
  bool can_launch_ahead(const ScheduledBatch& next) const;
  // Commits a launched step with a placeholder for each sampled token (-1 - its logits row).
  void commit_tentatively(InFlight& f);
  // After a tentatively committed step is collected: its tokens replace the placeholders.
  void resolve_placeholders(const Decided& d);
  // Keeps a step's outputs for the next step() (this one is about to throw).
  void stash_outputs(StepOutputs& step);
  // Scheduler::commit of a collected step's decisions.
  void commit_decided(Decided& d);
  // Frees retired requests once no in-flight step's mask task can point at them.
  void release_retired();
  // Packs the sampling rows of the launched batch for the device (engine_sampling.cpp).
  void pack_device_rows(const ScheduledBatch& batch);
  // Samples (or reads the device's samples for) one sequence and verifies its drafts; applies
  // the tokens to the penalty history, min/max-token counts and the constraint (engine thread
  // or a worker: touches only its own completion).
  void decide_sequence(const ScheduledSeq& ss, Sampler* sampler, SeqDecision& d);
  TokenFate token_fate(const Request& req, Completion& comp, std::int32_t token, std::int32_t seq_len) const;
  // Turns a decided sequence into its output (text, stop strings) and sets d.keep / d.finish: a
  // stop string may end the completion before its last committed token.
  void emit_sequence(const ScheduledSeq& ss, SeqDecision& d, CompletionOutput& out);
  // Outputs and completion bookkeeping of a decided step. `committed`: the scheduler already
  // took the commits (overlapped loop), so a stop string found now ends the sequence by abort;
  // otherwise the commits are cut to the stop string before Scheduler::commit.
  void emit_step(Decided& d, bool committed, StepOutputs& step, std::vector<Request*>& done);
  // Finished requests leave requests_ (kept alive in retired_ while a launched batch may use them).
  void retire(std::span<Request* const> done);
  // Runs fn(part, job) for every job, the parts split over the workers.
  void run_parallel(std::span<const std::size_t> jobs, const std::function<void(std::size_t, std::size_t)>& fn);
  void finish_text(Completion& comp, FinishReason reason, CompletionOutput& out);
  RequestOutput& output_for(Request& req, StepOutputs& step);
  void propose_drafts();
  // Fills the structured-output masks of the batch's logits rows (see docs/ENGINE.md): on the
  // mask pool, overlapping the forward, or inline. Returns the tasks to wait for.
  std::vector<std::future<void>> start_masks(const ScheduledBatch& batch);
  // Sets the logits of config_.unsampleable_token_ids to -inf in every row.
  void mask_unsampleable(std::int32_t rows);

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const Detokenizer> detokenizer_;
  std::int32_t vocab_size_ = 0;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<Sampler> samplers_;  // one per worker plus the engine thread (scratch buffers)
  std::mt19937_64 seed_rng_;
  std::shared_ptr<DraftProposer> proposer_;
  std::shared_ptr<const TokenConstraintFactory> constraints_;
  std::unique_ptr<ThreadPool> workers_;
  std::vector<std::uint32_t> masks_;          // [logits rows, mask words]
  std::vector<std::uint8_t> row_has_mask_;    // [logits rows]
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::unordered_map<SeqId, SeqRef> seq_refs_;
  std::vector<std::unique_ptr<Request>> aborted_;  // reported by the next step()
  // Finished or reported requests kept alive while a launched batch (its mask tasks) may still
  // point at them; freed once that batch is collected.
  std::vector<std::unique_ptr<Request>> retired_;
  std::vector<float> logits_;
  bool overlap_ = false;
  std::unique_ptr<DeviceSampler> device_sampler_;  // set when sampling on the runner's device
  std::deque<InFlight> inflight_;  // launched steps, oldest first (two while launching ahead)
  double launch_seconds_ = 0.0;
  // Outputs of a step whose step() threw after they were made (overlapped loop): the next step()
  // reports them.
  std::unique_ptr<StepOutputs> unreported_;
  std::uint64_t next_order_ = 0;
  EngineStats stats_;
};

}  // namespace deepinfer::engine
