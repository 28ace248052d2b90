// V4 / V4.1 sequence state (MODEL_SPEC A5, B5) kept so that one op call serves every sequence of a
// batch: the fixed-size parts (sliding-window rings, compressor partial groups) of all sequences
// live in one pool per layer indexed by a state slot, and the growing row stores (compressed KV,
// indexer keys) in paged pools addressed through each sequence's page list. The same arena type
// backs the engine's paged runner (pools sized from its cache layout, pages from its scheduler) and
// the model's own sequences (tests, CLI, benches: pools that grow on demand).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "ops/backend.h"

namespace deepinfer::model::v4 {

// The fixed-size state of every slot for one layer.
struct LayerPool {
  Tensor ring;  // [slots · window, head_dim]: slot s keeps position p's K=V row at s·window + p mod window
  std::optional<ops::CompressorState> compressor;        // layers whose own compressor pools groups of tokens
  std::optional<ops::CompressorState> index_compressor;  // V4 CSA layers (the indexer's compressor)
};

// One named part of a slot's fixed state (the engine's CacheSpec::fixed entries).
struct FixedPart {
  std::string name;
  int layer = 0;
  std::int64_t bytes = 0;
};
// The fixed parts of one slot of `config` with activations of `act`, in slot_tensors() order per layer.
std::vector<FixedPart> fixed_state_parts(const io::ModelConfig& config, DType act);

// Fixed-size state of `num_slots` sequence slots, one pool per layer.
class StatePool {
 public:
  StatePool(const io::ModelConfig& config, DType act, ops::Backend& backend, std::int32_t num_slots);

  std::int32_t num_slots() const { return num_slots_; }
  const std::vector<LayerPool>& layers() const { return layers_; }
  std::vector<LayerPool>& layers() { return layers_; }
  // Device views of one slot's state tensors, in a fixed order (copies between pools).
  std::vector<Tensor> slot_tensors(std::int32_t slot) const;
  // The empty state (position 0): compressor rows kv 0, score -inf (rings need nothing: only rows
  // written earlier are ever read).
  void reset(std::int32_t slot);
  // Copies slot `from` of `src` (a pool of the same model) to slot `to` of this pool.
  void copy_slot(const StatePool& src, std::int32_t from, std::int32_t to);
  // Grows to `num_slots` slots, keeping every slot's contents (tensors move).
  void grow(std::int32_t num_slots);

 private:
  ops::Backend* backend_;
  const io::ModelConfig* config_;
  DType act_;
  std::int32_t num_slots_ = 0;
  std::vector<LayerPool> layers_;
};

// A paged row store of every sequence: page p holds rows [p · page_rows, (p + 1) · page_rows).
struct RowPool {
  Tensor pool;  // [pages · page_rows, width]
  std::int64_t page_rows = 0;
  int ratio = 0;  // tokens per row
};

// Everything the sequences of one batch share: their slots' fixed state and the row stores.
class StateArena {
 public:
  // The model's own sequences: pools that grow by doubling, pages of `page_tokens` tokens.
  static std::shared_ptr<StateArena> growable(const io::ModelConfig& config, DType act, ops::Backend& backend);
  // The engine's: `num_slots` slots and the given store pools (CacheSpec::paged order), pages of
  // `page_tokens` tokens assigned by the engine.
  StateArena(const io::ModelConfig& config, DType act, ops::Backend& backend, std::int32_t num_slots,
             std::int32_t page_tokens, std::vector<RowPool> stores);

  StatePool& fixed() { return fixed_; }
  const StatePool& fixed() const { return fixed_; }
  const std::vector<RowPool>& stores() const { return stores_; }
  // Store of layer `layer`'s compressed KV / index keys (index into stores()), -1 when it owns none.
  int kv_store(int layer) const { return kv_store_[static_cast<std::size_t>(layer)]; }
  int index_store(int layer) const { return index_store_[static_cast<std::size_t>(layer)]; }
  std::int32_t page_tokens() const { return page_tokens_; }
  std::int64_t num_pages() const;
  // Bumped whenever a pool moves (growth): graphs captured over the old pools must be dropped.
  std::uint64_t generation() const { return generation_; }

  // Growable arenas only: a free slot (reset to the empty state), and pages for `tokens` tokens.
  std::int32_t acquire_slot();
  void ensure_pages(std::vector<std::int32_t>& pages, std::int64_t tokens);
  void release(std::int32_t slot, std::vector<std::int32_t>& pages);

 private:
  StateArena(const io::ModelConfig& config, DType act, ops::Backend& backend, std::int32_t num_slots);
  void grow_pages(std::int64_t pages);

  ops::Backend& backend_;
  StatePool fixed_;
  std::vector<RowPool> stores_;
  std::vector<int> kv_store_, index_store_;
  std::int32_t page_tokens_ = 0;
  std::uint64_t generation_ = 0;
  bool growable_ = false;
  std::vector<std::int32_t> free_slots_, free_pages_;
};

struct SequenceState {
  SequenceState() = default;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;
  ~SequenceState();

  std::int64_t num_tokens = 0;  // tokens absorbed so far = position of the next token
  StateArena* arena = nullptr;
  std::int32_t slot = 0;              // fixed state: arena->fixed() slot
  std::vector<std::int32_t> pages;    // row stores: token page i lives on page pages[i] of every store
  // V4.1 Engram: the last (max_ngram_size - 1) token ids before position num_tokens, oldest
  // first (fewer at the start of a sequence). Host memory: hashing runs on the host.
  std::vector<std::int32_t> recent_tokens;
  // Set for the model's own sequences: the slot and pages go back to it on destruction.
  std::shared_ptr<StateArena> owner;
};

// A fresh sequence (position 0) in `arena` (a growable one, kept alive by the state).
std::unique_ptr<SequenceState> new_sequence_state(const std::shared_ptr<StateArena>& arena);

}  // namespace deepinfer::model::v4
