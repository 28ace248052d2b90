// CPU backend benchmarks: the batch-invariant linear in every weight format at decode and prefill
// row counts, decode sparse attention, and the whole V4 forward pass on the make-tiny geometry
// (prefill tokens/s, decode step latency) in both numeric modes. Best of repeated runs; prints
// markdown tables. usage: ops_cpu_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <omp.h>

#include "io/tiny_checkpoint.h"
#include "io/weight_quant.h"
#include "model/deepseek_v4/loaded_model.h"
#include "ops/cpu/cpu_backend.h"

namespace {

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

// The fastest of `reps` runs: on a shared machine the minimum is the least disturbed estimate.
double best_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (scratch buffers, page faults)
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return *std::min_element(t.begin(), t.end());
}

Tensor random_f32(const Shape& shape, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

ops::LinearWeight weight_in(const std::string& format, std::int64_t n, std::int64_t k) {
  const Tensor w = random_f32(Shape{n, k}, 1, 0.05f);
  if (format == "f32") return {ops::WeightFormat::kF32, w, Tensor(), 0};
  if (format == "bf16") return {ops::WeightFormat::kBF16, w.to(DType::kBF16), Tensor(), 0};
  if (format == "fp8") {
    auto [q, s] = io::quantize_fp8_block(w, 128, 128);
    return {ops::WeightFormat::kFp8Block, q, s, 128};
  }
  auto [q, s] = io::quantize_fp4(w);
  return {ops::WeightFormat::kFp4, q, s, 32};
}

void bench_linear(ops::Backend& be, bool quick) {
  std::printf("\n### linear (y = x·Wᵀ, N = K = %d)\n\n| weights | M | act quant | time (ms) | GFLOP/s |\n|---|---|---|---|---|\n",
              quick ? 1024 : 2048);
  const std::int64_t n = quick ? 1024 : 2048, k = n;
  for (const char* format : {"f32", "bf16", "fp8", "fp4"}) {
    const ops::LinearWeight w = weight_in(format, n, k);
    for (std::int64_t m : {1, 16, 128}) {
      const Tensor x = random_f32(Shape{m, k}, 2, 1.0f);
      Tensor out = Tensor::empty(Shape{m, n}, DType::kF32);
      const int act = std::string(format) == "fp8" || std::string(format) == "fp4" ? 128 : 0;
      const double s = best_seconds(quick ? 3 : 7, [&] { be.linear(x, w, {act}, out); });
      std::printf("| %s | %lld | %s | %.3f | %.2f |\n", format, static_cast<long long>(m), act ? "fp8/128" : "-",
                  s * 1e3, 2.0 * static_cast<double>(m * n * k) / s / 1e9);
    }
  }
}

void bench_attention(ops::Backend& be, bool quick) {
  std::printf("\n### decode sparse attention (1 token, 64 heads × 512, K keys)\n\n| K | time (ms) |\n|---|---|\n");
  for (std::int64_t keys : {128, 640}) {
    const Tensor q = random_f32(Shape{1, 64, 512}, 3, 0.05f);
    const Tensor kv = random_f32(Shape{keys, 512}, 4, 1.0f);
    const Tensor sinks = random_f32(Shape{64}, 5, 1.0f);
    Tensor idx = Tensor::empty(Shape{1, keys}, DType::kI32);
    for (std::int64_t i = 0; i < keys; ++i) idx.data<std::int32_t>()[i] = static_cast<std::int32_t>(i);
    Tensor out = Tensor::empty(q.shape(), DType::kF32);
    const ops::RowView src = ops::RowView::contiguous(kv);
    const double s = best_seconds(quick ? 3 : 7, [&] {
      be.sparse_attention(q, {&src, 1}, idx, sinks, {0.044f, true, 64}, out);
    });
    std::printf("| %lld | %.3f |\n", static_cast<long long>(keys), s * 1e3);
  }
}

void bench_model(ops::Backend& be, bool quick) {
  std::printf("\n### V4 forward, make-tiny geometry (5 layers, hidden 128, vocab 4096)\n\n"
              "| checkpoint | mode | prefill 256 tok (tok/s) | decode step (ms) |\n|---|---|---|---|\n");
  for (bool fp8 : {false, true}) {
    const auto dir = std::filesystem::temp_directory_path() / ("deepinfer_ops_cpu_bench_" + std::to_string(::getpid()));
    io::TinyModelOptions options;
    options.fp8 = fp8;
    options.draft = io::DraftKind::kNone;
    io::write_random_checkpoint(io::tiny_model_config(options), dir, 1);
    for (auto mode : {model::v4::NumericMode::kExact, model::v4::NumericMode::kReferenceQat}) {
      auto loaded = model::v4::open_model(dir, mode, be);
      auto& m = *loaded.model;
      std::vector<std::int32_t> ids(256);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919) % 4096);
      Tensor last = Tensor::empty(Shape{1, m.config().vocab_size}, DType::kF32);
      const double prefill = best_seconds(quick ? 1 : 3, [&] {
        auto seq = m.new_sequence();
        const model::v4::Model::Chunk c{seq.get(), ids, 1};
        m.forward({&c, 1}, last);
      });
      auto seq = m.new_sequence();
      const model::v4::Model::Chunk c{seq.get(), ids, 1};
      m.forward({&c, 1}, last);
      const std::int32_t token = 5;
      const double step = best_seconds(quick ? 5 : 20, [&] {
        const model::v4::Model::Chunk d{seq.get(), {&token, 1}, 1};
        m.forward({&d, 1}, last);
      });
      std::printf("| %s | %s | %.0f | %.3f |\n", fp8 ? "fp8 + fp4 experts" : "bf16",
                  std::string(model::v4::numeric_mode_name(mode)).c_str(), 256.0 / prefill, step * 1e3);
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  ops::cpu::CpuBackend backend;
  std::printf("## CPU backend (%d OpenMP threads)\n", omp_get_max_threads());
  bench_linear(backend, quick);
  bench_attention(backend, quick);
  bench_model(backend, quick);
  return 0;
}
