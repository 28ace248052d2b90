// The scheduler's step: plan, allocate, preempt, admit, build the batch; then commit results.
#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace deepinfer::engine {

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

void SchedulerConfig::validate() const {
  DI_CHECK(max_num_seqs >= 1, "scheduler config: max_num_seqs {} must be >= 1", max_num_seqs);
  DI_CHECK(max_num_batched_tokens >= max_num_seqs,
           "scheduler config: max_num_batched_tokens {} must be >= max_num_seqs {} (every running sequence decodes "
           "each step)",
           max_num_batched_tokens, max_num_seqs);
  DI_CHECK(max_model_len >= 2, "scheduler config: max_model_len {} must be >= 2", max_model_len);
  DI_CHECK(max_prefill_chunk >= 0, "scheduler config: max_prefill_chunk {} must be >= 0", max_prefill_chunk);
  DI_CHECK(max_draft_tokens >= 0, "scheduler config: max_draft_tokens {} must be >= 0", max_draft_tokens);
}

Scheduler::Scheduler(SchedulerConfig config, cache::CacheLayout layout, cache::CacheConfig cache_config)
    : config_(config),
      layout_(std::move(layout)),
      cache_config_(cache_config),
      pages_(layout_.num_pages),
      state_slots_(layout_.num_state_slots),
      snapshots_(layout_.num_snapshot_slots) {
  config_.validate();
  DI_CHECK(layout_.num_state_slots >= config_.max_num_seqs, "scheduler: {} state slots for max_num_seqs {}",
           layout_.num_state_slots, config_.max_num_seqs);
  // A sequence alone must always be able to reach max_model_len, or it could never finish.
  DI_CHECK(layout_.pages_for_tokens(config_.max_model_len) <= layout_.num_pages,
           "scheduler: max_model_len {} needs {} pages of {} tokens but the cache has {}; lower max_model_len or "
           "give the cache more memory",
           config_.max_model_len, layout_.pages_for_tokens(config_.max_model_len), layout_.page_size,
           layout_.num_pages);
  DI_CHECK(config_.max_draft_tokens <= layout_.spec.max_rollback_tokens || !layout_.spec.has_fixed_state(),
           "scheduler: max_draft_tokens {} exceeds the model's max_rollback_tokens {}", config_.max_draft_tokens,
           layout_.spec.max_rollback_tokens);
  if (cache_config_.enable_prefix_caching) {
    prefix_ = std::make_unique<cache::PrefixCache>(layout_.page_size, pages_,
                                                   layout_.spec.has_fixed_state() ? &snapshots_ : nullptr);
  }
  watermark_pages_ = static_cast<std::int32_t>(std::ceil(cache_config_.admission_watermark * layout_.num_pages));
}

Sequence& Scheduler::get(SeqId id) {
  const auto it = seqs_.find(id);
  DI_CHECK(it != seqs_.end(), "scheduler: unknown sequence {}", id);
  return *it->second;
}

const Sequence* Scheduler::find(SeqId id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::int32_t Scheduler::num_waiting() const {
  return static_cast<std::int32_t>(seqs_.size()) - static_cast<std::int32_t>(running_.size());
}

SeqId Scheduler::add(SequenceInit init) {
  const auto prompt_len = static_cast<std::int32_t>(init.tokens.size());
  DI_CHECK(prompt_len >= 1, "request: the prompt is empty");
  DI_CHECK(init.max_len <= config_.max_model_len, "request: max length {} exceeds max_model_len {}", init.max_len,
           config_.max_model_len);
  DI_CHECK(prompt_len < init.max_len, "request: prompt of {} tokens leaves no room to generate (max length {})",
           prompt_len, init.max_len);
  auto owned = std::make_unique<Sequence>();
  Sequence& seq = *owned;
  seq.id = next_id_++;
  seq.arrival = init.arrival;
  seq.tokens = std::move(init.tokens);
  seq.prompt_len = prompt_len;
  seq.max_len = init.max_len;
  seq.cache_key = init.cache_key;
  seqs_.emplace(seq.id, std::move(owned));

  Sequence* leader = nullptr;
  if (init.fork_from) {
    const auto it = seqs_.find(*init.fork_from);
    if (it != seqs_.end()) leader = it->second.get();
  }
  const std::int32_t boundary = (prompt_len - 1) / layout_.page_size * layout_.page_size;
  if (leader != nullptr && boundary > 0 && leader->prompt_len == prompt_len && leader->num_computed < boundary &&
      std::equal(leader->tokens.begin(), leader->tokens.begin() + prompt_len, seq.tokens.begin())) {
    // Parked on the leader, outside the waiting queue, until the shared pages exist.
    seq.fork_leader = leader->id;
    seq.fork_boundary = boundary;
    leader->fork_boundary = boundary;
    leader->fork_waiters.push_back(seq.id);
  } else {
    enqueue_waiting(seq);
  }
  return seq.id;
}

void Scheduler::set_drafts(SeqId id, std::vector<std::int32_t> drafts) {
  Sequence& seq = get(id);
  seq.drafts = std::move(drafts);
}

void Scheduler::enqueue_waiting(Sequence& seq, SeqStatus status) {
  seq.status = status;
  const auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), &seq, [](const Sequence* a, const Sequence* b) {
    return a->arrival < b->arrival || (a->arrival == b->arrival && a->id < b->id);
  });
  waiting_.insert(pos, &seq);
}

void Scheduler::remove_waiting(SeqId id) {
  const auto it = std::find_if(waiting_.begin(), waiting_.end(), [id](const Sequence* s) { return s->id == id; });
  if (it != waiting_.end()) waiting_.erase(it);
}

void Scheduler::abort(SeqId id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Sequence& seq = *it->second;
  if (seq.status == SeqStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), &seq));
  } else {
    remove_waiting(id);
  }
  release(seq);
  seqs_.erase(it);
}

void Scheduler::release_fork_waiters(Sequence& leader) {
  for (SeqId wid : leader.fork_waiters) {
    const auto it = seqs_.find(wid);
    if (it == seqs_.end()) continue;
    Sequence& w = *it->second;
    w.fork_leader = 0;
    w.fork_boundary = 0;
    enqueue_waiting(w);  // on its own now: it computes (or prefix-matches) its prompt itself
  }
  leader.fork_waiters.clear();
}

void Scheduler::release(Sequence& seq) {
  // Tail pages first, so the LRU evicts a sequence's tail before its (more shareable) head.
  for (auto it = seq.pages.rbegin(); it != seq.pages.rend(); ++it) pages_.decref(*it);
  seq.pages.clear();
  if (seq.state_slot >= 0) state_slots_.decref(seq.state_slot);
  seq.state_slot = -1;
  seq.state_valid = false;
  if (seq.restore_snapshot >= 0) snapshots_.decref(seq.restore_snapshot);
  seq.restore_snapshot = -1;
  if (seq.pending_save >= 0) snapshots_.decref(seq.pending_save);
  seq.pending_save = -1;
  release_fork_waiters(seq);
  if (seq.fork_leader != 0) {
    const auto it = seqs_.find(seq.fork_leader);
    if (it != seqs_.end()) std::erase(it->second->fork_waiters, seq.id);
    seq.fork_leader = 0;
  }
}

void Scheduler::preempt(Sequence& seq) {
  release(seq);
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  seq.num_computed = 0;
  seq.registered_pages = 0;
  seq.cache_node = -1;
  seq.registration_stopped = false;
  seq.pending_rollback = 0;
  seq.drafts.clear();
  ++seq.num_preemptions;
  ++stats_.preemptions;
  enqueue_waiting(seq, SeqStatus::kPreempted);
}

std::int32_t Scheduler::cut_at_snapshot_boundary(const Sequence& seq, std::int32_t end) const {
  if (!layout_.spec.has_fixed_state()) return end;
  // A snapshot can only be taken where a step ends, so chunks stop at the wanted boundaries.
  const std::int32_t page = layout_.page_size;
  std::int32_t candidates[3] = {-1, -1, -1};
  if (!seq.fork_waiters.empty()) candidates[0] = seq.fork_boundary;
  if (prefix_) {
    candidates[1] = (seq.prompt_len - 1) / page * page;
    candidates[2] = seq.prompt_len / page * page;
  }
  for (std::int32_t b : candidates) {
    if (b > seq.num_computed && b < end) end = b;
  }
  return end;
}

bool Scheduler::wants_snapshot(const Sequence& seq, std::int32_t end, bool has_drafts) const {
  const std::int32_t page = layout_.page_size;
  if (!layout_.spec.has_fixed_state() || has_drafts || end == 0 || end % page != 0) return false;
  if (!seq.fork_waiters.empty() && end == seq.fork_boundary) return true;
  if (!prefix_) return false;
  if (end == (seq.prompt_len - 1) / page * page || end == seq.prompt_len / page * page) return true;
  return cache_config_.snapshot_on_decode && end > seq.prompt_len;
}

Scheduler::Plan Scheduler::plan(Sequence& seq, std::int32_t budget) const {
  Plan p;
  p.seq = &seq;
  if (budget <= 0) return p;
  const std::int32_t remaining = seq.num_known_remaining();
  if (remaining == 1) {
    const auto room = static_cast<std::int64_t>(seq.max_len) - static_cast<std::int64_t>(seq.tokens.size()) - 1;
    const std::int64_t drafts = std::min<std::int64_t>(
        {static_cast<std::int64_t>(seq.drafts.size()), budget - 1, config_.max_draft_tokens, std::max<std::int64_t>(room, 0)});
    p.known = 1;
    p.drafts = static_cast<std::int32_t>(drafts);
    return p;
  }
  std::int32_t n = std::min(remaining, budget);
  if (config_.max_prefill_chunk > 0) n = std::min(n, config_.max_prefill_chunk);
  p.known = cut_at_snapshot_boundary(seq, seq.num_computed + n) - seq.num_computed;
  return p;
}

bool Scheduler::grow_pages(Sequence& seq, std::int32_t end) {
  const std::int32_t need = layout_.pages_for_tokens(end) - static_cast<std::int32_t>(seq.pages.size());
  return need <= 0 || pages_.allocate(need, seq.pages);
}

Sequence* Scheduler::pick_victim(const Sequence& except) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (*it != &except) return *it;
  }
  return nullptr;
}

bool Scheduler::strip_waiting_pages(const Sequence* except) {
  // Forked n > 1 siblings hold prompt pages while they wait; when nothing running is left to
  // preempt, they give them back and recompute later (newest first).
  for (auto it = waiting_.rbegin(); it != waiting_.rend(); ++it) {
    Sequence& w = **it;
    if (w.pages.empty() || &w == except) continue;
    undo_match(w);
    w.num_cached_tokens = 0;
    return true;
  }
  return false;
}

void Scheduler::ensure_page_hashes(Sequence& seq, std::int32_t num_pages) {
  const auto page = static_cast<std::size_t>(layout_.page_size);
  while (static_cast<std::int32_t>(seq.page_hashes.size()) < num_pages) {
    const std::size_t k = seq.page_hashes.size();
    const std::uint64_t parent = k == 0 ? cache::prefix_root_hash(layout_.spec.model_identity, layout_.page_size,
                                                                  seq.cache_key)
                                        : seq.page_hashes.back();
    seq.page_hashes.push_back(cache::prefix_page_hash(parent, std::span(seq.tokens).subspan(k * page, page)));
  }
}

void Scheduler::match_prefix(Sequence& seq) {
  const std::int32_t max_pages = (static_cast<std::int32_t>(seq.tokens.size()) - 1) / layout_.page_size;
  ensure_page_hashes(seq, max_pages);
  cache::PrefixMatch m = prefix_->match(seq.cache_key, seq.page_hashes, seq.tokens, max_pages);
  seq.pages = std::move(m.pages);
  seq.num_computed = static_cast<std::int32_t>(seq.pages.size()) * layout_.page_size;
  seq.restore_snapshot = m.snapshot;
  seq.registered_pages = static_cast<std::int32_t>(seq.pages.size());
  seq.cache_node = m.last_node;
  seq.registration_stopped = false;
}

void Scheduler::undo_match(Sequence& seq) {
  for (auto it = seq.pages.rbegin(); it != seq.pages.rend(); ++it) pages_.decref(*it);
  seq.pages.clear();
  if (seq.restore_snapshot >= 0) snapshots_.decref(seq.restore_snapshot);
  seq.restore_snapshot = -1;
  seq.num_computed = 0;
  seq.registered_pages = 0;
  seq.cache_node = -1;
  seq.registration_stopped = false;
}

bool Scheduler::try_admit(Sequence& seq, std::int32_t budget, std::vector<Plan>& plans) {
  if (static_cast<std::int32_t>(running_.size()) >= config_.max_num_seqs) return false;
  const bool matched = seq.pages.empty() && prefix_ != nullptr;
  if (matched) match_prefix(seq);
  const std::int32_t hit = matched ? seq.num_computed : 0;
  const Plan p = plan(seq, budget);
  const std::int32_t need =
      layout_.pages_for_tokens(seq.num_computed + p.known) - static_cast<std::int32_t>(seq.pages.size());
  // The watermark keeps room for running sequences to grow; with none running it would only
  // block a large first chunk for ever.
  const std::int32_t reserve = running_.empty() ? 0 : watermark_pages_;
  if (p.known == 0 || pages_.num_available() < need + reserve) {
    if (matched) undo_match(seq);
    return false;
  }
  DI_CHECK(grow_pages(seq, seq.num_computed + p.known), "scheduler: page allocation failed after the check");
  seq.state_slot = state_slots_.allocate();
  DI_CHECK(seq.state_slot >= 0, "scheduler: no free state slot with {} running", running_.size());
  seq.state_valid = false;
  seq.status = SeqStatus::kRunning;
  running_.push_back(&seq);
  if (matched) {
    prefix_->record_query(static_cast<std::int64_t>(seq.tokens.size()), hit);
    if (seq.num_preemptions == 0) seq.num_cached_tokens = hit;
  }
  plans.push_back(p);
  return true;
}

ScheduledBatch Scheduler::schedule() {
  std::int32_t budget = config_.max_num_batched_tokens;
  std::vector<Plan> plans;
  std::vector<SeqId> preempted;
  // Decodes first (oldest first), then unfinished prefills of running sequences.
  std::vector<Sequence*> order = running_;
  std::stable_partition(order.begin(), order.end(), [](const Sequence* s) { return s->num_known_remaining() == 1; });
  for (Sequence* seq : order) {
    if (seq->status != SeqStatus::kRunning) continue;  // preempted earlier in this loop
    Plan p = plan(*seq, budget);
    if (p.known == 0) continue;
    while (!grow_pages(*seq, seq->num_computed + p.known + p.drafts)) {
      Sequence* victim = pick_victim(*seq);
      if (victim == nullptr) {
        if (strip_waiting_pages()) continue;
        break;
      }
      // Strict LIFO: the newest running sequence goes, even if already planned this step.
      const auto planned = std::find_if(plans.begin(), plans.end(), [&](const Plan& q) { return q.seq == victim; });
      if (planned != plans.end()) {
        budget += planned->known + planned->drafts;
        plans.erase(planned);
      }
      preempted.push_back(victim->id);
      preempt(*victim);
    }
    if (layout_.pages_for_tokens(seq->num_computed + p.known + p.drafts) > static_cast<std::int32_t>(seq->pages.size())) {
      preempted.push_back(seq->id);
      preempt(*seq);  // nothing newer left to take pages from
      continue;
    }
    budget -= p.known + p.drafts;
    plans.push_back(p);
  }
  // Admissions in arrival order, stopping at the first that does not fit (no overtaking, so a
  // large request cannot starve). None in a step that had to preempt.
  if (preempted.empty()) {
    while (!waiting_.empty() && budget > 0) {
      Sequence& seq = *waiting_.front();
      if (try_admit(seq, budget, plans)) {
        waiting_.pop_front();
        budget -= plans.back().known + plans.back().drafts;
        continue;
      }
      // Nothing runs and the head does not fit: pages held by queued forked siblings are all
      // that is left to reclaim, or the head would wait for ever.
      if (!running_.empty() || !strip_waiting_pages(&seq)) break;
    }
  }
  ++stats_.steps;
  ScheduledBatch batch = build(plans);
  batch.preempted = std::move(preempted);
  return batch;
}

ScheduledBatch Scheduler::build(std::vector<Plan>& plans) {
  ScheduledBatch batch;
  ForwardBatch& fb = batch.forward;
  for (const Plan& p : plans) {
    Sequence& seq = *p.seq;
    ForwardSeq fs;
    fs.seq_id = seq.id;
    fs.state_slot = seq.state_slot;
    if (seq.state_valid) {
      fs.state_init = StateInit::kContinue;
      fs.rollback_tokens = seq.pending_rollback;
    } else if (seq.restore_snapshot >= 0) {
      fs.state_init = StateInit::kRestore;
      fs.restore_snapshot = seq.restore_snapshot;
    } else {
      fs.state_init = StateInit::kReset;
    }
    fs.start_pos = seq.num_computed;
    fs.num_tokens = p.known + p.drafts;
    fs.token_offset = fb.num_tokens();
    const std::int32_t end = seq.num_computed + fs.num_tokens;
    for (std::int32_t i = 0; i < p.known; ++i) fb.token_ids.push_back(seq.tokens[static_cast<std::size_t>(seq.num_computed + i)]);
    for (std::int32_t i = 0; i < p.drafts; ++i) fb.token_ids.push_back(seq.drafts[static_cast<std::size_t>(i)]);
    for (std::int32_t pos = seq.num_computed; pos < end; ++pos) fb.positions.push_back(pos);
    fs.page_table_offset = static_cast<std::int32_t>(fb.page_table.size());
    fs.num_pages = layout_.pages_for_tokens(end);
    fb.page_table.insert(fb.page_table.end(), seq.pages.begin(), seq.pages.begin() + fs.num_pages);
    const bool samples = seq.num_computed + p.known == static_cast<std::int32_t>(seq.tokens.size());
    fs.logits_offset = fb.num_logit_rows();
    fs.num_logits = samples ? 1 + p.drafts : 0;
    for (std::int32_t i = 0; i < fs.num_logits; ++i) fb.logit_indices.push_back(fs.token_offset + fs.num_tokens - fs.num_logits + i);
    if (wants_snapshot(seq, end, p.drafts > 0)) {
      seq.pending_save = snapshots_.allocate();  // -1 if every slot is in use: no snapshot then
      fs.save_snapshot = seq.pending_save;
    }
    fb.seqs.push_back(fs);
    batch.seqs.push_back({seq.id, fs.start_pos, fs.num_tokens, p.drafts, fs.num_logits, fs.logits_offset});
    // Prefill: prompt tokens, or several known tokens at once (recompute after preemption).
    const bool prefill = p.known > 1 || seq.num_computed < seq.prompt_len;
    (prefill ? batch.num_prefill_tokens : batch.num_decode_tokens) += fs.num_tokens;
  }
  return batch;
}


void Scheduler::register_pages(Sequence& seq) {
  if (!prefix_ || seq.registration_stopped) return;
  const std::int32_t full = seq.num_computed / layout_.page_size;
  ensure_page_hashes(seq, full);
  const auto page = static_cast<std::size_t>(layout_.page_size);
  while (seq.registered_pages < full) {
    const auto k = static_cast<std::size_t>(seq.registered_pages);
    const std::uint64_t parent_hash = k == 0 ? 0 : seq.page_hashes[k - 1];
    const std::int32_t node = prefix_->insert(seq.cache_node, parent_hash, seq.cache_key, seq.page_hashes[k],
                                              std::span(seq.tokens).subspan(k * page, page), seq.pages[k]);
    if (node < 0) {
      seq.registration_stopped = true;
      return;
    }
    seq.cache_node = node;
    ++seq.registered_pages;
  }
}

void Scheduler::fork(Sequence& leader, Sequence& waiter, std::int32_t snapshot) {
  const std::int32_t num_pages = waiter.fork_boundary / layout_.page_size;
  waiter.pages.assign(leader.pages.begin(), leader.pages.begin() + num_pages);
  for (std::int32_t p : waiter.pages) pages_.incref(p);
  waiter.num_computed = waiter.fork_boundary;
  if (snapshot >= 0) {
    snapshots_.incref(snapshot);
    waiter.restore_snapshot = snapshot;
  }
  const auto hashes = std::min<std::size_t>(leader.page_hashes.size(), static_cast<std::size_t>(num_pages));
  waiter.page_hashes.assign(leader.page_hashes.begin(), leader.page_hashes.begin() + static_cast<std::ptrdiff_t>(hashes));
  if (leader.registered_pages == num_pages && !leader.registration_stopped) {
    waiter.registered_pages = num_pages;
    waiter.cache_node = leader.cache_node;
  } else {
    waiter.registration_stopped = true;  // the tree node for its last shared page is unknown
  }
  waiter.num_cached_tokens = waiter.fork_boundary;
  waiter.fork_leader = 0;
  enqueue_waiting(waiter);
  ++stats_.forks;
}

void Scheduler::finish_snapshot(Sequence& seq, std::int32_t end) {
  const std::int32_t snapshot = seq.pending_save;
  seq.pending_save = -1;
  ++stats_.snapshots_taken;
  if (prefix_ && !seq.registration_stopped && seq.registered_pages * layout_.page_size == end) {
    prefix_->attach_snapshot(seq.cache_node, seq.page_hashes[static_cast<std::size_t>(seq.registered_pages - 1)],
                             snapshot);
  }
  if (!seq.fork_waiters.empty() && end == seq.fork_boundary) {
    for (SeqId wid : seq.fork_waiters) {
      const auto it = seqs_.find(wid);
      if (it != seqs_.end()) fork(seq, *it->second, snapshot);
    }
    seq.fork_waiters.clear();
  }
  snapshots_.decref(snapshot);
}

void Scheduler::commit(const ScheduledBatch& batch, std::span<const SeqCommit> commits) {
  DI_CHECK(commits.size() == batch.seqs.size(), "scheduler: {} commits for {} scheduled sequences", commits.size(),
           batch.seqs.size());
  for (std::size_t i = 0; i < commits.size(); ++i) {
    const ScheduledSeq& ss = batch.seqs[i];
    const SeqCommit& c = commits[i];
    DI_CHECK(c.id == ss.id, "scheduler: commit {} is for sequence {}, expected {}", i, c.id, ss.id);
    const auto it = seqs_.find(ss.id);
    if (it == seqs_.end() || it->second->status != SeqStatus::kRunning || it->second->num_computed != ss.start_pos) {
      continue;  // aborted (or preempted and requeued) since schedule()
    }
    Sequence& seq = *it->second;
    DI_CHECK(c.num_accepted_drafts >= 0 && c.num_accepted_drafts <= ss.num_drafts,
             "scheduler: sequence {} accepted {} of {} drafts", seq.id, c.num_accepted_drafts, ss.num_drafts);
    DI_CHECK(ss.num_logits > 0 || c.new_tokens.empty(), "scheduler: sequence {} got tokens from a prefill chunk",
             seq.id);
    DI_CHECK(static_cast<std::int32_t>(c.new_tokens.size()) >= c.num_accepted_drafts + (ss.num_logits > 0 ? 1 : 0) ||
                 c.finish != FinishReason::kNone,
             "scheduler: sequence {} committed {} tokens for {} accepted drafts", seq.id, c.new_tokens.size(),
             c.num_accepted_drafts);
    for (std::int32_t d = 0; d < c.num_accepted_drafts; ++d) {
      DI_CHECK(c.new_tokens[static_cast<std::size_t>(d)] == seq.drafts[static_cast<std::size_t>(d)],
               "scheduler: sequence {} accepted draft {} but committed a different token", seq.id, d);
    }
    const std::int32_t rejected = ss.num_drafts - c.num_accepted_drafts;
    seq.num_computed = ss.start_pos + ss.num_tokens - rejected;
    seq.pending_rollback = rejected;
    seq.state_valid = true;
    if (seq.restore_snapshot >= 0) snapshots_.decref(seq.restore_snapshot);
    seq.restore_snapshot = -1;
    seq.tokens.insert(seq.tokens.end(), c.new_tokens.begin(), c.new_tokens.end());
    seq.drafts.clear();
    // Pages that held only rejected draft tokens go back now.
    while (static_cast<std::int32_t>(seq.pages.size()) > layout_.pages_for_tokens(seq.num_computed)) {
      pages_.decref(seq.pages.back());
      seq.pages.pop_back();
    }
    register_pages(seq);
    if (seq.pending_save >= 0) finish_snapshot(seq, ss.start_pos + ss.num_tokens);
    if (!seq.fork_waiters.empty() && seq.num_computed >= seq.fork_boundary) {
      if (layout_.spec.has_fixed_state()) {
        release_fork_waiters(seq);  // passed the boundary without a snapshot slot: no fork
      } else {
        for (SeqId wid : seq.fork_waiters) {
          const auto w = seqs_.find(wid);
          if (w != seqs_.end()) fork(seq, *w->second, -1);
        }
        seq.fork_waiters.clear();
      }
    }
    if (c.finish != FinishReason::kNone) {
      running_.erase(std::find(running_.begin(), running_.end(), &seq));
      release(seq);
      seqs_.erase(it);
    }
  }
}

void Scheduler::resolve_token(SeqId id, std::int32_t index, std::int32_t token) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Sequence& seq = *it->second;
  DI_CHECK(index >= seq.num_computed && index < static_cast<std::int32_t>(seq.tokens.size()) &&
               seq.tokens[static_cast<std::size_t>(index)] < 0,
           "scheduler: sequence {} has no placeholder at {} ({} tokens, {} computed)", id, index, seq.tokens.size(),
           seq.num_computed);
  seq.tokens[static_cast<std::size_t>(index)] = token;
}

void Scheduler::check_invariants() const {
  std::vector<std::int32_t> page_refs(static_cast<std::size_t>(layout_.num_pages), 0);
  std::vector<std::int32_t> snapshot_refs(static_cast<std::size_t>(layout_.num_snapshot_slots), 0);
  std::vector<std::int32_t> slot_refs(static_cast<std::size_t>(layout_.num_state_slots), 0);
  std::int32_t running = 0;
  for (const auto& [id, owned] : seqs_) {
    const Sequence& s = *owned;
    for (std::int32_t p : s.pages) ++page_refs[static_cast<std::size_t>(p)];
    if (s.restore_snapshot >= 0) ++snapshot_refs[static_cast<std::size_t>(s.restore_snapshot)];
    if (s.pending_save >= 0) ++snapshot_refs[static_cast<std::size_t>(s.pending_save)];
    if (s.state_slot >= 0) ++slot_refs[static_cast<std::size_t>(s.state_slot)];
    DI_CHECK((s.status == SeqStatus::kRunning) == (s.state_slot >= 0),
             "scheduler invariant: sequence {} is {} with state slot {}", id,
             s.status == SeqStatus::kRunning ? "running" : "queued", s.state_slot);
    DI_CHECK(static_cast<std::int32_t>(s.pages.size()) == layout_.pages_for_tokens(s.num_computed),
             "scheduler invariant: sequence {} holds {} pages for {} computed tokens", id, s.pages.size(),
             s.num_computed);
    DI_CHECK(s.num_computed < static_cast<std::int32_t>(s.tokens.size()),
             "scheduler invariant: sequence {} computed {} of {} tokens", id, s.num_computed, s.tokens.size());
    DI_CHECK(std::none_of(s.tokens.begin(), s.tokens.end(), [](std::int32_t t) { return t < 0; }),
             "scheduler invariant: sequence {} holds a placeholder token with no step in flight", id);
    running += s.status == SeqStatus::kRunning ? 1 : 0;
  }
  DI_CHECK(running == num_running(), "scheduler invariant: {} running sequences, {} in the running list", running,
           num_running());
  for (std::int32_t p = 0; p < layout_.num_pages; ++p) {
    DI_CHECK(pages_.refcount(p) == page_refs[static_cast<std::size_t>(p)],
             "scheduler invariant: page {} has refcount {} but sequences hold {}", p, pages_.refcount(p),
             page_refs[static_cast<std::size_t>(p)]);
  }
  for (std::int32_t s = 0; s < layout_.num_snapshot_slots; ++s) {
    DI_CHECK(snapshots_.refcount(s) == snapshot_refs[static_cast<std::size_t>(s)],
             "scheduler invariant: snapshot {} has refcount {} but sequences hold {}", s, snapshots_.refcount(s),
             snapshot_refs[static_cast<std::size_t>(s)]);
  }
  for (std::int32_t s = 0; s < layout_.num_state_slots; ++s) {
    DI_CHECK(state_slots_.refcount(s) == slot_refs[static_cast<std::size_t>(s)],
             "scheduler invariant: state slot {} has refcount {} but sequences hold {}", s, state_slots_.refcount(s),
             slot_refs[static_cast<std::size_t>(s)]);
  }
}

}  // namespace deepinfer::engine
