// Loading V4.1 weights: the shared block parts through v4's loader, then the CSA2 and Engram
// tensors of each layer by its role (MODEL_SPEC B1.3, B2).
#include "model/deepseek_v41/weights.h"

#include <algorithm>

#include "model/deepseek_v4/weight_loader.h"

namespace deepinfer::model::v41 {
namespace {

SourceWeights load_source(v4::WeightLoader& ld, const io::ModelConfig& c, const io::LayerSpec& spec,
                          const std::string& p, ops::Backend& be) {
  const std::int64_t D = c.hidden_size, d = c.head_dim, id = c.index_head_dim;
  SourceWeights s;
  s.wkv = ld.linear(p + "attn.compressor.wkv", d, D);
  if (spec.compress_ratio > 1) {
    s.wgate = ld.linear(p + "attn.compressor.wgate", d, D);
    s.ape = be.empty(Shape{spec.compress_ratio, d}, DType::kF32);
    be.fill(s.ape, 0.0f);
  }
  s.norm = ld.plain(p + "attn.compressor.norm.weight", Shape{d});
  s.wk = ld.linear(p + "attn.indexer.wk", id, d);
  s.k_norm = ld.plain(p + "attn.indexer.k_norm.weight", Shape{id});
  return s;
}

EngramWeights load_engram(v4::WeightLoader& ld, const io::ModelConfig& c, int layer, const std::string& p,
                          ops::Backend& be) {
  const io::EngramConfig& e = c.engram;
  const auto& ids = e.layer_ids;
  const auto slot = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), layer) - ids.begin());
  const std::int64_t rows = e.num_embeddings.at(slot), D = c.hidden_size, hc = c.hc_mult;
  const std::int64_t lookups = std::int64_t{e.max_ngram_size - 1} * e.n_heads;
  EngramWeights w;
  w.table = ld.host(p + "engram.embed.weight", Shape{rows, e.head_dim});
  if (w.table.dtype() == DType::kF8E4M3) {
    DI_CHECK(e.head_dim % 32 == 0, "{}: Engram head_dim {} must be a multiple of 32 for FP8 tables", ld.where(),
             e.head_dim);
    w.table_scale = ld.host(p + "engram.embed.scale", Shape{rows, e.head_dim / 32});
    DI_CHECK(w.table_scale.dtype() == DType::kUE8M0 || w.table_scale.dtype() == DType::kF32,
             "{}: {}engram.embed.scale has dtype {}, expected ue8m0 or f32", ld.where(), p,
             dtype_name(w.table_scale.dtype()));
  } else {
    DI_CHECK(w.table.dtype() == DType::kBF16 || w.table.dtype() == DType::kF32,
             "{}: {}engram.embed.weight has dtype {}, expected FP8 E4M3, bf16 or f32", ld.where(), p,
             dtype_name(w.table.dtype()));
  }
  w.wkv = ld.linear(p + "engram.wkv", (hc + 1) * D, lookups * e.head_dim);
  // Only the product of the two per-copy weight vectors enters the gate.
  const Tensor q = ld.host(p + "engram.q_weight", Shape{hc, D}).to(DType::kF32);
  const Tensor k = ld.host(p + "engram.k_weight", Shape{hc, D}).to(DType::kF32);
  Tensor omega = Tensor::empty(Shape{hc, D}, DType::kF32);
  for (std::int64_t i = 0; i < hc * D; ++i) omega.data<float>()[i] = q.data<float>()[i] * k.data<float>()[i];
  w.omega = be.upload(omega);
  return w;
}

}  // namespace

ModelWeights load_weights(const v4::WeightSource& source, const io::ModelConfig& c, ops::Backend& backend) {
  v4::WeightLoader ld(source, c, backend);
  const std::int64_t D = c.hidden_size;
  const std::int64_t ih = c.index_n_heads, id = c.index_head_dim;
  ModelWeights w;
  v4::load_embed_and_head(ld, c, w.embed, w.norm, w.head);
  for (int L = 0; L < c.num_layers; ++L) {
    const std::string p = fmt::format("layers.{}.", L);
    const io::LayerSpec& spec = c.layer(L);
    LayerWeights lw;
    v4::load_block_mixing(ld, c, p, lw.block);
    lw.block.attn = v4::load_attention_core(ld, c, p);
    lw.block.moe = v4::load_moe(ld, c, spec, p);
    if (spec.owns_compressor) lw.source = load_source(ld, c, spec, p, backend);
    if (spec.has_indexer)
      lw.index = IndexQueryWeights{ld.linear(p + "attn.indexer.wq_b", ih * id, c.q_lora_rank),
                                   ld.linear(p + "attn.indexer.weights_proj", ih, D)};
    if (spec.engram) lw.engram = load_engram(ld, c, L, p, backend);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace deepinfer::model::v41
