// The CPU linear: activation rows are converted (and optionally FP8 fake-quantised) once into a
// K-padded f32 buffer, weight rows are decoded per tile into an f32 panel, and the ISA-specific
// micro-kernel computes each output element with the same fixed-order arithmetic.
#include "ops/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <array>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/quant.h"
#include "tensor/float_formats.h"

namespace deepinfer::ops::cpu {
namespace {

constexpr std::int64_t kTileN = 32;  // weight rows decoded per task
constexpr std::int64_t kTileM = 32;  // activation rows per task

std::int64_t round_up16(std::int64_t k) { return (k + 15) / 16 * 16; }

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<std::size_t>(i)] = e4m3_to_f32(static_cast<std::uint8_t>(i));
    return t;
  }();
  return table;
}

// Both elements of a packed FP4 byte (low nibble first).
const std::array<std::array<float, 2>, 256>& fp4_pair_table() {
  static const std::array<std::array<float, 2>, 256> table = [] {
    std::array<std::array<float, 2>, 256> t{};
    for (int b = 0; b < 256; ++b) {
      t[static_cast<std::size_t>(b)] = {e2m1_to_f32(static_cast<std::uint8_t>(b & 0xf)),
                                        e2m1_to_f32(static_cast<std::uint8_t>(b >> 4))};
    }
    return t;
  }();
  return table;
}

float scale_value(const Tensor& scale, std::int64_t r, std::int64_t c) {
  const std::int64_t i = r * scale.dim(1) + c;
  if (scale.dtype() == DType::kUE8M0) return ue8m0_to_f32(scale.data<std::uint8_t>()[i]);
  return scale.data<float>()[i];
}

// Weight rows [n0, n0 + nt) as f32 into panel (row stride k16, zero padded past K).
void decode_rows(const LinearWeight& w, std::int64_t n0, std::int64_t nt, std::int64_t k16, float* panel) {
  const std::int64_t k = w.in_features();
  for (std::int64_t r = 0; r < nt; ++r) {
    const std::int64_t n = n0 + r;
    float* dst = panel + r * k16;
    switch (w.format) {
      case WeightFormat::kF32:
        std::memcpy(dst, w.data.data<float>() + n * k, static_cast<std::size_t>(k) * 4);
        break;
      case WeightFormat::kBF16: {
        const std::uint16_t* src = w.data.data<std::uint16_t>() + n * k;
        for (std::int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(src[i]);
        break;
      }
      case WeightFormat::kFp8Block: {
        const auto& lut = e4m3_table();
        const std::uint8_t* src = w.data.data<std::uint8_t>() + n * k;
        for (std::int64_t kb = 0; kb < k; kb += w.block) {
          const float s = scale_value(w.scale, n / w.block, kb / w.block);
          const std::int64_t end = std::min(k, kb + w.block);
          for (std::int64_t i = kb; i < end; ++i) dst[i] = lut[src[i]] * s;
        }
        break;
      }
      case WeightFormat::kFp4: {  // K and the block are even (validate_weight), so bytes never straddle blocks
        const auto& pairs = fp4_pair_table();
        const std::uint8_t* src = w.data.data<std::uint8_t>() + n * (k / 2);
        for (std::int64_t kb = 0; kb < k; kb += w.block) {
          const float s = scale_value(w.scale, n, kb / w.block);
          const std::int64_t end = std::min(k, kb + w.block);
          for (std::int64_t i = kb; i < end; i += 2) {
            const auto& pair = pairs[src[i / 2]];
            dst[i] = pair[0] * s;
            dst[i + 1] = pair[1] * s;
          }
        }
        break;
      }
    }
    std::fill(dst + k, dst + k16, 0.0f);
  }
}

// Columns [n0, n0 + nt) of output row m from the f32 results in c.
void store_partial_row(const Rows& out, std::int64_t m, std::int64_t n0, std::int64_t nt, const float* c) {
  std::uint8_t* p = out.row_ptr(m);
  if (out.is_f32()) {
    std::memcpy(reinterpret_cast<float*>(p) + n0, c, static_cast<std::size_t>(nt) * 4);
    return;
  }
  auto* h = reinterpret_cast<std::uint16_t*>(p) + n0;
  for (std::int64_t j = 0; j < nt; ++j) h[j] = f32_to_bf16(c[j]);
}

}  // namespace

const CpuKernels& kernels() {
  static const CpuKernels chosen = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return CpuKernels{&avx512::gemm_block, &avx512::dot, &avx512::axpy};
    if (__builtin_cpu_supports("avx2")) return CpuKernels{&avx2::gemm_block, &avx2::dot, &avx2::axpy};
    return CpuKernels{&generic::gemm_block, &generic::dot, &generic::axpy};
  }();
  return chosen;
}

void validate_weight(const LinearWeight& w) {
  DI_CHECK(w.data.defined() && w.data.ndim() == 2, "linear weight must be a 2-D tensor, got {}", w.data.shape());
  const std::int64_t n = w.data.dim(0);
  const std::int64_t k = w.data.dim(1);
  auto check_scale = [&](std::int64_t rows, std::int64_t cols) {
    DI_CHECK(w.scale.defined() && w.scale.ndim() == 2 && w.scale.dim(0) == rows && w.scale.dim(1) == cols,
             "weight {}: scale must be [{}, {}], got {}", w.data.shape(), rows, cols, w.scale.shape());
    DI_CHECK(w.scale.dtype() == DType::kUE8M0 || w.scale.dtype() == DType::kF32,
             "weight {}: scale dtype {} is not ue8m0 or f32", w.data.shape(), dtype_name(w.scale.dtype()));
    DI_CHECK(w.scale.is_contiguous(), "weight {}: scale must be contiguous", w.data.shape());
  };
  DI_CHECK(w.data.is_contiguous(), "weight {} must be contiguous", w.data.shape());
  switch (w.format) {
    case WeightFormat::kF32:
      DI_CHECK(w.data.dtype() == DType::kF32, "f32 weight has dtype {}", dtype_name(w.data.dtype()));
      return;
    case WeightFormat::kBF16:
      DI_CHECK(w.data.dtype() == DType::kBF16, "bf16 weight has dtype {}", dtype_name(w.data.dtype()));
      return;
    case WeightFormat::kFp8Block:
      DI_CHECK(w.data.dtype() == DType::kF8E4M3 && w.block > 0, "fp8 weight {} needs e4m3 data and a block size",
               w.data.shape());
      check_scale((n + w.block - 1) / w.block, (k + w.block - 1) / w.block);
      return;
    case WeightFormat::kFp4:
      DI_CHECK(w.data.dtype() == DType::kF4E2M1 && w.block > 0 && k % w.block == 0,
               "fp4 weight {} needs packed e2m1 data and K divisible by its block {}", w.data.shape(), w.block);
      check_scale(n, k / w.block);
      return;
  }
}

void linear_rows(const Rows& x, const LinearWeight& w, int act_quant_block, const Rows& out) {
  const std::int64_t m_rows = x.rows;
  const std::int64_t k = x.width;
  const std::int64_t n = out.width;
  DI_CHECK(w.in_features() == k && w.out_features() == n && out.rows == m_rows,
           "linear: x [{}, {}] · W{}ᵀ does not give out [{}, {}]", m_rows, k, w.data.shape(), out.rows, n);
  if (m_rows == 0 || n == 0) return;
  const std::int64_t k16 = round_up16(k);

  // Activations: converted, optionally fake-quantised, zero padded to k16 (owned by this thread).
  float* a = scratch(3, static_cast<std::size_t>(m_rows * k16));
#pragma omp parallel for schedule(static) if (worth_threads(m_rows * k * (act_quant_block > 0 ? 8 : 1)))
  for (std::int64_t m = 0; m < m_rows; ++m) {
    float* row = a + m * k16;
    const float* src = load_row(x, m, row);
    if (src != row) std::memcpy(row, src, static_cast<std::size_t>(k) * 4);
    if (act_quant_block > 0) fake_quant_fp8_span(row, k, act_quant_block);
    std::fill(row + k, row + k16, 0.0f);
  }

  const auto block_fn = kernels().gemm_block;
  const bool direct = w.format == WeightFormat::kF32 && k == k16;
  const std::int64_t n_tiles = (n + kTileN - 1) / kTileN;
  const std::int64_t m_tiles = (m_rows + kTileM - 1) / kTileM;
#pragma omp parallel for schedule(static) collapse(2) if (worth_threads(m_rows * n * k))
  for (std::int64_t nt = 0; nt < n_tiles; ++nt) {
    for (std::int64_t mt = 0; mt < m_tiles; ++mt) {
      const std::int64_t n0 = nt * kTileN;
      const std::int64_t nn = std::min(kTileN, n - n0);
      const std::int64_t m0 = mt * kTileM;
      const std::int64_t mm = std::min(kTileM, m_rows - m0);
      const float* panel;
      if (direct) {
        panel = w.data.data<float>() + n0 * k;
      } else {
        float* buf = scratch(0, static_cast<std::size_t>(kTileN * k16));
        decode_rows(w, n0, nn, k16, buf);
        panel = buf;
      }
      float* c = scratch(1, static_cast<std::size_t>(kTileM * kTileN));
      block_fn(a + m0 * k16, k16, mm, panel, k16, nn, k16, c, kTileN);
      for (std::int64_t i = 0; i < mm; ++i) store_partial_row(out, m0 + i, n0, nn, c + i * kTileN);
    }
  }
}

void CpuBackend::linear(const Tensor& x, const LinearWeight& w, const LinearOptions& options, Tensor& out) {
  validate_weight(w);
  linear_rows(as_rows(x), w, options.act_quant_block, as_rows(out));
}

}  // namespace deepinfer::ops::cpu
