// validate_checkpoint: does a checkpoint hold every manifest tensor in a form the loader accepts?
#include <fmt/format.h>

#include <unordered_set>

#include "io/checkpoint.h"
#include "io/weight_quant.h"
#include "model/weight_manifest.h"

namespace deepinfer::model {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool is_float(DType d) { return d == DType::kBF16 || d == DType::kF16 || d == DType::kF32; }
bool is_scale_dtype(DType d) { return d == DType::kUE8M0 || is_float(d); }

// Checks the scale of a quantised weight; returns "" or what is wrong.
std::string check_scale(const io::Checkpoint& ckpt, const std::string& scale, const Shape& want, StoredWeight& stored) {
  if (!ckpt.has(scale)) return fmt::format("quantised weight without its scale '{}'", scale);
  const Shape got = ckpt.shape(scale);
  if (!is_scale_dtype(ckpt.dtype(scale)))
    return fmt::format("scale '{}' has dtype {}; expected ue8m0 or a float type", scale, dtype_name(ckpt.dtype(scale)));
  if (!(got == want)) return fmt::format("scale '{}' has shape {}; expected {}", scale, got, want);
  stored.has_scale = true;
  stored.bytes += static_cast<std::int64_t>(dtype_bytes(ckpt.dtype(scale), got.numel()));
  return "";
}

// Returns "" if the stored tensor is an accepted form of `entry`, else the reason.
std::string check_entry(const ManifestEntry& entry, const io::Checkpoint& ckpt, StoredWeight& stored) {
  const DType dtype = ckpt.dtype(entry.name);
  const Shape shape = ckpt.shape(entry.name);
  stored.dtype = dtype;
  stored.bytes = static_cast<std::int64_t>(dtype_bytes(dtype, shape.numel()));
  const std::string scale = entry.scale_name().empty() ? entry.name.substr(0, entry.name.rfind(".weight")) + ".scale"
                                                       : entry.scale_name();
  const bool matrix = entry.shape.ndim() == 2;
  if (entry.format == WeightFormat::kIndex) {
    if (dtype != DType::kI64 && dtype != DType::kI32) return fmt::format("dtype {}; expected i64 (or i32)", dtype_name(dtype));
    return shape == entry.shape ? "" : fmt::format("shape {}; expected {}", shape, entry.shape);
  }
  if (is_float(dtype)) {
    if (entry.format == WeightFormat::kFloat && entry.dtype == DType::kF32 && dtype != DType::kF32)
      return fmt::format("dtype {}; expected f32", dtype_name(dtype));
    return shape == entry.shape ? "" : fmt::format("shape {}; expected {}", shape, entry.shape);
  }
  if (dtype == DType::kF8E4M3 && matrix && entry.dtype != DType::kF32) {
    if (!(shape == entry.shape)) return fmt::format("shape {}; expected {}", shape, entry.shape);
    // FP8 experts in place of FP4 are convert.py's 128x128 re-encoding; compressors may be FP8 too.
    const io::QuantizationConfig& q = ckpt.config().quant;
    int br = entry.format == WeightFormat::kFp8Block ? entry.block_rows : q.block_rows;
    int bc = entry.format == WeightFormat::kFp8Block ? entry.block_cols : q.block_cols;
    if (entry.format == WeightFormat::kFp4 || br == 0) br = bc = 128;
    return check_scale(ckpt, scale, Shape{ceil_div(shape[0], br), ceil_div(shape[1], bc)}, stored);
  }
  const bool packed = dtype == DType::kI8 || dtype == DType::kU8;
  if ((packed || dtype == DType::kF4E2M1) && entry.format == WeightFormat::kFp4) {
    stored.dtype = DType::kF4E2M1;
    const Shape want_stored = packed ? Shape{entry.shape[0], entry.shape[1] / 2} : entry.shape;
    if (!(shape == want_stored))
      return fmt::format("packed fp4 of shape {}; expected {} ({} logical)", shape, want_stored, entry.shape);
    return check_scale(ckpt, scale, Shape{entry.shape[0], entry.shape[1] / io::kFp4BlockSize}, stored);
  }
  return fmt::format("stored as {} {}; expected {} {}", dtype_name(dtype), shape, dtype_name(entry.dtype), entry.shape);
}

}  // namespace

ManifestReport validate_checkpoint(const std::vector<ManifestEntry>& manifest, const io::Checkpoint& checkpoint) {
  ManifestReport report;
  report.stored.resize(manifest.size());
  std::unordered_set<std::string> known;
  for (std::size_t i = 0; i < manifest.size(); ++i) {
    const ManifestEntry& entry = manifest[i];
    known.insert(entry.name);
    const auto dot = entry.name.rfind(".weight");
    known.insert(dot == std::string::npos ? entry.name + ".scale" : entry.name.substr(0, dot) + ".scale");
    if (!checkpoint.has(entry.name)) {
      (entry.optional ? report.optional_missing : report.issues).push_back({entry.name, "missing"});
      continue;
    }
    const std::string problem = check_entry(entry, checkpoint, report.stored[i]);
    if (!problem.empty()) report.issues.push_back({entry.name, problem});  // present but wrong: always an error
  }
  for (const auto& name : checkpoint.names())
    if (!known.count(name)) report.unexpected.push_back(name);
  return report;
}

}  // namespace deepinfer::model
