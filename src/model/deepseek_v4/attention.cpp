// The V4 attention sub-layer (MODEL_SPEC A4.3–A4.5): low-rank queries with per-head RMS norm,
// the shared K=V row, SWA over the ring plus this chunk, the compressed branch (HCA: every
// visible entry; CSA: the lightning indexer's top-k), output de-rotation and the grouped output
// projection. Only ops are called, each once for the whole batch; index lists, rows and page
// tables come from the step's metadata (step_meta.h).
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

// The compressed branch's index list: HCA lists every visible entry (metadata); CSA scores the
// indexer keys of each row's sequence and writes its top-k into the list's compressed columns.
Tensor compressed_list(ForwardContext& cx, const Step& step, const io::LayerSpec& spec, const Projections& pr) {
  const RatioMeta& rm = step.meta->ratio(spec.compress_ratio);
  if (!spec.has_indexer) return rm.all_list;
  Tensor idx = rm.topk_list;  // the window part is fixed; every CSA layer rewrites the top-k part
  if (rm.topk_width == 0) return idx;
  const RowPool& keys = store_pool(step, step.segments.front().state->arena->index_store(spec.index));
  Tensor scores = cx.alloc(Shape{step.tokens, rm.entries}, DType::kF32);
  cx.backend.indexer_scores(pr.iq.q, step.meta->store_view(keys), rm.key_base, rm.num_keys, pr.iq.weights, scores);
  Tensor picks = idx.narrow(1, cx.config.sliding_window, rm.topk_width);
  cx.backend.topk_visible(scores, step.positions, spec.compress_ratio, static_cast<int>(rm.topk_width), rm.offsets,
                          picks);
  return idx;
}

// Compressor projections of the whole batch (token-parallel), in f32 on unquantised inputs as
// the reference runs them: the KV compressor's, then (CSA) the indexer's with its queries.
void project_compressor(ForwardContext& cx, const CompressorWeights& cw, const Tensor& u, Tensor& kv, Tensor& gate) {
  const std::int64_t t = u.dim(0);
  kv = cx.alloc(Shape{t, cw.wkv.out_features()}, DType::kF32);
  gate = cx.alloc(Shape{t, cw.wgate.out_features()}, DType::kF32);
  cx.backend.linear(u, cw.wkv, {}, kv);
  cx.backend.linear(u, cw.wgate, {}, gate);
}

void project_indexer(ForwardContext& cx, const IndexerWeights& iw, const Tensor& u, const Tensor& q_lat,
                     const Tensor& positions, Projections& pr) {
  project_compressor(cx, iw.compressor, u, pr.i_kv, pr.i_gate);
  pr.iq = project_index_queries(cx, iw.wq_b, iw.weights_proj, u, q_lat, positions);
}

}  // namespace

void attention_forward(ForwardContext& cx, const io::LayerSpec& spec, const AttentionWeights& w, const Step& step,
                       const Tensor& u, Tensor& out) {
  const io::ModelConfig& c = cx.config;
  const ops::RopeTable& rope = spec.compress_ratio != 0 ? cx.rope_compress : cx.rope_main;
  Projections pr;
  LayerPool& pool = layer_pool(step, spec.index);
  const StateArena& arena = *step.segments.front().state->arena;
  const RowPool* compressed = nullptr;
  // The K=V row and the compressed KV rows need only u: on the backend's side lane they run beside
  // the queries and the indexer (disjoint tensors, states and stores), small launches that leave most
  // of the GPU idle at decode batch sizes.
  ops::SideLane side(cx.backend, step.tokens);
  pr.kv = project_window_kv(cx, w, u, step.positions, rope);
  if (w.compressor) {
    const RowPool& kv_rows = store_pool(step, arena.kv_store(spec.index));
    project_compressor(cx, *w.compressor, u, pr.c_kv, pr.c_gate);
    Tensor k = compress_rows(cx, step, pr.c_kv, pr.c_gate, w.compressor->ape, w.compressor->norm, *pool.compressor);
    store_compressed(cx, step, k, spec.compress_ratio, false, kv_rows);
    compressed = &kv_rows;
  }
  side.return_to_main();
  const Queries queries = project_queries(cx, w, u, step.positions, rope, true);
  pr.q = queries.q;
  if (w.compressor && w.indexer) {
    project_indexer(cx, *w.indexer, u, queries.latent, step.positions, pr);
    const CompressorWeights& ic = w.indexer->compressor;
    Tensor ik = compress_rows(cx, step, pr.i_kv, pr.i_gate, ic.ape, ic.norm, *pool.index_compressor);
    store_compressed(cx, step, ik, spec.compress_ratio, true, store_pool(step, arena.index_store(spec.index)));
  }
  side.join();
  Tensor idx = w.compressor ? compressed_list(cx, step, spec, pr) : step.meta->window_list;
  Tensor o = cx.act(Shape{step.tokens, c.num_heads, c.head_dim});
  attend_rows(cx, step, pool, w.sinks, pr.q, pr.kv, idx, compressed, o);
  project_output(cx, w, o, step.positions, rope, out);
}

}  // namespace deepinfer::model::v4
