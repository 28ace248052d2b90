// Tiny random checkpoints: built-in geometries, deterministic per-tensor random streams, and the
// released storage formats (FP8 block + UE8M0, packed FP4 experts) via io/weight_quant.h.
#include "io/tiny_checkpoint.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <numbers>
#include <system_error>

#include "common/error.h"
#include "io/file_util.h"
#include "io/safetensors_writer.h"
#include "io/weight_quant.h"
#include "model/weight_manifest.h"

namespace deepinfer::io {
namespace {

using model::ManifestEntry;
using model::WeightFormat;

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char ch : text) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  return h;
}

// One random stream per (seed, tensor name): a tensor's values do not depend on which other
// tensors the model has or the order they are written in.
class RandomStream {
 public:
  RandomStream(std::uint64_t seed, std::string_view name) : state_(seed * 0x2545f4914f6cdd1dull ^ fnv1a(name)) {}
  double uniform() { return static_cast<double>(splitmix64(state_) >> 11) * 0x1.0p-53; }  // [0, 1)
  std::uint64_t below(std::uint64_t n) { return splitmix64(state_) % n; }
  float normal() {  // Box-Muller, both outputs used
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform(), u2 = uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1)), angle = 2.0 * std::numbers::pi * u2;
    spare_ = static_cast<float>(radius * std::sin(angle));
    has_spare_ = true;
    return static_cast<float>(radius * std::cos(angle));
  }

 private:
  std::uint64_t state_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Values for one tensor, by its role: norms near 1, embeddings and lookup tables N(0, 1),
// projections N(0, 1/fan_in), small biases, and mixing parameters of moderate size.
std::vector<float> tensor_values(const ManifestEntry& e, RandomStream& rng) {
  std::vector<float> v(static_cast<std::size_t>(e.numel()));
  const bool matrix = e.shape.ndim() == 2;
  float mean = 0.0f, stddev = 0.1f;
  if (ends_with(e.name, "norm.weight")) {
    mean = 1.0f;
    stddev = 0.05f;
  } else if (e.name == "embed.weight" || ends_with(e.name, "markov_w1.weight") || ends_with(e.name, "markov_head.embed.weight") ||
             ends_with(e.name, "engram.embed.weight")) {
    stddev = 1.0f;
  } else if (ends_with(e.name, "attn_sink")) {
    stddev = 0.5f;
  } else if (ends_with(e.name, "gate.bias") || ends_with(e.name, "gate.bias_vl")) {
    stddev = 0.01f;
  } else if (ends_with(e.name, "_scale") || ends_with(e.name, "_base") || ends_with(e.name, ".ape")) {
    stddev = 0.1f;
  } else if (matrix) {
    stddev = 1.0f / std::sqrt(static_cast<float>(e.shape[1]));
  }
  for (auto& x : v) x = mean + stddev * rng.normal();
  return v;
}

// tid2eid: each token gets num_experts_per_tok distinct experts.
Tensor hash_table(const ManifestEntry& e, int experts, RandomStream& rng) {
  Tensor t = Tensor::empty(e.shape, DType::kI64);
  auto* out = t.data<std::int64_t>();
  std::vector<std::int64_t> pool(static_cast<std::size_t>(experts));
  const std::int64_t k = e.shape[1];
  for (std::int64_t row = 0; row < e.shape[0]; ++row) {
    for (int i = 0; i < experts; ++i) pool[static_cast<std::size_t>(i)] = i;
    for (std::int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates
      const auto pick = static_cast<std::size_t>(j) + static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(experts - j)));
      std::swap(pool[static_cast<std::size_t>(j)], pool[pick]);
      out[row * k + j] = pool[static_cast<std::size_t>(j)];
    }
  }
  return t;
}

void add_tensor(SafetensorsWriter& writer, const ManifestEntry& e, const ModelConfig& config, std::uint64_t seed) {
  RandomStream rng(seed, e.name);
  if (e.format == WeightFormat::kIndex) {
    writer.add(e.name, hash_table(e, config.n_routed_experts, rng));
    return;
  }
  const Tensor values = Tensor::from_f32(e.shape, tensor_values(e, rng));
  switch (e.format) {
    case WeightFormat::kFloat: writer.add(e.name, e.dtype == DType::kF32 ? values : values.to(DType::kBF16)); return;
    case WeightFormat::kFp8Block: {
      const auto [weight, scale] = quantize_fp8_block(values, e.block_rows, e.block_cols);
      writer.add(e.name, weight);
      writer.add(e.scale_name(), scale);
      return;
    }
    case WeightFormat::kFp4: {
      const auto [weight, scale] = quantize_fp4(values);
      writer.add(e.name, weight);  // stored as I8 [out, in/2], as DeepSeek does
      writer.add(e.scale_name(), scale);
      return;
    }
    case WeightFormat::kIndex: break;
  }
}

ModelConfig tiny_v4(const TinyModelOptions& o) {
  ModelConfig c;
  c.arch = ModelArch::kDeepseekV4;
  c.compress_ratios = {0, 0, 4, 128, 4};
  c.num_layers = 5;
  c.num_hash_layers = 3;
  c.index_topk = 8;
  if (o.draft == DraftKind::kDSpark) c.draft.target_layer_ids = {2, 3, 4};
  c.rms_norm_eps = 1e-6;
  if (o.fp8) c.quant = QuantizationConfig{true, 128, 128, "ue8m0", ExpertFormat::kFp4};
  return c;
}

ModelConfig tiny_v41(const TinyModelOptions& o) {
  ModelConfig c;
  c.arch = ModelArch::kDeepseekV41;
  c.compress_ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1};
  c.num_layers = 12;
  c.kv_source_layer_ids = {2, 4, 6};
  c.index_source_layer_ids = {2, 4, 6, 9};
  c.candidate_source_layer_id = 6;
  c.candidate_topk_blocks = 4;
  c.candidate_block_size = 8;
  c.index_topk = 8;
  c.rms_norm_eps = 1e-20;
  c.engram = EngramConfig{{1, 4}, {}, 4, 256, 8, 32, 2, 0};
  for (const auto& primes : engram_bucket_primes(c.engram)) {
    std::int64_t rows = 0;
    for (const auto p : primes) rows += p;
    c.engram.num_embeddings.push_back(rows);
  }
  if (o.draft == DraftKind::kDSpark) {
    c.draft.target_layer_ids = {9, 10, 11};
    c.draft.n_routed_experts = 4;
    c.draft.num_experts_per_tok = 2;
  }
  if (o.fp8) c.quant = QuantizationConfig{true, 32, 32, "ue8m0", ExpertFormat::kFp4};
  return c;
}

}  // namespace

std::int64_t padded_vocab_size(std::int64_t tokens) {
  DI_CHECK(tokens > 0, "a tokenizer with {} tokens", tokens);
  return (tokens + 1279) / 1280 * 1280;
}

ModelConfig tiny_model_config(const TinyModelOptions& options) {
  DI_CHECK(options.vocab_size >= 16, "tiny model: vocabulary of {} tokens is too small", options.vocab_size);
  DI_CHECK(options.arch == ModelArch::kDeepseekV4 || options.draft != DraftKind::kMtp,
           "tiny model: DeepSeek-V4.1 drafts with DSpark, not MTP");
  ModelConfig c = options.arch == ModelArch::kDeepseekV4 ? tiny_v4(options) : tiny_v41(options);
  c.vocab_size = options.vocab_size;
  c.hidden_size = 128;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = 128;
  c.rope_head_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 128;
  c.sliding_window = 128;
  c.max_position_embeddings = 1048576;
  c.rope = RopeConfig{10000, 160000, YarnConfig{16, 65536, 32, 1, 1.0}};
  c.index_n_heads = 4;
  c.index_head_dim = 128;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.moe_intermediate_size = 128;
  c.scoring_func = "sqrtsoftplus";
  c.topk_method = "noaux_tc";
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  if (!options.fp8) c.quant.expert_format = ExpertFormat::kBf16;
  DraftConfig& d = c.draft;
  d.kind = options.draft;
  d.num_stages = options.draft == DraftKind::kMtp ? 1 : options.draft == DraftKind::kDSpark ? 3 : 0;
  if (d.kind == DraftKind::kDSpark) {
    d.block_size = 5;
    // DeepSeek's noise token where the vocabulary has it, else the last id.
    d.noise_token_id = c.vocab_size > 128799 ? 128799 : c.vocab_size - 1;
    d.markov_rank = 16;
  }
  // Through the parser: derives the layer roles and validates the whole geometry.
  return parse_model_config(model_config_to_json(c), "tiny model config");
}

TinyCheckpointStats write_random_checkpoint(const ModelConfig& config, const std::filesystem::path& directory,
                                            std::uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) throw_error("{}: cannot create the output directory: {}", directory.string(), ec.message());
  const std::string config_json = model_config_to_json(config);
  write_file_atomically(directory / "config.json", {config_json.data(), config_json.size()});

  const std::vector<ManifestEntry> manifest = model::build_weight_manifest(config);
  std::int64_t total = 0;
  for (const auto& e : manifest) total += e.released_bytes();
  // Two shards with an index, as the release is laid out (sharded loading gets exercised).
  constexpr int kShards = 2;
  TinyCheckpointStats stats;
  stats.shards = kShards;
  std::map<std::string, std::string> weight_map;
  std::size_t next = 0;
  std::int64_t written = 0;
  for (int shard = 0; shard < kShards; ++shard) {
    const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, kShards);
    SafetensorsWriter writer;
    writer.set_metadata("format", "pt");
    while (next < manifest.size() && (shard == kShards - 1 || written < total * (shard + 1) / kShards)) {
      written += manifest[next].released_bytes();
      add_tensor(writer, manifest[next++], config, seed);
    }
    writer.write(directory / file);
    stats.tensors += static_cast<std::int64_t>(writer.size());
    stats.bytes += static_cast<std::int64_t>(writer.data_bytes());
    for (const auto& name : writer.names()) weight_map[name] = file;
  }
  write_safetensors_index(directory / "model.safetensors.index.json", weight_map, static_cast<std::uint64_t>(stats.bytes));
  return stats;
}

}  // namespace deepinfer::io
