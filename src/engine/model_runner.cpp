// Consistency checks of a ForwardBatch.
#include "engine/model_runner.h"

#include "common/error.h"

namespace deepinfer::engine {

void ModelRunner::collect(std::span<float> logits) {
  DI_CHECK(launched_ != nullptr, "model runner: collect() without launch()");
  const ForwardBatch* batch = launched_;
  launched_ = nullptr;
  forward(*batch, logits);
}

void ModelRunner::launch_ahead(const ForwardBatch&, const Tensor&) {
  throw_error("model runner: this runner cannot launch a step before the previous one's tokens are known");
}

const Tensor& ModelRunner::device_logits() const {
  throw_error("model runner: this runner keeps its logits on the host (no device_logits)");
}

void ForwardBatch::validate(const cache::CacheLayout& layout) const {
  DI_CHECK(positions.size() == token_ids.size(), "forward batch: {} positions for {} tokens", positions.size(),
           token_ids.size());
  std::int32_t next_token = 0, next_page = 0, next_row = 0;
  for (const ForwardSeq& s : seqs) {
    DI_CHECK(s.num_tokens >= 1, "forward batch: seq {} has num_tokens {}", s.seq_id, s.num_tokens);
    DI_CHECK(s.token_offset == next_token, "forward batch: seq {} token_offset {} (expected {})", s.seq_id,
             s.token_offset, next_token);
    DI_CHECK(s.page_table_offset == next_page, "forward batch: seq {} page_table_offset {} (expected {})", s.seq_id,
             s.page_table_offset, next_page);
    DI_CHECK(s.logits_offset == next_row, "forward batch: seq {} logits_offset {} (expected {})", s.seq_id,
             s.logits_offset, next_row);
    DI_CHECK(s.num_logits >= 0 && s.num_logits <= s.num_tokens, "forward batch: seq {} num_logits {} of {} tokens",
             s.seq_id, s.num_logits, s.num_tokens);
    DI_CHECK(s.state_slot >= 0 && s.state_slot < layout.num_state_slots, "forward batch: seq {} state_slot {}",
             s.seq_id, s.state_slot);
    DI_CHECK(s.state_init != StateInit::kReset || s.start_pos == 0 ||
                 (!layout.spec.has_fixed_state() && s.start_pos % layout.page_size == 0),
             "forward batch: seq {} resets its state at start_pos {}", s.seq_id, s.start_pos);
    if (s.state_init == StateInit::kRestore) {
      DI_CHECK(s.restore_snapshot >= 0 && s.restore_snapshot < layout.num_snapshot_slots &&
                   s.start_pos % layout.page_size == 0,
               "forward batch: seq {} restores snapshot {} at start_pos {}", s.seq_id, s.restore_snapshot, s.start_pos);
    }
    if (s.save_snapshot >= 0) {
      DI_CHECK(s.save_snapshot < layout.num_snapshot_slots && (s.start_pos + s.num_tokens) % layout.page_size == 0,
               "forward batch: seq {} saves snapshot {} at position {}", s.seq_id, s.save_snapshot,
               s.start_pos + s.num_tokens);
    }
    DI_CHECK(s.num_pages == layout.pages_for_tokens(s.start_pos + s.num_tokens),
             "forward batch: seq {} has {} pages for {} tokens", s.seq_id, s.num_pages, s.start_pos + s.num_tokens);
    for (std::int32_t i = 0; i < s.num_tokens; ++i) {
      const auto t = static_cast<std::size_t>(s.token_offset + i);
      DI_CHECK(t < token_ids.size() && positions[t] == s.start_pos + i,
               "forward batch: seq {} token {} has a wrong position", s.seq_id, i);
    }
    for (std::int32_t i = 0; i < s.num_pages; ++i) {
      const auto p = static_cast<std::size_t>(s.page_table_offset + i);
      DI_CHECK(p < page_table.size() && page_table[p] >= 0 && page_table[p] < layout.num_pages,
               "forward batch: seq {} page table entry {} is invalid", s.seq_id, i);
    }
    for (std::int32_t i = 0; i < s.num_logits; ++i) {
      const auto r = static_cast<std::size_t>(s.logits_offset + i);
      DI_CHECK(r < logit_indices.size() && logit_indices[r] == s.token_offset + s.num_tokens - s.num_logits + i,
               "forward batch: seq {} logits row {} points at the wrong token", s.seq_id, i);
    }
    next_token += s.num_tokens;
    next_page += s.num_pages;
    next_row += s.num_logits;
  }
  DI_CHECK(next_token == num_tokens() && next_page == static_cast<std::int32_t>(page_table.size()) &&
               next_row == num_logit_rows(),
           "forward batch: sequences cover {} tokens / {} pages / {} rows of {} / {} / {}", next_token, next_page,
           next_row, num_tokens(), page_table.size(), num_logit_rows());
}

}  // namespace deepinfer::engine
