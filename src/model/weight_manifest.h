// The weight manifest: from a ModelConfig, every tensor the model needs (DeepSeek name, logical
// shape, stored format, whether optional, which component it belongs to) for V4 (MODEL_SPEC A2)
// and V4.1 (B2); and the check of a checkpoint against it. Used by `deepinfer inspect`,
// `deepinfer make-tiny` and the model loader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/model_config.h"
#include "tensor/tensor.h"

namespace deepinfer::io {
class Checkpoint;
}

namespace deepinfer::model {

enum class Component : std::uint8_t {
  kEmbed,          // embed.weight
  kAttention,      // projections, norms, sink of the attention block
  kCompressor,     // attn.compressor.*
  kIndexer,        // attn.indexer.* (incl. the V4 indexer's own compressor)
  kRouter,         // ffn.gate.* (weight, bias, bias_vl, tid2eid)
  kRoutedExperts,  // ffn.experts.*
  kSharedExpert,   // ffn.shared_experts.*
  kMhc,            // hc_* mixing parameters, attn_norm / ffn_norm
  kEngram,         // V4.1 layers.L.engram.*
  kHead,           // norm.weight, head.weight, hc_head_*
  kDraft,          // mtp.* (MTP / DSpark stages and their heads)
};
inline constexpr int kNumComponents = 11;
std::string_view component_name(Component component);

// How a tensor is stored in the official release.
enum class WeightFormat : std::uint8_t {
  kFloat,     // a plain tensor: BF16 as released (F16/F32 accepted), or F32 where `dtype` says so
  kFp8Block,  // FP8 E4M3 + "<name minus .weight>.scale" [ceil(out/br), ceil(in/bc)]
  kFp4,       // packed E2M1 as I8 [out, in/2] + ".scale" [out, in/32]
  kIndex,     // integer table (tid2eid: I64 as released, I32 accepted)
};
std::string_view weight_format_name(WeightFormat format);

struct ManifestEntry {
  std::string name;        // DeepSeek name of the tensor ("layers.3.attn.wq_a.weight")
  Shape shape;             // logical shape ([out, in] for linear weights)
  WeightFormat format = WeightFormat::kFloat;
  DType dtype = DType::kBF16;  // released element type: BF16, F32, F8_E4M3, kF4E2M1 (packed), I64
  int block_rows = 0;      // kFp8Block scale blocks; kFp4: 1 x kFp4BlockSize
  int block_cols = 0;
  bool optional = false;   // e.g. the MTP/DSpark stages' extras the engine can run without
  Component component = Component::kAttention;
  int layer = -1;          // backbone layer or num_layers + stage, -1 for global tensors

  // "<stem>.scale" for quantised formats, "" otherwise.
  std::string scale_name() const;
  // Elements of the logical tensor.
  std::int64_t numel() const { return shape.numel(); }
  // Bytes as released (weight + scale).
  std::int64_t released_bytes() const;
};

// Every tensor of the model described by `config`, backbone then draft stages then head; names
// are unique. Routed experts with an unspecified format are listed as FP4 (the release format).
std::vector<ManifestEntry> build_weight_manifest(const io::ModelConfig& config);

// One finding of validate_checkpoint.
struct ManifestIssue {
  std::string tensor;
  std::string message;  // "missing", "shape [..] expected [..]", ...
};

// The stored form of one manifest tensor found in a checkpoint.
struct StoredWeight {
  DType dtype = DType::kBF16;  // stored element type (packed FP4 reported as kF4E2M1)
  bool has_scale = false;
  std::int64_t bytes = 0;      // stored bytes incl. the scale
};

struct ManifestReport {
  std::vector<ManifestIssue> issues;       // required tensors missing; any tensor mis-shaped or mis-typed
  std::vector<ManifestIssue> optional_missing;
  std::vector<std::string> unexpected;     // stored tensors the manifest does not list
  std::vector<StoredWeight> stored;        // parallel to the manifest; bytes 0 if missing
  bool ok() const { return issues.empty(); }
};

// Checks that every manifest tensor exists in `checkpoint` in an accepted stored form: the released
// format, or a dequantised float (BF16/F16/F32) tensor of the logical shape without a scale, or FP8
// block weights in place of FP4 experts (convert.py's lossless re-encoding). Scales must have the
// shape the block size implies and a UE8M0 or float dtype.
ManifestReport validate_checkpoint(const std::vector<ManifestEntry>& manifest, const io::Checkpoint& checkpoint);

}  // namespace deepinfer::model
