// ModelConfig: the typed configuration of a DeepSeek-V4 (deepseek_v4) or V4.1 (deepseek_v41)
// checkpoint, parsed from config.json in any of the spellings found in the wild, plus the per-layer
// schedule derived from it (MODEL_SPEC A1, B1).
//
// Accepted spellings (all produce the same ModelConfig; a field given in two spellings with
// different values is an error naming both):
//  * the released config.json (HF-style names with DeepSeek's legacy fields: compress_ratios,
//    num_hash_layers, qk_rope_head_dim, rope_scaling; V4.1 nests the text model under text_config);
//  * DeepSeek's inference/config.json (ModelArgs names: dim, n_layers, n_heads, rope_head_dim,
//    window_size, rope_factor, original_seq_len, kv_source_layers, ...; no model_type: V4.1 is told
//    apart by its CSA2 fields);
//  * HF transformers' save_pretrained spelling (layer_types, compress_rates, mlp_layer_types,
//    partial_rotary_factor, rope_parameters {main, compress}).
// Required fields that are missing are errors; nothing falls back to the toy defaults of ModelArgs
// or to HF's class defaults (MODEL_SPEC P17). The only defaults are values that DeepSeek's
// reference code fixes and its inference/config.json therefore omits: num_key_value_heads 1,
// rms_norm_eps (V4 1e-6; V4.1 always states it), hc_eps 1e-6, topk_method noaux_tc,
// norm_topk_prob true, gate_temp 1.0, tie_word_embeddings false, YaRN attention_factor 1.0,
// max_position_embeddings = original_seq_len * rope_factor, and the FP8 block of a
// quantised inference config (V4 128, V4.1 32).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::io {

enum class ModelArch : std::uint8_t { kDeepseekV4, kDeepseekV41 };
// "deepseek_v4" / "deepseek_v41"
std::string_view model_arch_name(ModelArch arch);

enum class AttentionKind : std::uint8_t {
  kSlidingWindow,      // ratio 0: the 128-token window only (V4, V4.1, every MTP/DSpark stage)
  kCompressedSparse,   // V4 CSA: ratio 4, overlapping compressor + lightning indexer
  kHeavilyCompressed,  // V4 HCA: ratio 128, compressor without indexer or overlap
  kSharedCompressed,   // V4.1 CSA2: ratio 2 or 1, reads the compressed KV of the nearest KV source
};
// "SWA", "CSA", "HCA", "CSA2"
std::string_view attention_kind_name(AttentionKind kind);

// V4.1 CSA2 mode of a compressed layer (MODEL_SPEC B1.3).
enum class Csa2Role : std::uint8_t {
  kNone,     // not a V4.1 compressed layer
  kFull,     // KV source: owns a compressor, index keys (wk) and, when an index source, an indexer
  kReuse,    // reads the nearest source's KV and the nearest index source's top-k
  kReindex,  // owns indexer queries (wq_b, weights_proj), scores against the source's index keys
};
// "-", "Full", "Reuse", "Reindex"
std::string_view csa2_role_name(Csa2Role role);

struct LayerSpec {
  int index = 0;           // 0-based; draft stages continue after the backbone (43, 44, ...)
  int compress_ratio = 0;  // 0 (window only), 4 / 128 (V4), 2 / 1 (V4.1)
  AttentionKind attention = AttentionKind::kSlidingWindow;
  Csa2Role role = Csa2Role::kNone;
  bool owns_compressor = false;   // has attn.compressor.* weights and a compressed-KV cache
  bool has_indexer = false;       // computes its own top-k (attn.indexer.wq_b / weights_proj)
  bool owns_index_keys = false;   // V4: indexer's own compressor; V4.1: attn.indexer.wk / k_norm
  bool candidate_source = false;  // V4.1: builds the candidate-block pool
  int kv_source_layer = -1;       // layer whose compressed KV it attends to (itself for V4), -1: none
  int index_source_layer = -1;    // layer whose top-k it uses (itself if it has an indexer), -1: none
  bool hash_routed = false;       // V4: MoE routed by the token-id table ffn.gate.tid2eid
  bool engram = false;            // V4.1: an Engram read precedes the block
  double rope_theta = 0;          // ratio 0: rope_theta, plain; else compress_rope_theta with YaRN
  bool yarn = false;

  bool operator==(const LayerSpec&) const = default;
};

struct YarnConfig {
  double factor = 0;
  std::int64_t original_max_position_embeddings = 0;
  double beta_fast = 0;
  double beta_slow = 0;
  double attention_factor = 1.0;  // the reference applies no mscale
  bool operator==(const YarnConfig&) const = default;
};

struct RopeConfig {
  double theta = 0;           // ratio-0 layers
  double compress_theta = 0;  // compressed layers
  std::optional<YarnConfig> yarn;  // applied to compressed layers only
  bool operator==(const RopeConfig&) const = default;
};

// How routed experts are stored. kUnspecified: the config does not say (the V4 preview's
// config.json omits expert_dtype); the checkpoint's tensors decide.
enum class ExpertFormat : std::uint8_t { kUnspecified, kFp4, kFp8, kBf16 };
std::string_view expert_format_name(ExpertFormat format);

struct QuantizationConfig {
  bool fp8 = false;         // dense projections are FP8 E4M3 with per-block scales
  int block_rows = 0;       // weight_block_size (V4 128x128, V4.1 32x32); 0 when not fp8
  int block_cols = 0;
  std::string scale_fmt;    // "ue8m0" (power-of-two scales); "" when not fp8 or not stated
  ExpertFormat expert_format = ExpertFormat::kUnspecified;
  bool operator==(const QuantizationConfig&) const = default;
};

enum class DraftKind : std::uint8_t { kNone, kMtp, kDSpark };
std::string_view draft_kind_name(DraftKind kind);

// Speculative-decoding heads stored as mtp.{s}.* (MODEL_SPEC A2.4, A4.8, A4.9, B4.8). The stage
// count comes from the stages' compress_ratios entries, n_mtp_layers, V4.1's
// num_nextn_predict_layers or (V4 DSpark, HF spelling) the number of tap layers — never from
// V4's num_nextn_predict_layers when DSpark fields are present (P27).
struct DraftConfig {
  DraftKind kind = DraftKind::kNone;
  int num_stages = 0;
  int block_size = 0;          // DSpark: tokens drafted per step
  std::int64_t noise_token_id = -1;
  std::vector<int> target_layer_ids;  // DSpark taps
  int markov_rank = 0;
  int n_routed_experts = 0;    // the stages' expert bank (V4: the backbone's; V4.1: its own)
  int num_experts_per_tok = 0;
  std::vector<LayerSpec> stages;  // window-only blocks, index = num_layers + s
  bool operator==(const DraftConfig&) const = default;
};

struct EngramConfig {
  std::vector<int> layer_ids;
  std::vector<std::int64_t> num_embeddings;  // table rows per Engram layer
  int max_ngram_size = 0;
  std::int64_t vocab_size = 0;  // prime search start
  int n_heads = 0;
  int head_dim = 0;
  std::int64_t pad_token_id = -1;
  std::int64_t compressed_vocab_size = 0;  // 0: not stated (derive from the tokenizer)
  bool operator==(const EngramConfig&) const = default;
};

// V4.1's vision tower, recorded so `inspect` can report it; the engine is text-only.
struct VisionConfig {
  bool present = false;
  int num_layers = 0;
  int hidden_size = 0;
  std::int64_t image_token_id = -1;  // top-level image_token_id (-1: not stated)
  bool operator==(const VisionConfig&) const = default;
};

struct ModelConfig {
  ModelArch arch = ModelArch::kDeepseekV4;

  std::int64_t vocab_size = 0;
  int hidden_size = 0;        // D
  int num_layers = 0;         // backbone layers (draft stages not included)
  int num_heads = 0;          // H
  int num_kv_heads = 0;       // 1 (shared K=V latent)
  int head_dim = 0;           // 512
  int rope_head_dim = 0;      // 64: RoPE on the last rope_head_dim dims of each head
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  int sliding_window = 0;
  std::int64_t max_position_embeddings = 0;
  RopeConfig rope;

  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;

  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int n_shared_experts = 0;
  int moe_intermediate_size = 0;
  int num_hash_layers = 0;    // V4: layers [0, num_hash_layers) route by tid2eid; V4.1: 0
  std::string scoring_func;   // "sqrtsoftplus"
  std::string topk_method;    // "noaux_tc"
  bool norm_topk_prob = true;
  double routed_scaling_factor = 0;
  double swiglu_limit = 0;
  double gate_temp = 1.0;

  int hc_mult = 0;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 0;
  double rms_norm_eps = 0;
  bool tie_word_embeddings = false;

  std::vector<int> compress_ratios;  // one per backbone layer

  // V4.1 CSA2 schedule (empty / -1 for V4).
  std::vector<int> kv_source_layer_ids;
  std::vector<int> index_source_layer_ids;
  int candidate_source_layer_id = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;

  EngramConfig engram;
  VisionConfig vision;
  QuantizationConfig quant;
  DraftConfig draft;

  std::vector<LayerSpec> layers;  // derived, one per backbone layer

  bool operator==(const ModelConfig&) const = default;
  const LayerSpec& layer(int index) const;
};

// The bucket primes of every Engram layer (MODEL_SPEC B4.7): consecutive primes above
// engram.vocab_size, never reused; each layer takes (max_ngram_size - 1) * n_heads of them in
// (n-gram size, head) order, layers in the order of engram.layer_ids. A layer's table has as many
// rows as its primes sum to (parsing checks engram_num_embeddings against this).
std::vector<std::vector<std::int64_t>> engram_bucket_primes(const EngramConfig& engram);

// Parses config.json text; `source` (a path or label) names the file in error messages.
ModelConfig parse_model_config(std::string_view json_text, std::string_view source);
// Reads and parses a config.json file.
ModelConfig load_model_config(const std::filesystem::path& path);

// Serialises a config in the released config.json spelling (V4: flat HF-style names with
// compress_ratios / num_hash_layers / rope_scaling; V4.1: text_config nesting), so that
// parse_model_config(model_config_to_json(c)) == c.
std::string model_config_to_json(const ModelConfig& config);

// Which spelling a config.json uses, for `inspect`: "deepseek-release", "deepseek-inference"
// or "hf-transformers".
std::string detect_config_spelling(std::string_view json_text);

}  // namespace deepinfer::io
