// Checkpoint: config.json + safetensors of a model directory, indexed by DeepSeek tensor names.
#include "io/checkpoint.h"

#include <algorithm>
#include <system_error>

#include "common/error.h"
#include "common/logging.h"
#include "io/tensor_names.h"

namespace deepinfer::io {

std::string_view name_layout_name(NameLayout layout) {
  switch (layout) {
    case NameLayout::kDeepSeek: return "DeepSeek names";
    case NameLayout::kDeepSeekPrefixed: return "DeepSeek names with the model. prefix";
    case NameLayout::kHuggingFace: return "HF transformers names";
  }
  return "?";
}

Checkpoint Checkpoint::open(const std::filesystem::path& directory) {
  std::error_code ec;
  if (!std::filesystem::exists(directory, ec)) throw_error("{}: no such model directory", directory.string());
  if (!std::filesystem::is_directory(directory, ec)) throw_error("{}: not a directory", directory.string());
  const auto config_path = directory / "config.json";
  if (!std::filesystem::exists(config_path, ec))
    throw_error("{}: no config.json (a model directory holds config.json and its safetensors)", directory.string());
  Checkpoint ckpt;
  ckpt.directory_ = directory;
  ModelConfig config = load_model_config(config_path);
  ckpt.files_ = std::make_shared<const ShardedSafetensors>(ShardedSafetensors::open(directory));
  bool prefixed = false, renamed = false;
  for (const auto& stored : ckpt.files_->names()) {
    const CanonicalName canonical = canonical_tensor_name(stored);
    prefixed = prefixed || canonical.prefixed;
    renamed = renamed || canonical.renamed;
    ckpt.add_stored(stored, canonical);
  }
  ckpt.layout_ = renamed ? NameLayout::kHuggingFace : prefixed ? NameLayout::kDeepSeekPrefixed : NameLayout::kDeepSeek;
  ckpt.config_ = std::make_shared<const ModelConfig>(std::move(config));
  ckpt.resolve_expert_format();
  log::info("{}: {} tensors ({}), {}", directory.string(), ckpt.tensors_.size(), name_layout_name(ckpt.layout_),
            model_arch_name(ckpt.config_->arch));
  return ckpt;
}

void Checkpoint::add_stored(const std::string& stored, const CanonicalName& canonical) {
  const auto add = [&](std::string name, Source source) {
    const auto [it, inserted] = tensors_.emplace(name, source);
    if (!inserted)
      throw_error("{}: stored tensors '{}' and '{}' both map to '{}'", directory_.string(), it->second.stored, stored, name);
  };
  if (canonical.kind == CanonicalName::Kind::kPlain) {
    add(canonical.name, Source{stored});
    return;
  }
  const SafetensorsEntry& entry = files_->entry(stored);
  const bool gate_up = canonical.kind == CanonicalName::Kind::kStackedGateUp;
  if (entry.shape.ndim() < 2 || (gate_up && entry.shape[1] % 2 != 0))
    throw_error("{}: stacked expert tensor '{}' has shape {}; expected [experts, {}rows, ...]", files_->file_of(stored).string(),
                stored, entry.shape, gate_up ? "2 x " : "");
  for (std::int64_t e = 0; e < entry.shape[0]; ++e) {
    if (gate_up) {
      add(expert_tensor_name(canonical.name, e, "w1", canonical.scale), Source{stored, Source::Slice::kFirstHalf, e});
      add(expert_tensor_name(canonical.name, e, "w3", canonical.scale), Source{stored, Source::Slice::kSecondHalf, e});
    } else {
      add(expert_tensor_name(canonical.name, e, "w2", canonical.scale), Source{stored, Source::Slice::kExpert, e});
    }
  }
}

// The V4 preview's config.json does not state how routed experts are stored; its tensors do.
void Checkpoint::resolve_expert_format() {
  if (config_->quant.expert_format != ExpertFormat::kUnspecified) return;
  for (const auto& layer : config_->layers) {
    const std::string name = expert_tensor_name(fmt::format("layers.{}.ffn.experts", layer.index), 0, "w1", false);
    if (!has(name)) continue;
    ModelConfig resolved = *config_;
    const DType stored = dtype(name);
    if (stored == DType::kI8 || stored == DType::kU8 || stored == DType::kF4E2M1) resolved.quant.expert_format = ExpertFormat::kFp4;
    else if (stored == DType::kF8E4M3) resolved.quant.expert_format = ExpertFormat::kFp8;
    else resolved.quant.expert_format = ExpertFormat::kBf16;
    log::info("{}: routed experts are stored as {} ({})", directory_.string(), expert_format_name(resolved.quant.expert_format),
              dtype_name(stored));
    config_ = std::make_shared<const ModelConfig>(std::move(resolved));
    return;
  }
}

const Checkpoint::Source& Checkpoint::source(std::string_view name) const {
  const auto it = tensors_.find(std::string(name));
  if (it == tensors_.end()) throw_error("{}: the checkpoint has no tensor '{}'", directory_.string(), name);
  return it->second;
}

Tensor Checkpoint::tensor(std::string_view name) const {
  const Source& src = source(name);
  const Tensor stored = files_->tensor(src.stored);
  switch (src.slice) {
    case Source::Slice::kWhole: return stored;
    case Source::Slice::kExpert: return stored.select(src.expert);
    case Source::Slice::kFirstHalf: return stored.select(src.expert).narrow(0, 0, stored.dim(1) / 2);
    case Source::Slice::kSecondHalf: return stored.select(src.expert).narrow(0, stored.dim(1) / 2, stored.dim(1) / 2);
  }
  throw_error("{}: tensor '{}': bad slice", directory_.string(), name);
}

DType Checkpoint::dtype(std::string_view name) const { return files_->entry(source(name).stored).dtype; }

Shape Checkpoint::shape(std::string_view name) const {
  const Source& src = source(name);
  const Shape& stored = files_->entry(src.stored).shape;
  if (src.slice == Source::Slice::kWhole) return stored;
  Shape out(std::span<const std::int64_t>(stored.dims().subspan(1)));
  if (src.slice != Source::Slice::kExpert) out[0] /= 2;
  return out;
}

std::string Checkpoint::describe(std::string_view name) const {
  const Source& src = source(name);
  std::string where = fmt::format("{}: {}", files_->file_of(src.stored).filename().string(), src.stored);
  switch (src.slice) {
    case Source::Slice::kWhole: return where;
    case Source::Slice::kExpert: return fmt::format("{}[{}]", where, src.expert);
    case Source::Slice::kFirstHalf: return fmt::format("{}[{}], first half of the rows", where, src.expert);
    case Source::Slice::kSecondHalf: return fmt::format("{}[{}], second half of the rows", where, src.expert);
  }
  return where;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, src] : tensors_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace deepinfer::io
