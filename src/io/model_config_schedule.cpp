// The derived parts of ModelConfig: Engram / vision fields, the MTP / DSpark stage count, and the
// per-layer roles (V4: SWA / CSA / HCA and hash routing; V4.1: CSA2 Full / Reuse / Reindex).
#include <fmt/ranges.h>

#include <algorithm>

#include "io/model_config_internal.h"

namespace deepinfer::io::detail {
namespace {

constexpr std::int64_t kMaxDim = 1 << 24;
constexpr std::int64_t kMaxEngramTables = 1024;  // the release has 48

std::uint64_t mul_mod(std::uint64_t a, std::uint64_t b, std::uint64_t m) {
  __extension__ using U128 = unsigned __int128;  // GCC and Clang; -Wpedantic needs the marker
  return static_cast<std::uint64_t>(static_cast<U128>(a) * b % m);
}

std::uint64_t pow_mod(std::uint64_t base, std::uint64_t exponent, std::uint64_t m) {
  std::uint64_t result = 1;
  for (base %= m; exponent > 0; exponent >>= 1, base = mul_mod(base, base, m))
    if (exponent & 1) result = mul_mod(result, base, m);
  return result;
}

// Deterministic Miller-Rabin for 64-bit integers (these bases decide every n < 2^64).
bool is_prime(std::uint64_t n) {
  if (n < 2) return false;
  for (std::uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37})
    if (n % p == 0) return n == p;
  std::uint64_t d = n - 1;
  int r = 0;
  for (; d % 2 == 0; d /= 2) ++r;
  for (std::uint64_t a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    std::uint64_t x = pow_mod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < r && composite; ++i) {
      x = mul_mod(x, x, n);
      composite = x != n - 1;
    }
    if (composite) return false;
  }
  return true;
}

bool contains(const std::vector<int>& list, int value) { return std::find(list.begin(), list.end(), value) != list.end(); }

void require_ascending(const ConfigFields& f, std::string_view name, const std::vector<int>& ids) {
  for (std::size_t i = 1; i < ids.size(); ++i)
    if (ids[i] <= ids[i - 1]) f.fail("'{}' = {} must be strictly increasing", f.field(name), fmt::join(ids, ", "));
}

// The latest entry of `ids` that is <= layer, or -1.
int latest_at_or_before(const std::vector<int>& ids, int layer) {
  int best = -1;
  for (const int id : ids)
    if (id <= layer) best = std::max(best, id);
  return best;
}

void parse_dspark(ModelConfig& c, const ConfigFields& f) {
  DraftConfig& d = c.draft;
  d.block_size = static_cast<int>(f.req_int({"dspark_block_size"}, 1, 64));
  d.noise_token_id = f.req_int({"dspark_noise_token_id"}, 0, c.vocab_size - 1);
  const auto targets = f.req_int_list({"dspark_target_layer_ids"}, 0, c.num_layers - 1);
  d.target_layer_ids.assign(targets.begin(), targets.end());
  if (d.target_layer_ids.empty()) f.fail("'{}' is empty", f.field("dspark_target_layer_ids"));
  d.markov_rank = static_cast<int>(f.req_int({"dspark_markov_rank"}, 1, kMaxDim));
  if (c.arch == ModelArch::kDeepseekV41) {
    d.n_routed_experts = static_cast<int>(f.req_int({"dspark_n_routed_experts"}, 1, kMaxDim));
    d.num_experts_per_tok =
        static_cast<int>(f.req_int({"dspark_num_experts_per_tok", "dspark_n_activated_experts"}, 1, d.n_routed_experts));
  } else {
    d.n_routed_experts = c.n_routed_experts;
    d.num_experts_per_tok = c.num_experts_per_tok;
  }
}

// The stage count from every source that states it; they must agree.
int agreed_stage_count(const ConfigFields& f, std::initializer_list<std::pair<std::string_view, std::optional<std::int64_t>>> claims) {
  std::optional<std::pair<std::string_view, std::int64_t>> first;
  for (const auto& [name, value] : claims) {
    if (!value) continue;
    if (!first) first = {name, *value};
    else if (*value != first->second)
      f.fail("{} says {} MTP/DSpark stages but {} says {}", f.field(name), *value, f.field(first->first), first->second);
  }
  return first ? static_cast<int>(first->second) : 0;
}

}  // namespace

void parse_engram_and_vision(ModelConfig& c, const ConfigFields& top, const ConfigFields& f) {
  if (c.arch == ModelArch::kDeepseekV41) {
    EngramConfig& e = c.engram;
    const auto ids = f.opt_int_list({"engram_layer_ids"}, 0, c.num_layers - 1).value_or(std::vector<std::int64_t>{});
    e.layer_ids.assign(ids.begin(), ids.end());
    require_ascending(f, "engram_layer_ids", e.layer_ids);
    if (!e.layer_ids.empty()) {
      e.num_embeddings = f.req_int_list({"engram_num_embeddings"}, 1, std::int64_t{1} << 40);
      if (e.num_embeddings.size() != e.layer_ids.size())
        f.fail("'{}' has {} entries for {} Engram layers", f.field("engram_num_embeddings"), e.num_embeddings.size(),
               e.layer_ids.size());
      e.max_ngram_size = static_cast<int>(f.req_int({"engram_max_ngram_size"}, 2, 16));
      e.vocab_size = f.req_int({"engram_vocab_size"}, 1, std::int64_t{1} << 40);
      e.n_heads = static_cast<int>(f.req_int({"engram_n_heads"}, 1, 1024));
      e.head_dim = static_cast<int>(f.req_int({"engram_head_dim"}, 1, kMaxDim));
      e.pad_token_id = f.req_int({"engram_pad_token_id", "engram_pad_id"}, 0, c.vocab_size - 1);
      e.compressed_vocab_size = f.opt_int({"engram_compressed_vocab_size"}, 1, c.vocab_size).value_or(0);
      const std::int64_t tables = std::int64_t{e.max_ngram_size - 1} * e.n_heads * static_cast<std::int64_t>(e.layer_ids.size());
      if (tables > kMaxEngramTables) f.fail("{} Engram hash tables is more than the {} supported", tables, kMaxEngramTables);
      const auto primes = engram_bucket_primes(e);
      for (std::size_t i = 0; i < primes.size(); ++i) {
        std::int64_t rows = 0;
        for (const auto p : primes[i]) rows += p;
        if (rows != e.num_embeddings[i])
          f.fail("'{}[{}]' = {}, but the Engram bucket primes above engram_vocab_size {} give layer {} {} rows",
                 f.field("engram_num_embeddings"), i, e.num_embeddings[i], e.vocab_size, e.layer_ids[i], rows);
      }
    }
  }
  const auto layers = top.opt_int({"vision_config.num_hidden_layers"}, 1, 4096);
  const auto width = top.opt_int({"vision_config.hidden_size"}, 1, kMaxDim);
  const auto inference_layers = f.opt_int({"vision_n_layers"}, 1, 4096);
  const auto inference_width = f.opt_int({"vision_dim"}, 1, kMaxDim);
  if (layers && inference_layers && *layers != *inference_layers)
    f.fail("vision_config.num_hidden_layers = {} contradicts 'vision_n_layers' = {}", *layers, *inference_layers);
  if (width && inference_width && *width != *inference_width)
    f.fail("vision_config.hidden_size = {} contradicts 'vision_dim' = {}", *width, *inference_width);
  if (const auto image = top.opt_int({"image_token_id"}, 0, std::int64_t{1} << 40)) c.vision.image_token_id = *image;
  c.vision.present = top.has({"vision_config"}) || inference_layers.has_value();
  if (c.vision.present) {
    if (!layers && !inference_layers) f.fail("vision config without its number of layers");
    if (!width && !inference_width) f.fail("vision config without its hidden size");
    c.vision.num_layers = static_cast<int>(layers ? *layers : *inference_layers);
    c.vision.hidden_size = static_cast<int>(width ? *width : *inference_width);
  }
}

void parse_draft(ModelConfig& c, const ConfigFields& f, const std::vector<int>& stage_ratios) {
  for (std::size_t i = 0; i < stage_ratios.size(); ++i)
    if (stage_ratios[i] != 0)
      f.fail("'{}[{}]' = {}: entries past the backbone belong to MTP/DSpark stages, which are window-only (ratio 0)",
             f.field("compress_ratios"), static_cast<std::size_t>(c.num_layers) + i, stage_ratios[i]);
  const std::optional<std::int64_t> listed =
      stage_ratios.empty() ? std::nullopt : std::optional<std::int64_t>(static_cast<std::int64_t>(stage_ratios.size()));
  const auto n_mtp = f.opt_int({"n_mtp_layers"}, 0, 64);
  const auto nextn = f.opt_int({"num_nextn_predict_layers"}, 0, 64);
  const bool dspark = f.any_present({"dspark_block_size", "dspark_target_layer_ids", "dspark_noise_token_id", "dspark_markov_rank"});
  DraftConfig& d = c.draft;
  if (c.arch == ModelArch::kDeepseekV4 && dspark) {
    // V4-0731 keeps num_nextn_predict_layers = 1 next to 3 DSpark stages: it does not count them (P27).
    d.num_stages = agreed_stage_count(f, {{"n_mtp_layers", n_mtp}, {"compress_ratios (entries past the backbone)", listed}});
    parse_dspark(c, f);
    if (d.num_stages == 0) d.num_stages = static_cast<int>(d.target_layer_ids.size());
    d.kind = DraftKind::kDSpark;
  } else {
    d.num_stages = agreed_stage_count(f, {{"num_nextn_predict_layers", nextn},
                                          {"n_mtp_layers", n_mtp},
                                          {"compress_ratios (entries past the backbone)", listed}});
    if (d.num_stages > 0 && c.arch == ModelArch::kDeepseekV41) {
      parse_dspark(c, f);
      d.kind = DraftKind::kDSpark;
    } else if (d.num_stages > 0) {
      d.kind = DraftKind::kMtp;
      d.n_routed_experts = c.n_routed_experts;
      d.num_experts_per_tok = c.num_experts_per_tok;
    }
  }
}

void derive_schedule(ModelConfig& c, const ConfigFields& f) {
  const bool v41 = c.arch == ModelArch::kDeepseekV41;
  if (v41) {
    require_ascending(f, "kv_source_layer_ids", c.kv_source_layer_ids);
    require_ascending(f, "index_source_layer_ids", c.index_source_layer_ids);
    for (const int id : c.kv_source_layer_ids)
      if (c.compress_ratios[static_cast<std::size_t>(id)] == 0)
        f.fail("KV source layer {} has compress_ratios[{}] = 0: a source must compress", id, id);
    for (const int id : c.index_source_layer_ids) {
      if (c.compress_ratios[static_cast<std::size_t>(id)] == 0)
        f.fail("index source layer {} has compress_ratios[{}] = 0", id, id);
      if (latest_at_or_before(c.kv_source_layer_ids, id) < 0)
        f.fail("index source layer {} has no KV source at or before it to provide index keys", id);
    }
    if (c.candidate_source_layer_id >= 0 && !contains(c.index_source_layer_ids, c.candidate_source_layer_id))
      f.fail("'{}' = {} is not an index source layer", f.field("candidate_source_layer_id"), c.candidate_source_layer_id);
  }
  c.layers.clear();
  bool any_indexer = false;
  for (int i = 0; i < c.num_layers; ++i) {
    LayerSpec s;
    s.index = i;
    s.compress_ratio = c.compress_ratios[static_cast<std::size_t>(i)];
    const bool compressed = s.compress_ratio != 0;
    s.rope_theta = compressed ? c.rope.compress_theta : c.rope.theta;
    s.yarn = compressed && c.rope.yarn.has_value();
    if (!v41) {
      s.attention = !compressed ? AttentionKind::kSlidingWindow
                    : s.compress_ratio == 4 ? AttentionKind::kCompressedSparse
                                            : AttentionKind::kHeavilyCompressed;
      s.owns_compressor = compressed;
      s.has_indexer = s.owns_index_keys = s.attention == AttentionKind::kCompressedSparse;
      s.kv_source_layer = compressed ? i : -1;
      s.index_source_layer = s.has_indexer ? i : -1;
      s.hash_routed = i < c.num_hash_layers;
    } else if (compressed) {
      s.attention = AttentionKind::kSharedCompressed;
      s.kv_source_layer = latest_at_or_before(c.kv_source_layer_ids, i);
      s.index_source_layer = latest_at_or_before(c.index_source_layer_ids, i);
      if (s.kv_source_layer < 0) f.fail("compressed layer {} has no KV source at or before it", i);
      if (s.index_source_layer < 0) f.fail("compressed layer {} has no index source at or before it", i);
      s.owns_compressor = s.owns_index_keys = s.kv_source_layer == i;
      s.has_indexer = s.index_source_layer == i;
      s.role = s.owns_compressor ? Csa2Role::kFull : s.has_indexer ? Csa2Role::kReindex : Csa2Role::kReuse;
      s.candidate_source = i == c.candidate_source_layer_id;
    }
    s.engram = contains(c.engram.layer_ids, i);
    any_indexer = any_indexer || s.has_indexer;
    c.layers.push_back(s);
  }
  if (any_indexer && c.index_head_dim < c.rope_head_dim)
    f.fail("'{}' = {} is smaller than the {} RoPE dimensions the indexer rotates", f.field("index_head_dim"), c.index_head_dim,
           c.rope_head_dim);
  c.draft.stages.clear();
  for (int s = 0; s < c.draft.num_stages; ++s) {
    LayerSpec stage;
    stage.index = c.num_layers + s;
    stage.rope_theta = c.rope.theta;
    c.draft.stages.push_back(stage);
  }
}

}  // namespace deepinfer::io::detail

namespace deepinfer::io {

std::vector<std::vector<std::int64_t>> engram_bucket_primes(const EngramConfig& engram) {
  std::vector<std::vector<std::int64_t>> out;
  auto candidate = static_cast<std::uint64_t>(engram.vocab_size);
  const std::int64_t per_layer = std::int64_t{engram.max_ngram_size - 1} * engram.n_heads;
  for (std::size_t layer = 0; layer < engram.layer_ids.size(); ++layer) {
    std::vector<std::int64_t> primes;
    while (static_cast<std::int64_t>(primes.size()) < per_layer) {
      ++candidate;
      if (detail::is_prime(candidate)) primes.push_back(static_cast<std::int64_t>(candidate));
    }
    out.push_back(std::move(primes));
  }
  return out;
}

}  // namespace deepinfer::io
