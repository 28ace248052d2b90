// Continuous-batching scheduler: pure CPU logic, no CUDA. Each step it picks work under a token
// budget (decodes first, then prefill chunks of running sequences, then admissions in arrival
// order), allocates pages, preempts the newest sequence by recompute when pages run out, and
// builds the ForwardBatch. After the step, commit() applies the results: accepted tokens,
// speculative rollback, prefix-cache registration, snapshots, n > 1 forks, finishes.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/block_pool.h"
#include "cache/cache_spec.h"
#include "cache/prefix_cache.h"
#include "engine/model_runner.h"
#include "engine/sequence.h"

namespace deepinfer::engine {

struct SchedulerConfig {
  std::int32_t max_num_seqs = 256;             // running sequences at most
  std::int32_t max_num_batched_tokens = 8192;  // tokens per step (all sequences together)
  std::int32_t max_model_len = 8192;           // prompt + output
  std::int32_t max_prefill_chunk = 0;          // 0: a prefill chunk is limited by the budget only
  std::int32_t max_draft_tokens = 0;           // speculative tokens per sequence per step

  void validate() const;
};

struct SequenceInit {
  std::vector<std::int32_t> tokens;  // the prompt
  std::int32_t max_len = 0;          // <= max_model_len; the engine finishes at this length
  std::uint64_t cache_key = 0;
  std::uint64_t arrival = 0;
  // n > 1 siblings: fork from this (earlier added, same prompt) sequence's prompt pages.
  std::optional<SeqId> fork_from;
};

// What one sequence does in a step (aligned with ForwardBatch::seqs).
struct ScheduledSeq {
  SeqId id = 0;
  std::int32_t start_pos = 0;
  std::int32_t num_tokens = 0;  // known tokens plus drafts
  std::int32_t num_drafts = 0;
  std::int32_t num_logits = 0;  // 0 (prefill chunk) or 1 + num_drafts
  std::int32_t logits_offset = 0;
};

struct ScheduledBatch {
  ForwardBatch forward;
  std::vector<ScheduledSeq> seqs;
  std::vector<SeqId> preempted;  // preempted while scheduling this step
  std::int32_t num_prefill_tokens = 0;
  std::int32_t num_decode_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

// The engine's verdict on one scheduled sequence after sampling.
struct SeqCommit {
  SeqId id = 0;
  // Tokens appended to the sequence: the accepted drafts, then the sampled (bonus) token.
  // Empty for a prefill chunk that produced no logits.
  std::vector<std::int32_t> new_tokens;
  std::int32_t num_accepted_drafts = 0;
  FinishReason finish = FinishReason::kNone;
};

struct SchedulerStats {
  std::int64_t steps = 0;
  std::int64_t preemptions = 0;
  std::int64_t snapshots_taken = 0;
  std::int64_t forks = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, cache::CacheLayout layout, cache::CacheConfig cache_config);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a sequence; throws deepinfer::Error for an empty prompt, a prompt of max_len or
  // more, or a max_len above max_model_len.
  SeqId add(SequenceInit init);
  // Speculative tokens to verify in the next step (a running sequence in decode).
  void set_drafts(SeqId id, std::vector<std::int32_t> drafts);
  // Frees everything the sequence holds and forgets it; unknown ids are ignored.
  void abort(SeqId id);

  ScheduledBatch schedule();
  // `commits` aligned with batch.seqs. Sequences aborted since schedule() are skipped.
  void commit(const ScheduledBatch& batch, std::span<const SeqCommit> commits);

  // Launching ahead (docs/ENGINE.md §10): a step may be committed before its tokens are known,
  // with a placeholder (< 0) where each sampled token goes; this puts the real token in once it
  // is. The placeholder sits past the computed tokens, so no page hash has seen it. Unknown ids
  // (aborted since) are ignored.
  void resolve_token(SeqId id, std::int32_t index, std::int32_t token);
  const Sequence* find(SeqId id) const;
  std::int32_t num_running() const { return static_cast<std::int32_t>(running_.size()); }
  std::int32_t num_waiting() const;
  bool has_work() const { return !seqs_.empty(); }

  const SchedulerConfig& config() const { return config_; }
  const cache::CacheLayout& layout() const { return layout_; }
  const cache::BlockPool& page_pool() const { return pages_; }
  const cache::BlockPool& snapshot_pool() const { return snapshots_; }
  const cache::PrefixCache* prefix_cache() const { return prefix_.get(); }
  const SchedulerStats& stats() const { return stats_; }

  // Recounts every reference the sequences hold and compares with the pools; throws
  // deepinfer::Error on a mismatch (tests call it after every step).
  void check_invariants() const;

 private:
  struct Plan {
    Sequence* seq = nullptr;
    std::int32_t known = 0;   // known tokens to compute
    std::int32_t drafts = 0;  // draft tokens to verify
  };

  Sequence& get(SeqId id);
  Plan plan(Sequence& seq, std::int32_t budget) const;
  std::int32_t cut_at_snapshot_boundary(const Sequence& seq, std::int32_t end) const;
  bool wants_snapshot(const Sequence& seq, std::int32_t end, bool has_drafts) const;
  bool grow_pages(Sequence& seq, std::int32_t end);
  Sequence* pick_victim(const Sequence& except);
  bool strip_waiting_pages(const Sequence* except = nullptr);
  bool try_admit(Sequence& seq, std::int32_t budget, std::vector<Plan>& plans);
  void match_prefix(Sequence& seq);
  void undo_match(Sequence& seq);
  void preempt(Sequence& seq);
  void release(Sequence& seq);
  void release_fork_waiters(Sequence& leader);
  void enqueue_waiting(Sequence& seq, SeqStatus status = SeqStatus::kWaiting);
  void remove_waiting(SeqId id);
  void register_pages(Sequence& seq);
  void finish_snapshot(Sequence& seq, std::int32_t end);
  void fork(Sequence& leader, Sequence& waiter, std::int32_t snapshot);
  void ensure_page_hashes(Sequence& seq, std::int32_t num_pages);
  ScheduledBatch build(std::vector<Plan>& plans);

  SchedulerConfig config_;
  cache::CacheLayout layout_;
  cache::CacheConfig cache_config_;
  cache::BlockPool pages_;
  cache::BlockPool state_slots_;
  cache::BlockPool snapshots_;
  std::unique_ptr<cache::PrefixCache> prefix_;
  std::int32_t watermark_pages_ = 0;

  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;   // by (arrival, id)
  std::vector<Sequence*> running_;  // by admission time: the back is preempted first
  SeqId next_id_ = 1;
  SchedulerStats stats_;
};

}  // namespace deepinfer::engine
