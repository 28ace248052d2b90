// A model directory opened for reading: its config.json (as io::ModelConfig) and its safetensors
// (single or sharded), with every tensor addressed by DeepSeek's own name.
//
// Interface for the rest of the engine:
//   io::Checkpoint ckpt = io::Checkpoint::open(model_dir);
//   const io::ModelConfig& cfg = ckpt.config();
//   if (ckpt.has("layers.0.attn.wq_a.scale")) ...
//   Tensor w = ckpt.tensor("layers.0.attn.wq_a.weight");   // zero-copy view, stored dtype
// Names: whatever the files store — DeepSeek's names, the same with HF's `model.` prefix, or HF
// transformers' renamed modules (self_attn.q_a_proj, mlp.experts.gate_up_proj, weight_scale_inv,
// ...) — is reachable under DeepSeek's name. HF's stacked experts come back as per-expert views
// ("layers.L.ffn.experts.E.w1.weight" is rows [0, I) of gate_up_proj[E]). Views are read-only and
// keep the files mapped. Routed-expert FP4 weights come back as stored (I8 [out, in/2]); wrap them
// with io::fp4_view for kF4E2M1 [out, in]. Dequantise with io/weight_quant.h.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/tensor_names.h"
#include "tensor/tensor.h"

namespace deepinfer::io {

// How the checkpoint's tensor names were spelled on disk.
enum class NameLayout : std::uint8_t {
  kDeepSeek,        // DeepSeek's names, no prefix (the official release)
  kDeepSeekPrefixed,  // DeepSeek's module names under `model.` (what HF writes for V4.1)
  kHuggingFace,     // HF transformers' renamed modules (DeepseekV4ForCausalLM state dict)
};
std::string_view name_layout_name(NameLayout layout);

class Checkpoint {
 public:
  // Opens `directory`: reads config.json and maps the safetensors files. Errors name the missing
  // config.json / shard, the bad field, or two stored tensors that map to the same DeepSeek name.
  static Checkpoint open(const std::filesystem::path& directory);

  const ModelConfig& config() const { return *config_; }
  const std::filesystem::path& directory() const { return directory_; }
  NameLayout layout() const { return layout_; }

  bool has(std::string_view name) const { return tensors_.count(std::string(name)) != 0; }
  // The tensor stored under DeepSeek name `name`, as a zero-copy view with its stored dtype. Throws
  // deepinfer::Error naming the tensor and the directory if absent.
  Tensor tensor(std::string_view name) const;
  // DType and shape without building a view.
  DType dtype(std::string_view name) const;
  Shape shape(std::string_view name) const;
  // Where `name` is stored: "file.safetensors: stored.name" (plus the slice for stacked experts).
  std::string describe(std::string_view name) const;
  // Every DeepSeek name present, sorted.
  std::vector<std::string> names() const;
  const ShardedSafetensors& files() const { return *files_; }

 private:
  struct Source {
    std::string stored;  // name in the file
    enum class Slice : std::uint8_t { kWhole, kFirstHalf, kSecondHalf, kExpert } slice = Slice::kWhole;
    std::int64_t expert = -1;  // stacked tensors: which expert (dim 0)
  };
  std::filesystem::path directory_;
  std::shared_ptr<const ModelConfig> config_;
  std::shared_ptr<const ShardedSafetensors> files_;
  std::unordered_map<std::string, Source> tensors_;
  NameLayout layout_ = NameLayout::kDeepSeek;

  const Source& source(std::string_view name) const;
  void add_stored(const std::string& stored, const CanonicalName& canonical);
  void resolve_expert_format();
};

}  // namespace deepinfer::io
