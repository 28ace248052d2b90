// Loading V4 weights: shape/dtype checks against the config, stored-format detection (float,
// FP8 block + scale, packed FP4 + scale), conversions the ops need (f32 mixing/bias tensors, i32
// hash table, bf16 wo_a) and upload to the backend.
#include "model/deepseek_v4/weights.h"

#include "io/checkpoint.h"
#include "model/deepseek_v4/weight_loader.h"

namespace deepinfer::model::v4 {
namespace {

thread_local ops::StagedUploader* current_uploader = nullptr;

class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(const io::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  bool has(std::string_view name) const override { return checkpoint_.has(name); }
  Tensor tensor(std::string_view name) const override { return checkpoint_.tensor(name); }
  std::string describe() const override { return checkpoint_.directory().string(); }

 private:
  const io::Checkpoint& checkpoint_;
};

CompressorWeights load_compressor(WeightLoader& ld, const std::string& p, std::int64_t ratio, std::int64_t d, bool overlap,
                                  std::int64_t dim) {
  const std::int64_t width = (overlap ? 2 : 1) * d;
  return {ld.linear(p + "wkv", width, dim), ld.linear(p + "wgate", width, dim),
          ld.plain(p + "ape", Shape{ratio, width}, true), ld.plain(p + "norm.weight", Shape{d})};
}

AttentionWeights load_attention(WeightLoader& ld, const io::ModelConfig& c, const io::LayerSpec& spec, const std::string& p) {
  AttentionWeights a = load_attention_core(ld, c, p);
  const std::int64_t D = c.hidden_size, d = c.head_dim, q = c.q_lora_rank;
  if (spec.owns_compressor)
    a.compressor = load_compressor(ld, p + "attn.compressor.", spec.compress_ratio, d, spec.has_indexer, D);
  if (spec.has_indexer) {
    const std::int64_t ih = c.index_n_heads, id = c.index_head_dim;
    a.indexer = IndexerWeights{ld.linear(p + "attn.indexer.wq_b", ih * id, q),
                               ld.linear(p + "attn.indexer.weights_proj", ih, D),
                               load_compressor(ld, p + "attn.indexer.compressor.", spec.compress_ratio, id, true, D)};
  }
  return a;
}

}  // namespace

AttentionWeights load_attention_core(WeightLoader& ld, const io::ModelConfig& c, const std::string& p) {
  const std::int64_t D = c.hidden_size, H = c.num_heads, d = c.head_dim, q = c.q_lora_rank;
  AttentionWeights a;
  a.wq_a = ld.linear(p + "attn.wq_a", q, D);
  a.q_norm = ld.plain(p + "attn.q_norm.weight", Shape{q});
  a.wq_b = ld.linear(p + "attn.wq_b", H * d, q);
  a.wkv = ld.linear(p + "attn.wkv", d, D);
  a.kv_norm = ld.plain(p + "attn.kv_norm.weight", Shape{d});
  a.wo_a = ld.grouped(p + "attn.wo_a", c.o_groups, c.o_lora_rank, H * d / c.o_groups);
  a.wo_b = ld.linear(p + "attn.wo_b", D, std::int64_t{c.o_groups} * c.o_lora_rank);
  a.sinks = ld.plain(p + "attn.attn_sink", Shape{H}, true);
  return a;
}

MoeWeights load_moe(WeightLoader& ld, const io::ModelConfig& c, const io::LayerSpec& spec, const std::string& p) {
  const std::int64_t D = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts;
  MoeWeights m;
  m.gate = ld.linear(p + "ffn.gate", E, D);
  if (spec.hash_routed) {
    m.tid2eid = ld.index_table(p + "ffn.gate.tid2eid", Shape{c.vocab_size, c.num_experts_per_tok}, E);
  } else {
    m.bias = ld.plain(p + "ffn.gate.bias", Shape{E}, true);
  }
  for (std::int64_t e = 0; e < E; ++e) {
    const std::string stem = fmt::format("{}ffn.experts.{}.", p, e);
    m.experts.push_back({ld.linear(stem + "w1", I, D), ld.linear(stem + "w3", I, D), ld.linear(stem + "w2", D, I)});
  }
  const std::int64_t S = I * c.n_shared_experts;
  m.shared = {ld.linear(p + "ffn.shared_experts.w1", S, D), ld.linear(p + "ffn.shared_experts.w3", S, D),
              ld.linear(p + "ffn.shared_experts.w2", D, S)};
  return m;
}

void load_embed_and_head(WeightLoader& ld, const io::ModelConfig& c, Tensor& embed, Tensor& norm,
                         ops::LinearWeight& head) {
  const std::int64_t D = c.hidden_size, V = c.vocab_size;
  embed = ld.plain("embed.weight", Shape{V, D});
  norm = ld.plain("norm.weight", Shape{D});
  if (c.tie_word_embeddings) {
    head = {embed.dtype() == DType::kF32 ? ops::WeightFormat::kF32 : ops::WeightFormat::kBF16, embed, Tensor(), 0};
  } else {
    head = ld.linear("head", V, D);
  }
}

void load_block_mixing(WeightLoader& ld, const io::ModelConfig& c, const std::string& p, LayerWeights& lw) {
  const std::int64_t D = c.hidden_size, hc = c.hc_mult;
  lw.attn_norm = ld.plain(p + "attn_norm.weight", Shape{D});
  lw.ffn_norm = ld.plain(p + "ffn_norm.weight", Shape{D});
  lw.hc_attn = ld.hc(p + "hc_attn", (2 + hc) * hc, 3);
  lw.hc_ffn = ld.hc(p + "hc_ffn", (2 + hc) * hc, 3);
}

UploadScope::UploadScope(ops::StagedUploader* uploader) : previous_(current_uploader) { current_uploader = uploader; }
UploadScope::~UploadScope() { current_uploader = previous_; }
ops::StagedUploader* UploadScope::current() { return current_uploader; }

std::unique_ptr<WeightSource> checkpoint_weights(const io::Checkpoint& checkpoint) {
  return std::make_unique<CheckpointWeights>(checkpoint);
}

ModelWeights load_weights(const WeightSource& source, const io::ModelConfig& c, ops::Backend& backend) {
  WeightLoader ld(source, c, backend);
  const std::int64_t hc = c.hc_mult;
  ModelWeights w;
  load_embed_and_head(ld, c, w.embed, w.norm, w.head);
  w.hc_head = ld.hc("hc_head", hc, 1);
  for (int L = 0; L < c.num_layers; ++L) {
    const std::string p = fmt::format("layers.{}.", L);
    const io::LayerSpec& spec = c.layer(L);
    LayerWeights lw;
    load_block_mixing(ld, c, p, lw);
    lw.attn = load_attention(ld, c, spec, p);
    lw.moe = load_moe(ld, c, spec, p);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace deepinfer::model::v4
