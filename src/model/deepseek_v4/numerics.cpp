// Numeric modes: names, defaults and the per-mode switches.
#include "model/deepseek_v4/numerics.h"

#include "common/error.h"

namespace deepinfer::model::v4 {

std::string_view numeric_mode_name(NumericMode mode) {
  return mode == NumericMode::kExact ? "exact" : "reference-qat";
}

NumericMode parse_numeric_mode(std::string_view text) {
  if (text == "exact") return NumericMode::kExact;
  if (text == "reference-qat") return NumericMode::kReferenceQat;
  throw_error("unknown numeric mode '{}' (use exact or reference-qat)", text);
}

NumericMode default_numeric_mode(const io::ModelConfig& config) {
  return config.quant.fp8 ? NumericMode::kReferenceQat : NumericMode::kExact;
}

Numerics Numerics::for_mode(NumericMode mode, const io::ModelConfig& config) {
  Numerics n;
  n.mode = mode;
  if (mode == NumericMode::kExact) return n;
  n.act = DType::kBF16;
  n.round_probs_bf16 = true;
  if (config.arch == io::ModelArch::kDeepseekV41) {  // module-level fp8/fp4 block 32 (MODEL_SPEC B1.2, B3)
    n.linear_act_block = 32;
    n.kv_quant_block = 32;
    n.kv_quant_whole = true;
    n.compressed_kv_fp4 = true;
    n.indexer_fp4 = true;
    return n;
  }
  // The reference quantises linear inputs in blocks of its FP8 weight block (V4: 128).
  n.linear_act_block = config.quant.block_cols > 0 ? config.quant.block_cols : 128;
  n.kv_quant_block = 64;
  n.indexer_rotate_fp4 = true;
  return n;
}

}  // namespace deepinfer::model::v4
