// Helpers shared by the prefill expert GEMM parity tests (parity_moe_prefill_test.cpp: the bf16 GEMMs;
// parity_moe_prefill_fp8_test.cpp: the fp8 one): routed steps with hot experts and fp4 expert sets held
// on the CPU and on the GPU.
#pragma once

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {

// Distinct experts per token, the first `hot` experts drawn three times as often (so some experts
// get several 128-row items and some a partial one or none).
inline std::vector<std::int32_t> prefill_route_ids(std::int64_t t, int k, int n_exp, int hot, std::uint32_t seed) {
  std::vector<std::int32_t> ids;
  std::mt19937 rng(seed);
  std::vector<int> pool;
  for (int e = 0; e < n_exp; ++e)
    for (int c = 0; c < (e < hot ? 3 : 1); ++c) pool.push_back(e);
  for (std::int64_t i = 0; i < t; ++i) {
    std::vector<int> taken;
    while (static_cast<int>(taken.size()) < k) {
      const int e = pool[rng() % pool.size()];
      if (std::find(taken.begin(), taken.end(), e) == taken.end()) taken.push_back(e);
    }
    ids.insert(ids.end(), taken.begin(), taken.end());
  }
  return ids;
}

struct PrefillExperts {
  std::vector<ExpertWeights> cpu, gpu;
  void add(ExpertWeights ew) {
    gpu.push_back({to_gpu(ew.w1), to_gpu(ew.w3), to_gpu(ew.w2)});
    cpu.push_back(std::move(ew));
  }
};

inline PrefillExperts prefill_fp4_experts(int n_exp, std::int64_t dim, std::int64_t inter, std::uint32_t seed) {
  PrefillExperts out;
  for (int e = 0; e < n_exp; ++e) {
    const auto s = seed + static_cast<std::uint32_t>(7 * e);
    out.add({quantize_fp4(random_tensor({inter, dim}, s, 0.05f)), quantize_fp4(random_tensor({inter, dim}, s + 1, 0.05f)),
             quantize_fp4(random_tensor({dim, inter}, s + 2, 0.05f))});
  }
  return out;
}

// One step's routed-expert inputs: bf16 tokens, their experts and routing weights.
struct PrefillStep {
  Tensor x, ids, wts;
  PrefillStep narrow_last() const {
    const std::int64_t t = x.dim(0) - 1;
    return {x.narrow(0, t, 1), ids.narrow(0, t, 1), wts.narrow(0, t, 1)};
  }
};

inline PrefillStep prefill_step(std::int64_t t, std::int64_t dim, int k, int n_exp, int hot, std::uint32_t seed) {
  return {random_tensor({t, dim}, seed, 1.0f, DType::kBF16), i32_tensor({t, k}, prefill_route_ids(t, k, n_exp, hot, seed + 1)),
          random_tensor({t, k}, seed + 2, 0.3f)};
}

// moe_experts on `b` (NaN-poisoned output, so unwritten rows fail any comparison).
inline Tensor run_prefill_experts(Backend& b, const PrefillStep& in, const PrefillExperts& ex, const MoeOptions& options) {
  Tensor got = poisoned({in.x.dim(0), in.x.dim(1)}, DType::kF32, b);
  b.moe_experts(to_gpu(in.x, b), to_gpu(in.ids, b), to_gpu(in.wts, b), ex.gpu, options, got);
  return got;
}

inline Tensor cpu_prefill_experts(const PrefillStep& in, const PrefillExperts& ex, const MoeOptions& options) {
  Tensor want = Tensor::empty({in.x.dim(0), in.x.dim(1)}, DType::kF32);
  backend().moe_experts(in.x, in.ids, in.wts, ex.cpu, options, want);
  return want;
}

}  // namespace deepinfer::ops::test
