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

// The micro-kernel, compiled once per instruction set (gemm_kernel_*.cpp):
// c[i * ldc + j] = dot(a + i * lda, w + j * ldw) over k16 elements (a multiple of 16).
using GemmBlockFn = void (*)(const float* a, std::int64_t lda, std::int64_t m, const float* w, std::int64_t ldw,
                             std::int64_t n, std::int64_t k16, float* c, std::int64_t ldc);
namespace avx512 {
void gemm_block(const float* a, std::int64_t lda, std::int64_t m, const float* w, std::int64_t ldw, std::int64_t n,
                std::int64_t k16, float* c, std::int64_t ldc);
}
namespace avx2 {
void gemm_block(const float* a, std::int64_t lda, std::int64_t m, const float* w, std::int64_t ldw, std::int64_t n,
                std::int64_t k16, float* c, std::int64_t ldc);
}
namespace generic {
void gemm_block(const float* a, std::int64_t lda, std::int64_t m, const float* w, std::int64_t ldw, std::int64_t n,
                std::int64_t k16, float* c, std::int64_t ldc);
}
// The best micro-kernel this CPU runs (all give bit-identical results).
GemmBlockFn gemm_block_for_this_cpu();

// Dot product of two f32 spans with the same 16-lane order as the GEMM (n need not be a multiple
// of 16); used by attention and indexer scores so they stay batch invariant too.
float dot_f32(const float* a, const float* b, std::int64_t n);

}  // namespace deepinfer::ops::cpu
