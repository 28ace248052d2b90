// The V4 forward pass: embedding into the mHC streams, the blocks (mHC → attention → mHC → MoE),
// the final hyper-connection head and the lm head; plus config checks and sequence state.
#include "model/deepseek_v4/model.h"

#include <bit>
#include <cmath>
#include <unordered_set>

#include "common/env.h"
#include "common/error.h"
#include "model/deepseek_v4/forward_context.h"
#include "model/deepseek_v4/rope.h"

namespace deepinfer::model::v4 {
namespace {

void check_config(const io::ModelConfig& c, const Numerics& num) {
  DI_CHECK(c.arch == io::ModelArch::kDeepseekV4, "model type {} is not supported by the V4 forward pass",
           io::model_arch_name(c.arch));
  check_shared_geometry(c);
  for (const io::LayerSpec& l : c.layers) {
    DI_CHECK(l.compress_ratio >= 0 && l.compress_ratio <= 128, "layer {}: compress ratio {} must be in [0, 128]",
             l.index, l.compress_ratio);
    DI_CHECK(l.has_indexer == (l.attention == io::AttentionKind::kCompressedSparse),
             "layer {}: only CSA layers have a lightning indexer", l.index);
  }
  if (num.indexer_rotate_fp4) {
    DI_CHECK(std::has_single_bit(static_cast<unsigned>(c.index_head_dim)) && c.index_head_dim % 32 == 0,
             "config index_head_dim = {} must be a power of two >= 32 in reference-qat mode (Hadamard + FP4)",
             c.index_head_dim);
  }
}

// One block: the stream goes `stream` → `other` (attention) → `stream` (MoE). hc_post never
// writes over the residual it reads (the op contract forbids that overlap).
void block_forward(ForwardContext& cx, const io::LayerSpec& spec, const LayerWeights& w, const Step& step,
                   Tensor& stream, Tensor& other) {
  ops::Backend& be = cx.backend;
  const io::ModelConfig& c = cx.config;
  const std::int64_t t = step.tokens, n = c.hc_mult;
  const ops::HcOptions hc{c.hc_sinkhorn_iters, static_cast<float>(c.hc_eps), cx.eps()};
  Tensor x = cx.act(Shape{t, c.hidden_size});
  Tensor post = cx.alloc(Shape{t, n}, DType::kF32);
  Tensor comb = cx.alloc(Shape{t, n, n}, DType::kF32);
  Tensor y = cx.act(Shape{t, c.hidden_size});

  be.hc_pre_norm(stream, w.hc_attn, hc, w.attn_norm, cx.eps(), x, post, comb);  // hc_pre + rms_norm, fused on the GPU
  attention_forward(cx, spec, w.attn, step, x, y);
  be.hc_post(y, stream, post, comb, other);

  be.hc_pre_norm(other, w.hc_ffn, hc, w.ffn_norm, cx.eps(), x, post, comb);
  moe_forward(cx, spec, w.moe, step, x, y);
  be.hc_post(y, other, post, comb, stream);
}

}  // namespace

StepPlan plan_step(std::span<const SequenceModel::Chunk> chunks, const io::ModelConfig& config, const Tensor& logits,
                   std::int64_t sampled_rows) {
  StepPlan plan;
  Step& step = plan.step;
  std::unordered_set<const SequenceState*> seen;
  for (const SequenceModel::Chunk& ch : chunks) {
    DI_CHECK(ch.state != nullptr && ch.state->arena != nullptr &&
                 ch.state->arena->fixed().layers().size() == config.layers.size(),
             "forward: a chunk has no sequence state of this model");
    DI_CHECK(plan.arena == nullptr || plan.arena == ch.state->arena,
             "forward: the sequences of one batch must share one state arena");
    plan.arena = ch.state->arena;
    DI_CHECK(seen.insert(ch.state).second, "forward: the same sequence appears twice in one batch");
    DI_CHECK(!ch.tokens.empty(), "forward: empty token list (a prompt needs at least one token)");
    DI_CHECK(ch.num_logits >= 0 && ch.num_logits <= static_cast<std::int32_t>(ch.tokens.size()),
             "forward: {} logits requested for {} tokens", ch.num_logits, ch.tokens.size());
    const Segment seg{ch.state, step.tokens, static_cast<std::int64_t>(ch.tokens.size()), ch.state->num_tokens, 0};
    DI_CHECK(seg.start_pos + seg.count <= std::int64_t{1} << 30, "forward: position {} is too large",
             seg.start_pos + seg.count);
    for (std::int64_t i = 0; i < seg.count; ++i) {
      const std::int32_t id = ch.tokens[static_cast<std::size_t>(i)];
      DI_CHECK((id >= 0 && id < config.vocab_size) || (id < 0 && -std::int64_t{id} <= sampled_rows),
               "token id {} at position {} is outside the vocabulary [0, {})", id, seg.start_pos + i, config.vocab_size);
      plan.ids.push_back(id);
      plan.positions.push_back(static_cast<std::int32_t>(seg.start_pos + i));
    }
    for (std::int64_t i = seg.count - ch.num_logits; i < seg.count; ++i)
      plan.logit_rows.push_back(static_cast<std::int32_t>(seg.offset + i));
    step.segments.push_back(seg);
    step.tokens += seg.count;
  }
  const auto rows = static_cast<std::int64_t>(plan.logit_rows.size());
  DI_CHECK(logits.dtype() == DType::kF32 && logits.shape() == Shape({rows, config.vocab_size}),
           "forward: logits must be f32 [{}, {}], got {} {}", rows, config.vocab_size, dtype_name(logits.dtype()),
           logits.shape());
  // The model's own sequences get pages for their new tokens (the engine's come with the batch).
  for (const Segment& seg : step.segments)
    if (seg.state->owner) seg.state->owner->ensure_pages(seg.state->pages, seg.start_pos + seg.count);
  return plan;
}

StepRows step_rows(const StepPlan& plan) {
  return StepRows{plan.step.segments, plan.ids, plan.positions, plan.logit_rows, {}};
}

void begin_step(ForwardContext& cx, Step& step, const StepMeta& meta) {
  cx.layer_ws.reset();
  step.meta = &meta;
  step.tokens = meta.rows;
  step.ids = meta.ids;
  step.positions = meta.positions;
}

void finish_step(const Step& step, std::span<const std::int32_t> ids, std::size_t history) {
  for (const Segment& seg : step.segments) {
    seg.state->num_tokens += seg.count;
    if (history == 0) continue;
    std::vector<std::int32_t>& recent = seg.state->recent_tokens;
    recent.insert(recent.end(), ids.begin() + seg.offset, ids.begin() + seg.offset + seg.count);
    if (recent.size() > history) recent.erase(recent.begin(), recent.end() - static_cast<std::ptrdiff_t>(history));
  }
}

void check_shared_geometry(const io::ModelConfig& c) {
  const std::string_view arch = io::model_arch_name(c.arch);
  DI_CHECK(c.num_kv_heads == 1, "config num_key_value_heads = {}: {} shares one K=V head", c.num_kv_heads, arch);
  DI_CHECK(c.rope_head_dim > 0 && c.rope_head_dim % 2 == 0 && c.rope_head_dim <= c.head_dim,
           "config qk_rope_head_dim = {} must be even and at most head_dim = {}", c.rope_head_dim, c.head_dim);
  DI_CHECK(c.hc_mult >= 1 && c.hc_mult <= 16, "config hc_mult = {} must be in [1, 16]", c.hc_mult);
  DI_CHECK(c.o_groups > 0 && (std::int64_t{c.num_heads} * c.head_dim) % c.o_groups == 0,
           "config o_groups = {} must divide num_heads·head_dim = {}", c.o_groups, c.num_heads * c.head_dim);
  DI_CHECK(c.sliding_window > 0, "config sliding_window = {} must be positive", c.sliding_window);
  DI_CHECK(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.n_routed_experts,
           "config num_experts_per_tok = {} must be in [1, n_routed_experts = {}]", c.num_experts_per_tok,
           c.n_routed_experts);
  DI_CHECK(c.n_shared_experts >= 1, "config n_shared_experts = {}: {} has a shared expert", c.n_shared_experts, arch);
}

Model::Model(const io::ModelConfig& config, ops::Backend& backend, const Numerics& numerics)
    : config_(config),
      backend_(backend),
      numerics_(numerics),
      step_ws_(backend),
      layer_ws_(backend),
      staging_(std::make_unique<MetaStaging>(backend)),
      graphs_by_bucket_(DecodeGraphs::on(backend)) {}

std::unique_ptr<Model> Model::load(const WeightSource& weights, const io::ModelConfig& config, ops::Backend& backend,
                                   NumericMode mode) {
  return load(weights, config, backend, Numerics::for_mode(mode, config));
}

std::unique_ptr<Model> Model::load(const WeightSource& weights, const io::ModelConfig& config, ops::Backend& backend,
                                   const Numerics& numerics) {
  std::unique_ptr<Model> m(new Model(config, backend, numerics));
  check_config(m->config_, m->numerics_);
  m->weights_ = load_weights(weights, m->config_, backend);
  m->rope_main_ = make_rope_table(backend, config, config.rope.theta, false);
  m->rope_compress_ = make_rope_table(backend, config, config.rope.compress_theta, true);
  m->arena_ = StateArena::growable(m->config_, m->numerics_.act, backend);
  m->bucketed_ = !backend.device().is_cpu();
  m->set_graphs(env::flags().cuda_graphs);
  return m;
}

std::unique_ptr<SequenceState> Model::new_sequence() const {
  return new_sequence_state(arena_);
}

void Model::set_graphs(bool graphs) {
  // Exact mode (the verification mode) is never captured: its f32 expert path places (token, expert)
  // pairs on the host, which a graph cannot hold; trying would only log a warning per bucket.
  graphs_ = graphs && ops::supports_graphs(backend_) && numerics_.mode != NumericMode::kExact;
  if (!graphs_) graphs_by_bucket_.clear();
}

void Model::run_layers(const Step& step, const void* stream, const std::function<void()>& layers) {
  if (!graphs_ || !bucketed_ || !is_decode(step)) {
    layers();
    return;
  }
  graphs_by_bucket_.run({DecodeBucket{step.meta->rows, step.meta->max_pages},
                         [&] { return decode_addresses(backend_, step, stream, layer_ws_, {}); }, layers,
                         [&](ops::Graph& g) {
                           g.keep_alive(step_ws_.retain());
                           g.keep_alive(layer_ws_.retain());
                         }});
}

void Model::forward(std::span<const Chunk> chunks, Tensor& logits) {
  StepPlan plan = plan_step(chunks, config_, logits, sampled_ids_ != nullptr ? sampled_ids_->dim(0) : 0);
  Step& step = plan.step;
  const auto rows = static_cast<std::int64_t>(plan.logit_rows.size());
  if (step.tokens == 0) return;

  step_ws_.reset();
  StepMetaBuilder builder(config_, *plan.arena, *staging_);
  const StepRows layout = step_rows(plan);
  builder.add(layout, builder.shape_of(layout, bucketed_));
  const std::vector<StepMeta> metas = builder.upload(*staging_);  // the step's one upload
  ForwardContext cx{backend_, step_ws_, layer_ws_, config_, numerics_, rope_main_, rope_compress_};
  begin_step(cx, step, metas.front());
  if (sampled_ids_ != nullptr) {
    Tensor ids = metas.front().ids;  // placeholders -> the earlier step's samples, before anything reads them
    backend_.resolve_sampled_ids(ids, *sampled_ids_);
  }

  const std::int64_t n = config_.hc_mult, dim = config_.hidden_size;
  Tensor stream = step_ws_.alloc(Shape{step.tokens, n, dim}, numerics_.act);
  Tensor stream_mid = step_ws_.alloc(Shape{step.tokens, n, dim}, numerics_.act);
  run_layers(step, stream.raw_data(), [&] {
    backend_.embedding(step.ids, weights_.embed, stream);
    for (int layer = 0; layer < config_.num_layers; ++layer) {
      block_forward(cx, config_.layer(layer), weights_.layers[static_cast<std::size_t>(layer)], step, stream,
                    stream_mid);
      layer_ws_.reset();
    }
  });

  if (rows > 0) {
    Tensor picked = step_ws_.alloc(Shape{rows, n, dim}, numerics_.act);
    backend_.gather_rows(stream, step.meta->logit_rows, picked);
    Tensor h = step_ws_.alloc(Shape{rows, dim}, numerics_.act);
    backend_.hc_head(picked, weights_.hc_head,
                     ops::HcOptions{config_.hc_sinkhorn_iters, static_cast<float>(config_.hc_eps), cx.eps()}, h);
    backend_.rms_norm(h, &weights_.norm, cx.eps(), h);
    backend_.linear(h, weights_.head, {}, logits);  // f32 logits, unquantised input (reference head)
  }
  finish_step(step, plan.ids, 0);
}

}  // namespace deepinfer::model::v4
