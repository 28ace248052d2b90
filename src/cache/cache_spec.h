// What per-sequence cache state a model needs (CacheSpec, reported by the model) and the geometry
// the engine fixes at start-up (CacheLayout: page size, pool sizes, page -> row addressing).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deepinfer::cache {

// A store of rows that grows with the sequence: one row per `tokens_per_row` tokens. Examples
// (MODEL_SPEC A5): V4 CSA compressed KV (ratio 4, 584 B), CSA indexer keys (ratio 4, 68 B), HCA
// compressed KV (ratio 128, 584 B); V4.1 layer-20 KV (ratio 1, 288 B). Row j of a store covers
// tokens [j * tokens_per_row, (j + 1) * tokens_per_row) of its sequence.
struct PagedStoreSpec {
  std::string name;            // diagnostic name, e.g. "layer.2.compressed_kv"
  std::int32_t layer = -1;     // model layer the store belongs to, -1 if none
  std::int32_t tokens_per_row = 1;
  std::int64_t bytes_per_row = 0;
};

// Per-sequence state whose size does not grow with the sequence: a sliding-window ring
// (window + max speculative tokens rows), a compressor's partial groups, drafter rings.
struct FixedStateSpec {
  std::string name;
  std::int32_t layer = -1;
  std::int64_t bytes = 0;
};

// Reported by the model (ModelRunner::cache_spec). The engine sizes its pools from it and never
// interprets the bytes; only the model reads and writes them.
struct CacheSpec {
  // Identity of the cached values: model id, config and the dtypes of the stored rows. It is
  // hashed into every prefix-cache key, so two models (or quantisations) never share pages.
  std::string model_identity;
  std::vector<PagedStoreSpec> paged;
  std::vector<FixedStateSpec> fixed;
  // How many trailing tokens the model can un-absorb from its fixed state (speculative rollback:
  // the ring holds window + this many rows, compressors keep their pre-draft partial groups).
  std::int32_t max_rollback_tokens = 0;

  // Throws deepinfer::Error naming the store and field at fault.
  void validate() const;
  // Least common multiple of all tokens_per_row: the page size must be a multiple of it so that
  // no compressed row straddles two pages.
  std::int32_t page_size_multiple() const;
  bool has_fixed_state() const { return !fixed.empty(); }
  std::int64_t fixed_state_bytes() const;
};

// Engine-side cache settings (one struct per subsystem, STYLE.md).
struct CacheConfig {
  std::int32_t page_size = 128;         // tokens per page; a multiple of page_size_multiple()
  std::int32_t num_pages = 0;           // 0: derive from memory_bytes
  std::int64_t memory_bytes = 0;        // budget for pages + state slots + snapshots when num_pages == 0
  std::int32_t num_snapshot_slots = -1;  // -1: max_num_seqs when the model has fixed state, else 0
  bool enable_prefix_caching = true;
  // Snapshot the fixed state whenever a decode step completes a page, so a later request that
  // continues this one's output (multi-turn chat) can resume there. Prompt-end snapshots are
  // always taken when prefix caching is on.
  bool snapshot_on_decode = true;
  // Fraction of pages kept free when admitting new sequences, so running ones can grow a while
  // before preemption starts.
  double admission_watermark = 0.01;

  void validate() const;
};

// The geometry fixed at engine start. Page addressing ("one page id = all paged stores of all
// layers", as vLLM's block): page p owns rows [p * rows_per_page(s), (p + 1) * rows_per_page(s))
// of every paged store s. A sequence's page table maps token-page index i (tokens
// [i * page_size, (i + 1) * page_size)) to a page id.
struct CacheLayout {
  CacheSpec spec;
  std::int32_t page_size = 0;
  std::int32_t num_pages = 0;
  std::int32_t num_state_slots = 0;     // live fixed state, one per running sequence
  std::int32_t num_snapshot_slots = 0;  // saved fixed state at page boundaries (prefix cache, n > 1)

  // Resolves sizes from the config; throws deepinfer::Error if the page size does not fit the
  // spec or the memory budget holds no page.
  static CacheLayout make(const CacheSpec& spec, const CacheConfig& config, std::int32_t max_num_seqs);

  std::int32_t rows_per_page(std::size_t store) const {
    return page_size / spec.paged[store].tokens_per_row;
  }
  std::int64_t page_bytes() const;
  std::int64_t total_bytes() const;
  // Pages needed to hold the first `num_tokens` tokens of a sequence.
  std::int32_t pages_for_tokens(std::int64_t num_tokens) const {
    return static_cast<std::int32_t>((num_tokens + page_size - 1) / page_size);
  }
  // Global row index in store `store` of row `row` (the row covering tokens
  // [row * tokens_per_row, ...)) of the sequence with page table `page_table`.
  std::int64_t row_index(std::size_t store, std::span<const std::int32_t> page_table,
                         std::int64_t row) const;
};

}  // namespace deepinfer::cache
