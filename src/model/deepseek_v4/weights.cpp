// Loading V4 weights: shape/dtype checks against the config, stored-format detection (float,
// FP8 block + scale, packed FP4 + scale), conversions the ops need (f32 mixing/bias tensors, i32
// hash table, bf16 wo_a) and upload to the backend.
#include "model/deepseek_v4/weights.h"

#include <fmt/format.h>

#include "io/checkpoint.h"
#include "io/weight_quant.h"

namespace deepinfer::model::v4 {
namespace {

class CheckpointWeights final : public WeightSource {
 public:
  explicit CheckpointWeights(const io::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  bool has(std::string_view name) const override { return checkpoint_.has(name); }
  Tensor tensor(std::string_view name) const override { return checkpoint_.tensor(name); }
  std::string describe() const override { return checkpoint_.directory().string(); }

 private:
  const io::Checkpoint& checkpoint_;
};

bool is_float(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

class Loader {
 public:
  Loader(const WeightSource& source, const io::ModelConfig& config, ops::Backend& backend)
      : src_(source), c_(config), be_(backend) {}

  // A float tensor of the given shape; f32 when `want_f32` (or when stored as f16).
  Tensor plain(const std::string& name, const Shape& shape, bool want_f32 = false) {
    Tensor t = fetch(name);
    check_shape(name, t, shape);
    DI_CHECK(is_float(t.dtype()), "{}: tensor {} has dtype {}, expected a float type", where(), name,
             dtype_name(t.dtype()));
    if (t.dtype() == DType::kF16 || (want_f32 && t.dtype() != DType::kF32)) t = t.to(DType::kF32);
    return upload(t);
  }

  Tensor index_table(const std::string& name, const Shape& shape, std::int64_t num_experts) {
    Tensor t = fetch(name);
    check_shape(name, t, shape);
    DI_CHECK(t.dtype() == DType::kI64 || t.dtype() == DType::kI32, "{}: tensor {} has dtype {}, expected i64 or i32",
             where(), name, dtype_name(t.dtype()));
    Tensor out = Tensor::empty(shape, DType::kI32);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const std::int64_t v = t.dtype() == DType::kI64 ? t.data<std::int64_t>()[i] : t.data<std::int32_t>()[i];
      DI_CHECK(v >= 0 && v < num_experts, "{}: {}[{}] = {} is not an expert id in [0, {})", where(), name, i, v,
               num_experts);
      out.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
    }
    return upload(out);
  }

  // A projection [rows, cols] in whatever form it is stored.
  ops::LinearWeight linear(const std::string& stem, std::int64_t rows, std::int64_t cols) {
    const std::string name = stem + ".weight";
    Tensor w = fetch(name);
    ops::LinearWeight out;
    if (w.dtype() == DType::kF8E4M3) {
      check_shape(name, w, Shape{rows, cols});
      out.format = ops::WeightFormat::kFp8Block;
      out.scale = scale_tensor(stem);
      out.block = fp8_block(name, rows, cols, out.scale);
    } else if (w.dtype() == DType::kI8 || w.dtype() == DType::kU8 || w.dtype() == DType::kF4E2M1) {
      w = io::fp4_view(w.is_contiguous() ? w : w.clone());
      check_shape(name, w, Shape{rows, cols});
      out.format = ops::WeightFormat::kFp4;
      out.scale = scale_tensor(stem);
      out.block = io::kFp4BlockSize;
      DI_CHECK(cols % out.block == 0 && out.scale.shape() == Shape({rows, cols / out.block}),
               "{}: scale of packed FP4 tensor {} is {}, expected [{}, {}]", where(), name, out.scale.shape(), rows,
               cols / out.block);
    } else {
      DI_CHECK(is_float(w.dtype()), "{}: tensor {} has dtype {}, expected float, FP8 or packed FP4", where(), name,
               dtype_name(w.dtype()));
      check_shape(name, w, Shape{rows, cols});
      DI_CHECK(!src_.has(stem + ".scale"), "{}: float tensor {} comes with a scale {}.scale", where(), name, stem);
      if (w.dtype() == DType::kF16) w = w.to(DType::kF32);
      out.format = w.dtype() == DType::kF32 ? ops::WeightFormat::kF32 : ops::WeightFormat::kBF16;
    }
    out.data = upload(w);
    return out;
  }

  // wo_a as bf16/f32 (convert.py dequantises it), split into one slice per output group.
  std::vector<ops::LinearWeight> grouped(const std::string& stem, int groups, std::int64_t rank, std::int64_t cols) {
    const std::string name = stem + ".weight";
    Tensor w = fetch(name);
    check_shape(name, w, Shape{groups * rank, cols});
    if (w.dtype() == DType::kF8E4M3) {
      const Tensor s = src_.tensor(stem + ".scale");
      const int b = fp8_block(name, groups * rank, cols, s);
      w = io::dequantize_fp8_block(w, s, b, b, DType::kBF16, name);
    } else {
      DI_CHECK(is_float(w.dtype()), "{}: tensor {} has dtype {}, expected float or FP8", where(), name,
               dtype_name(w.dtype()));
      if (w.dtype() == DType::kF16) w = w.to(DType::kF32);
    }
    const Tensor full = upload(w);
    std::vector<ops::LinearWeight> out;
    for (int g = 0; g < groups; ++g) {
      out.push_back({w.dtype() == DType::kF32 ? ops::WeightFormat::kF32 : ops::WeightFormat::kBF16,
                     full.narrow(0, g * rank, rank), Tensor(), 0});
    }
    return out;
  }

  ops::HcWeights hc(const std::string& prefix, std::int64_t mixes, std::int64_t scales) {
    const std::int64_t width = std::int64_t{c_.hc_mult} * c_.hidden_size;
    return {plain(prefix + "_fn", Shape{mixes, width}, true), plain(prefix + "_base", Shape{mixes}, true),
            plain(prefix + "_scale", Shape{scales}, true)};
  }

 private:
  const WeightSource& src_;
  const io::ModelConfig& c_;
  ops::Backend& be_;

  std::string where() const { return src_.describe(); }

  Tensor fetch(const std::string& name) {
    DI_CHECK(src_.has(name), "{}: tensor {} is missing (the config requires it)", where(), name);
    return src_.tensor(name);
  }

  Tensor upload(const Tensor& t) { return be_.upload(t.is_contiguous() ? t : t.clone()); }

  void check_shape(const std::string& name, const Tensor& t, const Shape& want) const {
    DI_CHECK(t.shape() == want, "{}: tensor {} has shape {}, but the config implies {}", where(), name, t.shape(), want);
  }

  Tensor scale_tensor(const std::string& stem) {
    Tensor s = fetch(stem + ".scale");
    DI_CHECK(s.ndim() == 2, "{}: scale {}.scale must be 2-D, got {}", where(), stem, s.shape());
    if (s.dtype() != DType::kUE8M0 && s.dtype() != DType::kF32) {
      DI_CHECK(is_float(s.dtype()), "{}: scale {}.scale has dtype {}", where(), stem, dtype_name(s.dtype()));
      s = s.to(DType::kF32);
    }
    return upload(s);
  }

  // The square FP8 block edge implied by the scale grid (the config's when it states one).
  int fp8_block(const std::string& name, std::int64_t rows, std::int64_t cols, const Tensor& scale) const {
    std::vector<int> candidates = {128, 32, 64, 16, 256};
    if (c_.quant.block_rows > 0) candidates.insert(candidates.begin(), c_.quant.block_rows);
    for (int b : candidates)
      if (scale.ndim() == 2 && scale.dim(0) == (rows + b - 1) / b && scale.dim(1) == (cols + b - 1) / b) return b;
    throw_error("{}: scale of FP8 tensor {} [{}, {}] has shape {}, which fits no square block size", where(), name,
                rows, cols, scale.shape());
  }
};

CompressorWeights load_compressor(Loader& ld, const std::string& p, std::int64_t ratio, std::int64_t d, bool overlap,
                                  std::int64_t dim) {
  const std::int64_t width = (overlap ? 2 : 1) * d;
  return {ld.linear(p + "wkv", width, dim), ld.linear(p + "wgate", width, dim),
          ld.plain(p + "ape", Shape{ratio, width}, true), ld.plain(p + "norm.weight", Shape{d})};
}

AttentionWeights load_attention(Loader& ld, const io::ModelConfig& c, const io::LayerSpec& spec, const std::string& p) {
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

MoeWeights load_moe(Loader& ld, const io::ModelConfig& c, const io::LayerSpec& spec, const std::string& p) {
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

}  // namespace

std::unique_ptr<WeightSource> checkpoint_weights(const io::Checkpoint& checkpoint) {
  return std::make_unique<CheckpointWeights>(checkpoint);
}

ModelWeights load_weights(const WeightSource& source, const io::ModelConfig& c, ops::Backend& backend) {
  Loader ld(source, c, backend);
  const std::int64_t D = c.hidden_size, V = c.vocab_size, hc = c.hc_mult;
  ModelWeights w;
  w.embed = ld.plain("embed.weight", Shape{V, D});
  w.norm = ld.plain("norm.weight", Shape{D});
  if (c.tie_word_embeddings) {
    w.head = {w.embed.dtype() == DType::kF32 ? ops::WeightFormat::kF32 : ops::WeightFormat::kBF16, w.embed, Tensor(), 0};
  } else {
    w.head = ld.linear("head", V, D);
  }
  w.hc_head = ld.hc("hc_head", hc, 1);
  for (int L = 0; L < c.num_layers; ++L) {
    const std::string p = fmt::format("layers.{}.", L);
    const io::LayerSpec& spec = c.layer(L);
    LayerWeights lw;
    lw.attn_norm = ld.plain(p + "attn_norm.weight", Shape{D});
    lw.ffn_norm = ld.plain(p + "ffn_norm.weight", Shape{D});
    lw.hc_attn = ld.hc(p + "hc_attn", (2 + hc) * hc, 3);
    lw.hc_ffn = ld.hc(p + "hc_ffn", (2 + hc) * hc, 3);
    lw.attn = load_attention(ld, c, spec, p);
    lw.moe = load_moe(ld, c, spec, p);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace deepinfer::model::v4
