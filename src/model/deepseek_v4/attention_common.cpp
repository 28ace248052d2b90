// Attention pieces that V4 (A4.3) and V4.1 (B4.2) compute alike, each one op call per batch:
// query and SWA K=V projections, indexer queries, the compressor, rotation + quantisation + store
// of compressed rows, sparse attention with the ring update, and the de-rotated grouped output
// projection. The numerics decide which QAT steps apply (V4 vs V4.1 blocks and formats).
#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/forward_context.h"

namespace deepinfer::model::v4 {

LayerPool& layer_pool(const Step& step, int layer) {
  return step.segments.front().state->arena->fixed().layers()[static_cast<std::size_t>(layer)];
}

const RowPool& store_pool(const Step& step, int index) {
  return step.segments.front().state->arena->stores()[static_cast<std::size_t>(index)];
}

Queries project_queries(ForwardContext& cx, const AttentionWeights& w, const Tensor& u, const Tensor& positions,
                        const ops::RopeTable& rope, bool per_head_norm) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const std::int64_t t = u.dim(0);
  Queries out;
  out.latent = cx.act(Shape{t, c.q_lora_rank});
  be.linear(u, w.wq_a, cx.linear_options(w.wq_a), out.latent);
  be.rms_norm(out.latent, &w.q_norm, cx.eps(), out.latent);
  out.q = cx.act(Shape{t, c.num_heads, c.head_dim});
  Tensor q_flat = out.q.reshape(Shape{t, std::int64_t{c.num_heads} * c.head_dim});
  be.linear(out.latent, w.wq_b, cx.linear_options(w.wq_b), q_flat);
  if (per_head_norm) {
    be.rms_norm_rope(out.q, nullptr, cx.eps(), positions, rope);  // one kernel on the GPU
  } else {
    be.rope(out.q, positions, rope, false);
  }
  return out;
}

Tensor project_window_kv(ForwardContext& cx, const AttentionWeights& w, const Tensor& u, const Tensor& positions,
                         const ops::RopeTable& rope) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const std::int64_t d = c.head_dim;
  Tensor kv = cx.act(Shape{u.dim(0), d});
  be.linear(u, w.wkv, cx.linear_options(w.wkv), kv);
  be.rms_norm_rope(kv, &w.kv_norm, cx.eps(), positions, rope);
  const Numerics& num = cx.numerics;
  if (num.kv_quant_block > 0) be.fake_quant_fp8(kv, 0, num.kv_quant_whole ? d : d - c.rope_head_dim, num.kv_quant_block);
  return kv;
}

IndexQueries project_index_queries(ForwardContext& cx, const ops::LinearWeight& wq_b,
                                   const ops::LinearWeight& weights_proj, const Tensor& u, const Tensor& q_latent,
                                   const Tensor& positions) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const std::int64_t t = u.dim(0);
  IndexQueries out;
  out.q = cx.act(Shape{t, c.index_n_heads, c.index_head_dim});
  Tensor q_flat = out.q.reshape(Shape{t, std::int64_t{c.index_n_heads} * c.index_head_dim});
  be.linear(q_latent, wq_b, cx.linear_options(wq_b), q_flat);
  be.rope(out.q, positions, cx.rope_compress, false);
  if (cx.numerics.indexer_rotate_fp4) be.hadamard(out.q);
  if (cx.numerics.indexer_rotate_fp4 || cx.numerics.indexer_fp4) be.fake_quant_fp4(out.q, 32, ops::Fp4ScaleKind::kUE8M0);
  // Head weights carry both scales: 1/sqrt(d_i) of the scores and 1/sqrt(H_i) of the sum.
  Tensor w_act = cx.act(Shape{t, c.index_n_heads});
  be.linear(u, weights_proj, cx.linear_options(weights_proj), w_act);
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(c.index_head_dim) * static_cast<float>(c.index_n_heads));
  be.scale(w_act, head_scale, w_act);
  out.weights = w_act;
  if (w_act.dtype() != DType::kF32) {
    out.weights = cx.alloc(w_act.shape(), DType::kF32);
    be.convert(w_act, out.weights);
  }
  return out;
}

void store_compressed(ForwardContext& cx, const Step& step, Tensor& k, int ratio, bool index_keys,
                      const RowPool& store) {
  ops::Backend& be = cx.backend;
  const RatioMeta& rm = step.meta->ratio(ratio);
  const std::int64_t d = k.dim(1);
  be.rope(k, rm.group_pos, cx.rope_compress, false);  // at the group's first position
  const Numerics& num = cx.numerics;
  if (index_keys) {
    if (num.indexer_rotate_fp4) be.hadamard(k);
    if (num.indexer_rotate_fp4 || num.indexer_fp4) be.fake_quant_fp4(k, 32, ops::Fp4ScaleKind::kUE8M0);
  } else if (num.compressed_kv_fp4) {
    be.fake_quant_fp4(k, 16, ops::Fp4ScaleKind::kE4M3);
  } else if (num.kv_quant_block > 0) {
    be.fake_quant_fp8(k, 0, d - cx.config.rope_head_dim, num.kv_quant_block);
  }
  be.scatter_rows(k, step.meta->store_view(store), rm.store_rows);
}

Tensor compress_rows(ForwardContext& cx, const Step& step, const Tensor& kv, const Tensor& score, const Tensor& ape,
                     const Tensor& norm, ops::CompressorState& state) {
  const std::int64_t d = norm.numel();
  Tensor pooled = cx.alloc(Shape{step.tokens, d}, DType::kF32);
  cx.backend.compressor_update(kv, score, ape, step.positions, step.meta->slots, state, pooled);
  Tensor k = cx.act(Shape{step.tokens, d});
  cx.backend.convert(pooled, k);
  cx.backend.rms_norm(k, &norm, cx.eps(), k);
  return k;
}

void attend_rows(ForwardContext& cx, const Step& step, LayerPool& pool, const Tensor& sinks, const Tensor& q,
                 const Tensor& kv, const Tensor& idx, const RowPool* compressed, Tensor& o) {
  const std::int64_t window = cx.config.sliding_window;
  std::vector<ops::RowView> sources = {step.meta->ring_view(pool.ring, window), ops::RowView::contiguous(kv)};
  if (compressed != nullptr) sources.push_back(step.meta->store_view(*compressed));
  const ops::AttentionOptions options{1.0f / std::sqrt(static_cast<float>(cx.config.head_dim)),
                                      cx.numerics.round_probs_bf16, 64};
  cx.backend.sparse_attention(q, sources, idx, sinks, options, o);
  // Each ring keeps its sequence's last `window` K=V rows for the next step.
  cx.backend.scatter_rows(kv, ops::RowView::contiguous(pool.ring), step.meta->ring_rows);
}

void project_output(ForwardContext& cx, const AttentionWeights& w, Tensor& o, const Tensor& positions,
                    const ops::RopeTable& rope, Tensor& out) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const std::int64_t t = o.dim(0), heads = c.num_heads, d = c.head_dim;
  be.rope(o, positions, rope, true);  // V = K carries RoPE: undo it at the query position
  const std::int64_t groups = c.o_groups, rank = c.o_lora_rank;
  Tensor z = cx.act(Shape{t, groups * rank});
  const Tensor o_flat = o.reshape(Shape{t, heads * d});
  // Block-diagonal: group g reads o's columns [g·heads·d/groups, +heads·d/groups) and writes z's [g·rank, +rank).
  be.linear_grouped(o_flat, w.wo_a, {}, z);
  be.linear(z, w.wo_b, cx.linear_options(w.wo_b), out);
}

}  // namespace deepinfer::model::v4
