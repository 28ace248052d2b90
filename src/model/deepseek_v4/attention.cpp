// The V4 attention sub-layer (MODEL_SPEC A4.3–A4.5): low-rank queries with per-head RMS norm,
// the shared K=V row, SWA over the ring plus this chunk, the compressed branch (HCA: every
// visible entry; CSA: the lightning indexer's top-k), output de-rotation and the grouped output
// projection. Only ops are called; index lists are built on the host from positions alone.
#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/forward_context.h"

namespace deepinfer::model::v4 {
namespace {

// Projections of the whole batch that the per-sequence part reads.
struct Projections {
  Tensor q;       // [T, H, d]
  Tensor kv;      // [T, d]
  Tensor c_kv;    // f32 [T, coff·d]  (compressed layers)
  Tensor c_gate;  // f32 [T, coff·d]
  Tensor i_kv;    // f32 [T, 2·d_i]  (CSA: the indexer's compressor)
  Tensor i_gate;
  Tensor i_q;     // [T, H_i, d_i]
  Tensor i_w;     // f32 [T, H_i]
};

Tensor rows_of(const Tensor& t, const Segment& s) { return t.narrow(0, s.offset, s.count); }

// Feeds one segment's projections to a compressor and appends the groups it completes, normed,
// rotated at their first position and (reference-QAT) quantised, to `store`.
void compress_into(ForwardContext& cx, const CompressorWeights& w, ops::CompressorState& state, RowStore& store,
                   const Tensor& kv, const Tensor& score, std::int64_t start_pos, bool index_keys) {
  const int ratio = state.ratio;
  const std::int64_t count = kv.dim(0);
  const std::int64_t first = start_pos / ratio;
  const std::int64_t emitted = (start_pos + count) / ratio - first;
  const std::int64_t d = w.norm.numel();
  Tensor pooled = cx.alloc(Shape{emitted, d}, DType::kF32);
  cx.backend.compressor_update(kv, score, w.ape, start_pos, state, pooled);
  if (emitted == 0) return;
  Tensor k = cx.act(Shape{emitted, d});
  cx.backend.convert(pooled, k);
  cx.backend.rms_norm(k, &w.norm, cx.eps(), k);
  std::vector<std::int32_t> positions(static_cast<std::size_t>(emitted));
  std::vector<std::int32_t> rows(static_cast<std::size_t>(emitted));
  for (std::int64_t i = 0; i < emitted; ++i) {
    rows[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(first + i);
    positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((first + i) * ratio);  // the group's first token
  }
  cx.backend.rope(k, cx.upload_i32(positions, Shape{emitted}), cx.rope_compress, false);
  const Numerics& num = cx.numerics;
  if (index_keys && num.indexer_rotate_fp4) {
    cx.backend.hadamard(k);
    cx.backend.fake_quant_fp4(k, 32, ops::Fp4ScaleKind::kUE8M0);
  } else if (!index_keys && num.kv_quant_block > 0) {
    cx.backend.fake_quant_fp8(k, 0, d - cx.config.rope_head_dim, num.kv_quant_block);
  }
  store.reserve(first + emitted);
  cx.backend.scatter_rows(k, store.view(), cx.upload_i32(rows, Shape{emitted}));
}

// Host index lists of one segment: [count, window + compressed]. The window part lists positions
// max(0, p-W+1) … p, older ones from the ring (virtual rows [0, W)) and this chunk's from its own
// K=V rows ([W, W + count)); HCA lists every visible compressed entry (virtual W + count + j).
std::vector<std::int32_t> index_lists(const Segment& seg, std::int64_t window, std::int64_t compressed_width,
                                      int hca_ratio) {
  const std::int64_t width = window + compressed_width;
  std::vector<std::int32_t> idx(static_cast<std::size_t>(seg.count * width), -1);
  for (std::int64_t i = 0; i < seg.count; ++i) {
    const std::int64_t p = seg.start_pos + i;
    std::int32_t* row = idx.data() + i * width;
    std::int64_t j = 0;
    for (std::int64_t pos = std::max<std::int64_t>(0, p - window + 1); pos <= p; ++pos, ++j) {
      row[j] = static_cast<std::int32_t>(pos < seg.start_pos ? pos % window : window + (pos - seg.start_pos));
    }
    if (hca_ratio > 0) {
      const std::int64_t visible = std::min(compressed_width, (p + 1) / hca_ratio);
      for (std::int64_t e = 0; e < visible; ++e) row[window + e] = static_cast<std::int32_t>(window + seg.count + e);
    }
  }
  return idx;
}

// The per-sequence part: compressors, indexer, attention and the ring update of one segment.
void attend_segment(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Segment& seg,
                    const Tensor& positions, const Projections& pr, Tensor& o) {
  LayerState& st = seg.state->layers[static_cast<std::size_t>(spec.index)];
  const io::ModelConfig& c = cx.config;
  const std::int64_t window = c.sliding_window;
  const int ratio = spec.compress_ratio;
  std::int64_t entries = 0;
  if (w.compressor) {
    compress_into(cx, *w.compressor, *st.compressor, *st.kv_rows, rows_of(pr.c_kv, seg), rows_of(pr.c_gate, seg),
                  seg.start_pos, false);
    entries = (seg.start_pos + seg.count) / ratio;
  }
  if (w.indexer) {
    compress_into(cx, w.indexer->compressor, *st.index_compressor, *st.index_rows, rows_of(pr.i_kv, seg),
                  rows_of(pr.i_gate, seg), seg.start_pos, true);
  }
  const std::int64_t compressed_width = w.indexer ? std::min<std::int64_t>(c.index_topk, entries) : entries;
  const std::int64_t width = window + compressed_width;
  const auto host_idx = index_lists(seg, window, compressed_width, w.indexer ? 0 : ratio);
  Tensor idx = cx.upload_i32(host_idx, Shape{seg.count, width});
  const Tensor seg_positions = rows_of(positions, seg);
  if (w.indexer && compressed_width > 0) {
    Tensor scores = cx.alloc(Shape{seg.count, entries}, DType::kF32);
    cx.backend.indexer_scores(rows_of(pr.i_q, seg), st.index_rows->view(), entries, rows_of(pr.i_w, seg), scores);
    Tensor picks = idx.narrow(1, window, compressed_width);
    cx.backend.topk_visible(scores, seg_positions, ratio, static_cast<int>(compressed_width),
                            static_cast<int>(window + seg.count), picks);
  }
  const Tensor kv = rows_of(pr.kv, seg);
  std::vector<ops::RowView> sources = {ops::RowView::contiguous(st.ring), ops::RowView::contiguous(kv)};
  if (st.kv_rows) sources.push_back(st.kv_rows->view());
  const ops::AttentionOptions options{1.0f / std::sqrt(static_cast<float>(c.head_dim)), cx.numerics.round_probs_bf16,
                                      64};
  Tensor out = rows_of(o, seg);
  cx.backend.sparse_attention(rows_of(pr.q, seg), sources, idx, w.sinks, options, out);

  // The ring keeps the last `window` K=V rows for the next chunk.
  const std::int64_t keep = std::min(seg.count, window);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(keep));
  for (std::int64_t i = 0; i < keep; ++i)
    slots[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((seg.start_pos + seg.count - keep + i) % window);
  cx.backend.scatter_rows(kv.narrow(0, seg.count - keep, keep), ops::RowView::contiguous(st.ring),
                          cx.upload_i32(slots, Shape{keep}));
}

// Compressor and indexer projections of the whole batch (token-parallel).
void project_compressed(ForwardContext& cx, const AttentionWeights& w, const Tensor& u, const Tensor& q_lat,
                        const Tensor& positions, Projections& pr) {
  const std::int64_t t = u.dim(0);
  ops::Backend& be = cx.backend;
  const CompressorWeights& cw = *w.compressor;
  pr.c_kv = cx.alloc(Shape{t, cw.wkv.out_features()}, DType::kF32);
  pr.c_gate = cx.alloc(Shape{t, cw.wgate.out_features()}, DType::kF32);
  be.linear(u, cw.wkv, {}, pr.c_kv);  // the reference runs compressors in f32, inputs unquantised
  be.linear(u, cw.wgate, {}, pr.c_gate);
  if (!w.indexer) return;
  const IndexerWeights& iw = *w.indexer;
  const io::ModelConfig& c = cx.config;
  pr.i_kv = cx.alloc(Shape{t, iw.compressor.wkv.out_features()}, DType::kF32);
  pr.i_gate = cx.alloc(Shape{t, iw.compressor.wgate.out_features()}, DType::kF32);
  be.linear(u, iw.compressor.wkv, {}, pr.i_kv);
  be.linear(u, iw.compressor.wgate, {}, pr.i_gate);
  pr.i_q = cx.act(Shape{t, c.index_n_heads, c.index_head_dim});
  Tensor iq_flat = pr.i_q.reshape(Shape{t, std::int64_t{c.index_n_heads} * c.index_head_dim});
  be.linear(q_lat, iw.wq_b, cx.linear_options(iw.wq_b), iq_flat);
  be.rope(pr.i_q, positions, cx.rope_compress, false);
  if (cx.numerics.indexer_rotate_fp4) {
    be.hadamard(pr.i_q);
    be.fake_quant_fp4(pr.i_q, 32, ops::Fp4ScaleKind::kUE8M0);
  }
  // Head weights carry both scales: 1/sqrt(d_i) of the scores and 1/sqrt(H_i) of the sum.
  Tensor w_act = cx.act(Shape{t, c.index_n_heads});
  be.linear(u, iw.weights_proj, cx.linear_options(iw.weights_proj), w_act);
  const float head_scale = 1.0f / std::sqrt(static_cast<float>(c.index_head_dim) * static_cast<float>(c.index_n_heads));
  be.scale(w_act, head_scale, w_act);
  pr.i_w = w_act;
  if (w_act.dtype() != DType::kF32) {
    pr.i_w = cx.alloc(w_act.shape(), DType::kF32);
    be.convert(w_act, pr.i_w);
  }
}

}  // namespace

void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Step& step,
                       const Tensor& u, Tensor& out) {
  const io::ModelConfig& c = cx.config;
  ops::Backend& be = cx.backend;
  const std::int64_t t = step.tokens, heads = c.num_heads, d = c.head_dim, rd = c.rope_head_dim;
  const ops::RopeTable& rope = spec.compress_ratio != 0 ? cx.rope_compress : cx.rope_main;
  Projections pr;

  Tensor q_lat = cx.act(Shape{t, c.q_lora_rank});
  be.linear(u, w.wq_a, cx.linear_options(w.wq_a), q_lat);
  be.rms_norm(q_lat, &w.q_norm, cx.eps(), q_lat);
  pr.q = cx.act(Shape{t, heads, d});
  Tensor q_flat = pr.q.reshape(Shape{t, heads * d});
  be.linear(q_lat, w.wq_b, cx.linear_options(w.wq_b), q_flat);
  be.rms_norm(pr.q, nullptr, cx.eps(), pr.q);  // per-head, unweighted (V4)
  be.rope(pr.q, step.positions, rope, false);

  pr.kv = cx.act(Shape{t, d});
  be.linear(u, w.wkv, cx.linear_options(w.wkv), pr.kv);
  be.rms_norm(pr.kv, &w.kv_norm, cx.eps(), pr.kv);
  be.rope(pr.kv, step.positions, rope, false);
  if (cx.numerics.kv_quant_block > 0) be.fake_quant_fp8(pr.kv, 0, d - rd, cx.numerics.kv_quant_block);
  if (w.compressor) project_compressed(cx, w, u, q_lat, step.positions, pr);

  Tensor o = cx.act(Shape{t, heads, d});
  for (const Segment& seg : step.segments) attend_segment(cx, spec, w, seg, step.positions, pr, o);
  be.rope(o, step.positions, rope, true);  // V = K carries RoPE: undo it at the query position

  const std::int64_t groups = c.o_groups, rank = c.o_lora_rank, group_in = heads * d / groups;
  Tensor z = cx.act(Shape{t, groups * rank});
  const Tensor o_flat = o.reshape(Shape{t, heads * d});
  for (std::int64_t g = 0; g < groups; ++g) {
    Tensor z_g = z.narrow(1, g * rank, rank);
    be.linear(o_flat.narrow(1, g * group_in, group_in), w.wo_a[static_cast<std::size_t>(g)], {}, z_g);
  }
  be.linear(z, w.wo_b, cx.linear_options(w.wo_b), out);
}

}  // namespace deepinfer::model::v4
