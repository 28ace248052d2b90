// The CUDA backend's factory (sm_90a kernels + cuBLASLt). Plain C++ with no CUDA types: code built
// without CUDA may call it too, and then gets a deepinfer::Error saying so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ops/backend.h"

namespace deepinfer::ops {

// Forms of the routed experts' decode wgmma kernel (CudaBackendOptions::moe_fp4_wgmma_variant).
constexpr int kMoeFp4WgmmaVariants = 8;

struct CudaBackendOptions {
  int device = 0;
  // Every row's reduction order independent of the batch (no M-dependent split-K or library
  // GEMMs); the default follows DEEPINFER_BATCH_INVARIANT.
  bool batch_invariant = false;
  // Row count from which linear() hands quantised/bf16 GEMMs to cuBLASLt (after dequantising the
  // weight to bf16); 0 disables the library path. Ignored in batch-invariant mode.
  int cublas_min_rows = 128;
  // FP8 tensor cores for fp8-block / fp4 weights with FP8 act quant (K % 32 == 0): the skinny
  // register-fragment GEMM up to this many rows (and up to 4x as many on weights of <= 8M elements;
  // 0 = off), then cuBLASLt's block-scaled FP8 GEMM (128x128 weight blocks, 128-element act blocks)
  // when fp8_cublas is set. Ignored in batch-invariant mode.
  int skinny_max_rows = 8;
  bool fp8_cublas = true;
  // Routed experts with fp4 weights (ue8m0 scales, dims % 128 == 0, act block 128, up to 16 rows per
  // expert on average): the grouped GEMM with 16-byte weight loads and a one-wave grid-stride walk of
  // the touched experts; false = the 4-byte-load skinny kernel of the session-3 FP8 path.
  bool moe_fp4_wide = true;
  // Its K split stops where a warp would stream fewer than this many 512-K passes per work unit
  // (1: split for balance across SMs; more: fewer, longer units, each paying one item/table look-up).
  int moe_fp4_wide_passes = 1;
  // linear_grouped on bf16 weights (no act quant) with bf16 activations up to this many rows (at most
  // 32; 0 = off): one launch of the skinny bf16 tensor-core kernel reading the activations in place
  // (the grouped wo_a: 2.4x faster than a loop of 8 GEMVs on the H200); above, or when off, the loop
  // of linear(). bf16_skinny_linear: single linear() calls on bf16 weights take it too (measured slower
  // than the GEMV / mma.sync paths for single weights, so off; tests turn it on). Ignored in
  // batch-invariant mode. bf16_skinny_unroll: 32-K steps in flight per warp (0 = per row count).
  int bf16_skinny_max_rows = 32;
  bool bf16_skinny_linear = false;
  int bf16_skinny_unroll = 0;
  // Up to this many rows (at most 8; 0 = off) of bf16 activations on fp8-block weights (blocks of 64k,
  // act block 64k): the skinny FP8 GEMM with the act quant fused into its blocks (one launch; the same
  // codes and scales). Measured faster at 1 row only: every block re-quantises its rows.
  // fp8_decode_unroll: 16-byte weight loads per row in flight (4 or 8).
  int fp8_fused_max_rows = 1;
  int fp8_decode_unroll = 4;
  // Up to 64 rows of bf16 activations on fp8 weights with 128x128 block scales (act block 128,
  // N % 64 == 0, K % 128 == 0) on sm_90a: the act quant, then the FP8 GEMM on warpgroup MMA
  // (fp8_wgmma_decode.cu: native e4m3 wgmma, where mma.sync e4m3 is emulated on Hopper), where
  // measured faster (CudaBackend::fp8_wgmma_eligible). On by default; DEEPINFER_FP8_WGMMA=0 turns it
  // off. Ignored in batch-invariant mode (above 64 rows other kernels sum in other orders).
  bool fp8_wgmma_decode = true;
  // Its K-split partials summed by the last CTA of each tile (fp8_wgmma_decode.cu finish_splits)
  // instead of a separate reduce launch; the same sums in the same order (bit-identical). Off: on the
  // H200 (2026-11-30, 4-layer V4 decode) it gained nothing at batch 1 (1.33 ms both) and lost at 8 / 32
  // (2.53 vs 2.49, 5.61 vs 5.42 ms): one CTA summing 32 rows x splits is slower than the reduce launch.
  bool fp8_wgmma_fixup = false;
  // Kernels that stream immutable weights launched as programmatic dependents of the kernel before them
  // (sm_90+; dependent_launch.cuh): the FP8 wgmma decode GEMM fills its weight pipeline while the act
  // quant before it runs, instead of after a full kernel boundary. Same results.
  bool dependent_launch = true;
  // The same fp4 expert GEMM with weights, scales and activations streamed by bulk copies (TMA)
  // through this many shared-memory stages of 512 K (2, 3 or 4; 0 = the register-staged kernel above),
  // where K % 512 == 0 and scale rows are 16-byte aligned. Bit-identical to it for equal K splits;
  // measured 5-60% slower (docs/PERFORMANCE_CUDA_OPS.md, 2026-11-30: the per-step math, not the loads, limits
  // both), so off by default.
  int moe_fp4_pipe_stages = 0;
  // The routed experts' decode GEMMs (the items above, fp4 weights with ue8m0 scales, act block 128,
  // dims % 128 == 0) on sm_90a warpgroup MMA (moe_fp4_wgmma.cu: fp4 tiles widened once to e4m3 in
  // shared memory or straight into registers, native fp8 wgmma; mma.sync e4m3 is emulated on sm_90):
  // 8-26% faster than the mma.sync kernel at 1..512 tokens on the H200 (2026-11-30, form 3 below),
  // so on by default; DEEPINFER_MOE_FP4_WGMMA=0
  // turns it off. Ignored in batch-invariant mode.
  bool moe_fp4_wgmma = true;
  // Which form of that kernel (moe_fp4_wgmma.cu; all give the same bits, ops_cuda_parity_test
  // MoeFp4WgmmaVariantsGiveTheSameBits): 0 = e4m3 tiles widened into shared memory (the first form);
  // 1 = that with the largest shared-memory carveout and 256-byte L2 prefetch of the weight pieces;
  // 2-5 = the A fragments converted straight from the fp4 ring into registers, one barrier per stage,
  // the scaling of a stage overlapping the next one's wgmma (2: 5 stages, 5 CTAs/SM, no prefetch; 3: the
  // same with the L2 prefetch; 4: 4 stages, 6 CTAs/SM; 5: 6 stages, 4 CTAs/SM); items of 32 rows take
  // form 1. ops_cuda_bench --moe-wgmma on the H200 (2026-11-30, whole moe_experts() op, µs at 1 / 8 /
  // 32 / 128 / 512 tokens): form 0 86.1 / 423.4 / 1153 / 2065 / 2832, form 3 80.7 / 350.4 / 924.6 /
  // 1669 / 2564 (17-20% faster at 8..128 tokens), form 1 = form 0, 2 = 3 within 0.5%, 4 and 5 slower
  // at 8..128 tokens: form 3 is the default. 6 / 7 (written after that run, not yet timed): form 2 with
  // the weight scales streamed per stage and unpadded swizzled rows, 7 stages at 5 CTAs/SM / 9 at 4.
  int moe_fp4_wgmma_variant = 3;  // 0 .. kMoeFp4WgmmaVariants - 1
  // That kernel's K order and split (moe_fp4_wgmma.cu MoeFp4WgmmaSplit): K in this many chunks per
  // GEMM (0 = one chunk, the plain ascending-K sum; -1 = auto from K alone: 4 chunks of >= 512 K), each
  // chunk summed from 0, the chunk sums added in order; a launch whose unsplit grid has at most
  // moe_fp4_wgmma_split_ctas CTAs per SM runs one CTA per chunk (the last of each tile adds the chunk
  // sums: the same bits), others one CTA per tile walking every chunk. The order depends on K only,
  // so a token keeps its bits alone and in any batch. Written 2026-11-30 for batch-1 decode (T = 1:
  // 384 CTAs per expert GEMM on ~660 slots); timed by ops_cuda_bench --moe-wgmma ('split'): slower at
  // every T on the H200 (T = 1: 86.1 vs 80.7 us; 32: 1016 vs 930), so off.
  int moe_fp4_wgmma_splits = 0;
  int moe_fp4_wgmma_split_ctas = 16;
  // Its launches as programmatic dependents of the kernel before them (the act quant before w1 / w3,
  // the SwiGLU before w2): each CTA reads its item and streams its first weight stages and scales
  // while that kernel finishes, the activations after griddepcontrol.wait. Same results. Measured
  // within noise of the plain launch on the H200 (T = 1: 79.3 vs 80.7 us; 8: 345.6 vs 349.3; 128:
  // 1687 vs 1677), so off.
  bool moe_fp4_wgmma_dependent = false;
  // V4.1's experts (act block 32, the same fp4 weights) through that kernel's register-A form (per-32-K
  // act scales applied with the per-32-K weight scales), items of <= 16 rows; else the generic skinny
  // kernel. Its parity tests pass on the H200 and it is 1.5-1.9x faster than the skinny kernel (T = 32:
  // 994 vs 1804 us); V4.1 decode, 4 layers: 1.93 / 4.97 / 12.93 -> 1.77 / 3.59 / 8.41 ms at batch
  // 1 / 8 / 32 (2026-11-30). On.
  bool moe_fp4_wgmma_act32 = true;
  // Prefill: fp4 experts with at least this many rows per expert on average (0 = off) go through the
  // grouped GEMM that widens each weight tile to bf16 once per 128-row item (moe_prefill_kernels.cu,
  // mma.sync: bit-identical to the batch-invariant mma.sync pipeline, so that mode takes it too).
  int moe_prefill_min_rows = 32;
  // That GEMM on sm_90a wgmma (moe_prefill_wgmma.cu: 37.6 vs 49.2 ms for the 8K prefill's experts,
  // 4 layers); it sums in its own order, so batch-invariant mode keeps the mma.sync kernel.
  bool moe_prefill_wgmma = true;
  // Steps of at least this many tokens (0 = never) with bf16 q and keys score the lightning indexer on
  // tensor cores (indexer_mma_kernels.cu); fewer, or batch-invariant mode: the SIMT kernel.
  int indexer_mma_min_tokens = 32;
  // How the device sampler fills its top-k / top-p histograms (sampling_cluster.cuh): 0 = one 64-bit
  // shared atomicAdd per id (a compare-and-swap loop on sm_90 that serializes on a tied bin: the H200's
  // 5-17x top-k + top-p regression at >= 8 rows, docs/PERFORMANCE_CUDA_OPS.md 'Device sampler:
  // histogram atomics'); 1 = per-thread runs of one bin added by native 32-bit atomics (never more
  // shared round trips per id, no retries); 2 = 1 with the runs summed per warp first (fewest atomics,
  // a match + shuffles per flush). Same bits. 1 and 2 are compile-checked only, so 0 until the device
  // run (tools/gpu/run_sampling.sh times all three).
  int sampler_histogram_fill = 0;
};

// The backend on CUDA device `device` (options from the environment).
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

// A CUDA device as the memory planner sees it (free / total from cudaMemGetInfo, so free excludes
// this process's context and whatever other processes hold).
struct CudaDeviceStatus {
  int device = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  std::int64_t free_bytes = 0, total_bytes = 0;
};

// Throws deepinfer::Error (never a CUDA abort) when deepinfer was built without CUDA, no CUDA
// device or driver is usable, `device` is out of range, its architecture is not one deepinfer has
// kernels for (device_arch.h: sm_90; sm_100 prepared), or this build holds no kernels for it
// (DEEPINFER_CUDA_ARCHS). make_cuda_backend runs the same checks.
CudaDeviceStatus cuda_device_status(int device);

// Device memory held by the CUDA backends' tensors and scratch on `device` (weights, cache pools,
// workspaces): now, and the most since the last reset_cuda_peak (the planner's activation probe).
struct CudaAllocationStats {
  std::int64_t live_bytes = 0;
  std::int64_t peak_bytes = 0;
};
CudaAllocationStats cuda_allocation_stats(int device);
void reset_cuda_peak(int device);

}  // namespace deepinfer::ops
