// State pools: the per-layer fixed state of every slot, paged row stores, and the growable arena
// behind the model's own sequences (slots and pages handed out and taken back, pools doubled).
#include "model/deepseek_v4/state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace deepinfer::model::v4 {
namespace {

struct CompressorShape {
  int ratio = 0;
  bool overlap = false;
  std::int64_t d = 0;
  std::int64_t ring_rows() const { return (overlap ? 2 : 1) * std::int64_t{ratio}; }
  std::int64_t width() const { return (overlap ? 2 : 1) * d; }
};

// Which compressors layer `spec` keeps partial groups for (V4 CSA pools overlapping windows and has
// the indexer's own compressor; a V4.1 ratio-1 source emits every token and keeps none).
std::optional<CompressorShape> kv_compressor(const io::ModelConfig& c, const io::LayerSpec& spec) {
  if (!spec.owns_compressor || spec.compress_ratio <= 1) return std::nullopt;
  return CompressorShape{spec.compress_ratio, c.arch == io::ModelArch::kDeepseekV4 && spec.has_indexer, c.head_dim};
}
std::optional<CompressorShape> index_compressor(const io::ModelConfig& c, const io::LayerSpec& spec) {
  if (!spec.owns_index_keys || c.arch != io::ModelArch::kDeepseekV4) return std::nullopt;
  return CompressorShape{spec.compress_ratio, true, c.index_head_dim};
}

ops::CompressorState make_compressor(ops::Backend& be, const CompressorShape& s, std::int32_t slots) {
  const Shape shape{slots * s.ring_rows(), s.width()};
  return ops::CompressorState{be.empty(shape, DType::kF32), be.empty(shape, DType::kF32), s.ratio, s.overlap};
}

// Rows [first, first + count) of `t` (empty tensors for count 0).
Tensor rows(const Tensor& t, std::int64_t first, std::int64_t count) { return t.narrow(0, first, count); }

void copy_rows(ops::Backend& be, const Tensor& src, Tensor& dst, std::int64_t count) {
  if (count == 0) return;
  Tensor to = rows(dst, 0, count);
  be.copy(rows(src, 0, count), to);
}

}  // namespace

std::vector<FixedPart> fixed_state_parts(const io::ModelConfig& c, DType act) {
  std::vector<FixedPart> parts;
  for (const io::LayerSpec& spec : c.layers) {
    parts.push_back({fmt::format("layer.{}.window_ring", spec.index), spec.index,
                     static_cast<std::int64_t>(dtype_bytes(act, std::int64_t{c.sliding_window} * c.head_dim))});
    if (const auto s = kv_compressor(c, spec))
      parts.push_back({fmt::format("layer.{}.compressor_partial", spec.index), spec.index,
                       2 * s->ring_rows() * s->width() * 4});
    if (const auto s = index_compressor(c, spec))
      parts.push_back({fmt::format("layer.{}.indexer_compressor_partial", spec.index), spec.index,
                       2 * s->ring_rows() * s->width() * 4});
  }
  return parts;
}

StatePool::StatePool(const io::ModelConfig& config, DType act, ops::Backend& backend, std::int32_t num_slots)
    : backend_(&backend), config_(&config), act_(act), num_slots_(num_slots) {
  DI_CHECK(num_slots >= 0, "state pool: {} slots", num_slots);
  for (const io::LayerSpec& spec : config.layers) {
    LayerPool lp;
    lp.ring = backend.empty(Shape{std::int64_t{num_slots} * config.sliding_window, config.head_dim}, act);
    if (const auto s = kv_compressor(config, spec)) lp.compressor = make_compressor(backend, *s, num_slots);
    if (const auto s = index_compressor(config, spec)) lp.index_compressor = make_compressor(backend, *s, num_slots);
    layers_.push_back(std::move(lp));
  }
  for (std::int32_t s = 0; s < num_slots; ++s) reset(s);
}

std::vector<Tensor> StatePool::slot_tensors(std::int32_t slot) const {
  DI_CHECK(slot >= 0 && slot < num_slots_, "state pool: slot {} of {}", slot, num_slots_);
  std::vector<Tensor> out;
  const std::int64_t window = config_->sliding_window;
  for (const LayerPool& lp : layers_) {
    out.push_back(rows(lp.ring, slot * window, window));
    for (const auto* c : {&lp.compressor, &lp.index_compressor}) {
      if (!c->has_value()) continue;
      const std::int64_t n = (*c)->ring_rows();
      out.push_back(rows((*c)->kv, slot * n, n));
      out.push_back(rows((*c)->score, slot * n, n));
    }
  }
  return out;
}

void StatePool::reset(std::int32_t slot) {
  DI_CHECK(slot >= 0 && slot < num_slots_, "state pool: slot {} of {}", slot, num_slots_);
  for (LayerPool& lp : layers_)
    for (auto* c : {&lp.compressor, &lp.index_compressor}) {
      if (!c->has_value()) continue;
      const std::int64_t n = (*c)->ring_rows();
      Tensor kv = rows((*c)->kv, slot * n, n), score = rows((*c)->score, slot * n, n);
      backend_->fill(kv, 0.0f);
      backend_->fill(score, -INFINITY);
    }
}

void StatePool::copy_slot(const StatePool& src, std::int32_t from, std::int32_t to) {
  const std::vector<Tensor> a = src.slot_tensors(from);
  std::vector<Tensor> b = slot_tensors(to);
  DI_CHECK(a.size() == b.size(), "state pool: copying between pools of different models");
  for (std::size_t i = 0; i < a.size(); ++i) backend_->copy(a[i], b[i]);
}

void StatePool::grow(std::int32_t num_slots) {
  if (num_slots <= num_slots_) return;
  StatePool bigger(*config_, act_, *backend_, num_slots);
  const std::int64_t window = config_->sliding_window;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    LayerPool& from = layers_[l];
    LayerPool& to = bigger.layers_[l];
    copy_rows(*backend_, from.ring, to.ring, num_slots_ * window);
    if (from.compressor) {
      copy_rows(*backend_, from.compressor->kv, to.compressor->kv, num_slots_ * from.compressor->ring_rows());
      copy_rows(*backend_, from.compressor->score, to.compressor->score, num_slots_ * from.compressor->ring_rows());
    }
    if (from.index_compressor) {
      const std::int64_t n = num_slots_ * from.index_compressor->ring_rows();
      copy_rows(*backend_, from.index_compressor->kv, to.index_compressor->kv, n);
      copy_rows(*backend_, from.index_compressor->score, to.index_compressor->score, n);
    }
  }
  layers_ = std::move(bigger.layers_);
  num_slots_ = num_slots;
}

namespace {

// The paged stores of `config` in CacheSpec::paged order (per layer: compressed KV, index keys).
struct StoreShape {
  int ratio = 0;
  std::int64_t width = 0;
};
std::vector<StoreShape> store_shapes(const io::ModelConfig& c) {
  std::vector<StoreShape> out;
  for (const io::LayerSpec& spec : c.layers) {
    if (spec.owns_compressor) out.push_back({spec.compress_ratio, c.head_dim});
    if (spec.owns_index_keys) out.push_back({spec.compress_ratio, c.index_head_dim});
  }
  return out;
}

// Tokens per page of a growable arena: a multiple of every ratio, at least 256.
std::int32_t local_page_tokens(const io::ModelConfig& c) {
  std::int32_t lcm = 1;
  for (const StoreShape& s : store_shapes(c)) lcm = std::lcm(lcm, s.ratio);
  return lcm * ((256 + lcm - 1) / lcm);
}

constexpr std::int32_t kInitialSlots = 4;
constexpr std::int64_t kInitialPages = 8;

}  // namespace

StateArena::StateArena(const io::ModelConfig& config, DType act, ops::Backend& backend, std::int32_t num_slots)
    : backend_(backend), fixed_(config, act, backend, num_slots) {
  int next = 0;
  for (const io::LayerSpec& spec : config.layers) {
    kv_store_.push_back(spec.owns_compressor ? next++ : -1);
    index_store_.push_back(spec.owns_index_keys ? next++ : -1);
  }
}

StateArena::StateArena(const io::ModelConfig& config, DType act, ops::Backend& backend, std::int32_t num_slots,
                       std::int32_t page_tokens, std::vector<RowPool> stores)
    : StateArena(config, act, backend, num_slots) {
  const std::vector<StoreShape> shapes = store_shapes(config);
  DI_CHECK(stores.size() == shapes.size(), "state arena: {} store pools for {} stores", stores.size(), shapes.size());
  for (std::size_t i = 0; i < shapes.size(); ++i)
    DI_CHECK(stores[i].ratio == shapes[i].ratio && stores[i].pool.ndim() == 2 &&
                 stores[i].pool.dim(1) == shapes[i].width && stores[i].page_rows * shapes[i].ratio == page_tokens,
             "state arena: store {} ({} rows per page, pool {}) does not fit ratio {}, width {}, {} tokens per page", i,
             stores[i].page_rows, stores[i].pool.shape(), shapes[i].ratio, shapes[i].width, page_tokens);
  stores_ = std::move(stores);
  page_tokens_ = page_tokens;
}

std::shared_ptr<StateArena> StateArena::growable(const io::ModelConfig& config, DType act, ops::Backend& backend) {
  std::shared_ptr<StateArena> a(new StateArena(config, act, backend, kInitialSlots));
  a->growable_ = true;
  a->page_tokens_ = local_page_tokens(config);
  for (const StoreShape& s : store_shapes(config)) {
    const std::int64_t page_rows = a->page_tokens_ / s.ratio;
    a->stores_.push_back({backend.empty(Shape{kInitialPages * page_rows, s.width}, act), page_rows, s.ratio});
  }
  for (std::int32_t s = kInitialSlots - 1; s >= 0; --s) a->free_slots_.push_back(s);
  for (auto p = static_cast<std::int32_t>(kInitialPages) - 1; p >= 0; --p) a->free_pages_.push_back(p);
  return a;
}

std::int64_t StateArena::num_pages() const {
  if (stores_.empty()) return 0;
  return stores_.front().pool.dim(0) / stores_.front().page_rows;
}

std::int32_t StateArena::acquire_slot() {
  DI_CHECK(growable_, "state arena: slots of the engine's arena are assigned by the engine");
  if (free_slots_.empty()) {
    const std::int32_t old = fixed_.num_slots();
    fixed_.grow(2 * old);
    for (std::int32_t s = 2 * old - 1; s >= old; --s) free_slots_.push_back(s);
    ++generation_;
  }
  const std::int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  fixed_.reset(slot);
  return slot;
}

void StateArena::grow_pages(std::int64_t pages) {
  const std::int64_t old = num_pages();
  for (RowPool& s : stores_) {
    Tensor bigger = backend_.empty(Shape{pages * s.page_rows, s.pool.dim(1)}, s.pool.dtype());
    copy_rows(backend_, s.pool, bigger, old * s.page_rows);
    s.pool = std::move(bigger);
  }
  for (auto p = static_cast<std::int32_t>(pages) - 1; p >= old; --p) free_pages_.push_back(p);
  ++generation_;
}

void StateArena::ensure_pages(std::vector<std::int32_t>& pages, std::int64_t tokens) {
  const std::int64_t needed = stores_.empty() ? 0 : (tokens + page_tokens_ - 1) / page_tokens_;
  if (static_cast<std::int64_t>(pages.size()) >= needed) return;
  DI_CHECK(growable_, "state arena: a sequence of the engine's arena needs {} pages for {} tokens, it has {}", needed,
           tokens, pages.size());
  const auto missing = needed - static_cast<std::int64_t>(pages.size());
  if (static_cast<std::int64_t>(free_pages_.size()) < missing) {
    const std::int64_t old = num_pages();
    grow_pages(std::max(2 * old, old + missing - static_cast<std::int64_t>(free_pages_.size())));
  }
  for (std::int64_t i = 0; i < missing; ++i) {
    pages.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
}

void StateArena::release(std::int32_t slot, std::vector<std::int32_t>& pages) {
  free_slots_.push_back(slot);
  free_pages_.insert(free_pages_.end(), pages.rbegin(), pages.rend());
  pages.clear();
}

SequenceState::~SequenceState() {
  if (owner) owner->release(slot, pages);
}

std::unique_ptr<SequenceState> new_sequence_state(const std::shared_ptr<StateArena>& arena) {
  auto s = std::make_unique<SequenceState>();
  s->slot = arena->acquire_slot();
  s->arena = arena.get();
  s->owner = arena;
  return s;
}

}  // namespace deepinfer::model::v4
