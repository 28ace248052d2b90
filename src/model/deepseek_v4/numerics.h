// The two numeric modes of the V4 forward pass and what each means op by op:
//  * exact: weights as stored (dequantised exactly), activations in f32 everywhere — what HF
//    transformers' DeepseekV4ForCausalLM computes in float32;
//  * reference-qat: the quantise→dequantise steps of DeepSeek's inference/model.py (MODEL_SPEC
//    A3.2): bf16 activations, FP8 inputs of quantised linears, FP8 KV (NoPE dims), indexer
//    Hadamard + FP4, bf16 attention probabilities. On V4.1 (MODEL_SPEC B3): FP8 block 32 for
//    linear inputs and the whole SWA K=V row, FP4 (block 16, E4M3 scales) compressed KV, FP4
//    indexer queries/keys without Hadamard.
#pragma once

#include <cstdint>
#include <string_view>

#include "io/model_config.h"
#include "tensor/dtype.h"

namespace deepinfer::model::v4 {

enum class NumericMode : std::uint8_t { kExact, kReferenceQat };

// "exact" / "reference-qat"
std::string_view numeric_mode_name(NumericMode mode);
// Parses a --mode value; throws deepinfer::Error listing the accepted values.
NumericMode parse_numeric_mode(std::string_view text);
// reference-qat for a quantised checkpoint (quantization_config present), exact otherwise.
NumericMode default_numeric_mode(const io::ModelConfig& config);

// What a mode switches on, resolved once per model.
struct Numerics {
  NumericMode mode = NumericMode::kExact;
  DType act = DType::kF32;       // activation storage (values are rounded to it after every op)
  int linear_act_block = 0;      // FP8 fake-quant block of quantised linears' inputs, 0 = off
  int kv_quant_block = 0;        // FP8 fake-quant block of the NoPE dims of SWA / compressed KV
  bool kv_quant_whole = false;   // V4.1: the FP8 fake quant of SWA K=V covers the RoPE dims too
  bool compressed_kv_fp4 = false;   // V4.1: compressed KV as FP4 (block 16, E4M3 scales)
  bool indexer_rotate_fp4 = false;  // Hadamard + FP4 (block 32, UE8M0) on indexer queries and keys
  bool indexer_fp4 = false;         // V4.1: FP4 (block 32, UE8M0) on indexer queries and keys, no Hadamard
  bool round_probs_bf16 = false;    // attention probabilities rounded to bf16 before P·V

  static Numerics for_mode(NumericMode mode, const io::ModelConfig& config);
};

}  // namespace deepinfer::model::v4
