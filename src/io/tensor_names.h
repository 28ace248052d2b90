// Tensor-name mapping: every checkpoint is addressed by DeepSeek's own names
// ("layers.3.attn.wq_a.weight", "layers.3.ffn.experts.7.w1.scale"), whether it stores them as
// DeepSeek does (no prefix), with HF's `model.` prefix, or under HF transformers' renamed modules
// (MODEL_SPEC A2.5: self_attn.q_a_proj, mlp.experts.gate_up_proj, weight_scale_inv, ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::io {

// How one stored tensor maps onto DeepSeek names.
struct CanonicalName {
  enum class Kind : std::uint8_t {
    kPlain,          // one stored tensor = one DeepSeek tensor (`name`)
    kStackedGateUp,  // HF mlp.experts.gate_up_proj[_scale_inv]: [E, 2I, ...] = per expert w1 rows then w3 rows
    kStackedDown,    // HF mlp.experts.down_proj[_scale_inv]: [E, D, ...] = per expert w2
  };
  Kind kind = Kind::kPlain;
  // kPlain: the DeepSeek name. Stacked: the prefix "layers.L.ffn.experts" (expert e's names are
  // "<prefix>.<e>.w1.weight" etc.).
  std::string name;
  bool scale = false;     // stacked only: the tensor holds scales (…_scale_inv), not weights
  bool prefixed = false;  // HF's top-level naming: the `model.` prefix, lm_head, embed_tokens, hc_head.*
  bool renamed = false;   // HF's module names inside blocks (self_attn, mlp, q_a_proj, weight_scale_inv, ...)
};

// Maps a stored tensor name to DeepSeek's naming. Names that are already DeepSeek's (including
// V4.1's, V4-only and V4.1-only ones alike) come back unchanged; names this mapping does not
// know keep their (prefix-stripped) spelling.
CanonicalName canonical_tensor_name(std::string_view stored);

// "layers.3.ffn.experts.7.w1.weight" for (prefix "layers.3.ffn.experts", expert 7, "w1", scale=false).
std::string expert_tensor_name(std::string_view prefix, std::int64_t expert, std::string_view which, bool scale);

}  // namespace deepinfer::io
