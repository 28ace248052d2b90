// The V4 / V4.1 ModelRunner: paged row stores over the engine's page pools, state slots and snapshots
// for the fixed per-sequence state, and the factory that opens a checkpoint for the engine.
#include "model/deepseek_v4/paged_runner.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/hash.h"
#include "common/error.h"
#include "io/model_config.h"

namespace deepinfer::model::v4 {

namespace {

std::uint64_t text_hash(const std::string& text) {
  std::uint64_t h = 0x6A09E667F3BCC908ull;
  for (unsigned char ch : text) h = cache::mix64(h ^ ch);
  return h;
}

}  // namespace

PagedModelRunner::PagedModelRunner(SequenceModel& model) : model_(model) {}

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
    if (l.owns_compressor)
      spec.paged.push_back({fmt::format("layer.{}.compressed_kv", layer), layer, l.compress_ratio,
                            static_cast<std::int64_t>(dtype_bytes(act, c.head_dim))});
    if (l.owns_index_keys)
      spec.paged.push_back({fmt::format("layer.{}.indexer_keys", layer), layer, l.compress_ratio,
                            static_cast<std::int64_t>(dtype_bytes(act, c.index_head_dim))});
  }
  for (const FixedPart& part : fixed_state_parts(c, act)) spec.fixed.push_back({part.name, part.layer, part.bytes});
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
  std::vector<RowPool> pools;
  for (std::size_t s = 0; s < spec.paged.size(); ++s) {
    const std::int64_t width = spec.paged[s].name.ends_with("indexer_keys") ? c.index_head_dim : c.head_dim;
    const std::int64_t page_rows = layout.rows_per_page(s);
    pools.push_back({be.empty(Shape{std::int64_t{layout.num_pages} * page_rows, width}, act), page_rows,
                     spec.paged[s].tokens_per_row});
  }
  arena_ = std::make_unique<StateArena>(c, act, be, layout.num_state_slots, layout.page_size, std::move(pools));
  for (std::int32_t i = 0; i < layout.num_state_slots; ++i) {
    auto state = std::make_unique<SequenceState>();
    state->arena = arena_.get();
    state->slot = i;
    slots_.push_back(std::move(state));
  }
  snapshots_ = std::make_unique<StatePool>(c, act, be, layout.num_snapshot_slots);
  snapshot_pos_.assign(static_cast<std::size_t>(layout.num_snapshot_slots), -1);
  snapshot_recent_.assign(static_cast<std::size_t>(layout.num_snapshot_slots), {});
  allocated_ = true;
}

SequenceState& PagedModelRunner::prepare(const engine::ForwardBatch& batch, const engine::ForwardSeq& s) {
  DI_CHECK(s.state_slot >= 0 && static_cast<std::size_t>(s.state_slot) < slots_.size(),
           "paged runner: seq {} uses state slot {} of {}", s.seq_id, s.state_slot, slots_.size());
  SequenceState& state = *slots_[static_cast<std::size_t>(s.state_slot)];
  switch (s.state_init) {
    case engine::StateInit::kReset:
      DI_CHECK(s.start_pos == 0, "paged runner: seq {} resets its state at position {} (the model has fixed state)",
               s.seq_id, s.start_pos);
      arena_->fixed().reset(s.state_slot);
      state.recent_tokens.clear();
      break;
    case engine::StateInit::kRestore: {
      const auto snap = static_cast<std::size_t>(s.restore_snapshot);
      DI_CHECK(snap < snapshot_pos_.size() && snapshot_pos_[snap] == s.start_pos,
               "paged runner: seq {} restores snapshot {} (taken at {}) to resume at {}", s.seq_id,
               s.restore_snapshot, snap < snapshot_pos_.size() ? snapshot_pos_[snap] : -1, s.start_pos);
      arena_->fixed().copy_slot(*snapshots_, s.restore_snapshot, s.state_slot);
      state.recent_tokens = snapshot_recent_[snap];
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
  state.pages.assign(batch.page_table.begin() + s.page_table_offset,
                     batch.page_table.begin() + s.page_table_offset + s.num_pages);
  return state;
}

void PagedModelRunner::forward(const engine::ForwardBatch& batch, std::span<float> logits) {
  launch(batch);
  collect(logits);
}

ops::Backend* PagedModelRunner::device_backend() {
  return model_.backend().device().is_cpu() ? nullptr : &model_.backend();
}

bool PagedModelRunner::can_launch_ahead() const {
  return !model_.backend().device().is_cpu() && dynamic_cast<const Model*>(&model_) != nullptr;
}

void PagedModelRunner::launch_ahead(const engine::ForwardBatch& batch, const Tensor& sampled) {
  auto* model = dynamic_cast<Model*>(&model_);
  DI_CHECK(model != nullptr && launched_.size() == 1,
           "paged runner: launch_ahead needs the V4 model and one launched step ({} launched)", launched_.size());
  model->set_sampled_ids(&sampled);
  try {
    launch(batch);
  } catch (...) {
    model->set_sampled_ids(nullptr);
    throw;
  }
  model->set_sampled_ids(nullptr);
}

void PagedModelRunner::launch(const engine::ForwardBatch& batch) {
  DI_CHECK(allocated_, "paged runner: forward before allocate_cache");
  DI_CHECK(launched_.size() < 2, "paged runner: a third step launched before the first was collected");
  const std::int64_t vocab = model_.config().vocab_size;
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
  // One logits buffer for every step, grown when a step needs more rows: a fresh allocation per
  // step would put cudaMalloc / cudaFree (which may synchronise) into the gap between GPU steps.
  // Step N's logits are consumed (sampled or copied out) before step N+1 is launched.
  if (logits_buffer_rows() < rows || logits_buffer_.ndim() != 2) logits_buffer_ = be.empty(Shape{rows, vocab}, DType::kF32);
  logits_ = logits_buffer_.narrow(0, 0, rows);
  model_.forward(chunks, logits_);
  for (const engine::ForwardSeq& s : batch.seqs) {
    if (s.save_snapshot >= 0) {
      const auto snap = static_cast<std::size_t>(s.save_snapshot);
      DI_CHECK(snap < snapshot_pos_.size(), "paged runner: seq {} saves to snapshot slot {} of {}", s.seq_id,
               s.save_snapshot, snapshot_pos_.size());
      snapshots_->copy_slot(arena_->fixed(), s.state_slot, s.save_snapshot);
      snapshot_pos_[snap] = s.start_pos + s.num_tokens;
      snapshot_recent_[snap] = slots_[static_cast<std::size_t>(s.state_slot)]->recent_tokens;
    }
  }
  launched_.push_back(&batch);  // only a launch that did not throw is collected
}

void PagedModelRunner::collect(std::span<float> logits) {
  DI_CHECK(!launched_.empty(), "paged runner: collect() without launch()");
  const engine::ForwardBatch& batch = *launched_.front();
  launched_.pop_front();
  // Logits stay on the device: the ops queued on them (device sampling) carry the step's results,
  // and whoever reads those waits for them; waiting here would also wait for a step launched ahead.
  if (logits.empty() && device_backend() != nullptr) return;
  const std::int64_t vocab = model_.config().vocab_size;
  ops::Backend& be = model_.backend();
  DI_CHECK(launched_.empty(), "paged runner: host logits of a step while another is launched");
  DI_CHECK(logits.size() == static_cast<std::size_t>(batch.num_logit_rows()) * static_cast<std::size_t>(vocab),
           "paged runner: logits buffer of {} floats for {} rows of {}", logits.size(), batch.num_logit_rows(),
           vocab);
  std::int64_t row = 0;
  for (const engine::ForwardSeq& s : batch.seqs) {
    if (s.num_logits == 0) continue;
    Tensor dst = Tensor::view_of(logits.data() + static_cast<std::size_t>(s.logits_offset) * vocab,
                                 Shape{s.num_logits, vocab}, DType::kF32, nullptr);
    be.copy(logits_.narrow(0, row, s.num_logits), dst);
    row += s.num_logits;
  }
  be.synchronize();
}

OpenedRunner open_paged_runner(const std::filesystem::path& directory, std::optional<NumericMode> mode) {
  std::unique_ptr<ops::Backend> backend = ops::make_cpu_backend();
  LoadedModel loaded = open_model(directory, mode, *backend);
  auto runner = std::make_unique<OwningPagedRunner>(std::move(backend), std::move(loaded));
  OpenedRunner opened;
  opened.config = &runner->model().config();
  opened.mode = runner->model().numerics().mode;
  opened.runner = std::move(runner);
  return opened;
}

}  // namespace deepinfer::model::v4
