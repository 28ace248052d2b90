// Tiny random DeepSeek-V4 models for the model tests: a config in the released spelling (parsed by
// io, so the layer schedule is derived as for real checkpoints), seeded random weights for every
// manifest tensor (bf16, or FP8-block + FP4 experts when quantised), an in-memory WeightSource,
// and a writer for an on-disk checkpoint directory.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "io/weight_quant.h"
#include "model/deepseek_v4/weights.h"
#include "model/weight_manifest.h"

namespace deepinfer::model::v4::test {

struct TinySpec {
  std::vector<int> compress_ratios = {0, 4, 8, 4};  // SWA, CSA, HCA (ratio 8), CSA
  int num_hash_layers = 1;
  int vocab = 96;
  int hidden = 64;
  int heads = 4;
  int head_dim = 64;
  int rope_dim = 16;
  int q_lora = 32;
  int o_groups = 2;
  int o_lora = 16;
  int window = 8;
  int index_heads = 2;
  int index_head_dim = 32;
  int index_topk = 3;
  int experts = 4;
  int experts_per_tok = 2;
  int moe_inter = 32;
  int hc_mult = 4;
  bool quantized = false;  // FP8 32x32 blocks + FP4 experts, with a quantization_config
  bool tie_embeddings = false;
  std::uint32_t seed = 1;
};

inline io::ModelConfig tiny_config(const TinySpec& s) {
  nlohmann::json c = {
      {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", s.vocab},
      {"hidden_size", s.hidden}, {"num_hidden_layers", s.compress_ratios.size()}, {"num_attention_heads", s.heads},
      {"num_key_value_heads", 1}, {"head_dim", s.head_dim}, {"qk_rope_head_dim", s.rope_dim},
      {"q_lora_rank", s.q_lora}, {"o_groups", s.o_groups}, {"o_lora_rank", s.o_lora},
      {"sliding_window", s.window}, {"compress_ratios", s.compress_ratios}, {"compress_rope_theta", 160000},
      {"rope_theta", 10000},
      {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 64},
                        {"beta_fast", 32}, {"beta_slow", 1}}},
      {"max_position_embeddings", 1024}, {"index_n_heads", s.index_heads}, {"index_head_dim", s.index_head_dim},
      {"index_topk", s.index_topk}, {"n_routed_experts", s.experts}, {"num_experts_per_tok", s.experts_per_tok},
      {"n_shared_experts", 1}, {"moe_intermediate_size", s.moe_inter}, {"num_hash_layers", s.num_hash_layers},
      {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5}, {"swiglu_limit", 10.0}, {"hc_mult", s.hc_mult}, {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6}, {"rms_norm_eps", 1e-6}, {"num_nextn_predict_layers", 0},
      {"tie_word_embeddings", s.tie_embeddings}};
  if (s.quantized) {
    c["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                                {"activation_scheme", "dynamic"}, {"weight_block_size", {32, 32}}};
    c["expert_dtype"] = "fp4";
  }
  return io::parse_model_config(c.dump(), "tiny config");
}

// Tensors by DeepSeek name.
class MapWeights final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  bool has(std::string_view name) const override { return tensors.count(std::string(name)) != 0; }
  Tensor tensor(std::string_view name) const override {
    const auto it = tensors.find(std::string(name));
    if (it == tensors.end()) throw_error("memory: tensor {} is missing", name);
    return it->second;
  }
  std::string describe() const override { return "memory"; }
};

// Standard deviation of a random float tensor, chosen so activations stay O(1) and logits vary.
inline float tensor_std(const std::string& name, const Shape& shape) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("_fn")) return 0.5f / std::sqrt(static_cast<float>(shape[1]));
  if (ends_with("_base") || ends_with("ape") || ends_with("attn_sink")) return 0.5f;
  if (ends_with("_scale") || ends_with("gate.bias")) return 0.2f;
  if (name == "embed.weight") return 1.0f;
  return shape.ndim() == 2 ? 1.0f / std::sqrt(static_cast<float>(shape[1])) : 0.1f;
}

inline Tensor random_f32(const Shape& shape, std::mt19937& rng, float std, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, std);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_f32(shape, v);
}

inline MapWeights random_weights(const io::ModelConfig& config, std::uint32_t seed) {
  MapWeights out;
  std::mt19937 rng(seed);
  for (const ManifestEntry& e : build_weight_manifest(config)) {
    if (e.format == WeightFormat::kIndex) {  // tid2eid: k distinct experts per token
      Tensor t = Tensor::empty(e.shape, DType::kI64);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(config.n_routed_experts));
      for (std::int64_t r = 0; r < e.shape[0]; ++r) {
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        for (std::int64_t j = 0; j < e.shape[1]; ++j) t.data<std::int64_t>()[r * e.shape[1] + j] = ids[static_cast<std::size_t>(j)];
      }
      out.tensors[e.name] = t;
      continue;
    }
    const bool norm = e.name.size() >= 11 && e.name.compare(e.name.size() - 11, 11, "norm.weight") == 0;
    const bool hc_scale = e.name.find("hc_") != std::string::npos && e.name.find("_scale") != std::string::npos;
    Tensor w = random_f32(e.shape, rng, tensor_std(e.name, e.shape), norm || hc_scale ? 1.0f : 0.0f);
    switch (e.format) {
      case WeightFormat::kFp8Block: {
        auto [q, s] = io::quantize_fp8_block(w, e.block_rows, e.block_cols);
        out.tensors[e.name] = q;
        out.tensors[e.scale_name()] = s;
        break;
      }
      case WeightFormat::kFp4: {
        auto [q, s] = io::quantize_fp4(w);
        out.tensors[e.name] = q;
        out.tensors[e.scale_name()] = s;
        break;
      }
      default:
        out.tensors[e.name] = e.dtype == DType::kF32 ? w : w.to(DType::kBF16);
    }
  }
  return out;
}

// The same model with every quantised weight replaced by its exact bf16 dequantisation.
inline MapWeights dequantized_twin(const MapWeights& quantized, const io::ModelConfig& config) {
  MapWeights out;
  for (const ManifestEntry& e : build_weight_manifest(config)) {
    const Tensor& w = quantized.tensors.at(e.name);
    if (e.format == WeightFormat::kFp8Block) {
      out.tensors[e.name] =
          io::dequantize_fp8_block(w, quantized.tensors.at(e.scale_name()), e.block_rows, e.block_cols, DType::kBF16);
    } else if (e.format == WeightFormat::kFp4) {
      out.tensors[e.name] = io::dequantize_fp4(w, quantized.tensors.at(e.scale_name()), DType::kBF16);
    } else {
      out.tensors[e.name] = w;
    }
  }
  return out;
}

// Writes config.json + model.safetensors into `dir` (created).
inline void write_checkpoint(const std::filesystem::path& dir, const io::ModelConfig& config, const MapWeights& w) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << io::model_config_to_json(config);
  io::SafetensorsWriter writer;
  for (const auto& [name, t] : w.tensors) writer.add(name, t);
  writer.write(dir / "model.safetensors");
}

}  // namespace deepinfer::model::v4::test
