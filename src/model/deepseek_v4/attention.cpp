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
  IndexQueries iq;  // CSA
};

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
  store_compressed(cx, k, first, ratio, index_keys, store);
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
  const auto host_idx = window_index_lists(seg, window, compressed_width, w.indexer ? 0 : ratio);
  Tensor idx = cx.upload_i32(host_idx, Shape{seg.count, window + compressed_width});
  if (w.indexer && compressed_width > 0) {
    Tensor scores = cx.alloc(Shape{seg.count, entries}, DType::kF32);
    cx.backend.indexer_scores(rows_of(pr.iq.q, seg), st.index_rows->view(), entries, rows_of(pr.iq.weights, seg),
                              scores);
    Tensor picks = idx.narrow(1, window, compressed_width);
    cx.backend.topk_visible(scores, rows_of(positions, seg), ratio, static_cast<int>(compressed_width),
                            static_cast<int>(window + seg.count), picks);
  }
  Tensor out = rows_of(o, seg);
  attend_segment_rows(cx, st, w.sinks, seg, rows_of(pr.q, seg), rows_of(pr.kv, seg), idx, st.kv_rows.get(), out);
}

// Compressor projections of the whole batch (token-parallel), in f32 on unquantised inputs as
// the reference runs them.
void project_compressed(ForwardContext& cx, const AttentionWeights& w, const Tensor& u, const Tensor& q_lat,
                        const Tensor& positions, Projections& pr) {
  const std::int64_t t = u.dim(0);
  ops::Backend& be = cx.backend;
  const CompressorWeights& cw = *w.compressor;
  pr.c_kv = cx.alloc(Shape{t, cw.wkv.out_features()}, DType::kF32);
  pr.c_gate = cx.alloc(Shape{t, cw.wgate.out_features()}, DType::kF32);
  be.linear(u, cw.wkv, {}, pr.c_kv);
  be.linear(u, cw.wgate, {}, pr.c_gate);
  if (!w.indexer) return;
  const IndexerWeights& iw = *w.indexer;
  pr.i_kv = cx.alloc(Shape{t, iw.compressor.wkv.out_features()}, DType::kF32);
  pr.i_gate = cx.alloc(Shape{t, iw.compressor.wgate.out_features()}, DType::kF32);
  be.linear(u, iw.compressor.wkv, {}, pr.i_kv);
  be.linear(u, iw.compressor.wgate, {}, pr.i_gate);
  pr.iq = project_index_queries(cx, iw.wq_b, iw.weights_proj, u, q_lat, positions);
}

}  // namespace

void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Step& step,
                       const Tensor& u, Tensor& out) {
  const io::ModelConfig& c = cx.config;
  const ops::RopeTable& rope = spec.compress_ratio != 0 ? cx.rope_compress : cx.rope_main;
  Projections pr;
  const Queries queries = project_queries(cx, w, u, step.positions, rope, true);
  pr.q = queries.q;
  pr.kv = project_window_kv(cx, w, u, step.positions, rope);
  if (w.compressor) project_compressed(cx, w, u, queries.latent, step.positions, pr);

  Tensor o = cx.act(Shape{step.tokens, c.num_heads, c.head_dim});
  for (const Segment& seg : step.segments) attend_segment(cx, spec, w, seg, step.positions, pr, o);
  project_output(cx, w, o, step.positions, rope, out);
}

}  // namespace deepinfer::model::v4
