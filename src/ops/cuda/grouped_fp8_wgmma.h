// The grouped FP8-block projection (V4's wo_a) on Hopper wgmma (grouped_fp8_wgmma.cu): argument struct,
// launch wrapper and the row limit the backend dispatches to it. Internal to src/ops/cuda (CUDA builds).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/device_rows.h"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {

// Rows the kernel serves (the decode batches; above, each 64-token tile re-widens every weight and
// the per-group GEMMs on the dequantised weight are the better tool).
constexpr std::int64_t kGroupedFp8WgmmaMaxRows = 256;

// out[:, g*n .. g*n+n) = x[:, g*k .. g*k+k) · W_gᵀ for each group g: x bf16 (base 16-byte aligned,
// stride % 8 == 0), W_g e4m3 [n, k] contiguous and 16-byte aligned with block scales (block 128 or 32,
// ue8m0 bytes or f32, rows of scale_ld); n % 64 == 0, k % 128 == 0. Each weight is widened to
// bf16(code x block scale), the products and sums are those of the bf16 dequantisation (f32 sums).
struct GroupedFp8WgmmaArgs {
  DevRows x;
  std::int64_t n = 0;  // output columns per group
  std::int64_t k = 0;  // K per group
  int groups = 0;
  const void* w[kMaxLinearGroups] = {};
  const void* w_scale[kMaxLinearGroups] = {};
  std::int64_t scale_ld = 0;
  int block = 0;
  int scale_f32 = 0;
  void* out = nullptr;  // [rows, groups * n], row stride ldo
  std::int64_t ldo = 0;
  int out_bf16 = 0;
  // Above 64 rows, 128-token tiles (each weight widened once per 128 tokens) instead of 64.
  int wide_tiles = 0;
};

// Launched with launch_chained (a programmatic dependent of the stream's previous kernel when the backend's
// dependent_launch is on): the first weight stages stream in before the wait, the activations after it.
void launch_grouped_fp8_wgmma(const GroupedFp8WgmmaArgs& args, cudaStream_t stream);

}  // namespace deepinfer::ops::cuda
