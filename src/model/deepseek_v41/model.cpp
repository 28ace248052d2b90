// The V4.1 forward pass: embedding into the mHC streams, per layer an optional Engram read and
// the block with single-pass (lagged) mHC — each sub-layer's input collapses with the previous
// site's pre weights — then the final collapse with the last pre weights, norm and lm head.
// With bounded replay the layers after the last KV source run on each long chunk's tail only.
#include "model/deepseek_v41/model.h"

#include <algorithm>

#include "common/env.h"
#include "common/error.h"
#include "common/logging.h"
#include "model/deepseek_v4/forward_context.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v41/csa2.h"

namespace deepinfer::model::v41 {
namespace {

using v4::ForwardContext;
using v4::Step;

void check_config(const io::ModelConfig& c, const v4::Numerics& num, const engram::EngramHasher* hasher) {
  DI_CHECK(c.arch == io::ModelArch::kDeepseekV41, "model type {} is not supported by the V4.1 forward pass",
           io::model_arch_name(c.arch));
  v4::check_shared_geometry(c);
  DI_CHECK(c.candidate_source_layer_id < 0 || (c.candidate_block_size > 0 && c.candidate_topk_blocks > 0),
           "config candidate_block_size = {} / candidate_topk_blocks = {} must be positive with a candidate source",
           c.candidate_block_size, c.candidate_topk_blocks);
  for (const io::LayerSpec& l : c.layers) {
    DI_CHECK(l.compress_ratio >= 0 && l.compress_ratio <= 2, "layer {}: V4.1 compress ratio {} must be 0, 1 or 2",
             l.index, l.compress_ratio);
    DI_CHECK(!l.hash_routed, "layer {}: V4.1 has no hash-routed MoE layers", l.index);
  }
  if (num.compressed_kv_fp4)
    DI_CHECK(c.head_dim % 16 == 0, "config head_dim = {} must be a multiple of 16 for FP4 compressed KV", c.head_dim);
  if (num.indexer_fp4)
    DI_CHECK(c.index_head_dim % 32 == 0, "config index_head_dim = {} must be a multiple of 32 for FP4 index keys",
             c.index_head_dim);
  DI_CHECK(c.engram.layer_ids.empty() || hasher != nullptr,
           "the config has Engram layers but no Engram hasher (compressed token map) was given");
  if (hasher != nullptr)
    DI_CHECK(hasher->num_layers() == static_cast<int>(c.engram.layer_ids.size()),
             "the Engram hasher covers {} layers, the config has {}", hasher->num_layers(), c.engram.layer_ids.size());
}

// Replay preconditions (MODEL_SPEC B5.3): the tail covers the window plus the longest draft, and
// nothing after the split owns global state or reads Engram.
int check_replay(const io::ModelConfig& c, const ReplayOptions& r) {
  const int split = c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back();
  if (!r.compact) return split;
  DI_CHECK(r.keep_tokens >= c.sliding_window + r.max_draft_tokens,
           "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS={} does not cover the sliding window ({}) plus the longest draft ({} "
           "tokens): after a rejected draft the ring would read rows never computed",
           r.keep_tokens, c.sliding_window, r.max_draft_tokens);
  DI_CHECK(split >= 0, "bounded replay (DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact) needs a KV source layer");
  const io::LayerSpec& s = c.layer(split);
  DI_CHECK(s.has_indexer, "bounded replay: the last KV source (layer {}) must also be an index source", split);
  for (const int e : c.engram.layer_ids)
    DI_CHECK(e <= split, "bounded replay: Engram layer {} comes after the last KV source {}", e, split);
  return split;
}

// The streams of one step and the lagged pre weights that collapse the next sub-layer's input.
struct Streams {
  Tensor stream, mid;  // [T, n, D]
  Tensor pre;          // f32 [T, n]
};

// One block with single-pass mHC (MODEL_SPEC B4.1): stream → mid (attention) → stream (MoE).
void block_forward(ForwardContext& cx, const io::LayerSpec& spec, const LayerWeights& w, const Step& step, bool tail,
                   Csa2Shared& shared, Streams& s) {
  ops::Backend& be = cx.backend;
  const io::ModelConfig& c = cx.config;
  const std::int64_t t = step.tokens, n = c.hc_mult;
  const ops::HcOptions hc{c.hc_sinkhorn_iters, static_cast<float>(c.hc_eps), cx.eps()};
  const v4::LayerWeights& b = w.block;
  Tensor x = cx.act(Shape{t, c.hidden_size});
  Tensor y = cx.act(Shape{t, c.hidden_size});
  Tensor pre_attn = cx.alloc(Shape{t, n}, DType::kF32);
  Tensor post = cx.alloc(Shape{t, n}, DType::kF32);
  Tensor comb = cx.alloc(Shape{t, n, n}, DType::kF32);

  be.hc_mix(s.stream, b.hc_attn, hc, pre_attn, post, comb);
  be.hc_collapse(s.stream, s.pre, x);
  be.rms_norm(x, &b.attn_norm, cx.eps(), x);
  attention_forward(cx, spec, w, step, tail, shared, x, y);
  be.hc_post(y, s.stream, post, comb, s.mid);

  be.hc_mix(s.mid, b.hc_ffn, hc, s.pre, post, comb);  // s.pre ← this site's pre, used one site later
  be.hc_collapse(s.mid, pre_attn, x);
  be.rms_norm(x, &b.ffn_norm, cx.eps(), x);
  v4::moe_forward(cx, spec, b.moe, step, x, y);
  be.hc_post(y, s.mid, post, comb, s.stream);
}

}  // namespace

ReplayOptions ReplayOptions::from_env(const io::ModelConfig& config) {
  const env::Flags& f = env::flags();
  ReplayOptions r;
  r.compact = f.yoco_prefill_truncation_mode == "compact";
  r.keep_tokens = f.yoco_prefill_keep_tokens;
  r.max_draft_tokens = config.draft.num_stages > 0 ? f.use_nextn_decode : 0;
  return r;
}

Model::Model(const io::ModelConfig& config, ops::Backend& backend, const v4::Numerics& numerics)
    : config_(config),
      backend_(backend),
      numerics_(numerics),
      step_ws_(backend),
      layer_ws_(backend),
      staging_(std::make_unique<v4::MetaStaging>(backend)),
      engram_staging_(std::make_unique<v4::MetaStaging>(backend)),
      graphs_by_bucket_(v4::DecodeGraphs::on(backend)) {}

std::unique_ptr<Model> Model::load(const v4::WeightSource& weights, const io::ModelConfig& config,
                                   ops::Backend& backend, const v4::Numerics& numerics,
                                   std::shared_ptr<const engram::EngramHasher> hasher, const ReplayOptions& replay) {
  std::unique_ptr<Model> m(new Model(config, backend, numerics));
  check_config(m->config_, m->numerics_, hasher.get());
  m->last_kv_source_ = check_replay(m->config_, replay);
  m->replay_ = replay;
  m->hasher_ = std::move(hasher);
  m->weights_ = v41::load_weights(weights, m->config_, backend);
  m->rope_main_ = v4::make_rope_table(backend, config, config.rope.theta, false);
  m->rope_compress_ = v4::make_rope_table(backend, config, config.rope.compress_theta, true);
  m->arena_ = v4::StateArena::growable(m->config_, m->numerics_.act, backend);
  m->bucketed_ = !backend.device().is_cpu();
  m->set_graphs(env::flags().cuda_graphs);
  return m;
}

std::unique_ptr<v4::SequenceState> Model::new_sequence() const {
  return v4::new_sequence_state(arena_);
}

void Model::set_graphs(bool graphs) {
  // Exact mode's f32 expert path places (token, expert) pairs on the host: never captured.
  graphs_ = graphs && ops::supports_graphs(backend_) && numerics_.mode != v4::NumericMode::kExact;
  if (!graphs_) graphs_by_bucket_.clear();
}

namespace {

// The replayed tails of a split step: each chunk's last keep rows (all of a shorter chunk).
struct TailPlan {
  Step step;
  std::vector<std::int32_t> source_rows;   // full-step row of each tail row
  std::vector<std::int32_t> ids, positions;
};

TailPlan plan_tail(const Step& step, const v4::StepPlan& plan, std::int64_t keep) {
  TailPlan tp;
  for (const v4::Segment& seg : step.segments) {
    const std::int64_t rows = std::min(seg.count, keep);
    const std::int64_t start = seg.start_pos + seg.count - rows;
    tp.step.segments.push_back({seg.state, tp.step.tokens, rows, start, rows < seg.count ? start : 0});
    for (std::int64_t i = seg.count - rows; i < seg.count; ++i) {
      const auto src = static_cast<std::size_t>(seg.offset + i);
      tp.source_rows.push_back(static_cast<std::int32_t>(src));
      tp.ids.push_back(plan.ids[src]);
      tp.positions.push_back(plan.positions[src]);
    }
    tp.step.tokens += rows;
  }
  return tp;
}

// Logit rows in the tail layout; a truncated chunk can only give logits of its tail.
std::vector<std::int32_t> tail_logit_rows(std::span<const SequenceModel::Chunk> chunks, const TailPlan& tp) {
  std::vector<std::int32_t> rows;
  for (std::size_t s = 0; s < chunks.size(); ++s) {
    const v4::Segment& seg = tp.step.segments[s];
    DI_CHECK(chunks[s].num_logits <= seg.count,
             "bounded replay (DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE=compact) keeps only the last {} rows of a prefill "
             "chunk: {} logits (prompt logprobs) cannot be computed",
             seg.count, chunks[s].num_logits);
    for (std::int64_t i = seg.count - chunks[s].num_logits; i < seg.count; ++i)
      rows.push_back(static_cast<std::int32_t>(seg.offset + i));
  }
  return rows;
}

}  // namespace

std::vector<Tensor> Model::upload_engram_rows(const v4::Step& step, std::span<const std::int32_t> ids) {
  const auto& layers = config_.engram.layer_ids;
  if (layers.empty()) return {};
  // Every Engram layer's rows depend only on the step's tokens and histories: gathered on the host
  // up front and uploaded in one staged copy (no synchronising copy inside the layer loop).
  const std::int64_t dim = config_.engram.head_dim, per_layer = step.tokens * hasher_->columns() * dim;
  std::vector<std::int32_t> host(static_cast<std::size_t>(per_layer) * layers.size());
  for (std::size_t e = 0; e < layers.size(); ++e) {
    const LayerWeights& w = weights_.layers[static_cast<std::size_t>(layers[e])];
    gather_engram_rows(*w.engram, static_cast<int>(e), *hasher_, step, ids, dim,
                       std::span<std::int32_t>(host).subspan(e * static_cast<std::size_t>(per_layer),
                                                            static_cast<std::size_t>(per_layer)));
  }
  Tensor device = engram_staging_->upload(host);
  std::vector<Tensor> rows;
  for (std::size_t e = 0; e < layers.size(); ++e) {
    auto* base = static_cast<std::int32_t*>(device.raw_data()) + e * static_cast<std::size_t>(per_layer);
    rows.push_back(Tensor::view_of(base, Shape{step.tokens, hasher_->columns() * dim}, DType::kF32, nullptr,
                                   device.device()));
  }
  return rows;
}

namespace {

// What the layers of one pass read besides the weights: the step, the replayed tail of a split
// step (metas[1]) and each Engram layer's uploaded table rows.
struct LayerPass {
  const Step& step;
  const TailPlan& tail;
  const std::vector<v4::StepMeta>& metas;
  bool split = false;
  int last_kv_source = -1;
  const std::vector<Tensor>& engram_rows;
};

// Embedding, then every layer (Engram read, block); the late layers of a split step run on the
// tails only. Returns the final streams (the tails' when split).
Streams run_blocks(ForwardContext& cx, const ModelWeights& weights, const LayerPass& p, Streams s) {
  const io::ModelConfig& c = cx.config;
  const std::int64_t n = c.hc_mult, dim = c.hidden_size;
  Csa2Shared shared(c.layers.size());
  shared.split_layer = p.last_kv_source;
  if (p.split) shared.tail = &p.tail.step;
  cx.backend.embedding(p.step.ids, weights.embed, s.stream);
  const auto& engram_ids = c.engram.layer_ids;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const bool in_tail = p.split && layer > p.last_kv_source;
    if (p.split && layer == p.last_kv_source + 1) {  // late layers: only the tails' rows go on
      const std::int64_t t = p.tail.step.tokens;
      Streams ts{cx.step_ws.alloc(Shape{t, n, dim}, cx.numerics.act), cx.step_ws.alloc(Shape{t, n, dim}, cx.numerics.act),
                 cx.step_ws.alloc(Shape{t, n}, DType::kF32)};
      cx.backend.gather_rows(s.stream, p.metas[1].extra, ts.stream);
      cx.backend.gather_rows(s.pre, p.metas[1].extra, ts.pre);
      s = ts;
    }
    const LayerWeights& w = weights.layers[static_cast<std::size_t>(layer)];
    if (w.engram) {
      const auto e = static_cast<std::size_t>(std::find(engram_ids.begin(), engram_ids.end(), layer) - engram_ids.begin());
      engram_forward(cx, *w.engram, p.engram_rows[e], s.stream);
    }
    block_forward(cx, c.layer(layer), w, in_tail ? p.tail.step : p.step, in_tail, shared, s);
    cx.layer_ws.reset();
  }
  return s;
}

}  // namespace

void Model::forward(std::span<const Chunk> chunks, Tensor& logits) {
  v4::StepPlan plan = v4::plan_step(chunks, config_, logits);
  Step& step = plan.step;
  const auto rows = static_cast<std::int64_t>(plan.logit_rows.size());
  if (step.tokens == 0) return;

  // Bounded replay applies when some chunk is longer than the kept tail (never a decode step).
  const bool split = replay_.compact && std::any_of(step.segments.begin(), step.segments.end(), [&](const auto& seg) {
                       return seg.count > replay_.keep_tokens;
                     });
  TailPlan tail;
  std::vector<std::int32_t> tail_logits;
  step_ws_.reset();
  v4::StepMetaBuilder builder(config_, *plan.arena, *staging_);
  v4::StepRows full_rows = v4::step_rows(plan);
  full_rows.one_hot = config_.hc_mult;  // the pre weights of layer 0's lagged collapse
  const v4::StepShape shape = builder.shape_of(full_rows, bucketed_);  // pads decode steps only
  builder.add(full_rows, shape);
  if (split) {
    tail = plan_tail(step, plan, replay_.keep_tokens);
    tail_logits = tail_logit_rows(chunks, tail);
    v4::StepShape tail_shape = shape;  // same score widths: the tail holds the step's last rows
    tail_shape.rows = tail.step.tokens;
    builder.add(v4::StepRows{tail.step.segments, tail.ids, tail.positions, tail_logits, tail.source_rows}, tail_shape);
  }
  const std::vector<v4::StepMeta> metas = builder.upload(*staging_);  // the step's one upload
  ForwardContext cx{backend_, step_ws_, layer_ws_, config_, numerics_, rope_main_, rope_compress_};
  v4::begin_step(cx, step, metas.front());
  if (split) {
    tail.step.meta = &metas[1];
    tail.step.ids = metas[1].ids;
    tail.step.positions = metas[1].positions;
  }
  // Staged before the layers (an upload cannot be captured); one buffer per capacity, so a bucket's
  // rows always land at the same address.
  const std::vector<Tensor> engram_rows = upload_engram_rows(step, plan.ids);

  const std::int64_t n = config_.hc_mult, dim = config_.hidden_size;
  // Layer 0 collapses with copy 0's one-hot pre weights: rows of the step metadata (hc_mix then
  // overwrites them with each site's pre weights).
  const Streams first{step_ws_.alloc(Shape{step.tokens, n, dim}, numerics_.act),
                      step_ws_.alloc(Shape{step.tokens, n, dim}, numerics_.act), metas.front().one_hot};
  Streams s = first;  // a decode step (graphs) ends in its first streams
  const LayerPass pass{step, tail, metas, split, last_kv_source_, engram_rows};
  run_layers(step, first.stream.raw_data(), engram_rows.empty() ? nullptr : engram_rows.front().raw_data(),
             [&] { s = run_blocks(cx, weights_, pass, first); });

  if (rows > 0) {
    const Tensor& picked_rows = split ? metas[1].logit_rows : metas[0].logit_rows;
    Tensor picked = step_ws_.alloc(Shape{rows, n, dim}, numerics_.act);
    backend_.gather_rows(s.stream, picked_rows, picked);
    Tensor pre = step_ws_.alloc(Shape{rows, n}, DType::kF32);
    backend_.gather_rows(s.pre, picked_rows, pre);
    Tensor h = step_ws_.alloc(Shape{rows, dim}, numerics_.act);
    backend_.hc_collapse(picked, pre, h);  // the last site's pre weights: no hc_head in V4.1
    backend_.rms_norm(h, &weights_.norm, cx.eps(), h);
    backend_.linear(h, weights_.head, {}, logits);  // f32 logits, unquantised input (reference head)
  }
  const std::size_t history = config_.engram.layer_ids.empty() ? 0 : static_cast<std::size_t>(config_.engram.max_ngram_size - 1);
  v4::finish_step(step, plan.ids, history);
}

void Model::run_layers(const Step& step, const void* stream, const void* engram_rows,
                       const std::function<void()>& layers) {
  if (!graphs_ || !bucketed_ || !v4::is_decode(step)) {
    layers();
    return;
  }
  // The layers' step temporaries (index lists, the candidate mask) start here in the warm-up, the
  // capture and every replay: the body rewinds the step workspace to this mark first.
  const ops::Workspace::Mark mark = step_ws_.mark();
  const auto body = [&] {
    step_ws_.release(mark);
    layers();
  };
  graphs_by_bucket_.run({v4::DecodeBucket{step.meta->rows, step.meta->max_pages},
                         [&] {
                           step_ws_.release(mark);
                           const void* temporaries = step_ws_.alloc(Shape{1}, DType::kU8).raw_data();
                           step_ws_.release(mark);
                           return v4::decode_addresses(backend_, step, stream, layer_ws_, {engram_rows, temporaries});
                         },
                         body,
                         [&](ops::Graph& g) {
                           g.keep_alive(step_ws_.retain());
                           g.keep_alive(layer_ws_.retain());
                         }});
}

}  // namespace deepinfer::model::v41
