// The boundary between the engine and a model: the engine hands a ForwardBatch (tokens, positions,
// page tables, state slots, which rows need logits) to a ModelRunner and gets logits back. The
// model owns the cache memory and its layout inside a page; the engine owns which pages and
// slots each sequence uses (docs/ENGINE.md, "Model boundary").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/cache_spec.h"
#include "tensor/tensor.h"

namespace deepinfer::ops {
class Backend;
}

namespace deepinfer::engine {

using SeqId = std::uint64_t;

// How a sequence's fixed state (state_slot) is prepared before this step's tokens.
enum class StateInit : std::uint8_t {
  // The slot holds the state after start_pos + rollback_tokens tokens; the last rollback_tokens
  // of them were rejected speculative tokens that the model must un-absorb first.
  kContinue,
  // No state carries over: the slot is (re)initialised. start_pos is 0, except for models
  // without fixed state (CacheSpec::fixed empty), whose prefix-cache hits start at a page
  // boundary with nothing to restore.
  kReset,
  kRestore,  // copy snapshot slot restore_snapshot (the state at start_pos, a page boundary) in
};

// One sequence of the batch. Its tokens are token_ids[token_offset, token_offset + num_tokens)
// at positions start_pos, start_pos + 1, ...; its page table is
// page_table[page_table_offset, page_table_offset + num_pages) and covers every token up to
// start_pos + num_tokens. Pages holding positions < start_pos may be shared with other
// sequences (prefix cache, n > 1) and are read-only; every page this step writes (positions >=
// start_pos) belongs to this sequence alone.
struct ForwardSeq {
  SeqId seq_id = 0;
  std::int32_t state_slot = -1;
  StateInit state_init = StateInit::kContinue;
  std::int32_t restore_snapshot = -1;  // with kRestore
  std::int32_t rollback_tokens = 0;    // with kContinue
  // >= 0: after absorbing this step's tokens (start_pos + num_tokens is then a page boundary),
  // copy the fixed state into this snapshot slot. Never set on steps that carry draft tokens.
  std::int32_t save_snapshot = -1;
  std::int32_t start_pos = 0;
  std::int32_t num_tokens = 0;
  std::int32_t token_offset = 0;
  std::int32_t page_table_offset = 0;
  std::int32_t num_pages = 0;
  // Logits are wanted for the last num_logits tokens of this step (0: none, a prefill chunk
  // that does not reach the end; 1: the next token; 1 + k: verification of k draft tokens);
  // they are rows [logits_offset, logits_offset + num_logits) of the output.
  std::int32_t logits_offset = 0;
  std::int32_t num_logits = 0;
};

// A step's work, flattened sequence-major so it maps directly onto device buffers.
struct ForwardBatch {
  std::vector<std::int32_t> token_ids;      // [num_tokens]
  std::vector<std::int32_t> positions;      // [num_tokens] absolute positions in each sequence
  std::vector<std::int32_t> page_table;     // per-sequence page tables, concatenated
  std::vector<std::int32_t> logit_indices;  // [num_logit_rows] index into token_ids of each logits row
  std::vector<ForwardSeq> seqs;

  std::int32_t num_tokens() const { return static_cast<std::int32_t>(token_ids.size()); }
  std::int32_t num_logit_rows() const { return static_cast<std::int32_t>(logit_indices.size()); }
  bool empty() const { return seqs.empty(); }
  // Checks the internal consistency of the batch against a layout (offsets, page coverage, slot
  // and page id ranges); throws deepinfer::Error naming the sequence and field. For runners'
  // debug paths and tests.
  void validate(const cache::CacheLayout& layout) const;
};

// A model as the engine sees it. Implementations: the V4 / V4.1 runners (src/model), the fake
// runner for engine tests. One runner serves one engine (one data-parallel rank); nothing in it
// is global.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // The per-sequence state the model keeps; read once, before allocate_cache.
  virtual cache::CacheSpec cache_spec() const = 0;
  virtual std::int32_t vocab_size() const = 0;
  // Allocates num_pages pages (each page holds rows_per_page rows of every paged store),
  // num_state_slots fixed states and num_snapshot_slots snapshots. Called once.
  virtual void allocate_cache(const cache::CacheLayout& layout) = 0;
  // Runs one step: reads and writes the cache through the batch's page tables and slots, and
  // writes f32 logits [batch.num_logit_rows(), vocab_size()] row-major into `logits`.
  virtual void forward(const ForwardBatch& batch, std::span<float> logits) = 0;

  // ---- asynchronous steps (docs/ENGINE.md §8) ------------------------------------------------
  // launch() queues a step and may return before the device has finished it; collect() completes
  // it. The batch stays alive and unchanged in between, and every launch() is followed by one
  // collect() before the next launch(). The defaults run forward() inside collect(), so a host
  // runner needs nothing more.
  virtual void launch(const ForwardBatch& batch) { launched_ = &batch; }
  // Completes the (oldest) launched step. With a non-empty `logits` span it waits and writes the
  // logits there as forward() does; an empty span (only for runners with a device_backend())
  // leaves them in device_logits(), where the ops the engine queued after launch() on that backend
  // read them, and need not wait (the engine waits on its read-back of those ops' results).
  virtual void collect(std::span<float> logits);
  // The backend whose device holds the logits of a launched step, or nullptr (host logits). The
  // engine samples there with Backend::sample_tokens and copies back only token ids.
  virtual ops::Backend* device_backend() { return nullptr; }
  // f32 [num_logit_rows, vocab] of the last launched step, valid from launch() until the next
  // launch() (device_backend() runners only; the default throws).
  virtual const Tensor& device_logits() const;
  // ---- launching ahead (docs/ENGINE.md §10) ------------------------------------------------------
  // Whether launch_ahead() works (device runners whose model reads its token ids on the device).
  virtual bool can_launch_ahead() const { return false; }
  // launch(), but while the previous launched step may still run: a token id v < 0 in
  // batch.token_ids stands for the token sampled for logits row -1 - v of that step, which the
  // runner takes on the device from `sampled` (i32 [rows, width], the token in column 0, written
  // by work queued before this call) before the forward reads it. Up to two steps are then
  // launched; collect() completes the oldest. Default: throws. (A runner that can_launch_ahead()
  // also takes a plain launch() while one step is launched: a step after one without logits rows
  // has no placeholders.)
  virtual void launch_ahead(const ForwardBatch& batch, const Tensor& sampled);
  // Throws deepinfer::Error for a prompt this model cannot take (V4.1: image tokens, no vision
  // tower yet); the engine rejects that request alone.
  virtual void check_prompt(std::span<const std::int32_t> prompt) const { (void)prompt; }

 private:
  const ForwardBatch* launched_ = nullptr;  // the default launch/collect pair
};

}  // namespace deepinfer::engine
