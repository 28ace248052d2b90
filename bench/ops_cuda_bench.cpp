// CUDA op benchmarks against the roofline: HBM copy bandwidth and the bf16 GEMM rate measured in
// the same run, then V4-Flash GEMMs (bf16 and fp8 128x128-block weights) at decode and prefill
// batch sizes, the fp4 routed-expert pipeline over 256 experts, and decode sparse attention.
// Every time is the median of CUDA-graph replays (ops::cuda_time). Prints markdown tables.
// usage: ops_cuda_bench [--quick | --attention (that section alone) | --gemm (ceilings, GEMMs, experts) |
//                        --moe (ceilings, routed experts at decode sizes) | --moe-wgmma [--act32] (the
//                        experts' wgmma kernel vs mma.sync; --act32: V4.1's act block 32, skinny vs
//                        wgmma) | --moe-trace (experts, default vs mma.sync, a 30 ms pause after each
//                        timing: for a kernel trace) |
//                        --decode (ceilings, decode linears of 1..32 rows, fp8 to 64, streamed from HBM) |
//                        --decode-fp8 SET... (the FP8 decode linears under each CudaBackendOptions set
//                        "NAME=VALUE,...", "" = defaults) |
//                        --moe-prefill (ceilings, routed experts at prefill sizes: the prefill GEMM vs skinny) |
//                        --wo-a (ceilings, V4's grouped wo_a at 1..256 rows: bf16 vs its FP8 blocks, old and wgmma)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_timing.h"
#include "tensor/device_info.h"
#include "tensor/float_formats.h"

namespace {

using namespace deepinfer;
using namespace deepinfer::ops;

// Fast deterministic fill (xorshift), so multi-GB expert sets take seconds, not minutes.
struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float uniform() { return static_cast<float>(next() >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f; }
};

Tensor host_bf16(const Shape& shape, float scale, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kBF16);
  Rng r{seed * 2654435761u + 1};
  auto* p = t.data<std::uint16_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = f32_to_bf16(r.uniform() * scale);
  return t;
}

// Random finite e4m3 codes / packed e2m1 bytes with ue8m0 scales near 2^-7.
Tensor host_bytes(const Shape& shape, DType dtype, std::uint64_t seed, bool fp8) {
  Tensor t = Tensor::empty(shape, dtype);
  Rng r{seed * 40503u + 7};
  auto* p = static_cast<std::uint8_t*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    auto b = static_cast<std::uint8_t>(r.next() >> 56);
    if (fp8 && (b & 0x7f) == 0x7f) b ^= 0x01;  // no NaN codes
    p[i] = b;
  }
  return t;
}

Tensor host_scales(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kUE8M0);
  Rng r{seed + 99};
  auto* p = t.data<std::uint8_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<std::uint8_t>(118 + r.next() % 4);
  return t;
}

LinearWeight make_weight(Backend& b, WeightFormat f, std::int64_t n, std::int64_t k, std::uint64_t seed) {
  switch (f) {
    case WeightFormat::kBF16:
      return {f, b.upload(host_bf16({n, k}, 0.05f, seed)), Tensor(), 0};
    case WeightFormat::kFp8Block:
      return {f, b.upload(host_bytes({n, k}, DType::kF8E4M3, seed, true)),
              b.upload(host_scales({(n + 127) / 128, (k + 127) / 128}, seed)), 128};
    case WeightFormat::kFp4:
      return {f, b.upload(host_bytes({n, k}, DType::kF4E2M1, seed, false)), b.upload(host_scales({n, k / 32}, seed)),
              32};
    case WeightFormat::kF32:
      break;
  }
  return {};
}

// Floors use the ceilings measured earlier on this machine type (HBM by a copy kernel, dense
// bf16/fp8 through the vendor libraries); this run's own measurements are printed beside them.
struct Roof {
  double hbm_gbs = 4230.0;
  double bf16_tflops = 784.0;
  double fp8_tflops = 1417.0;
};

double floor_us(double bytes, double flops, double peak_tflops, const Roof& roof) {
  return std::max(bytes / (roof.hbm_gbs * 1e3), flops / (peak_tflops * 1e6));
}

void measure_roof(Roof& roof, Backend& b) {
  const std::int64_t bytes = std::int64_t{2} << 30;
  Tensor src = b.empty({bytes / 4}, DType::kF32);
  Tensor dst = b.empty({bytes / 4}, DType::kF32);
  b.fill(src, 1.0f);
  const CudaTiming copy = cuda_time(b, [&] { b.copy(src, dst); }, 5, 10);
  const double copy_gbs = 2.0 * static_cast<double>(bytes) / (copy.median_ms * 1e6);
  const std::int64_t n = 8192;
  const LinearWeight w = make_weight(b, WeightFormat::kBF16, n, n, 1);
  const Tensor x = b.upload(host_bf16({n, n}, 1.0f, 2));
  Tensor y = b.empty({n, n}, DType::kBF16);
  const CudaTiming gemm = cuda_time(b, [&] { b.linear(x, w, LinearOptions{}, y); }, 3, 10);
  const double gemm_tflops = 2.0 * n * n * n / (gemm.median_ms * 1e9);
  const LinearWeight w8 = make_weight(b, WeightFormat::kFp8Block, n, n, 3);
  const CudaTiming gemm8 = cuda_time(b, [&] { b.linear(x, w8, LinearOptions{128}, y); }, 3, 10);
  const double fp8_tflops = 2.0 * n * n * n / (gemm8.median_ms * 1e9);
  std::printf("## Ceilings\n\n| what | this run | floor uses |\n| --- | ---: | ---: |\n");
  std::printf("| HBM: cudaMemcpyAsync device-to-device, 2 GiB (read + write) | %.0f GB/s | %.0f GB/s |\n", copy_gbs,
              roof.hbm_gbs);
  std::printf("| bf16 GEMM 8192³ through linear() (act staging + cuBLASLt) | %.0f TFLOP/s | %.0f TFLOP/s |\n",
              gemm_tflops, roof.bf16_tflops);
  std::printf("| fp8 GEMM 8192³ through linear() (act quant + cuBLASLt block-scaled FP8) | %.0f TFLOP/s | %.0f "
              "TFLOP/s |\n\n", fp8_tflops, roof.fp8_tflops);
}

struct GemmShape {
  const char* name;
  std::int64_t n, k;
};

// The backends whose paths the GEMM table compares (all on device 0, sharing the weights).
struct GemmBackends {
  Backend& fast;       // what linear() picks by default
  Backend& invariant;  // the mma.sync kernel at every M
  Backend& skinny;     // FP8 skinny tensor-core GEMM at every M
  Backend& fp8_lt;     // cuBLASLt block-scaled FP8 at every M
  Backend& bf16_lt;    // cuBLASLt on a bf16 copy of the weight at every M (the previous large-M path)
};

void bench_gemms(const GemmBackends& be, const Roof& roof, bool quick) {
  const std::vector<GemmShape> shapes = {{"wq_a", 1024, 4096},   {"wq_b", 32768, 1024}, {"wkv", 512, 4096},
                                         {"wo_b", 4096, 8192},   {"shared w1/w3", 2048, 4096},
                                         {"shared w2", 4096, 2048}};
  const CudaBackendOptions defaults;
  std::printf("## GEMMs (y = x·Wᵀ, bf16 x and out; fp8 rows use FP8 act quant per 128)\n\n");
  std::printf("floor = max(bytes / HBM, FLOPs / peak) with the bf16 peak for bf16 weights and the fp8 peak for "
              "fp8 weights. Paths: 'default' = what linear() picks (fp8: the FP8 skinny tensor-core GEMM up to %d "
              "rows, then cuBLASLt's block-scaled FP8 GEMM; bf16: the decode GEMV up to 4 rows, mma.sync below %d, "
              "cuBLASLt from there), 'mma' = our mma.sync kernel (what the batch-invariant backend always runs), "
              "'skinny' / 'fp8 cuBLASLt' / 'bf16 cuBLASLt' = that path forced (bf16 cuBLASLt dequantises the fp8 "
              "weight to bf16 first: the previous large-M path).\n\n",
              defaults.skinny_max_rows, defaults.cublas_min_rows);
  std::printf("| weight | format | M | path | time µs | TFLOP/s | GB/s | floor µs | floor/time |\n");
  std::printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block}) {
    const bool fp8 = f == WeightFormat::kFp8Block;
    std::vector<std::int64_t> ms = quick ? std::vector<std::int64_t>{1, 256} : std::vector<std::int64_t>{1, 4, 32, 256, 4096};
    if (fp8 && !quick) ms = {1, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
    for (const GemmShape& s : shapes) {
      const LinearWeight w = make_weight(be.fast, f, s.n, s.k, static_cast<std::uint64_t>(s.n + s.k));
      for (std::int64_t m : ms) {
        const Tensor x = be.fast.upload(host_bf16({m, s.k}, 1.0f, static_cast<std::uint64_t>(m)));
        Tensor y = be.fast.empty({m, s.n}, DType::kBF16);
        const LinearOptions opt{fp8 ? 128 : 0};
        const double flops = 2.0 * m * s.n * s.k;
        const double bytes = static_cast<double>(w.data.nbytes() + (w.scale.defined() ? w.scale.nbytes() : 0)) +
                             2.0 * m * (s.k + s.n);
        const double fl = floor_us(bytes, flops, fp8 ? roof.fp8_tflops : roof.bf16_tflops, roof);
        auto row = [&](const char* path, Backend& b) {
          const CudaTiming t = cuda_time(b, [&] { b.linear(x, w, opt, y); }, 5, 10);
          const double us = t.median_ms * 1e3;
          std::printf("| %s [%lld, %lld] | %s | %lld | %s | %.1f | %.1f | %.0f | %.1f | %.0f%% |\n", s.name,
                      static_cast<long long>(s.n), static_cast<long long>(s.k), fp8 ? "fp8/128" : "bf16",
                      static_cast<long long>(m), path, us, flops / (us * 1e6), bytes / (us * 1e3), fl, 100.0 * fl / us);
        };
        row("default", be.fast);
        row("mma", be.invariant);
        if (fp8) {
          if (m <= 64) row("skinny", be.skinny);
          row("fp8 cuBLASLt", be.fp8_lt);
          if (m >= 64) row("bf16 cuBLASLt", be.bf16_lt);
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\n");
}

// One decode linear of the V4-Flash geometry: `groups` weights [n, k] (groups > 1: the block-diagonal
// wo_a through linear_grouped), FP8 act quant per 128 for fp8 weights unless act_quant is false (wo_a
// kept as FP8 blocks: computed on their exact bf16 widening).
struct DecodeLinear {
  const char* name;
  WeightFormat format;
  std::int64_t n, k;
  int groups;
  DType out;
  bool act_quant = true;
};

// The V4-Flash decode linears the benches time.
const std::vector<DecodeLinear>& decode_linears() {
  static const std::vector<DecodeLinear> cases = {
      {"lm head", WeightFormat::kBF16, 129280, 4096, 1, DType::kF32},
      {"wo_a (8 groups)", WeightFormat::kBF16, 1024, 4096, 8, DType::kBF16},
      {"wo_a (8 groups, as stored)", WeightFormat::kFp8Block, 1024, 4096, 8, DType::kBF16, false},
      {"compressor (ratio 4)", WeightFormat::kBF16, 1024, 4096, 1, DType::kF32},
      {"compressor (ratio 128)", WeightFormat::kBF16, 512, 4096, 1, DType::kF32},
      {"indexer compressor", WeightFormat::kBF16, 256, 4096, 1, DType::kF32},
      {"wq_a", WeightFormat::kFp8Block, 1024, 4096, 1, DType::kBF16},
      {"wq_b", WeightFormat::kFp8Block, 32768, 1024, 1, DType::kBF16},
      {"wkv", WeightFormat::kFp8Block, 512, 4096, 1, DType::kBF16},
      {"wo_b", WeightFormat::kFp8Block, 4096, 8192, 1, DType::kBF16},
      {"shared w1/w3", WeightFormat::kFp8Block, 2048, 4096, 1, DType::kBF16},
      {"shared w2", WeightFormat::kFp8Block, 4096, 2048, 1, DType::kBF16},
      {"indexer wq_b", WeightFormat::kFp8Block, 8192, 1024, 1, DType::kBF16}};
  return cases;
}

// Decode linears (1..32 rows) with their weights rotated over copies of >= 256 MB in all, so every
// call streams its weight from HBM as in a forward (back-to-back calls on one small weight would
// time the 50 MB L2). 'default' = what linear() / linear_grouped() pick now; 'previous' = the paths
// before the skinny bf16 kernel and the fused FP8 act quant (bf16: GEMV up to 4 rows, mma.sync +
// split-K above, wo_a as 8 launches; fp8: act-quant launch + skinny GEMM); 'alt' = the new kernels
// where the default does not take them (bf16 single weights through the skinny kernel; fp8 with the
// act quant fused up to 8 rows, 8 loads in flight); 'fp8 cuBLASLt' = cuBLASLt's block-scaled FP8 GEMM;
// 'fp8 mma.sync' = the default without the sm_90a wgmma kernel (CudaBackendOptions::fp8_wgmma_decode,
// which the default takes where it was measured faster: CudaBackend::fp8_wgmma_eligible).
void bench_decode_linears(Backend& fast, Backend& previous, Backend& alt, Backend& fp8_lt, Backend& fp8_mma,
                          const Roof& roof) {
  const std::vector<DecodeLinear>& cases = decode_linears();
  std::printf("## Decode linears (weights rotated through >= 256 MB of copies: HBM, not L2)\n\n");
  std::printf("| weight | format | M | path | time µs | weight GB/s | floor µs | floor/time |\n");
  std::printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |\n");
  for (const DecodeLinear& c : cases) {
    const bool fp8 = c.format == WeightFormat::kFp8Block;
    std::vector<std::vector<LinearWeight>> copies;
    double wbytes = 0.0;
    for (int r = 0; r == 0 || wbytes * r < 256e6; ++r) {
      std::vector<LinearWeight> set;
      for (int g = 0; g < c.groups; ++g)
        set.push_back(make_weight(fast, c.format, c.n, c.k, static_cast<std::uint64_t>(1000 * r + g + c.n)));
      if (r == 0)
        for (const LinearWeight& w : set)
          wbytes += static_cast<double>(w.data.nbytes() + (w.scale.defined() ? w.scale.nbytes() : 0));
      copies.push_back(std::move(set));
    }
    const LinearOptions opt{fp8 && c.act_quant ? 128 : 0};
    for (std::int64_t m : {1, 2, 4, 8, 16, 32, 64}) {
      if (m == 64 && !fp8) continue;  // 64 rows: the wgmma kernel's top size
      const Tensor x = fast.upload(host_bf16({m, c.groups * c.k}, 1.0f, static_cast<std::uint64_t>(m)));
      Tensor y = fast.empty({m, c.groups * c.n}, c.out);
      const double fl = floor_us(wbytes + 2.0 * m * c.groups * c.k, 2.0 * m * c.groups * c.n * c.k,
                                 fp8 ? roof.fp8_tflops : roof.bf16_tflops, roof);
      auto row = [&](const char* path, Backend& b, bool loop) {
        const auto reps = static_cast<int>(copies.size());
        auto body = [&] {
          for (const auto& set : copies) {
            if (!loop && c.groups > 1) {
              b.linear_grouped(x, set, opt, y);
              continue;
            }
            for (int g = 0; g < c.groups; ++g) {
              Tensor yg = y.narrow(1, g * c.n, c.n);
              b.linear(x.narrow(1, g * c.k, c.k), set[static_cast<std::size_t>(g)], opt, yg);
            }
          }
        };
        const CudaTiming t = cuda_time(b, body, 1, 10);
        const double us = t.median_ms * 1e3 / reps;
        std::printf("| %s [%lld, %lld] | %s | %lld | %s | %.2f | %.0f | %.2f | %.0f%% |\n", c.name,
                    static_cast<long long>(c.n), static_cast<long long>(c.k), fp8 ? "fp8/128" : "bf16",
                    static_cast<long long>(m), path, us, wbytes / (us * 1e3), fl, 100.0 * fl / us);
      };
      row("default", fast, false);
      row("previous", previous, true);
      if (m <= 8 || !fp8) row("alt", alt, false);
      if (fp8 && m >= 4) row("fp8 cuBLASLt", fp8_lt, false);
      if (fp8) row("fp8 mma.sync", fp8_mma, false);
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

// The FP8 decode linears (1..32 rows, weights rotated through >= 256 MB of copies) under each set of
// CudaBackendOptions assignments ("" = the defaults; "a=1,b=0"): one row per weight, rows and set, so
// a kernel option is A/B'd at the op on one build (ops_cuda_bench --decode-fp8 "" "NAME=VALUE,...").
void bench_fp8_decode_sets(const std::vector<std::string>& sets, const Roof& roof) {
  std::vector<std::unique_ptr<Backend>> backends;
  for (const std::string& set : sets) {
    CudaBackendOptions options;
    for (std::size_t at = 0; at < set.size();) {
      const std::size_t end = std::min(set.find(',', at), set.size());
      set_cuda_option(options, std::string_view(set).substr(at, end - at));
      at = end + 1;
    }
    backends.push_back(make_cuda_backend(options));
  }
  Backend& fast = *backends.front();
  std::printf("## FP8 decode linears by option set (weights rotated through >= 256 MB of copies)\n\n");
  std::printf("| weight | M | options | time µs | weight GB/s | floor/time |\n| --- | ---: | --- | ---: | ---: | ---: |\n");
  for (const DecodeLinear& c : decode_linears()) {
    if (c.format != WeightFormat::kFp8Block || c.groups != 1) continue;
    std::vector<LinearWeight> copies;  // on the one device every backend uses
    double wbytes = 0.0;
    for (int r = 0; r == 0 || wbytes * r < 256e6; ++r) {
      copies.push_back(make_weight(fast, c.format, c.n, c.k, static_cast<std::uint64_t>(1000 * r + c.n)));
      if (r == 0) wbytes = static_cast<double>(copies[0].data.nbytes() + copies[0].scale.nbytes());
    }
    for (std::int64_t m : {1, 2, 4, 8, 16, 32}) {
      const Tensor x = fast.upload(host_bf16({m, c.k}, 1.0f, static_cast<std::uint64_t>(m)));
      Tensor y = fast.empty({m, c.n}, c.out);
      const double fl = floor_us(wbytes + 2.0 * m * c.k, 2.0 * m * c.n * c.k, roof.fp8_tflops, roof);
      for (std::size_t s = 0; s < backends.size(); ++s) {
        Backend& b = *backends[s];
        const auto body = [&] {
          for (const LinearWeight& w : copies) b.linear(x, w, LinearOptions{128}, y);
        };
        const double us = cuda_time(b, body, 1, 10).median_ms * 1e3 / static_cast<double>(copies.size());
        std::printf("| %s [%lld, %lld] | %lld | %s | %.2f | %.0f | %.0f%% |\n", c.name, static_cast<long long>(c.n),
                    static_cast<long long>(c.k), static_cast<long long>(m), sets[s].empty() ? "defaults" : sets[s].c_str(),
                    us, wbytes / (us * 1e3), 100.0 * fl / us);
      }
      std::fflush(stdout);
    }
  }
  std::printf("\n");
}

// V4's wo_a (8 groups x [1024, 4096]) at the decode batches, weights rotated through >= 256 MB of copies:
// its bf16 dequantisation, the FP8 blocks through the skinny kernel / per-group loop (grouped_fp8_wgmma
// off) and through the wgmma kernel (grouped_fp8_wgmma.cu) with 64-token tiles only and with its default
// 128-token tiles above 64 rows. The floor: the FP8 bytes at the measured HBM rate or the bf16 products at
// the measured bf16 rate.
void bench_wo_a(Backend& fast, Backend& fp8_old, Backend& wgmma_narrow, const Roof& roof) {
  const int groups = 8;
  const std::int64_t n = 1024, k = 4096;
  std::printf("## wo_a (8 groups x [1024, 4096]; weights rotated through >= 256 MB: HBM, not L2)\n\n");
  std::printf("| M | path | time µs | weight GB/s | floor µs | floor/time |\n| ---: | --- | ---: | ---: | ---: | ---: |\n");
  struct Set {
    std::vector<std::vector<LinearWeight>> copies;
    double bytes = 0.0;
  };
  auto make_set = [&](WeightFormat f) {
    Set set;
    for (int r = 0; r == 0 || set.bytes * r < 256e6; ++r) {
      std::vector<LinearWeight> ws;
      for (int g = 0; g < groups; ++g) ws.push_back(make_weight(fast, f, n, k, static_cast<std::uint64_t>(1000 * r + g + 7)));
      if (r == 0)
        for (const LinearWeight& w : ws)
          set.bytes += static_cast<double>(w.data.nbytes() + (w.scale.defined() ? w.scale.nbytes() : 0));
      set.copies.push_back(std::move(ws));
    }
    return set;
  };
  const Set bf16 = make_set(WeightFormat::kBF16), fp8 = make_set(WeightFormat::kFp8Block);
  for (std::int64_t m : {1, 8, 32, 128, 256}) {
    const Tensor x = fast.upload(host_bf16({m, groups * k}, 1.0f, static_cast<std::uint64_t>(m)));
    Tensor y = fast.empty({m, groups * n}, DType::kBF16);
    const double fl = floor_us(fp8.bytes + 2.0 * m * groups * k, 2.0 * m * groups * n * k, roof.bf16_tflops, roof);
    auto row = [&](const char* path, Backend& b, const Set& set) {
      const CudaTiming t = cuda_time(b, [&] {
        for (const auto& ws : set.copies) b.linear_grouped(x, ws, {}, y);
      }, 1, 10);
      const double us = t.median_ms * 1e3 / static_cast<double>(set.copies.size());
      std::printf("| %lld | %s | %.2f | %.0f | %.2f | %.0f%% |\n", static_cast<long long>(m), path, us,
                  set.bytes / (us * 1e3), fl, 100.0 * fl / us);
    };
    row("bf16 dequantisation", fast, bf16);
    row("fp8 blocks, skinny / loop", fp8_old, fp8);
    row("fp8 blocks, wgmma, 64-token tiles", wgmma_narrow, fp8);
    row("fp8 blocks, wgmma (default: 128-token tiles)", fast, fp8);
    std::fflush(stdout);
  }
  std::printf("\n");
}

// One routed-expert path to time: a label and the backend whose options select it.
struct ExpertPath {
  const char* label;
  Backend* backend;
};

// paths[0] is the reference ("default"); every other path's output is compared with it. With
// trace_gaps, each (T, path) is followed by a synchronised 30 ms pause, so a kernel trace of the run
// splits into one segment per timing (tools/gpu/run_moe_experts.sh).
void bench_experts(const std::vector<ExpertPath>& paths, const Roof& roof, const std::vector<std::int64_t>& ts,
                   bool trace_gaps, int act_block = 128) {
  Backend& b = *paths.front().backend;
  const int n_exp = 256, k = 6;
  const std::int64_t dim = 4096, inter = 2048;
  std::vector<ExpertWeights> experts;
  experts.reserve(n_exp);
  const auto t0 = std::chrono::steady_clock::now();
  for (int e = 0; e < n_exp; ++e)
    experts.push_back({make_weight(b, WeightFormat::kFp4, inter, dim, 10 * e + 1),
                       make_weight(b, WeightFormat::kFp4, inter, dim, 10 * e + 2),
                       make_weight(b, WeightFormat::kFp4, dim, inter, 10 * e + 3)});
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double expert_bytes = 3.0 * (inter * dim / 2 + inter * dim / 32);
  std::printf("## Routed experts: fp4 weights, 256 experts × [2048, 4096] (w1, w3) + [4096, 2048] (w2), top-6\n\n");
  std::printf("moe_experts(): FP8 act quant to codes, sort by expert on the device, grouped FP8 tensor-core GEMM "
              "for w1/w3 (fp4 widened to e4m3), SwiGLU + act quant to codes, w2, combine. Paths: 'default' = "
              "this build's defaults (moe_fp4_wgmma: sm_90a warpgroup MMA, fp4 tiles widened once to e4m3 in shared "
              "memory or straight into registers); 'mma.sync' = the register-staged 16-byte fp4 kernel (emulated e4m3 "
              "mma.sync); '4-byte' = moe_fp4_wide off (the "
              "session-3 kernel); 'mma' = the batch-invariant pipeline. Bytes = distinct experts touched × %.1f MB + activations. (weights generated in %.0f s)\n\n",
              expert_bytes / 1e6, setup_s);
  std::printf("| tokens | experts touched | path | time µs | TFLOP/s | GB/s | floor µs | floor/time | vs default |\n");
  std::printf("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (std::int64_t t : ts) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(t * k));
    std::mt19937 rng(static_cast<std::uint32_t>(t));
    std::set<int> touched;
    std::vector<int> perm(n_exp);
    for (std::int64_t i = 0; i < t; ++i) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int j = 0; j < k; ++j) {
        std::swap(perm[static_cast<std::size_t>(j)], perm[static_cast<std::size_t>(j + static_cast<int>(rng() % (n_exp - j)))]);
        ids[static_cast<std::size_t>(i * k + j)] = perm[static_cast<std::size_t>(j)];
        touched.insert(perm[static_cast<std::size_t>(j)]);
      }
    }
    Tensor id_host = Tensor::empty({t, k}, DType::kI32);
    std::memcpy(id_host.raw_data(), ids.data(), ids.size() * 4);
    Tensor w_host = Tensor::empty({t, k}, DType::kF32);
    for (std::int64_t i = 0; i < t * k; ++i) w_host.data<float>()[i] = 0.25f;
    const Tensor x = b.upload(host_bf16({t, dim}, 1.0f, 5));
    const Tensor gid = b.upload(id_host), gw = b.upload(w_host);
    Tensor out = b.empty({t, dim}, DType::kF32);
    const MoeOptions options{10.0f, act_block, DType::kBF16};
    const double flops = 2.0 * t * k * 3.0 * dim * inter;
    const double bytes = static_cast<double>(touched.size()) * expert_bytes + t * dim * 6.0;
    const double fl = floor_us(bytes, flops, roof.fp8_tflops, roof);
    Tensor first = Tensor::empty({t, dim}, DType::kF32), host_out = Tensor::empty({t, dim}, DType::kF32);
    for (const ExpertPath& path : paths) {
      Backend* be = path.backend;
      const CudaTiming tm = cuda_time(*be, [&] { be->moe_experts(x, gid, gw, experts, options, out); }, 3, 10);
      const double us = tm.median_ms * 1e3;
      // max |Δ| / max |default| against the default path's output (same inputs).
      be->copy(out, be == &b ? first : host_out);
      be->synchronize();
      double diff = 0.0, ref = 0.0;
      for (std::int64_t i = 0; be != &b && i < t * dim; ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(host_out.data<float>()[i] - first.data<float>()[i])));
        ref = std::max(ref, static_cast<double>(std::fabs(first.data<float>()[i])));
      }
      std::printf("| %lld | %zu | %s | %.1f | %.1f | %.0f | %.1f | %.0f%% | %.1e |\n", static_cast<long long>(t),
                  touched.size(), path.label, us, flops / (us * 1e6), bytes / (us * 1e3), fl, 100.0 * fl / us,
                  ref > 0.0 ? diff / ref : diff);
      std::fflush(stdout);
      if (trace_gaps) std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  }
  std::printf("\n");
}

// One sparse-attention shape: each token attends to `window` rows of its sequence's window (a
// contiguous source) and `topk` rows of its sequence's compressed KV (a source paged by 64 rows,
// pages shuffled), as the model's attention calls it. prefill: the tokens are consecutive
// positions of one sequence (window = the previous rows of the chunk, -1 before the start).
struct AttnBenchCase {
  const char* name;
  std::int64_t tokens;
  std::int64_t window, topk, comp_rows;  // comp_rows: compressed rows per sequence
  bool prefill;
};

struct AttnBenchInput {
  Tensor q, idx, out, window_pool, comp_pool, pages;
  std::int64_t valid = 0;  // indices that are not -1, over all tokens
};

AttnBenchInput make_attention_input(Backend& b, const AttnBenchCase& c, std::int64_t heads, std::int64_t d) {
  const std::int64_t seqs = c.prefill ? 1 : c.tokens, k = c.window + c.topk;
  const std::int64_t window_rows = c.prefill ? c.tokens : seqs * c.window;
  const std::int64_t pages_per_seq = (c.comp_rows + 63) / 64;
  AttnBenchInput in;
  in.q = b.upload(host_bf16({c.tokens, heads, d}, 1.0f, 12));
  in.window_pool = b.upload(host_bf16({window_rows, d}, 1.0f, 14));
  in.comp_pool = b.upload(host_bf16({seqs * pages_per_seq * 64, d}, 1.0f, 15));
  std::mt19937 rng(13);
  std::vector<std::int32_t> page_ids(static_cast<std::size_t>(seqs * pages_per_seq));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  Tensor pages_host = Tensor::empty({seqs * pages_per_seq}, DType::kI32);
  std::copy(page_ids.begin(), page_ids.end(), pages_host.data<std::int32_t>());
  in.pages = b.upload(pages_host);
  Tensor idx_host = Tensor::empty({c.tokens, k}, DType::kI32);
  std::vector<std::int32_t> comp(static_cast<std::size_t>(c.comp_rows));
  for (std::int64_t t = 0; t < c.tokens; ++t) {
    std::int32_t* row = idx_host.data<std::int32_t>() + t * k;
    const std::int64_t seq = c.prefill ? 0 : t;
    for (std::int64_t j = 0; j < c.window; ++j) {
      const std::int64_t r = c.prefill ? t - c.window + 1 + j : seq * c.window + j;
      row[j] = r < 0 ? -1 : static_cast<std::int32_t>(r);
    }
    std::iota(comp.begin(), comp.end(), static_cast<std::int32_t>(window_rows + seq * pages_per_seq * 64));
    std::shuffle(comp.begin(), comp.end(), rng);  // top-k: distinct rows in no particular order
    for (std::int64_t j = 0; j < c.topk; ++j) row[c.window + j] = j < c.comp_rows ? comp[static_cast<std::size_t>(j)] : -1;
    for (std::int64_t j = 0; j < k; ++j) in.valid += row[j] >= 0 ? 1 : 0;
  }
  in.idx = b.upload(idx_host);
  in.out = b.empty({c.tokens, heads, d}, DType::kBF16);
  return in;
}

void bench_attention(Backend& b, const Roof& roof) {
  const std::int64_t heads = 64, d = 512;
  CudaBackendOptions inv_options;
  inv_options.batch_invariant = true;
  auto invariant = make_cuda_backend(inv_options);
  const Tensor sinks = b.upload(host_bf16({heads}, 1.0f, 16).to(DType::kF32));
  std::printf("## Sparse attention (64 heads, d = 512, MQA, bf16 q and KV, bf16-rounded probabilities)\n\n");
  std::printf("bf16 q and KV take the tensor-core kernel (sparse_attention_mma.cu: 16 or 64 heads as the M tile, "
              "64 gathered rows per tile; the index list split across CTAs when the grid cannot fill the GPU, "
              "never in batch-invariant mode). Bytes = gathered KV rows (1 KB each, per token) + q + out; FLOPs = "
              "4·T·H·rows·d; floor = max(bytes / HBM, FLOPs / bf16 peak). 8K context: 128 window rows + 512 of the "
              "2048 compressed rows (CSA); HCA: 128 + all 64 compressed rows. 'SIMT (block 32)' = the scalar kernel "
              "that ran before (other block sizes and f32 activations still take it).\n\n");
  std::printf("| case | tokens | path | time µs | GB/s | TFLOP/s | floor µs | floor/time |\n");
  std::printf("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<AttnBenchCase> cases;
  for (std::int64_t t : {1, 8, 32, 128}) cases.push_back({"decode 8K CSA 128+512", t, 128, 512, 2048, false});
  for (std::int64_t t : {1, 32, 128}) cases.push_back({"decode 8K HCA 128+64", t, 128, 64, 64, false});
  cases.push_back({"prefill 1024 tokens, 8K CSA 128+512", 1024, 128, 512, 2048, true});
  cases.push_back({"prefill 1024 tokens, HCA 128+64", 1024, 128, 64, 64, true});
  for (const AttnBenchCase& c : cases) {
    AttnBenchInput in = make_attention_input(b, c, heads, d);
    const RowView src[2] = {RowView::contiguous(in.window_pool),
                            RowView{in.comp_pool, in.pages, 64, in.comp_pool.dim(0)}};
    const AttentionOptions opt{0.044194f, true, 64};
    const double bytes = static_cast<double>(in.valid) * d * 2.0 + 2.0 * c.tokens * heads * d * 2.0;
    const double flops = 4.0 * static_cast<double>(in.valid) * heads * d;
    const double fl = floor_us(bytes, flops, roof.bf16_tflops, roof);
    auto row = [&](const char* path, Backend& be, const AttentionOptions& o) {
      const CudaTiming tm = cuda_time(be, [&] { be.sparse_attention(in.q, src, in.idx, sinks, o, in.out); }, 5, 10);
      const double us = tm.median_ms * 1e3;
      std::printf("| %s | %lld | %s | %.1f | %.0f | %.1f | %.1f | %.0f%% |\n", c.name, static_cast<long long>(c.tokens),
                  path, us, bytes / (us * 1e3), flops / (us * 1e6), fl, 100.0 * fl / us);
      std::fflush(stdout);
    };
    row("default", b, opt);
    if (c.tokens <= 128) row("batch-invariant", *invariant, opt);  // prefill does not split either way
    // The SIMT kernel (the path before the tensor-core kernel) is what block sizes other than 64 take.
    if (c.tokens <= 128 && !c.prefill && c.topk == 512) row("SIMT (block 32)", b, AttentionOptions{opt.scale, true, 32});
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const auto info = deepinfer::cuda_device_info();
  if (info.count == 0) {
    std::printf("ops_cuda_bench: no GPU (%s); nothing to measure\n", info.reason.c_str());
    return 0;
  }
  try {
    std::printf("# CUDA op benchmarks on %s\n\n", info.name.c_str());
    auto fast = make_cuda_backend(0);
    if (argc > 1 && std::strcmp(argv[1], "--attention") == 0) {
      bench_attention(*fast, Roof{});
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--decode") == 0) {
      Roof roof;
      measure_roof(roof, *fast);
      CudaBackendOptions prev, alt, lt8, mma;
      prev.bf16_skinny_max_rows = 0;
      prev.fp8_fused_max_rows = 0;
      prev.fp8_wgmma_decode = false;
      alt.bf16_skinny_linear = true;  // the skinny bf16 kernel on single weights too
      alt.fp8_fused_max_rows = 8;
      alt.fp8_decode_unroll = 8;
      alt.fp8_wgmma_decode = false;
      lt8.skinny_max_rows = 0;
      lt8.fp8_wgmma_decode = false;
      mma.fp8_wgmma_decode = false;
      auto previous = make_cuda_backend(prev);
      auto alternative = make_cuda_backend(alt);
      auto fp8_lt = make_cuda_backend(lt8);
      auto fp8_mma = make_cuda_backend(mma);
      bench_decode_linears(*fast, *previous, *alternative, *fp8_lt, *fp8_mma, roof);
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--decode-fp8") == 0) {
      Roof roof;
      measure_roof(roof, *fast);
      std::vector<std::string> sets(argv + 2, argv + argc);
      if (sets.empty()) sets.emplace_back();
      bench_fp8_decode_sets(sets, roof);
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--wo-a") == 0) {
      Roof roof;
      measure_roof(roof, *fast);
      CudaBackendOptions old_options;
      old_options.grouped_fp8_wgmma = false;
      auto fp8_old = make_cuda_backend(old_options);
      CudaBackendOptions narrow_options;
      narrow_options.grouped_fp8_wgmma_wide = false;
      auto wgmma_narrow = make_cuda_backend(narrow_options);
      bench_wo_a(*fast, *fp8_old, *wgmma_narrow, roof);
      return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--moe-prefill") == 0) {
      // Prefill sizes: the 128-row-item fp4 GEMMs (default from 32 rows per expert: fp8 wgmma; 'forced' at
      // every size; 'bf16 wgmma' / 'mma.sync' = the bf16 GEMMs, mma.sync the batch-invariant kernel) against
      // the skinny FP8 path they replace ('off').
      Roof roof;
      measure_roof(roof, *fast);
      CudaBackendOptions forced_options, bf16_options, sync_options, off_options;
      forced_options.moe_prefill_min_rows = 1;
      bf16_options.moe_prefill_min_rows = 1;
      bf16_options.moe_prefill_fp8 = false;
      sync_options = bf16_options;
      sync_options.moe_prefill_wgmma = false;
      off_options.moe_prefill_min_rows = 0;
      auto forced = make_cuda_backend(forced_options);
      auto bf16 = make_cuda_backend(bf16_options);
      auto sync = make_cuda_backend(sync_options);
      auto off = make_cuda_backend(off_options);
      bench_experts({{"default", fast.get()}, {"prefill forced", forced.get()}, {"prefill bf16 wgmma", bf16.get()},
                     {"prefill mma.sync", sync.get()}, {"prefill off", off.get()}},
                    roof, {256, 1024, 2048, 8192}, false);
      return 0;
    }
    CudaBackendOptions nar;
    nar.moe_fp4_wide = false;
    nar.moe_fp4_wgmma = false;
    auto narrow = make_cuda_backend(nar);
    if (argc > 1 && std::strcmp(argv[1], "--moe-wgmma") == 0) {  // the experts' wgmma kernel forms
      Roof roof;
      measure_roof(roof, *fast);
      std::vector<ExpertPath> paths = {{"default", fast.get()}};
      CudaBackendOptions mma;
      mma.moe_fp4_wgmma = false;
      auto mma_sync = make_cuda_backend(mma);
      paths.push_back({"mma.sync", mma_sync.get()});
      // Session 9's pieces switched off one by one ('session 8' = all of them off: the whole prologue
      // after the wait, the 1024-thread sort) and the K order in two halves (split over CTAs at one
      // token, else walked; 'walked': always).
      struct Variant {
        const char* label;
        const char* options;  // CudaBackendOptions assignments (set_cuda_option)
      };
      std::vector<std::unique_ptr<Backend>> variants;
      for (const Variant& v :
           {Variant{"K halves", "moe_fp4_wgmma_ksplit=2"},
            Variant{"K halves walked", "moe_fp4_wgmma_ksplit=2,moe_fp4_wgmma_split_ctas=0"},
            Variant{"no early prologue", "moe_fp4_wgmma_early=0"},
            Variant{"no early w2 launch", "moe_fp4_wgmma_early_w2=0"},
            Variant{"1024-thread sort", "moe_sort_small=0"},
            Variant{"session 8", "moe_fp4_wgmma_early=0,moe_sort_small=0"}}) {
        CudaBackendOptions o;
        std::string list = v.options;
        for (std::size_t at = 0; at < list.size();) {
          const std::size_t comma = std::min(list.find(',', at), list.size());
          set_cuda_option(o, list.substr(at, comma - at));
          at = comma + 1;
        }
        variants.push_back(make_cuda_backend(o));
        paths.push_back({v.label, variants.back().get()});
      }
      if (argc > 2 && std::strcmp(argv[2], "--act32") == 0) {
        // V4.1's act block 32: the skinny kernel it takes by default vs the wgmma form (items <= 16 rows).
        CudaBackendOptions a32;
        a32.moe_fp4_wgmma_act32 = true;
        auto act32 = make_cuda_backend(a32);
        std::printf("act block 32 (V4.1):\n\n");
        bench_experts({{"default", fast.get()}, {"wgmma act32", act32.get()}}, roof, {1, 8, 32, 128}, false, 32);
        return 0;
      }
      bench_experts(paths, roof, {1, 8, 32, 128, 512}, false);
      return 0;
    }
    if (argc > 1 && (std::strcmp(argv[1], "--moe") == 0 || std::strcmp(argv[1], "--moe-trace") == 0)) {
      const bool trace = std::strcmp(argv[1], "--moe-trace") == 0;
      Roof roof;
      if (!trace) measure_roof(roof, *fast);
      CudaBackendOptions mma;
      mma.moe_fp4_wgmma = false;  // the register-staged mma.sync kernel (the default before wgmma)
      auto mma_sync = make_cuda_backend(mma);
      std::vector<ExpertPath> paths = {{"default", fast.get()}, {"mma.sync", mma_sync.get()}};
      if (!trace) paths.push_back({"4-byte", narrow.get()});  // (run_moe_experts.sh labels the trace's two)
      bench_experts(paths, roof, trace ? std::vector<std::int64_t>{1, 8, 32, 128, 256}
                                       : std::vector<std::int64_t>{1, 4, 8, 32, 64, 128, 256, 512}, trace);
      return 0;
    }
    CudaBackendOptions inv;
    inv.batch_invariant = true;
    auto invariant = make_cuda_backend(inv);
    CudaBackendOptions sk;
    sk.batch_invariant = false;
    sk.skinny_max_rows = 1 << 20;
    auto skinny = make_cuda_backend(sk);
    CudaBackendOptions lt8;
    lt8.batch_invariant = false;
    lt8.skinny_max_rows = 0;
    auto fp8_lt = make_cuda_backend(lt8);
    CudaBackendOptions lt16;
    lt16.batch_invariant = false;
    lt16.skinny_max_rows = 0;
    lt16.fp8_cublas = false;
    lt16.cublas_min_rows = 1;
    auto bf16_lt = make_cuda_backend(lt16);
    Roof roof;
    measure_roof(roof, *fast);
    bench_gemms({*fast, *invariant, *skinny, *fp8_lt, *bf16_lt}, roof, quick);
    if (argc <= 1 || std::strcmp(argv[1], "--gemm") != 0) bench_attention(*fast, roof);
    const std::vector<std::int64_t> expert_tokens =
        quick ? std::vector<std::int64_t>{1, 256} : std::vector<std::int64_t>{1, 4, 8, 32, 64, 256, 1024, 4096};
    bench_experts({{"default", fast.get()}, {"4-byte", narrow.get()}, {"mma", invariant.get()}}, roof, expert_tokens,
                  false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
