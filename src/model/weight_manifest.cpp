// The weight manifest of V4 (MODEL_SPEC A2) and V4.1 (B2), built from the config's layer roles.
#include "model/weight_manifest.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"
#include "io/weight_quant.h"

namespace deepinfer::model {
namespace {

using io::ModelArch;
using io::ModelConfig;

// Bounds that keep every size computation in range for any config the parser accepts; the
// released models are far below both (largest tensor ~1e11 elements, ~48k tensors).
constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 40;
constexpr std::int64_t kMaxManifestTensors = 2'000'000;

class ManifestBuilder {
 public:
  explicit ManifestBuilder(const ModelConfig& config) : c_(config) {}

  void plain(std::string name, Shape shape, DType dtype, Component component, int layer, bool optional = false) {
    std::int64_t elements = 1;
    for (const std::int64_t d : shape.dims())
      if (d < 0 || __builtin_mul_overflow(elements, d, &elements) || elements > kMaxTensorElements)
        throw_error("config describes tensor '{}' of shape {}, larger than deepinfer supports", name, shape);
    ManifestEntry e;
    e.name = std::move(name);
    e.shape = shape;
    e.dtype = dtype;
    e.format = dtype == DType::kI64 ? WeightFormat::kIndex : WeightFormat::kFloat;
    e.component = component;
    e.layer = layer;
    e.optional = optional;
    out_.push_back(std::move(e));
  }
  // A projection stored FP8 with block scales in quantised checkpoints.
  void fp8_linear(const std::string& stem, std::int64_t rows, std::int64_t cols, Component component, int layer,
                  bool optional = false) {
    plain(stem + ".weight", Shape{rows, cols}, DType::kBF16, component, layer, optional);
    if (!c_.quant.fp8) return;
    ManifestEntry& e = out_.back();
    e.format = WeightFormat::kFp8Block;
    e.dtype = DType::kF8E4M3;
    e.block_rows = c_.quant.block_rows;
    e.block_cols = c_.quant.block_cols;
  }
  void expert_linear(const std::string& stem, std::int64_t rows, std::int64_t cols, int layer, bool optional) {
    plain(stem + ".weight", Shape{rows, cols}, DType::kBF16, Component::kRoutedExperts, layer, optional);
    ManifestEntry& e = out_.back();
    switch (c_.quant.expert_format) {
      case io::ExpertFormat::kUnspecified:
      case io::ExpertFormat::kFp4:
        e.format = WeightFormat::kFp4;
        e.dtype = DType::kF4E2M1;
        e.block_rows = 1;
        e.block_cols = io::kFp4BlockSize;
        break;
      case io::ExpertFormat::kFp8:
        e.format = WeightFormat::kFp8Block;
        e.dtype = DType::kF8E4M3;
        e.block_rows = c_.quant.block_rows > 0 ? c_.quant.block_rows : 128;
        e.block_cols = c_.quant.block_cols > 0 ? c_.quant.block_cols : 128;
        break;
      case io::ExpertFormat::kBf16: break;
    }
  }

  void global_head();
  void block(const std::string& prefix, const io::LayerSpec& spec, int experts, bool stage, bool optional);
  void draft_extras();

  std::vector<ManifestEntry> take() { return std::move(out_); }

 private:
  const ModelConfig& c_;
  std::vector<ManifestEntry> out_;

  void attention(const std::string& p, const io::LayerSpec& spec, bool optional);
  void moe(const std::string& p, const io::LayerSpec& spec, int experts, bool stage, bool optional);
  void engram(const std::string& p, int layer, std::int64_t rows);
};

void ManifestBuilder::attention(const std::string& p, const io::LayerSpec& spec, bool optional) {
  const std::int64_t D = c_.hidden_size, hd = c_.head_dim, H = c_.num_heads, q = c_.q_lora_rank;
  const std::int64_t ih = c_.index_n_heads, ihd = c_.index_head_dim;
  const int L = spec.index;
  const auto attn = Component::kAttention;
  fp8_linear(p + "attn.wq_a", q, D, attn, L, optional);
  plain(p + "attn.q_norm.weight", Shape{q}, DType::kBF16, attn, L, optional);
  fp8_linear(p + "attn.wq_b", H * hd, q, attn, L, optional);
  fp8_linear(p + "attn.wkv", hd, D, attn, L, optional);
  plain(p + "attn.kv_norm.weight", Shape{hd}, DType::kBF16, attn, L, optional);
  fp8_linear(p + "attn.wo_a", std::int64_t{c_.o_groups} * c_.o_lora_rank, H * hd / c_.o_groups, attn, L, optional);
  fp8_linear(p + "attn.wo_b", D, std::int64_t{c_.o_groups} * c_.o_lora_rank, attn, L, optional);
  plain(p + "attn.attn_sink", Shape{H}, DType::kF32, attn, L, optional);
  const auto comp = Component::kCompressor, idx = Component::kIndexer;
  if (c_.arch == ModelArch::kDeepseekV4 && spec.owns_compressor) {
    const std::int64_t r = spec.compress_ratio;
    const std::int64_t width = (spec.compress_ratio == 4 ? 2 : 1) * hd;  // CSA overlaps two windows
    plain(p + "attn.compressor.wkv.weight", Shape{width, D}, DType::kBF16, comp, L);
    plain(p + "attn.compressor.wgate.weight", Shape{width, D}, DType::kBF16, comp, L);
    plain(p + "attn.compressor.ape", Shape{r, width}, DType::kF32, comp, L);
    plain(p + "attn.compressor.norm.weight", Shape{hd}, DType::kBF16, comp, L);
  }
  if (c_.arch == ModelArch::kDeepseekV4 && spec.has_indexer) {
    fp8_linear(p + "attn.indexer.wq_b", ih * ihd, q, idx, L);
    plain(p + "attn.indexer.weights_proj.weight", Shape{ih, D}, DType::kBF16, idx, L);
    plain(p + "attn.indexer.compressor.wkv.weight", Shape{2 * ihd, D}, DType::kBF16, idx, L);
    plain(p + "attn.indexer.compressor.wgate.weight", Shape{2 * ihd, D}, DType::kBF16, idx, L);
    plain(p + "attn.indexer.compressor.ape", Shape{spec.compress_ratio, 2 * ihd}, DType::kF32, idx, L);
    plain(p + "attn.indexer.compressor.norm.weight", Shape{ihd}, DType::kBF16, idx, L);
  }
  if (c_.arch == ModelArch::kDeepseekV41 && spec.owns_compressor) {
    plain(p + "attn.compressor.wkv.weight", Shape{hd, D}, DType::kBF16, comp, L);
    if (spec.compress_ratio > 1) plain(p + "attn.compressor.wgate.weight", Shape{hd, D}, DType::kBF16, comp, L);
    plain(p + "attn.compressor.norm.weight", Shape{hd}, DType::kBF16, comp, L);
    plain(p + "attn.indexer.wk.weight", Shape{ihd, hd}, DType::kBF16, idx, L);
    plain(p + "attn.indexer.k_norm.weight", Shape{ihd}, DType::kBF16, idx, L);
  }
  if (c_.arch == ModelArch::kDeepseekV41 && spec.has_indexer) {
    fp8_linear(p + "attn.indexer.wq_b", ih * ihd, q, idx, L);
    plain(p + "attn.indexer.weights_proj.weight", Shape{ih, D}, DType::kBF16, idx, L);
  }
}

void ManifestBuilder::moe(const std::string& p, const io::LayerSpec& spec, int experts, bool stage, bool optional) {
  const std::int64_t D = c_.hidden_size, I = c_.moe_intermediate_size;
  const int L = spec.index;
  const auto router = Component::kRouter;
  plain(p + "ffn.gate.weight", Shape{experts, D}, DType::kBF16, router, L, optional);
  if (spec.hash_routed) {
    plain(p + "ffn.gate.tid2eid", Shape{c_.vocab_size, c_.num_experts_per_tok}, DType::kI64, router, L, optional);
  } else {
    plain(p + "ffn.gate.bias", Shape{experts}, DType::kF32, router, L, optional);
  }
  if (c_.arch == ModelArch::kDeepseekV41 && !stage) plain(p + "ffn.gate.bias_vl", Shape{experts}, DType::kF32, router, L, optional);
  for (int e = 0; e < experts; ++e) {
    const std::string stem = fmt::format("{}ffn.experts.{}.", p, e);
    expert_linear(stem + "w1", I, D, L, optional);
    expert_linear(stem + "w2", D, I, L, optional);
    expert_linear(stem + "w3", I, D, L, optional);
  }
  if (c_.n_shared_experts > 0) {
    const std::int64_t S = I * c_.n_shared_experts;
    fp8_linear(p + "ffn.shared_experts.w1", S, D, Component::kSharedExpert, L, optional);
    fp8_linear(p + "ffn.shared_experts.w2", D, S, Component::kSharedExpert, L, optional);
    fp8_linear(p + "ffn.shared_experts.w3", S, D, Component::kSharedExpert, L, optional);
  }
}

void ManifestBuilder::engram(const std::string& p, int layer, std::int64_t rows) {
  const io::EngramConfig& e = c_.engram;
  const std::int64_t lookups = std::int64_t{e.max_ngram_size - 1} * e.n_heads;
  plain(p + "engram.embed.weight", Shape{rows, e.head_dim}, DType::kBF16, Component::kEngram, layer);
  if (c_.quant.fp8) {  // FP8 rows with one scale per 32 values (MODEL_SPEC B2)
    ManifestEntry& table = out_.back();
    table.format = WeightFormat::kFp8Block;
    table.dtype = DType::kF8E4M3;
    table.block_rows = 1;
    table.block_cols = io::kFp4BlockSize;
  }
  fp8_linear(p + "engram.wkv", std::int64_t{c_.hc_mult + 1} * c_.hidden_size, lookups * e.head_dim, Component::kEngram, layer);
  plain(p + "engram.q_weight", Shape{c_.hc_mult, c_.hidden_size}, DType::kBF16, Component::kEngram, layer);
  plain(p + "engram.k_weight", Shape{c_.hc_mult, c_.hidden_size}, DType::kBF16, Component::kEngram, layer);
}

void ManifestBuilder::block(const std::string& prefix, const io::LayerSpec& spec, int experts, bool stage, bool optional) {
  const std::int64_t D = c_.hidden_size, hc = c_.hc_mult;
  const int L = spec.index;
  const Component norms = stage ? Component::kDraft : Component::kAttention;
  plain(prefix + "attn_norm.weight", Shape{D}, DType::kBF16, norms, L, optional);
  plain(prefix + "ffn_norm.weight", Shape{D}, DType::kBF16, stage ? Component::kDraft : Component::kRouter, L, optional);
  for (const char* site : {"attn", "ffn"}) {
    plain(fmt::format("{}hc_{}_fn", prefix, site), Shape{(2 + hc) * hc, hc * D}, DType::kF32, Component::kMhc, L, optional);
    plain(fmt::format("{}hc_{}_base", prefix, site), Shape{(2 + hc) * hc}, DType::kF32, Component::kMhc, L, optional);
    plain(fmt::format("{}hc_{}_scale", prefix, site), Shape{3}, DType::kF32, Component::kMhc, L, optional);
  }
  attention(prefix, spec, optional);
  moe(prefix, spec, experts, stage, optional);
  if (spec.engram) {
    const auto& ids = c_.engram.layer_ids;
    const auto slot = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), L) - ids.begin());
    engram(prefix, L, c_.engram.num_embeddings[slot]);
  }
  if (!stage) return;
  // Everything a stage owns besides its block belongs to the draft component.
  for (auto it = out_.end(); it != out_.begin();) {
    --it;
    if (it->layer != L) break;
    it->component = Component::kDraft;
  }
}

void ManifestBuilder::global_head() {
  const std::int64_t D = c_.hidden_size, hc = c_.hc_mult;
  plain("embed.weight", Shape{c_.vocab_size, D}, DType::kBF16, Component::kEmbed, -1);
  plain("norm.weight", Shape{D}, DType::kBF16, Component::kHead, -1);
  if (!c_.tie_word_embeddings) plain("head.weight", Shape{c_.vocab_size, D}, DType::kBF16, Component::kHead, -1);
  if (c_.arch == ModelArch::kDeepseekV4) {  // V4.1 collapses the streams with the lagged pre-mix instead
    plain("hc_head_fn", Shape{hc, hc * D}, DType::kF32, Component::kHead, -1);
    plain("hc_head_base", Shape{hc}, DType::kF32, Component::kHead, -1);
    plain("hc_head_scale", Shape{1}, DType::kF32, Component::kHead, -1);
  }
}

// Stage-specific tensors of MTP (A2.4 preview) and DSpark (A2.4 0731, B2).
void ManifestBuilder::draft_extras() {
  const io::DraftConfig& d = c_.draft;
  const std::int64_t D = c_.hidden_size, hc = c_.hc_mult, V = c_.vocab_size;
  const auto draft = Component::kDraft;
  if (d.kind == io::DraftKind::kMtp) {
    for (int s = 0; s < d.num_stages; ++s) {
      const std::string p = fmt::format("mtp.{}.", s);
      const int L = c_.num_layers + s;
      fp8_linear(p + "e_proj", D, D, draft, L, true);
      fp8_linear(p + "h_proj", D, D, draft, L, true);
      for (const char* norm : {"enorm", "hnorm", "norm"}) plain(p + norm + ".weight", Shape{D}, DType::kBF16, draft, L, true);
      plain(p + "hc_head_fn", Shape{hc, hc * D}, DType::kF32, draft, L, true);
      plain(p + "hc_head_base", Shape{hc}, DType::kF32, draft, L, true);
      plain(p + "hc_head_scale", Shape{1}, DType::kF32, draft, L, true);
    }
    return;
  }
  if (d.kind != io::DraftKind::kDSpark || d.num_stages == 0) return;
  const int first = c_.num_layers, last = c_.num_layers + d.num_stages - 1;
  const std::string p0 = "mtp.0.", pl = fmt::format("mtp.{}.", d.num_stages - 1);
  fp8_linear(p0 + "main_proj", D, static_cast<std::int64_t>(d.target_layer_ids.size()) * D, draft, first, true);
  plain(p0 + "main_norm.weight", Shape{D}, DType::kBF16, draft, first, true);
  plain(pl + "norm.weight", Shape{D}, DType::kBF16, draft, last, true);
  const bool v4 = c_.arch == ModelArch::kDeepseekV4;
  if (v4) {
    plain(pl + "hc_head_fn", Shape{hc, hc * D}, DType::kF32, draft, last, true);
    plain(pl + "hc_head_base", Shape{hc}, DType::kF32, draft, last, true);
    plain(pl + "hc_head_scale", Shape{1}, DType::kF32, draft, last, true);
  }
  // V4.1 renamed the Markov head's tensors (markov_w1 / markov_w2 -> embed / head).
  plain(pl + (v4 ? "markov_head.markov_w1.weight" : "markov_head.embed.weight"), Shape{V, d.markov_rank}, DType::kBF16, draft,
        last, true);
  plain(pl + (v4 ? "markov_head.markov_w2.weight" : "markov_head.head.weight"), Shape{V, d.markov_rank}, DType::kBF16, draft,
        last, true);
  plain(pl + "confidence_head.proj.weight", Shape{1, D + d.markov_rank}, DType::kBF16, draft, last, true);
}

}  // namespace

std::string_view component_name(Component component) {
  switch (component) {
    case Component::kEmbed: return "embed";
    case Component::kAttention: return "attention";
    case Component::kCompressor: return "compressor";
    case Component::kIndexer: return "indexer";
    case Component::kRouter: return "router";
    case Component::kRoutedExperts: return "routed experts";
    case Component::kSharedExpert: return "shared expert";
    case Component::kMhc: return "mHC";
    case Component::kEngram: return "engram";
    case Component::kHead: return "head";
    case Component::kDraft: return "mtp/dspark";
  }
  return "?";
}

std::string_view weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kFloat: return "float";
    case WeightFormat::kFp8Block: return "fp8 block";
    case WeightFormat::kFp4: return "fp4";
    case WeightFormat::kIndex: return "index";
  }
  return "?";
}

std::string ManifestEntry::scale_name() const {
  if (format != WeightFormat::kFp8Block && format != WeightFormat::kFp4) return "";
  constexpr std::string_view kWeight = ".weight";
  if (name.size() > kWeight.size() && name.compare(name.size() - kWeight.size(), kWeight.size(), kWeight) == 0)
    return name.substr(0, name.size() - kWeight.size()) + ".scale";
  return name + ".scale";
}

std::int64_t ManifestEntry::released_bytes() const {
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  switch (format) {
    case WeightFormat::kFloat:
    case WeightFormat::kIndex: return static_cast<std::int64_t>(dtype_bytes(dtype, numel()));
    case WeightFormat::kFp8Block: return numel() + ceil_div(shape[0], block_rows) * ceil_div(shape[1], block_cols);
    case WeightFormat::kFp4: return numel() / 2 + shape[0] * (shape[1] / io::kFp4BlockSize);
  }
  return 0;
}

std::vector<ManifestEntry> build_weight_manifest(const ModelConfig& config) {
  const std::int64_t blocks = config.num_layers + config.draft.num_stages;
  const std::int64_t per_block = 3 * std::int64_t{std::max(config.n_routed_experts, config.draft.n_routed_experts)} + 80;
  if (blocks * per_block > kMaxManifestTensors)
    throw_error("config describes about {} tensors ({} blocks x {} experts), more than the {} deepinfer supports",
                blocks * per_block, blocks, config.n_routed_experts, kMaxManifestTensors);
  ManifestBuilder builder(config);
  builder.global_head();
  for (const auto& spec : config.layers) builder.block(fmt::format("layers.{}.", spec.index), spec, config.n_routed_experts, false, false);
  for (int s = 0; s < config.draft.num_stages; ++s)
    builder.block(fmt::format("mtp.{}.", s), config.draft.stages[static_cast<std::size_t>(s)], config.draft.n_routed_experts,
                  true, true);
  builder.draft_extras();
  return builder.take();
}

}  // namespace deepinfer::model
