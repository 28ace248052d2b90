// The CPU linear kernel: y = x · Wᵀ for every stored weight format, with an optional FP8
// fake-quant of x. Each output element is a 16-lane f32 dot product over K followed by a fixed
// reduction tree, so a row's result never depends on M, the tiling or the thread count.
#pragma once

#include <cstdint>

#include "ops/cpu/rows.h"
#include "ops/op_types.h"

namespace deepinfer::ops::cpu {

// out [M, N] = x [M, K] · Wᵀ; out rows are rounded to out's dtype. Must not be called from
// inside an OpenMP parallel region (it opens its own).
void linear_rows(const Rows& x, const LinearWeight& w, int act_quant_block, const Rows& out);

// Checks a weight's tensors against its format (shapes, dtypes, scale grid); throws on mismatch.
void validate_weight(const LinearWeight& w);

// The kernels compiled once per instruction set (gemm_kernel_*.cpp), all with the same arithmetic:
//  gemm_block: c[i * ldc + j] = dot(a + i * lda, w + j * ldw) over k16 elements (a multiple of 16);
//  dot: 16 lane accumulators (lane l sums k ≡ l mod 16) reduced by a fixed tree;
//  axpy: y += alpha · x.
struct CpuKernels {
  void (*gemm_block)(const float* a, std::int64_t lda, std::int64_t m, const float* w, std::int64_t ldw,
                     std::int64_t n, std::int64_t k16, float* c, std::int64_t ldc);
  float (*dot)(const float* a, const float* b, std::int64_t n);
  void (*axpy)(float alpha, const float* x, float* y, std::int64_t n);
};
#define DI_DECLARE_CPU_KERNELS(isa)                                                                           \
  namespace isa {                                                                                             \
  void gemm_block(const float* a, std::int64_t lda, std::int64_t m, const float* w, std::int64_t ldw,          \
                  std::int64_t n, std::int64_t k16, float* c, std::int64_t ldc);                               \
  float dot(const float* a, const float* b, std::int64_t n);                                                   \
  void axpy(float alpha, const float* x, float* y, std::int64_t n);                                           \
  }
DI_DECLARE_CPU_KERNELS(avx512)
DI_DECLARE_CPU_KERNELS(avx2)
DI_DECLARE_CPU_KERNELS(generic)
#undef DI_DECLARE_CPU_KERNELS

// The best kernels this CPU runs (all give bit-identical results).
const CpuKernels& kernels();

// Dot product of two f32 spans with the same 16-lane order as the GEMM (n need not be a multiple
// of 16); used by norms, attention and indexer scores so they stay batch invariant too.
inline float dot_f32(const float* a, const float* b, std::int64_t n) { return kernels().dot(a, b, n); }

}  // namespace deepinfer::ops::cpu
