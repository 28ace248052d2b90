// The loop that launches ahead (docs/ENGINE.md §10): step N+1 is scheduled and queued on the device
// before step N's tokens reach the host. N was committed with a placeholder per sampled token, so
// the scheduler can plan N+1; N+1's input ids for those tokens are read on the device from N's
// samples. Then N is collected, its placeholders resolved, and its text and outputs made while the
// device runs N+1. A sequence that N finished has a wasted row in N+1, dropped at collection.
#include <algorithm>

#include "common/error.h"
#include "engine/engine.h"

namespace deepinfer::engine {

bool Engine::can_launch_ahead(const ScheduledBatch& next) const {
  if (!launches_ahead() || inflight_.size() != 1 || !inflight_.front().tentative) return false;
  const InFlight& prev = inflight_.front();
  if (prev.device && !prev.device_queued) return false;  // its samples wait for masks
  for (const ScheduledSeq& ss : next.seqs) {
    if (ss.num_drafts > 0) return false;
    if (ss.num_logits == 0) continue;
    const auto it = seq_refs_.find(ss.id);
    if (it == seq_refs_.end()) continue;  // finished or aborted: its row is dropped anyway
    const Request& req = *it->second.request;
    const Completion& comp = req.completions[static_cast<std::size_t>(it->second.index)];
    // Its mask needs the constraint advanced by N's token. (Penalties need N's token too: it joins
    // the row's history on the device, DeviceSampler::set_source.)
    if (comp.constraint) return false;
  }
  return true;
}

void Engine::commit_tentatively(InFlight& f) {
  std::vector<SeqCommit> commits;
  commits.reserve(f.batch.seqs.size());
  for (const ScheduledSeq& ss : f.batch.seqs) {
    DI_CHECK(ss.num_drafts == 0, "engine: sequence {} has drafts in a step committed ahead of its tokens", ss.id);
    SeqCommit& c = commits.emplace_back();
    c.id = ss.id;
    if (ss.num_logits == 0) continue;
    c.new_tokens.push_back(-1 - ss.logits_offset);
    // A token that reaches the sequence's length limit is its last whatever it is: the sequence
    // leaves now, so the next step does not compute a row for it in vain.
    const Sequence* seq = scheduler_->find(ss.id);
    if (seq != nullptr && ss.start_pos + ss.num_tokens + 1 >= seq->max_len) c.finish = FinishReason::kLength;
  }
  scheduler_->commit(f.batch, commits);
  f.tentative = true;
}

void Engine::resolve_placeholders(const Decided& d) {
  if (!d.tentative) return;
  for (const ScheduledSeq& ss : d.batch.seqs) {
    if (ss.num_logits == 0) continue;
    scheduler_->resolve_token(ss.id, ss.start_pos + ss.num_tokens, d.row_tokens[static_cast<std::size_t>(ss.logits_offset)]);
  }
}

void Engine::step_ahead(StepOutputs& step, std::vector<Request*>& done) {
  const bool ahead = launches_ahead();
  const bool has_prev = !inflight_.empty();
  ScheduledBatch next = scheduler_->schedule();
  std::optional<Decided> d;
  // A launch failed (its own batch is ended already): step N's outputs go out with the next step().
  const auto keep_outputs_and_rethrow = [&] {
    if (d) emit_step(*d, /*committed=*/true, step, done);
    retire(done);
    stash_outputs(step);
    throw;
  };
  bool launched = false;
  if (!next.empty() && (!has_prev || can_launch_ahead(next))) {
    try {
      launch_step(std::move(next), /*ahead=*/has_prev);
    } catch (...) {
      if (has_prev) {
        d = collect_step();
        resolve_placeholders(*d);
      }
      keep_outputs_and_rethrow();
    }
    launched = true;
  }
  if (has_prev) {
    d = collect_step();  // waits for N's samples only; N + 1 (if launched) keeps the device busy
    resolve_placeholders(*d);
  }
  if (!next.empty() && !launched) {
    // Some row needs N's token on the host: launch now, N's tokens in place of the placeholders.
    for (std::int32_t& id : next.forward.token_ids) {
      if (id < 0) id = d->row_tokens[static_cast<std::size_t>(-1 - id)];
    }
    try {
      launch_step(std::move(next));
    } catch (...) {
      keep_outputs_and_rethrow();
    }
    launched = true;
  }
  // Leaving this loop (drafts appeared): the last step is committed for real when collected.
  if (launched && ahead) commit_tentatively(inflight_.back());
  if (d) emit_step(*d, /*committed=*/true, step, done);
}

}  // namespace deepinfer::engine
