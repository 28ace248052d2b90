// Dummy weights: counter-based random values (ops/random_fill.h) over the weight manifest, written
// straight into the release encodings (no quantisation pass): on the GPU by a kernel when the model
// loads onto one, else on every host core; both write the same bytes.
#include "model/deepseek_v4/dummy_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v41/model.h"
#include "model/weight_manifest.h"
#include "ops/cuda/device_loading.h"
#include "ops/random_fill.h"

namespace deepinfer::model::v4 {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

constexpr std::int64_t kChunkBytes = std::int64_t{1} << 22;
// Tensors from this size on are generated in device memory when the model loads onto a GPU.
constexpr std::int64_t kDeviceFillBytes = std::int64_t{1} << 20;

// Calls fill(chunk_index, begin, end) over [0, bytes) in 4 MB chunks on all cores (chunk edges are
// multiples of 8 bytes, so no word or element straddles two).
template <typename Fill>
void parallel_chunks(std::int64_t bytes, const Fill& fill) {
  const std::int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  const auto threads = static_cast<std::int64_t>(
      std::min<std::int64_t>(chunks, std::max(1u, std::thread::hardware_concurrency())));
  if (threads <= 1) {
    for (std::int64_t c = 0; c < chunks; ++c) fill(c, c * kChunkBytes, std::min(bytes, (c + 1) * kChunkBytes));
    return;
  }
  std::vector<std::thread> pool;
  for (std::int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::int64_t c = t; c < chunks; c += threads) fill(c, c * kChunkBytes, std::min(bytes, (c + 1) * kChunkBytes));
    });
  }
  for (auto& th : pool) th.join();
}

// Mean and RMS of a float tensor by its role (as make-tiny: norms near 1, embeddings O(1),
// projections 1/sqrt(fan_in), small biases, moderate mixing parameters).
std::pair<float, float> float_role(const ManifestEntry& e) {
  // Norm weights, and the Engram gate's per-copy RMSNorm weights (q_weight, k_weight).
  if (ends_with(e.name, "norm.weight") || ends_with(e.name, "engram.q_weight") || ends_with(e.name, "engram.k_weight"))
    return {1.0f, 0.05f};
  if (e.name == "embed.weight") return {0.0f, 1.0f};
  if (ends_with(e.name, "attn_sink")) return {0.0f, 0.5f};
  if (ends_with(e.name, "gate.bias")) return {0.0f, 0.01f};
  if (e.shape.ndim() == 2 && !ends_with(e.name, "_fn")) return {0.0f, 1.0f / std::sqrt(static_cast<float>(e.shape[1]))};
  return {0.0f, 0.1f};
}

// Power-of-two UE8M0 code nearest to `value`.
std::uint8_t ue8m0_code(double value) {
  return static_cast<std::uint8_t>(std::clamp(127.0 + std::round(std::log2(value)), 1.0, 254.0));
}

// Host version of ops::fill_random_on_device: the same value of every byte or element.
void fill_random_on_host(Tensor& t, const ops::RandomFillSpec& spec) {
  auto* out = static_cast<std::uint8_t*>(t.raw_data());
  parallel_chunks(static_cast<std::int64_t>(t.nbytes()), [&](std::int64_t, std::int64_t begin, std::int64_t end) {
    switch (spec.kind) {
      case ops::RandomFillKind::kFp8Codes:
      case ops::RandomFillKind::kBytes:
        for (std::int64_t w = begin / 8; w * 8 < end; ++w) {
          const std::uint64_t word = ops::random_word(spec.key, static_cast<std::uint64_t>(w));
          for (std::int64_t i = w * 8; i < std::min(end, w * 8 + 8); ++i)
            out[i] = ops::random_byte(spec, word, static_cast<std::uint64_t>(i));
        }
        break;
      case ops::RandomFillKind::kF32Uniform:
        for (std::int64_t i = begin / 4; i < end / 4; ++i)
          reinterpret_cast<float*>(out)[i] = ops::random_uniform(spec, static_cast<std::uint64_t>(i));
        break;
      case ops::RandomFillKind::kBf16Uniform:
        for (std::int64_t i = begin / 2; i < end / 2; ++i)
          reinterpret_cast<std::uint16_t*>(out)[i] =
              ops::random_bf16_bits(ops::random_uniform(spec, static_cast<std::uint64_t>(i)));
        break;
    }
  });
}

class DummyWeights final : public WeightSource {
 public:
  // device: the CUDA backend the model loads onto (large tensors are made there), or null.
  DummyWeights(const io::ModelConfig& config, std::uint64_t seed, ops::Backend* device)
      : config_(config), seed_(seed), device_(device) {
    for (ManifestEntry& e : build_weight_manifest(config)) {
      const std::string scale = e.scale_name();
      if (!scale.empty()) scales_.emplace(scale, e.name);
      entries_.emplace(e.name, std::move(e));
    }
  }

  bool has(std::string_view name) const override {
    const std::string key(name);
    return entries_.count(key) > 0 || scales_.count(key) > 0;
  }

  Tensor tensor(std::string_view name) const override {
    const std::string key(name);
    if (auto s = scales_.find(key); s != scales_.end()) return scale_of(entries_.at(s->second));
    auto it = entries_.find(key);
    DI_CHECK(it != entries_.end(), "{}: no tensor {} in the weight manifest", describe(), name);
    const ManifestEntry& e = it->second;
    switch (e.format) {
      case WeightFormat::kFloat: return float_tensor(e);
      case WeightFormat::kFp8Block: return random_tensor(e, DType::kF8E4M3, {ops::RandomFillKind::kFp8Codes, 0, 0.0f, 0.0f});
      case WeightFormat::kFp4: return random_tensor(e, DType::kF4E2M1, {ops::RandomFillKind::kBytes, 0, 0.0f, 0.0f});
      case WeightFormat::kIndex: return hash_table(e);
    }
    throw_error("{}: tensor {} has an unknown format", describe(), name);
  }

  std::string describe() const override {
    return "dummy weights (seed " + std::to_string(seed_) + ", " + std::to_string(config_.num_layers) + " layers)";
  }

 private:
  // Made on the device when there is one and the tensor is large, else on the host cores.
  Tensor random_tensor(const ManifestEntry& e, DType dtype, ops::RandomFillSpec spec) const {
    spec.key = ops::random_fill_key(seed_, e.name.data(), e.name.size());
    const bool on_device = device_ != nullptr && static_cast<std::int64_t>(dtype_bytes(dtype, e.numel())) >= kDeviceFillBytes;
    Tensor t = on_device ? device_->empty(e.shape, dtype) : Tensor::empty(e.shape, dtype);
    if (on_device) {
      ops::fill_random_on_device(*device_, t, spec);
    } else {
      fill_random_on_host(t, spec);
    }
    return t;
  }

  // UE8M0 scales that give the weight ~1/sqrt(fan_in) RMS (FP8 codes above: RMS ~1.2; E2M1: ~2.9).
  Tensor scale_of(const ManifestEntry& e) const {
    const double code_rms = e.format == WeightFormat::kFp4 ? 2.93 : 1.2;
    const std::uint8_t code = ue8m0_code(1.0 / (code_rms * std::sqrt(static_cast<double>(e.shape[1]))));
    const Shape shape = e.format == WeightFormat::kFp4
                            ? Shape{e.shape[0], e.shape[1] / e.block_cols}
                            : Shape{(e.shape[0] + e.block_rows - 1) / e.block_rows, (e.shape[1] + e.block_cols - 1) / e.block_cols};
    Tensor t = Tensor::empty(shape, DType::kUE8M0);
    std::memset(t.raw_data(), code, t.nbytes());
    return t;
  }

  // Uniform values with the role's mean and RMS (uniform on ±sqrt(3)·rms), in the released dtype.
  Tensor float_tensor(const ManifestEntry& e) const {
    const auto [mean, rms] = float_role(e);
    const bool f32 = e.dtype == DType::kF32;
    return random_tensor(e, f32 ? DType::kF32 : DType::kBF16,
                         {f32 ? ops::RandomFillKind::kF32Uniform : ops::RandomFillKind::kBf16Uniform, 0, mean,
                          std::sqrt(3.0f) * rms});
  }

  // tid2eid [vocab, k]: k distinct experts per token.
  Tensor hash_table(const ManifestEntry& e) const {
    Tensor t = Tensor::empty(e.shape, DType::kI64);
    const std::int64_t k = e.shape[1], experts = config_.n_routed_experts;
    DI_CHECK(k <= experts, "{}: tid2eid needs {} distinct experts of {}", describe(), k, experts);
    const std::uint64_t key = ops::random_fill_key(seed_, e.name.data(), e.name.size());
    std::uint64_t counter = 0;
    auto* out = t.data<std::int64_t>();
    for (std::int64_t row = 0; row < e.shape[0]; ++row) {
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t pick = 0;
        do {
          pick = static_cast<std::int64_t>(ops::random_word(key, counter++) % static_cast<std::uint64_t>(experts));
        } while (std::find(out + row * k, out + row * k + j, pick) != out + row * k + j);
        out[row * k + j] = pick;
      }
    }
    return t;
  }

  io::ModelConfig config_;
  std::uint64_t seed_;
  ops::Backend* device_;
  std::unordered_map<std::string, ManifestEntry> entries_;
  std::unordered_map<std::string, std::string> scales_;  // scale name -> weight name
};

}  // namespace

namespace {

// V4.1: the CSA2 source lists and Engram layers of the first `layers` layers. Sources are found by
// looking back (nearest at or before a layer), so a prefix keeps every kept layer's sources; the
// candidate source goes when it is cut (only later Reindex layers read its mask). Engram tables take
// consecutive bucket primes in layer order, so the kept layers' row counts stay exact.
void cut_v41_schedule(io::ModelConfig& c, int layers) {
  const auto cut = [layers](int id) { return id >= layers; };
  std::erase_if(c.kv_source_layer_ids, cut);
  std::erase_if(c.index_source_layer_ids, cut);
  if (cut(c.candidate_source_layer_id)) {
    c.candidate_source_layer_id = -1;
    c.candidate_topk_blocks = c.candidate_block_size = 0;
  }
  io::EngramConfig& e = c.engram;
  const auto kept = static_cast<std::size_t>(std::find_if(e.layer_ids.begin(), e.layer_ids.end(), cut) - e.layer_ids.begin());
  e.layer_ids.resize(kept);
  e.num_embeddings.resize(kept);
}

// Every kept layer must keep the role it has in the full model (attention kind, KV / index source,
// Full / Reuse / Reindex, candidate source, hash routing, Engram), or the cut model would not be a
// prefix of the real one.
void check_roles_kept(const io::ModelConfig& full, const io::ModelConfig& cut) {
  for (int i = 0; i < cut.num_layers; ++i) {
    const io::LayerSpec &a = full.layer(i), &b = cut.layer(i);
    const auto role = [](const io::LayerSpec& s) {
      return fmt::format("{} ratio {}, KV source {}, index source {}{}{}{}", io::csa2_role_name(s.role), s.compress_ratio,
                         s.kv_source_layer, s.index_source_layer, s.candidate_source ? ", candidate source" : "",
                         s.hash_routed ? ", hash-routed" : "", s.engram ? ", Engram" : "");
    };
    DI_CHECK(a == b, "dummy weights: cutting to {} layers changes layer {}: {} in the full model, {} after the cut",
             cut.num_layers, i, role(a), role(b));
  }
}

}  // namespace

io::ModelConfig dummy_model_config(const io::ModelConfig& config, int layers) {
  const bool v41 = config.arch == io::ModelArch::kDeepseekV41;
  DI_CHECK(config.arch == io::ModelArch::kDeepseekV4 || v41, "dummy weights: model type {} is not DeepSeek-V4 or V4.1",
           io::model_arch_name(config.arch));
  DI_CHECK(layers <= config.num_layers, "dummy weights: {} layers requested, the config has {}", layers,
           config.num_layers);
  io::ModelConfig c = config;
  if (layers > 0) {
    c.num_layers = layers;
    c.compress_ratios.resize(static_cast<std::size_t>(layers));
    c.num_hash_layers = std::min(c.num_hash_layers, layers);
    if (v41) cut_v41_schedule(c, layers);
  }
  c.draft = io::DraftConfig{};
  // The release formats: FP8 E4M3 dense weights in V4's 128x128 / V4.1's 32x32 blocks, UE8M0 scales, FP4 experts.
  const int block = v41 ? 32 : 128;
  c.quant = io::QuantizationConfig{true, block, block, "ue8m0", io::ExpertFormat::kFp4};
  // Through the parser: re-derives the layer roles and validates the geometry.
  io::ModelConfig out = io::parse_model_config(io::model_config_to_json(c), "dummy model config");
  check_roles_kept(config, out);
  return out;
}

std::unique_ptr<WeightSource> dummy_weights(const io::ModelConfig& config, std::uint64_t seed, ops::Backend* device) {
  return std::make_unique<DummyWeights>(config, seed, device != nullptr && !device->device().is_cpu() ? device : nullptr);
}

std::unique_ptr<SequenceModel> load_dummy_model(const io::ModelConfig& config, std::uint64_t seed, ops::Backend& backend,
                                                NumericMode mode) {
  const auto weights = dummy_weights(config, seed, &backend);
  const Numerics numerics = Numerics::for_mode(mode, config);
  if (config.arch != io::ModelArch::kDeepseekV41) return Model::load(*weights, config, backend, numerics);
  std::shared_ptr<const engram::EngramHasher> hasher;
  if (!config.engram.layer_ids.empty()) {
    // No tokenizer: token t hashes as compressed id t mod the stated compressed vocabulary (every id
    // of the map is used, as the real map's are), or as itself when the config states none.
    const std::int64_t size = config.engram.compressed_vocab_size > 0 ? config.engram.compressed_vocab_size : config.vocab_size;
    std::vector<std::int32_t> cmap(static_cast<std::size_t>(config.vocab_size));
    for (std::size_t t = 0; t < cmap.size(); ++t) cmap[t] = static_cast<std::int32_t>(static_cast<std::int64_t>(t) % size);
    hasher = std::make_shared<const engram::EngramHasher>(config, std::move(cmap), size);
  }
  return v41::Model::load(*weights, config, backend, numerics, std::move(hasher));
}

}  // namespace deepinfer::model::v4
