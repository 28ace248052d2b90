// Scheduler without a model: admission, budgets, chunked prefill, decode-first order,
// preemption (LIFO, recompute), abort, FIFO fairness, no starvation, rollback, snapshots, forks.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "engine/fake_model_runner.h"

namespace deepinfer::engine {
namespace {

struct Options {
  std::int32_t num_pages = 32;
  std::int32_t page_size = 8;
  std::int32_t max_num_seqs = 8;
  std::int32_t budget = 32;
  std::int32_t max_model_len = 128;
  bool prefix = false;
  std::int32_t drafts = 0;
};

std::unique_ptr<Scheduler> make_scheduler(const Options& s) {
  SchedulerConfig config;
  config.max_num_seqs = s.max_num_seqs;
  config.max_num_batched_tokens = s.budget;
  config.max_model_len = s.max_model_len;
  config.max_draft_tokens = s.drafts;
  cache::CacheConfig cache;
  cache.page_size = s.page_size;
  cache.num_pages = s.num_pages;
  cache.num_snapshot_slots = 8;
  cache.enable_prefix_caching = s.prefix;
  cache.admission_watermark = 0.0;
  const cache::CacheLayout layout = cache::CacheLayout::make(FakeModelRunner().cache_spec(), cache, s.max_num_seqs);
  return std::make_unique<Scheduler>(config, layout, cache);
}

SequenceInit prompt_of(std::int32_t length, std::int32_t max_len, std::uint64_t arrival, std::int32_t first = 1) {
  SequenceInit init;
  for (std::int32_t i = 0; i < length; ++i) init.tokens.push_back(first + i % 50);
  init.max_len = max_len;
  init.arrival = arrival;
  return init;
}

// One step with a model that always samples token 3 and a sequence finishing at its max_len.
ScheduledBatch step(Scheduler& s) {
  ScheduledBatch batch = s.schedule();
  std::vector<SeqCommit> commits;
  for (const ScheduledSeq& ss : batch.seqs) {
    SeqCommit c;
    c.id = ss.id;
    if (ss.num_logits > 0) {
      const Sequence& seq = *s.find(ss.id);
      c.new_tokens = {3};
      if (static_cast<std::int32_t>(seq.tokens.size()) + 1 >= seq.max_len) c.finish = FinishReason::kLength;
    }
    commits.push_back(c);
  }
  s.commit(batch, commits);
  s.check_invariants();
  return batch;
}

TEST(Scheduler, AdmitsNoMoreThanMaxNumSeqs) {
  Options setup;
  setup.max_num_seqs = 3;
  auto s = make_scheduler(setup);
  for (int i = 0; i < 5; ++i) s->add(prompt_of(4, 20, static_cast<std::uint64_t>(i)));
  const ScheduledBatch b = step(*s);
  EXPECT_EQ(b.seqs.size(), 3u);
  EXPECT_EQ(s->num_running(), 3);
  EXPECT_EQ(s->num_waiting(), 2);
}

TEST(Scheduler, TokenBudgetChunksALongPrompt) {
  Options setup;
  setup.budget = 32;
  auto s = make_scheduler(setup);
  const SeqId id = s->add(prompt_of(100, 120, 0));
  std::vector<std::int32_t> chunks;
  for (int i = 0; i < 4; ++i) {
    const ScheduledBatch b = step(*s);
    ASSERT_EQ(b.seqs.size(), 1u);
    chunks.push_back(b.seqs[0].num_tokens);
    EXPECT_LE(b.forward.num_tokens(), 32);
    EXPECT_EQ(b.seqs[0].num_logits, i == 3 ? 1 : 0);  // logits only once the prompt is done
  }
  EXPECT_EQ(chunks, (std::vector<std::int32_t>{32, 32, 32, 4}));
  EXPECT_EQ(s->find(id)->tokens.size(), 101u);
}

TEST(Scheduler, DecodesGoFirstAndPrefillTakesTheRestOfTheBudget) {
  Options setup;
  setup.budget = 16;
  auto s = make_scheduler(setup);
  const SeqId a = s->add(prompt_of(5, 60, 0));
  step(*s);  // a: prefill done, now decoding
  const SeqId b = s->add(prompt_of(40, 60, 1));
  const SeqId c = s->add(prompt_of(40, 60, 2));
  ScheduledBatch batch = step(*s);
  ASSERT_EQ(batch.seqs.size(), 2u);
  EXPECT_EQ(batch.seqs[0].id, a);
  EXPECT_EQ(batch.seqs[0].num_tokens, 1);
  EXPECT_EQ(batch.seqs[1].id, b);
  EXPECT_EQ(batch.seqs[1].num_tokens, 15);
  EXPECT_EQ(batch.num_decode_tokens, 1);
  EXPECT_EQ(batch.num_prefill_tokens, 15);
  // Next step: a's decode, then b's unfinished prefill before c is admitted.
  batch = step(*s);
  ASSERT_GE(batch.seqs.size(), 2u);
  EXPECT_EQ(batch.seqs[0].id, a);
  EXPECT_EQ(batch.seqs[1].id, b);
  EXPECT_EQ(batch.seqs[1].num_tokens, 15);
  EXPECT_EQ(s->find(c)->status, SeqStatus::kWaiting);
}

TEST(Scheduler, PreemptsTheNewestSequenceAndRecomputesItLater) {
  Options setup;
  setup.num_pages = 8;  // 64 tokens
  setup.max_model_len = 40;
  auto s = make_scheduler(setup);
  const SeqId old_seq = s->add(prompt_of(20, 40, 0));
  const SeqId new_seq = s->add(prompt_of(20, 40, 1));
  step(*s);
  ASSERT_EQ(s->num_running(), 2);
  // Both decode; 6 pages hold 2 x 24 tokens; growth to 25 tokens needs a 4th page each.
  bool preempted = false;
  for (int i = 0; i < 30 && !preempted; ++i) {
    const ScheduledBatch b = step(*s);
    if (!b.preempted.empty()) {
      EXPECT_EQ(b.preempted, std::vector<SeqId>{new_seq});
      preempted = true;
    }
  }
  ASSERT_TRUE(preempted);
  const Sequence* victim = s->find(new_seq);
  EXPECT_EQ(victim->status, SeqStatus::kPreempted);
  EXPECT_EQ(victim->num_computed, 0);
  EXPECT_TRUE(victim->pages.empty());
  EXPECT_EQ(victim->num_preemptions, 1);
  EXPECT_GT(victim->tokens.size(), 20u);  // generated tokens are kept and recomputed
  EXPECT_EQ(s->find(old_seq)->status, SeqStatus::kRunning);
  for (int i = 0; i < 200 && s->has_work(); ++i) step(*s);
  EXPECT_FALSE(s->has_work());
  EXPECT_EQ(s->page_pool().num_in_use(), 0);
}

TEST(Scheduler, AbortFreesPagesAndSlots) {
  Options setup;
  auto s = make_scheduler(setup);
  const SeqId a = s->add(prompt_of(30, 60, 0));
  const SeqId b = s->add(prompt_of(10, 60, 1));
  step(*s);
  EXPECT_GT(s->page_pool().num_in_use(), 0);
  s->abort(a);
  s->abort(b);
  s->abort(12345);
  EXPECT_EQ(s->page_pool().num_in_use(), 0);
  EXPECT_FALSE(s->has_work());
  s->check_invariants();
  EXPECT_TRUE(step(*s).empty());
}

TEST(Scheduler, AdmissionIsFifoSoSmallRequestsCannotOvertakeABigOne) {
  Options setup;
  setup.num_pages = 12;
  setup.budget = 96;
  setup.max_model_len = 96;
  auto s = make_scheduler(setup);
  s->add(prompt_of(60, 70, 0));                    // takes 8 pages
  const SeqId big = s->add(prompt_of(60, 70, 1));  // needs 8 more: must wait
  const SeqId small = s->add(prompt_of(4, 70, 2));
  step(*s);
  EXPECT_EQ(s->find(big)->status, SeqStatus::kWaiting);
  EXPECT_EQ(s->find(small)->status, SeqStatus::kWaiting);  // not admitted ahead of `big`
}

TEST(Scheduler, NoRequestStarvesUnderSustainedArrivals) {
  Options setup;
  setup.num_pages = 24;
  setup.max_num_seqs = 4;
  setup.budget = 24;
  setup.max_model_len = 64;
  auto s = make_scheduler(setup);
  std::map<SeqId, int> arrived, finished;
  std::uint64_t arrival = 0;
  for (int t = 0; t < 600; ++t) {
    if (t < 400 && t % 3 == 0) {  // arrivals faster than the engine can serve them
      const std::int32_t len = t % 2 == 0 ? 30 : 6;
      const SeqId id = s->add(prompt_of(len, len + 20, arrival++, t % 40));
      arrived[id] = t;
    }
    const std::map<SeqId, int> before = arrived;
    step(*s);
    for (const auto& [id, when] : before) {
      if (!finished.count(id) && s->find(id) == nullptr) finished[id] = t;
    }
  }
  for (int t = 0; t < 5000 && s->has_work(); ++t) step(*s);
  EXPECT_FALSE(s->has_work());
  // Everybody finished, and in roughly their arrival order: no request waits for ever while
  // later ones are served.
  int inversions = 0;
  for (const auto& [a, ta] : arrived) {
    for (const auto& [b, tb] : arrived) {
      if (ta < tb && finished.count(a) && finished.count(b) && finished[a] > finished[b] + 40) ++inversions;
    }
  }
  EXPECT_EQ(inversions, 0);
}

TEST(Scheduler, RejectedDraftsAreRolledBackAndTheirPagesFreed) {
  Options setup;
  setup.drafts = 6;
  auto s = make_scheduler(setup);
  const SeqId id = s->add(prompt_of(6, 60, 0));
  step(*s);  // prompt done: 7 tokens, 6 computed
  s->set_drafts(id, {11, 12, 13, 14, 15, 16});
  ScheduledBatch b = s->schedule();
  ASSERT_EQ(b.seqs.size(), 1u);
  EXPECT_EQ(b.seqs[0].num_tokens, 7);  // the last token plus six drafts
  EXPECT_EQ(b.seqs[0].num_logits, 7);
  EXPECT_EQ(b.forward.seqs[0].num_pages, 2);  // positions 6..12 reach the second page
  // One draft accepted, then the target's own token.
  SeqCommit c;
  c.id = id;
  c.new_tokens = {11, 40};
  c.num_accepted_drafts = 1;
  s->commit(b, std::vector<SeqCommit>{c});
  s->check_invariants();
  const Sequence& seq = *s->find(id);
  EXPECT_EQ(seq.num_computed, 8);
  EXPECT_EQ(seq.pending_rollback, 5);
  EXPECT_EQ(seq.pages.size(), 1u);  // the second page held only rejected drafts
  EXPECT_EQ(seq.tokens.back(), 40);
  b = s->schedule();
  EXPECT_EQ(b.forward.seqs[0].state_init, StateInit::kContinue);
  EXPECT_EQ(b.forward.seqs[0].rollback_tokens, 5);
  EXPECT_EQ(b.forward.seqs[0].start_pos, 8);
  SeqCommit next;
  next.id = id;
  next.new_tokens = {41};
  s->commit(b, std::vector<SeqCommit>{next});
  // A commit that accepts a draft but reports a different token is refused.
  s->set_drafts(id, {21, 22});
  b = s->schedule();
  SeqCommit wrong;
  wrong.id = id;
  wrong.new_tokens = {23, 24};
  wrong.num_accepted_drafts = 1;
  EXPECT_THROW(s->commit(b, std::vector<SeqCommit>{wrong}), Error);
}

TEST(Scheduler, PrefillStopsAtTheSnapshotBoundaryWhenCaching) {
  Options setup;
  setup.prefix = true;
  setup.budget = 64;
  auto s = make_scheduler(setup);
  s->add(prompt_of(21, 60, 0));
  ScheduledBatch b = step(*s);
  EXPECT_EQ(b.seqs[0].num_tokens, 16);  // the last full page boundary before the prompt's end
  EXPECT_GE(b.forward.seqs[0].save_snapshot, 0);
  b = step(*s);
  EXPECT_EQ(b.seqs[0].num_tokens, 5);
  EXPECT_EQ(b.forward.seqs[0].save_snapshot, -1);
  EXPECT_EQ(s->prefix_cache()->stats().snapshots_attached, 1);
  // An identical prompt resumes at 16 from the cache.
  s->add(prompt_of(21, 60, 1));
  b = step(*s);
  ASSERT_EQ(b.seqs.size(), 2u);
  EXPECT_EQ(b.forward.seqs[1].state_init, StateInit::kRestore);
  EXPECT_EQ(b.seqs[1].start_pos, 16);
  const cache::PrefixCacheStats& stats = s->prefix_cache()->stats();
  EXPECT_EQ(stats.queries, 2);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.hit_tokens, 16);
  EXPECT_EQ(s->find(b.seqs[1].id)->num_cached_tokens, 16);
}

TEST(Scheduler, ForkedSiblingsShareTheLeadersPromptPages) {
  Options setup;
  auto s = make_scheduler(setup);
  const SequenceInit p = prompt_of(27, 60, 0);
  const SeqId leader = s->add(p);
  SequenceInit sibling = p;
  sibling.fork_from = leader;
  const SeqId s1 = s->add(sibling);
  const SeqId s2 = s->add(sibling);
  ScheduledBatch b = step(*s);
  ASSERT_EQ(b.seqs.size(), 1u);        // siblings wait for the leader
  EXPECT_EQ(b.seqs[0].num_tokens, 24);  // cut at the fork boundary
  EXPECT_EQ(s->stats().forks, 2);
  const Sequence& l = *s->find(leader);
  for (SeqId id : {s1, s2}) {
    const Sequence& w = *s->find(id);
    EXPECT_EQ(w.num_computed, 24);
    EXPECT_EQ(std::vector<std::int32_t>(w.pages.begin(), w.pages.end()),
              std::vector<std::int32_t>(l.pages.begin(), l.pages.begin() + 3));
    EXPECT_GE(w.restore_snapshot, 0);
  }
  EXPECT_EQ(s->page_pool().refcount(l.pages[0]), 3);
  b = step(*s);
  EXPECT_EQ(b.seqs.size(), 3u);
  EXPECT_EQ(b.forward.seqs[1].state_init, StateInit::kRestore);
  EXPECT_EQ(b.seqs[1].num_tokens, 3);
}

TEST(Scheduler, RejectsImpossibleRequestsAndConfigs) {
  Options setup;
  auto s = make_scheduler(setup);
  EXPECT_THROW(s->add(prompt_of(0, 10, 0)), Error);
  EXPECT_THROW(s->add(prompt_of(10, 10, 0)), Error);
  EXPECT_THROW(s->add(prompt_of(5, 500, 0)), Error);
  Options small = setup;
  small.num_pages = 4;  // 32 tokens < max_model_len 128
  EXPECT_THROW(make_scheduler(small), Error);
  Options budget = setup;
  budget.budget = 4;  // fewer tokens than max_num_seqs
  EXPECT_THROW(make_scheduler(budget), Error);
  Options drafts = setup;
  drafts.drafts = 20;  // more than the model can roll back
  EXPECT_THROW(make_scheduler(drafts), Error);
}

}  // namespace
}  // namespace deepinfer::engine
