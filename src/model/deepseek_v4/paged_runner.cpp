// The V4 / V4.1 ModelRunner: paged row stores over the engine's page pools, state slots and snapshots
// for the fixed per-sequence state, and the factory that opens a checkpoint for the engine.
#include "model/deepseek_v4/paged_runner.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/hash.h"
#include "common/error.h"
#include "io/model_config.h"
#include "ops/cuda/cuda_backend.h"

namespace deepinfer::model::v4 {

// One sequence's rows of one paged store: the pool with this step's page table.
class PagedRowStore final : public RowStore {
 public:
  PagedRowStore(const Tensor& pool, std::int64_t page_rows, std::string name)
      : pool_(pool), page_rows_(page_rows), name_(std::move(name)) {}

  void bind(const Tensor& page_table, std::int64_t num_pages) {
    page_table_ = page_table;
    num_pages_ = num_pages;
  }
  void reserve(std::int64_t rows) override {
    DI_CHECK(rows <= num_pages_ * page_rows_,
             "paged runner: store {} needs {} rows but the sequence's {} pages hold {}", name_, rows, num_pages_,
             num_pages_ * page_rows_);
  }
  ops::RowView view() const override { return ops::RowView{pool_, page_table_, page_rows_, num_pages_ * page_rows_}; }

 private:
  Tensor pool_;
  std::int64_t page_rows_;
  std::string name_;
  Tensor page_table_;
  std::int64_t num_pages_ = 0;
};

namespace {

std::int64_t tensor_bytes(const Tensor& t) {
  return static_cast<std::int64_t>(dtype_bytes(t.dtype(), t.numel()));
}

std::uint64_t text_hash(const std::string& text) {
  std::uint64_t h = 0x6A09E667F3BCC908ull;
  for (unsigned char ch : text) h = cache::mix64(h ^ ch);
  return h;
}

}  // namespace

PagedModelRunner::PagedModelRunner(SequenceModel& model) : model_(model), fresh_(model.new_sequence()) {
  int next = 0;
  for (const io::LayerSpec& spec : model_.config().layers) {
    LayerStores ls;
    if (spec.owns_compressor) ls.kv = next++;
    if (spec.owns_index_keys) ls.index = next++;
    stores_.push_back(ls);
  }
}

PagedModelRunner::~PagedModelRunner() = default;

cache::CacheSpec PagedModelRunner::cache_spec() const {
  const io::ModelConfig& c = model_.config();
  const DType act = model_.numerics().act;
  cache::CacheSpec spec;
  spec.model_identity = fmt::format("{}/{}/{}/{:016x}", io::model_arch_name(c.arch), numeric_mode_name(model_.numerics().mode),
                                    dtype_name(act), text_hash(io::model_config_to_json(c)));
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    const io::LayerSpec& l = c.layers[i];
    const int layer = static_cast<int>(i);
    if (stores_[i].kv >= 0)
      spec.paged.push_back({fmt::format("layer.{}.compressed_kv", layer), layer, l.compress_ratio,
                            static_cast<std::int64_t>(dtype_bytes(act, c.head_dim))});
    if (stores_[i].index >= 0)
      spec.paged.push_back({fmt::format("layer.{}.indexer_keys", layer), layer, l.compress_ratio,
                            static_cast<std::int64_t>(dtype_bytes(act, c.index_head_dim))});
    const LayerState& ls = fresh_->layers[i];
    spec.fixed.push_back({fmt::format("layer.{}.window_ring", layer), layer, tensor_bytes(ls.ring)});
    if (ls.compressor)
      spec.fixed.push_back({fmt::format("layer.{}.compressor_partial", layer), layer,
                            tensor_bytes(ls.compressor->kv) + tensor_bytes(ls.compressor->score)});
    if (ls.index_compressor)
      spec.fixed.push_back({fmt::format("layer.{}.indexer_compressor_partial", layer), layer,
                            tensor_bytes(ls.index_compressor->kv) + tensor_bytes(ls.index_compressor->score)});
  }
  spec.max_rollback_tokens = 0;  // the ring holds exactly the window: no speculative rollback yet
  return spec;
}

void PagedModelRunner::check_prompt(std::span<const std::int32_t> prompt) const {
  const std::int64_t image = model_.config().vision.image_token_id;
  if (image < 0) return;
  const auto it = std::find(prompt.begin(), prompt.end(), image);
  DI_CHECK(it == prompt.end(), "image input is not supported yet (prompt token {} at index {} is the image token)",
           image, it - prompt.begin());
}

std::int32_t PagedModelRunner::vocab_size() const { return static_cast<std::int32_t>(model_.config().vocab_size); }

void PagedModelRunner::allocate_cache(const cache::CacheLayout& layout) {
  DI_CHECK(!allocated_, "paged runner: allocate_cache called twice");
  const cache::CacheSpec spec = cache_spec();
  DI_CHECK(layout.spec.paged.size() == spec.paged.size() && layout.spec.model_identity == spec.model_identity,
           "paged runner: the layout was made for another cache spec ({})", layout.spec.model_identity);
  layout_ = layout;
  ops::Backend& be = model_.backend();
  const io::ModelConfig& c = model_.config();
  const DType act = model_.numerics().act;
  for (std::size_t s = 0; s < spec.paged.size(); ++s) {
    const std::int64_t width = spec.paged[s].name.ends_with("indexer_keys") ? c.index_head_dim : c.head_dim;
    pools_.push_back(be.empty(Shape{std::int64_t{layout.num_pages} * layout.rows_per_page(s), width}, act));
  }
  for (std::int32_t i = 0; i < layout.num_state_slots; ++i) {
    auto state = model_.new_sequence();
    for (std::size_t l = 0; l < stores_.size(); ++l) {
      const std::string layer = std::to_string(l);
      if (stores_[l].kv >= 0) {
        const auto s = static_cast<std::size_t>(stores_[l].kv);
        state->layers[l].kv_rows =
            std::make_unique<PagedRowStore>(pools_[s], layout.rows_per_page(s), spec.paged[s].name);
      }
      if (stores_[l].index >= 0) {
        const auto s = static_cast<std::size_t>(stores_[l].index);
        state->layers[l].index_rows =
            std::make_unique<PagedRowStore>(pools_[s], layout.rows_per_page(s), spec.paged[s].name);
      }
    }
    slots_.push_back(std::move(state));
  }
  for (std::int32_t i = 0; i < layout.num_snapshot_slots; ++i) {
    auto snap = model_.new_sequence();
    for (LayerState& ls : snap->layers) {
      ls.kv_rows.reset();
      ls.index_rows.reset();
    }
    snapshots_.push_back(std::move(snap));
  }
  snapshot_pos_.assign(static_cast<std::size_t>(layout.num_snapshot_slots), -1);
  allocated_ = true;
}

std::vector<Tensor*> PagedModelRunner::fixed_tensors(SequenceState& state) {
  std::vector<Tensor*> out;
  for (LayerState& ls : state.layers) {
    out.push_back(&ls.ring);
    if (ls.compressor) {
      out.push_back(&ls.compressor->kv);
      out.push_back(&ls.compressor->score);
    }
    if (ls.index_compressor) {
      out.push_back(&ls.index_compressor->kv);
      out.push_back(&ls.index_compressor->score);
    }
  }
  return out;
}

void PagedModelRunner::copy_fixed(SequenceState& src, SequenceState& dst) {
  const std::vector<Tensor*> from = fixed_tensors(src), to = fixed_tensors(dst);
  for (std::size_t i = 0; i < from.size(); ++i) model_.backend().copy(*from[i], *to[i]);
  dst.num_tokens = src.num_tokens;
  dst.recent_tokens = src.recent_tokens;
}

SequenceState& PagedModelRunner::prepare(const engine::ForwardBatch& batch, const engine::ForwardSeq& s) {
  SequenceState& state = *slots_.at(static_cast<std::size_t>(s.state_slot));
  switch (s.state_init) {
    case engine::StateInit::kReset:
      DI_CHECK(s.start_pos == 0, "paged runner: seq {} resets its state at position {} (the model has fixed state)",
               s.seq_id, s.start_pos);
      copy_fixed(*fresh_, state);
      break;
    case engine::StateInit::kRestore: {
      const auto snap = static_cast<std::size_t>(s.restore_snapshot);
      DI_CHECK(snap < snapshots_.size() && snapshot_pos_[snap] == s.start_pos,
               "paged runner: seq {} restores snapshot {} (taken at {}) to resume at {}", s.seq_id,
               s.restore_snapshot, snap < snapshots_.size() ? snapshot_pos_[snap] : -1, s.start_pos);
      copy_fixed(*snapshots_[snap], state);
      break;
    }
    case engine::StateInit::kContinue:
      DI_CHECK(s.rollback_tokens == 0,
               "paged runner: seq {} asks to roll back {} tokens; the V4 runner does not support speculative "
               "rollback yet (max_rollback_tokens = 0)",
               s.seq_id, s.rollback_tokens);
      DI_CHECK(state.num_tokens == s.start_pos, "paged runner: seq {} slot {} holds {} tokens, the step starts at {}",
               s.seq_id, s.state_slot, state.num_tokens, s.start_pos);
      break;
  }
  state.num_tokens = s.start_pos;
  // One device copy of the page table, shared by every store of the sequence.
  std::vector<std::int32_t> pages(batch.page_table.begin() + s.page_table_offset,
                                  batch.page_table.begin() + s.page_table_offset + s.num_pages);
  Tensor table;
  if (!pages.empty()) {
    const Tensor host = Tensor::view_of(pages.data(), Shape{s.num_pages}, DType::kI32, nullptr);
    table = model_.backend().empty(Shape{s.num_pages}, DType::kI32);
    model_.backend().copy(host, table);
  }
  for (LayerState& ls : state.layers) {
    if (ls.kv_rows) static_cast<PagedRowStore&>(*ls.kv_rows).bind(table, s.num_pages);
    if (ls.index_rows) static_cast<PagedRowStore&>(*ls.index_rows).bind(table, s.num_pages);
  }
  return state;
}

void PagedModelRunner::forward(const engine::ForwardBatch& batch, std::span<float> logits) {
  DI_CHECK(allocated_, "paged runner: forward before allocate_cache");
  const std::int64_t vocab = model_.config().vocab_size;
  DI_CHECK(logits.size() == static_cast<std::size_t>(batch.num_logit_rows()) * static_cast<std::size_t>(vocab),
           "paged runner: logits buffer of {} floats for {} rows of {}", logits.size(), batch.num_logit_rows(), vocab);
  std::vector<Model::Chunk> chunks;
  std::int32_t rows = 0;
  for (const engine::ForwardSeq& s : batch.seqs) {
    SequenceState& state = prepare(batch, s);
    const std::span<const std::int32_t> tokens(batch.token_ids.data() + s.token_offset,
                                               static_cast<std::size_t>(s.num_tokens));
    chunks.push_back({&state, tokens, s.num_logits});
    rows += s.num_logits;
  }
  ops::Backend& be = model_.backend();
  Tensor out = be.empty(Shape{rows, vocab}, DType::kF32);
  model_.forward(chunks, out);
  std::int64_t row = 0;
  for (const engine::ForwardSeq& s : batch.seqs) {
    if (s.num_logits > 0) {
      Tensor dst = Tensor::view_of(logits.data() + static_cast<std::size_t>(s.logits_offset) * vocab,
                                   Shape{s.num_logits, vocab}, DType::kF32, nullptr);
      be.copy(out.narrow(0, row, s.num_logits), dst);
      row += s.num_logits;
    }
    if (s.save_snapshot >= 0) {
      const auto snap = static_cast<std::size_t>(s.save_snapshot);
      DI_CHECK(snap < snapshots_.size(), "paged runner: seq {} saves to snapshot slot {} of {}", s.seq_id,
               s.save_snapshot, snapshots_.size());
      copy_fixed(*slots_[static_cast<std::size_t>(s.state_slot)], *snapshots_[snap]);
      snapshot_pos_[snap] = s.start_pos + s.num_tokens;
    }
  }
  be.synchronize();
}

namespace {

// Keeps the backend and the checkpoint alive for as long as the runner.
class OwningRunner final : public engine::ModelRunner {
 public:
  OwningRunner(std::unique_ptr<ops::Backend> backend, const std::filesystem::path& dir,
               std::optional<NumericMode> mode)
      : backend_(std::move(backend)), loaded_(open_model(dir, mode, *backend_)), runner_(*loaded_.model) {}
  cache::CacheSpec cache_spec() const override { return runner_.cache_spec(); }
  std::int32_t vocab_size() const override { return runner_.vocab_size(); }
  void allocate_cache(const cache::CacheLayout& layout) override { runner_.allocate_cache(layout); }
  void forward(const engine::ForwardBatch& batch, std::span<float> logits) override { runner_.forward(batch, logits); }
  void check_prompt(std::span<const std::int32_t> prompt) const override { runner_.check_prompt(prompt); }
  const SequenceModel& model() const { return *loaded_.model; }

 private:
  std::unique_ptr<ops::Backend> backend_;
  LoadedModel loaded_;
  PagedModelRunner runner_;
};

std::unique_ptr<ops::Backend> make_backend(const std::string& device) {
  if (device == "cpu") return ops::make_cpu_backend();
  if (device == "cuda") return ops::make_cuda_backend(0);
  if (device.starts_with("cuda:")) {
    const std::string index = device.substr(5);
    DI_CHECK(!index.empty() && index.find_first_not_of("0123456789") == std::string::npos && index.size() < 4,
             "device '{}': expected cpu, cuda or cuda:N", device);
    return ops::make_cuda_backend(std::stoi(index));
  }
  throw_error("device '{}': expected cpu, cuda or cuda:N", device);
}

}  // namespace

OpenedRunner open_paged_runner(const std::filesystem::path& directory, std::optional<NumericMode> mode,
                               const std::string& device) {
  auto runner = std::make_unique<OwningRunner>(make_backend(device), directory, mode);
  OpenedRunner opened;
  opened.config = &runner->model().config();
  opened.mode = runner->model().numerics().mode;
  opened.runner = std::move(runner);
  return opened;
}

}  // namespace deepinfer::model::v4
