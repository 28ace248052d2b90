// Stored name -> DeepSeek name. The HF renames are the inverse of transformers'
// conversion_mapping.py rules for deepseek_v4 (MODEL_SPEC A2.5), applied to the part after
// "layers.L." / "mtp.S."; DeepSeek's own names pass through unchanged.
#include "io/tensor_names.h"

#include <array>
#include <cctype>
#include <utility>

#include <fmt/format.h>

namespace deepinfer::io {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Length of "layers.<digits>." / "mtp.<digits>." at the start of `name`, or 0.
std::size_t block_prefix_length(std::string_view name) {
  for (std::string_view head : {std::string_view("layers."), std::string_view("mtp.")}) {
    if (!starts_with(name, head)) continue;
    std::size_t i = head.size();
    const std::size_t digits_start = i;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
    if (i > digits_start && i < name.size() && name[i] == '.') return i + 1;
  }
  return 0;
}

// Prefix renames of a block's tail, first match wins (the nested indexer rules come before the
// compressor rules that share their prefix).
constexpr std::array<std::pair<std::string_view, std::string_view>, 31> kTailRenames = {{
    {"input_layernorm.", "attn_norm."},
    {"post_attention_layernorm.", "ffn_norm."},
    {"attn_hc.", "hc_attn_"},
    {"ffn_hc.", "hc_ffn_"},
    {"self_attn.compressor.indexer.scorer.weights_proj.", "attn.indexer.weights_proj."},
    {"self_attn.compressor.indexer.weights_proj.", "attn.indexer.weights_proj."},
    {"self_attn.compressor.indexer.q_b_proj.", "attn.indexer.wq_b."},
    {"self_attn.compressor.indexer.kv_proj.", "attn.indexer.compressor.wkv."},
    {"self_attn.compressor.indexer.gate_proj.", "attn.indexer.compressor.wgate."},
    {"self_attn.compressor.indexer.kv_norm.", "attn.indexer.compressor.norm."},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
    {"self_attn.compressor.indexer.", "attn.indexer."},
    {"self_attn.compressor.kv_proj.", "attn.compressor.wkv."},
    {"self_attn.compressor.gate_proj.", "attn.compressor.wgate."},
    {"self_attn.compressor.kv_norm.", "attn.compressor.norm."},
    {"self_attn.compressor.position_bias", "attn.compressor.ape"},
    {"self_attn.q_a_proj.", "attn.wq_a."},
    {"self_attn.q_a_norm.", "attn.q_norm."},
    {"self_attn.q_b_proj.", "attn.wq_b."},
    {"self_attn.kv_proj.", "attn.wkv."},
    {"self_attn.o_a_proj.", "attn.wo_a."},
    {"self_attn.o_b_proj.", "attn.wo_b."},
    {"self_attn.sinks", "attn.attn_sink"},
    {"self_attn.", "attn."},
    {"attn.norm.", "attn.kv_norm."},  // transformers 5.17 saves kv_norm as attn.norm (HF_V4_NOTES §9)
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.shared_experts.gate_proj.", "ffn.shared_experts.w1."},
    {"mlp.shared_experts.up_proj.", "ffn.shared_experts.w3."},
    {"mlp.shared_experts.down_proj.", "ffn.shared_experts.w2."},
    {"mlp.", "ffn."},
    {"", ""},
}};

// Top-level HF names (after the `model.` prefix is gone).
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kTopRenames = {{
    {"lm_head.weight", "head.weight"},
    {"embed_tokens.weight", "embed.weight"},
    {"hc_head.hc_fn", "hc_head_fn"},
    {"hc_head.hc_base", "hc_head_base"},
    {"hc_head.hc_scale", "hc_head_scale"},
}};

std::string rename_tail(std::string_view tail, bool& renamed) {
  for (const auto& [from, to] : kTailRenames) {
    if (from.empty()) break;
    if (starts_with(tail, from)) {
      renamed = true;
      return std::string(to) + std::string(tail.substr(from.size()));
    }
  }
  return std::string(tail);
}

}  // namespace

CanonicalName canonical_tensor_name(std::string_view stored) {
  CanonicalName out;
  std::string_view name = stored;
  if (starts_with(name, "model.")) {
    name.remove_prefix(6);
    out.prefixed = true;
  }
  std::string result;
  const std::size_t block = block_prefix_length(name);
  if (block == 0) {
    result = std::string(name);
    // HF's top-level names (lm_head, embed_tokens, hc_head.*) come with the `model.` prefix style
    // even where the modules keep DeepSeek's names (V4.1), so they count as prefixing.
    for (const auto& [from, to] : kTopRenames) {
      if (name == from) {
        result = std::string(to);
        out.prefixed = true;
      }
    }
  } else {
    const std::string_view prefix = name.substr(0, block);
    const std::string_view tail = name.substr(block);
    // HF's stacked routed experts: [E, 2I, K] (w1 rows then w3 rows) and [E, D, I].
    for (const auto& [stacked, kind] :
         {std::pair{std::string_view("mlp.experts.gate_up_proj"), CanonicalName::Kind::kStackedGateUp},
          std::pair{std::string_view("mlp.experts.down_proj"), CanonicalName::Kind::kStackedDown}}) {
      if (tail == stacked || (starts_with(tail, stacked) && tail.substr(stacked.size()) == "_scale_inv")) {
        out.kind = kind;
        out.scale = tail.size() != stacked.size();
        out.name = std::string(prefix) + "ffn.experts";
        out.renamed = true;
        return out;
      }
    }
    result = std::string(prefix) + rename_tail(tail, out.renamed);
  }
  constexpr std::string_view kScaleInv = ".weight_scale_inv";
  if (result.size() > kScaleInv.size() && result.compare(result.size() - kScaleInv.size(), kScaleInv.size(), kScaleInv) == 0) {
    result.replace(result.size() - kScaleInv.size(), kScaleInv.size(), ".scale");
    out.renamed = true;
  }
  out.name = std::move(result);
  return out;
}

std::string expert_tensor_name(std::string_view prefix, std::int64_t expert, std::string_view which, bool scale) {
  return fmt::format("{}.{}.{}.{}", prefix, expert, which, scale ? "scale" : "weight");
}

}  // namespace deepinfer::io
