// Whole-model V4 / V4.1 benchmark on dummy weights of a real geometry made on the device (issue 6
// item 5; the config's model type picks the model): prefill tokens/s for given prompt lengths, decode
// step time (graph-replayed and eager) and tokens/s for batch x context grids, each next to its floor
// from ceilings measured in the same run (device-to-device copy bandwidth; bf16 GEMM rate through
// linear()). V4.1's Engram tables stay in host memory and are capped to --engram-rows rows per layer
// (the real ones hold ~384M rows, ~100 GB each; the output states the cap). Prints markdown tables.
// usage: v4_model_bench --config CONFIG_OR_DIR [--num-layers 8] [--device cuda|cpu]
//          [--prefill 1024,8192] [--batches 1,8,32,128,256] [--contexts 1024,8192] [--steps 4]
//          [--engram-rows 4194304 (0: the config's)] [--moe-prefill-min-rows 32 (0: no prefill expert GEMM)]
//          [--moe-prefill-wgmma 1 (0: the mma.sync kernel)] [--moe-prefill-fp8 1 (0: the bf16 prefill GEMM)]
//          [--cuda-option NAME=VALUE[,NAME=VALUE...]] (CudaBackendOptions fields by name, repeatable; last wins)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v41/model.h"
#include "model/weight_manifest.h"
#include "ops/cuda/cuda_backend.h"

namespace {

using namespace deepinfer;
using model::SequenceModel;

struct Args {
  std::string config;
  int layers = 8;
  std::string device = "cuda";
  std::vector<std::int64_t> prefill = {1024, 8192}, batches = {1, 8, 32, 128, 256}, contexts = {1024, 8192};
  int steps = 4;
  std::int64_t engram_rows = std::int64_t{1} << 22;
  int moe_prefill_min_rows = ops::CudaBackendOptions{}.moe_prefill_min_rows;  // 0: prefill experts on the skinny path
  bool moe_prefill_wgmma = ops::CudaBackendOptions{}.moe_prefill_wgmma;
  bool moe_prefill_fp8 = ops::CudaBackendOptions{}.moe_prefill_fp8;
  std::vector<std::string> cuda_options;  // NAME=VALUE assignments (ops::set_cuda_option)
};

std::vector<std::int64_t> parse_list(const std::string& text) {
  std::vector<std::int64_t> out;
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    out.push_back(std::stoll(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    DI_CHECK(i + 1 < argc, "{} needs a value", flag);
    const std::string v = argv[++i];
    if (flag == "--config") a.config = v;
    else if (flag == "--num-layers") a.layers = std::stoi(v);
    else if (flag == "--device") a.device = v;
    else if (flag == "--prefill") a.prefill = parse_list(v);
    else if (flag == "--batches") a.batches = parse_list(v);
    else if (flag == "--contexts") a.contexts = parse_list(v);
    else if (flag == "--steps") a.steps = std::stoi(v);
    else if (flag == "--engram-rows") a.engram_rows = std::stoll(v);
    else if (flag == "--moe-prefill-min-rows") a.moe_prefill_min_rows = std::stoi(v);
    else if (flag == "--moe-prefill-wgmma") a.moe_prefill_wgmma = std::stoi(v) != 0;
    else if (flag == "--moe-prefill-fp8") a.moe_prefill_fp8 = std::stoi(v) != 0;
    else if (flag == "--cuda-option")
      for (std::size_t pos = 0; pos <= v.size();) {
        const std::size_t comma = std::min(v.find(',', pos), v.size());
        a.cuda_options.push_back(v.substr(pos, comma - pos));
        pos = comma + 1;
      }
    else throw_error("unknown flag {}", flag);
  }
  DI_CHECK(!a.config.empty(), "--config (a config.json or a model directory) is required");
  return a;
}

double seconds(const std::function<void()>& body, ops::Backend& be) {
  be.synchronize();
  const auto start = std::chrono::steady_clock::now();
  body();
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Tensor random_bf16(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kBF16);
  auto* p = static_cast<std::uint16_t*>(t.raw_data());
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    p[i] = static_cast<std::uint16_t>(0x3c00 | (seed & 0x80ff));  // ±[2^-7, 2^-6): finite, never zero
  }
  return t;
}

// The fp8 GEMM rate of linear() on a GPU (0 elsewhere): an 8192^3 FP8-block weight with the FP8 act quant
// per 128 (cuBLASLt's block-scaled FP8 GEMM, the prefill path), act quant included. Under the kernel
// tracer the GEMM kernel's own rate is in the trace (tools/gpu/prefill_gemm_report.py reads it).
double measure_fp8_gemm(ops::Backend& be, bool gpu) {
  if (!gpu) return 0.0;
  const std::int64_t n = 8192;
  Tensor codes = Tensor::empty(Shape{n, n}, DType::kF8E4M3);
  auto* p = static_cast<std::uint8_t*>(codes.raw_data());
  std::uint64_t seed = 11;
  for (std::int64_t i = 0; i < codes.numel(); ++i) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    p[i] = static_cast<std::uint8_t>(0x30 | (seed & 0x87));  // ±[0.5, 1): finite, never zero
  }
  Tensor scale = Tensor::empty(Shape{n / 128, n / 128}, DType::kUE8M0);
  std::memset(scale.raw_data(), 120, static_cast<std::size_t>(scale.numel()));  // 2^-7
  const ops::LinearWeight w{ops::WeightFormat::kFp8Block, be.upload(codes), be.upload(scale), 128};
  Tensor x = be.upload(random_bf16(Shape{n, n}, 13)), y = be.empty(Shape{n, n}, DType::kBF16);
  const ops::LinearOptions fp8{128};
  be.linear(x, w, fp8, y);
  const double s = seconds([&] { for (int i = 0; i < 5; ++i) be.linear(x, w, fp8, y); }, be) / 5;
  return 2.0 * static_cast<double>(n * n * n) / s;
}

// Ceilings of this run: copy bandwidth (bytes read + written) and the bf16 GEMM rate of linear().
std::pair<double, double> measure_ceilings(ops::Backend& be, bool gpu) {
  const std::int64_t copy_bytes = gpu ? (std::int64_t{1} << 31) : (std::int64_t{1} << 27);
  Tensor a = be.empty(Shape{copy_bytes / 4}, DType::kF32), b = be.empty(Shape{copy_bytes / 4}, DType::kF32);
  be.fill(a, 1.5f);
  be.copy(a, b);
  const double copy_s = seconds([&] { for (int i = 0; i < 5; ++i) be.copy(a, b); }, be) / 5;
  const std::int64_t n = gpu ? 8192 : 1024;
  ops::LinearWeight w{ops::WeightFormat::kBF16, be.upload(random_bf16(Shape{n, n}, 7)), Tensor(), 0};
  Tensor x = be.upload(random_bf16(Shape{n, n}, 9)), y = be.empty(Shape{n, n}, DType::kBF16);
  be.linear(x, w, {}, y);
  const double gemm_s = seconds([&] { for (int i = 0; i < 5; ++i) be.linear(x, w, {}, y); }, be) / 5;
  return {2.0 * static_cast<double>(copy_bytes) / copy_s, 2.0 * static_cast<double>(n * n * n) / gemm_s};
}

// Bytes of the weights (as released) split into routed experts and the rest; active parameters per
// token (every matrix but the embedding, num_experts_per_tok routed experts per layer). A decode step
// reads one embedding row per token, not the table, so the table is kept apart for the byte floor.
// V4.1 Engram tables are host-side lookups: apart too (a step reads its gathered rows, engram_row_bytes
// per token on the device).
struct WeightSizes {
  double expert_bytes = 0, other_bytes = 0, embed_bytes = 0, active_params = 0;
  double engram_table_bytes = 0, engram_row_bytes = 0;
};

WeightSizes weight_sizes(const io::ModelConfig& c) {
  WeightSizes s;
  for (const model::ManifestEntry& e : model::build_weight_manifest(c)) {
    const bool expert = e.component == model::Component::kRoutedExperts;
    if (e.name == "embed.weight") {
      s.embed_bytes += static_cast<double>(e.released_bytes());
      continue;
    }
    if (e.name.ends_with("engram.embed.weight") || e.name.ends_with("engram.embed.scale")) {
      s.engram_table_bytes += static_cast<double>(e.released_bytes());
      continue;
    }
    (expert ? s.expert_bytes : s.other_bytes) += static_cast<double>(e.released_bytes());
    if (e.shape.ndim() != 2) continue;
    s.active_params += static_cast<double>(e.numel()) * (expert ? double(c.num_experts_per_tok) / c.n_routed_experts : 1.0);
  }
  // Each Engram layer uploads f32 rows [lookups · head_dim] per token.
  const io::EngramConfig& g = c.engram;
  s.engram_row_bytes = static_cast<double>(g.layer_ids.size()) * (g.max_ngram_size - 1) * g.n_heads * g.head_dim * 4.0;
  return s;
}

// V4.1: the Engram tables cut to about `rows` rows per layer (0: as configured) by lowering the
// n-gram bucket base, so each layer's 24 prime-sized buckets stay consistent with the hasher.
io::ModelConfig cap_engram_rows(io::ModelConfig c, std::int64_t rows) {
  io::EngramConfig& e = c.engram;
  if (rows <= 0 || e.layer_ids.empty()) return c;
  const std::int64_t tables = std::int64_t{e.max_ngram_size - 1} * e.n_heads;
  if (*std::max_element(e.num_embeddings.begin(), e.num_embeddings.end()) <= rows) return c;
  e.vocab_size = std::max<std::int64_t>(1, rows / tables);
  const auto primes = io::engram_bucket_primes(e);
  for (std::size_t i = 0; i < primes.size(); ++i) {
    e.num_embeddings[i] = 0;
    for (const std::int64_t p : primes[i]) e.num_embeddings[i] += p;
  }
  return io::parse_model_config(io::model_config_to_json(c), "bench config (Engram rows capped)");
}

void set_graphs(SequenceModel& m, bool graphs) {
  if (auto* v4 = dynamic_cast<model::v4::Model*>(&m)) v4->set_graphs(graphs);
  if (auto* v41 = dynamic_cast<model::v41::Model*>(&m)) v41->set_graphs(graphs);
}

// K=V rows (bf16, head_dim wide) one token's attention reads per layer at context `ctx`, plus the
// indexer keys a CSA layer scores.
double kv_bytes_per_token(const io::ModelConfig& c, std::int64_t ctx) {
  double bytes = 0;
  for (const io::LayerSpec& l : c.layers) {
    double rows = static_cast<double>(std::min<std::int64_t>(ctx, c.sliding_window));
    if (l.compress_ratio > 0) {
      const double entries = static_cast<double>(ctx / l.compress_ratio);
      rows += l.has_indexer ? std::min<double>(entries, c.index_topk) : entries;
      if (l.has_indexer) bytes += entries * c.index_head_dim * 2.0;
    }
    bytes += rows * c.head_dim * 2.0;
  }
  return bytes;
}

std::vector<std::int32_t> token_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<std::int32_t>((seed >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return ids;
}

// Feeds `ids` to `seq` in chunks of at most 8192 tokens (one logit row per chunk).
void prefill(SequenceModel& m, model::v4::SequenceState* seq, const std::vector<std::int32_t>& ids, Tensor& logits) {
  for (std::size_t p = 0; p < ids.size(); p += 8192) {
    const std::size_t n = std::min<std::size_t>(8192, ids.size() - p);
    const SequenceModel::Chunk c{seq, std::span(ids).subspan(p, n), 1};
    m.forward({&c, 1}, logits);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  const bool gpu = args.device == "cuda";
  ops::CudaBackendOptions cuda_options;
  cuda_options.batch_invariant = env::flags().batch_invariant;
  cuda_options.fp8_wgmma_decode = env::flags().fp8_wgmma;  // DEEPINFER_FP8_WGMMA, as make_cuda_backend(device)
  cuda_options.moe_fp4_wgmma = env::flags().moe_fp4_wgmma;  // DEEPINFER_MOE_FP4_WGMMA, likewise
  cuda_options.moe_prefill_min_rows = args.moe_prefill_min_rows;
  cuda_options.moe_prefill_wgmma = args.moe_prefill_wgmma;
  cuda_options.moe_prefill_fp8 = args.moe_prefill_fp8;
  for (const std::string& assignment : args.cuda_options) ops::set_cuda_option(cuda_options, assignment);
  auto backend = gpu ? ops::make_cuda_backend(cuda_options) : ops::make_cpu_backend();
  ops::Backend& be = *backend;
  const std::filesystem::path path = std::filesystem::is_directory(args.config)
                                         ? std::filesystem::path(args.config) / "config.json"
                                         : std::filesystem::path(args.config);
  const io::ModelConfig full = io::load_model_config(path);
  const io::ModelConfig c = cap_engram_rows(model::v4::dummy_model_config(full, args.layers), args.engram_rows);
  const WeightSizes ws = weight_sizes(c);
  const auto [bandwidth, flops] = measure_ceilings(be, gpu);
  const double fp8_flops = measure_fp8_gemm(be, gpu);
  const bool v41 = c.arch == io::ModelArch::kDeepseekV41;
  std::printf("# %s model bench: %s, %d layers, %s backend, reference-qat, dummy FP8/FP4 weights%s (%.3g GB)\n\n",
              v41 ? "V4.1" : "V4", path.string().c_str(), c.num_layers, std::string(be.name()).c_str(),
              gpu ? " made on the device" : "", (ws.expert_bytes + ws.other_bytes + ws.embed_bytes) / 1e9);
  for (const std::string& assignment : args.cuda_options) std::printf("CUDA option: %s\n", assignment.c_str());
  if (!args.cuda_options.empty()) std::printf("\n");
  if (!c.engram.layer_ids.empty()) {
    const std::int64_t cut = model::v4::dummy_model_config(full, args.layers).engram.num_embeddings.front();
    std::printf("Engram: %zu layer(s), tables in host memory %s: %lld rows in the first (the config has %lld), "
                "%.3g GB (--engram-rows %lld); each token reads %lld rows per layer.\n\n",
                c.engram.layer_ids.size(), c.engram.num_embeddings.front() < cut ? "CAPPED" : "at full size",
                static_cast<long long>(c.engram.num_embeddings.front()), static_cast<long long>(cut),
                ws.engram_table_bytes / 1e9, static_cast<long long>(args.engram_rows),
                static_cast<long long>((c.engram.max_ngram_size - 1) * c.engram.n_heads));
  }
  std::printf("Ceilings measured in this run: copy %.2f TB/s (read + write), bf16 GEMM %.3g TFLOP/s (linear, %s)",
              bandwidth / 1e12, flops / 1e12, gpu ? "8192^3" : "1024^3");
  if (fp8_flops > 0) std::printf(", fp8 GEMM %.3g TFLOP/s (linear incl. act quant, 8192^3)", fp8_flops / 1e12);
  std::printf("\n\n");
  std::unique_ptr<SequenceModel> m;
  const double load_s = seconds([&] {
    m = model::v4::load_dummy_model(c, 1, be, model::v4::NumericMode::kReferenceQat);
  }, be);
  std::printf("Weights made and loaded in %.1f s.\n\n", load_s);
  Tensor one = be.empty(Shape{1, c.vocab_size}, DType::kF32);

  std::printf("| prefill tokens | time (s) | tokens/s | floor: FLOPs / bf16 peak (s) | share of peak |\n"
              "| ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::int64_t p : args.prefill) {
    const auto ids = token_ids(p, c.vocab_size, static_cast<std::uint64_t>(p));
    // Warm-up at the same length, so the timed prompt finds the workspaces, scratch and pinned
    // metadata staging grown already (a server grows them once, in its memory-planning forward).
    {
      auto warm = m->new_sequence();
      prefill(*m, warm.get(), token_ids(p, c.vocab_size, 3), one);
    }
    auto seq = m->new_sequence();
    const double t = seconds([&] { prefill(*m, seq.get(), ids, one); }, be);
    const double floor = 2.0 * ws.active_params * static_cast<double>(p) / flops;
    std::printf("| %lld | %.3f | %.0f | %.3f | %.0f%% |\n", static_cast<long long>(p), t, static_cast<double>(p) / t,
                floor, 100.0 * floor / t);
    std::fflush(stdout);
  }

  std::printf("\n| batch | context | step (ms) | eager step (ms) | tokens/s | floor: bytes / copy BW (ms) | floor / step |\n"
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const std::int64_t ctx : args.contexts) {
    for (const std::int64_t batch : args.batches) {
      std::vector<std::unique_ptr<model::v4::SequenceState>> seqs;
      for (std::int64_t b = 0; b < batch; ++b) {
        seqs.push_back(m->new_sequence());
        prefill(*m, seqs.back().get(), token_ids(ctx, c.vocab_size, static_cast<std::uint64_t>(b + 11)), one);
      }
      Tensor logits = be.empty(Shape{batch, c.vocab_size}, DType::kF32);
      std::vector<std::int32_t> next = token_ids(batch, c.vocab_size, 5);
      std::vector<SequenceModel::Chunk> chunks;
      for (std::int64_t b = 0; b < batch; ++b)
        chunks.push_back({seqs[static_cast<std::size_t>(b)].get(), std::span(next).subspan(static_cast<std::size_t>(b), 1), 1});
      // Every op launched (DEEPINFER_CUDA_GRAPHS=0), then the step replayed as a CUDA graph where the
      // backend can capture (the warm-up step runs eagerly and captures the bucket's graph).
      const auto timed = [&](bool graphs) {
        set_graphs(*m, graphs);
        m->forward(chunks, logits);  // warm-up step
        return seconds([&] { for (int s = 0; s < args.steps; ++s) m->forward(chunks, logits); }, be) / args.steps;
      };
      const double eager = timed(false);
      const double t = timed(true);
      // Weights read once per step (routed experts: the expected distinct share under uniform routing;
      // the embedding table: one row per token) plus every token's KV rows.
      const double touched = 1.0 - std::pow(1.0 - double(c.num_experts_per_tok) / c.n_routed_experts, double(batch));
      const double bytes = ws.other_bytes + ws.expert_bytes * touched +
                           double(batch) * (ws.embed_bytes / double(c.vocab_size) + kv_bytes_per_token(c, ctx) +
                                            ws.engram_row_bytes);
      const double floor = bytes / bandwidth;
      std::printf("| %lld | %lld | %.2f | %.2f | %.0f | %.3f | %.0f%% |\n", static_cast<long long>(batch),
                  static_cast<long long>(ctx), 1e3 * t, 1e3 * eager, static_cast<double>(batch) / t, 1e3 * floor,
                  100.0 * floor / t);
      std::fflush(stdout);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "v4_model_bench: %s\n", e.what());
  return 1;
}
