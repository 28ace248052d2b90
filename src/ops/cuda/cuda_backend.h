// The CUDA backend's factory (sm_90a kernels + cuBLASLt). Plain C++ with no CUDA types: code built
// without CUDA may call it too, and then gets a deepinfer::Error saying so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ops/backend.h"

namespace deepinfer::ops {

struct CudaBackendOptions {
  int device = 0;
  // Every row's reduction order independent of the batch (no M-dependent split-K or library
  // GEMMs); the default follows DEEPINFER_BATCH_INVARIANT.
  bool batch_invariant = false;
  // Row count from which linear() hands quantised/bf16 GEMMs to cuBLASLt (after dequantising the
  // weight to bf16); 0 disables the library path. Ignored in batch-invariant mode.
  int cublas_min_rows = 128;
  // Row count from which a bf16 weight of at least 2^28 elements (the logits head, 129,280 x 4,096)
  // takes cuBLASLt as well (0 = only from cublas_min_rows): below that the GEMV (<= 4 rows) or the
  // mma.sync kernel stream it. H200, 4-layer V4 decode (2026-11-30, tools/gpu/run_option_ab.sh): 8
  // rows 2.50 -> 2.43 ms, 32 rows 5.39 -> 5.17 ms. Ignored in batch-invariant mode.
  int cublas_large_min_rows = 8;
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
  // Load wo_a (stored FP8, computed on its exact bf16 dequantisation) as FP8 blocks, 32 MB less HBM a
  // layer (1.4 GB on the 43-layer model): computed by the wgmma kernel below up to 256 rows (the weights
  // widened exactly to bf16 in registers), else the skinny kernel / loop of linear(). H200, 4-layer V4
  // decode, one A/B call over e09bd7c (2026-11-30): on vs off 1.00 / 1.68 / 3.22 / 5.97 / 7.69 vs 1.04 /
  // 1.71 / 3.34 / 6.14 / 7.77 ms at batch 1 / 8 / 32 / 128 / 256 (wo_a alone: 14.6 vs 27.0 us a layer
  // at batch 1, 77.5 vs 100.2 at 256). Not in batch-invariant mode (it keeps the bf16 copy's path).
  bool grouped_fp8_weights = true;
  // linear_grouped on FP8-block weights (block 128 or 32, N % 64 == 0, K % 128 == 0, no act quant, bf16
  // x) up to kGroupedFp8WgmmaMaxRows rows on sm_90a: one launch of grouped_fp8_wgmma.cu (bf16 wgmma with
  // the weights widened to their exact bf16 values in registers, two K halves per CTA). Ignored in
  // batch-invariant mode.
  bool grouped_fp8_wgmma = true;
  // Above 64 rows, 128-token tiles (wgmma m64n128: each weight widened once per 128 tokens, half the
  // weight reads from L2) instead of 64-token tiles; the same bits either way. H200, wo_a alone
  // (2026-11-30): 31.6 vs 39.3 us a layer at 128 rows, 60.8 vs 76.4 at 256.
  bool grouped_fp8_wgmma_wide = true;
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
  // Up to fp8_wgmma_fixup_max_rows rows (at most 8) and fp8_wgmma_fixup_max_splits K splits, that
  // GEMM's K-split partials are summed by the last CTA of each 64-row tile (fp8_wgmma_decode.cu
  // finish_splits, bit-identical to the reduce launch it replaces; its serial sum grows with the
  // splits: wkv's 32 and wq_a's 16 lose), and up to fp8_wgmma_fused_quant_max_rows rows (at most 8)
  // each CTA quantises its own K range of the activations after its wait (the act-quant launch saved;
  // the same codes and scales). 0 = off. H200 (PERFORMANCE_CUDA_OPS.md, session 9 "fp8gemm"): the
  // fused quant wins on every V4 FP8 linear at 1..4 rows and ties at 8 (wo_b's 2048 K a CTA at 8 rows
  // lose ~1 us); the fix-up wins at <= 8 splits up to 8 rows in the whole model.
  int fp8_wgmma_fixup_max_rows = 8;
  int fp8_wgmma_fixup_max_splits = 8;
  int fp8_wgmma_fused_quant_max_rows = 4;
  // Every kernel launched as a programmatic dependent of the kernel before it on its stream (sm_90+;
  // dependent_launch.cuh, captured into graphs as programmatic edges): each kernel waits for its
  // predecessor first thing and then lets its successor's CTAs launch, so a launch overlaps the kernel
  // before it instead of following its completion; the FP8 wgmma decode GEMM and the mHC kernels also
  // read their weights before the wait. Same results.
  bool dependent_launch = true;
  // The routed experts' decode GEMMs (the items above, fp4 weights with ue8m0 scales, act block 128,
  // dims % 128 == 0) on sm_90a warpgroup MMA (moe_fp4_wgmma.cu: fp4 tiles widened once to e4m3 in
  // shared memory for items of 32 rows, straight into registers for smaller ones; native fp8 wgmma where
  // mma.sync e4m3 is emulated on sm_90): 8-26% faster than the mma.sync kernel at 1..512 tokens on the
  // H200 (2026-11-30), so on by default; DEEPINFER_MOE_FP4_WGMMA=0 turns it off. Ignored in
  // batch-invariant mode. Other forms, a K split and a dependent launch measured slower or within
  // noise and were deleted (docs/PERFORMANCE_CUDA_OPS.md).
  bool moe_fp4_wgmma = true;
  // V4.1's experts (act block 32, the same fp4 weights) through that kernel's register-A form (per-32-K
  // act scales applied with the per-32-K weight scales), items of <= 16 rows; else the generic skinny
  // kernel. Its parity tests pass on the H200 and it is 1.5-1.9x faster than the skinny kernel (T = 32:
  // 994 vs 1804 us); V4.1 decode, 4 layers: 1.93 / 4.97 / 12.93 -> 1.77 / 3.59 / 8.41 ms at batch
  // 1 / 8 / 32 (2026-11-30). On.
  bool moe_fp4_wgmma_act32 = true;
  // Ring stages of that kernel's register-A form (items of <= 16 rows): 0 = by grid size (a launch of at
  // most 3 CTAs an SM, e.g. V4-Flash at one token, keeps 10 stages in flight per CTA instead of 5: its
  // one partial wave is latency-bound), or 5 / 10 forced (benches).
  int moe_fp4_wgmma_stages = 0;
  // That kernel's operands K-permuted inside each 32-K block (act codes written so, fp4 bytes read as
  // stored; fp4 widened to 2^-6-scaled e4m3 by shifts, the scales carry the 2^6 back): a thread's
  // fragment is one ldmatrix word per row and step, 187 instead of 241 instructions a 128-K stage.
  // Off: the unpermuted form (the A/B of docs/PERFORMANCE_CUDA_OPS.md).
  bool moe_fp4_wgmma_permuted = true;
  // That kernel's register-A form issues its prologue (item, expert table, first weight stages and
  // scales) before its griddepcontrol.wait, the activations after it: the w1/w3 GEMM's weights stream
  // while the act quant runs, the w2 GEMM's while the SwiGLU runs. moe_fp4_wgmma_early_w2: the SwiGLU
  // also lets the w2 GEMM's CTAs launch before its own wait, so they take the SMs the w1/w3 GEMM's last
  // CTAs free. Same bits either way. H200, moe_experts() at one token: 48.5 us with both off (and the
  // 1024-thread sort) -> 43.5 with both on; off one at a time (K halves on): 46.0 / 43.5 vs 41.7 us;
  // from 8 tokens up within +-2% (docs/PERFORMANCE_CUDA_OPS.md, session 9 "experts").
  bool moe_fp4_wgmma_early = true;
  bool moe_fp4_wgmma_early_w2 = true;
  // 2: that kernel's K order in two halves where K / 128 is even (each summed from 0, then added) —
  // a function of the weight shape alone, so a token keeps its bits in any batch; 1: one sum over K (the
  // session-8 bits). moe_fp4_wgmma_split_ctas: with 2, a launch whose unsplit grid would be one partial
  // wave of items of 8 (V4-Flash at one token) runs each half in its own CTA (6 CTAs an SM instead of 3),
  // the SwiGLU / combine adding the halves' f32 partials; larger grids walk both halves in one CTA (the
  // same sums). H200, whole moe_experts() op at 1 / 8 / 32 / 128 / 512 tokens (2026-11-30, session 9):
  // 2 = 41.7 / 202.2 / 550.3 / 1001.1 / 1562.1 us, 1 = 43.5 / 197.4 / 536.3 / 977.5 / 1454.3 (two CTAs
  // per tile at every T: 4-18% slower from 8 tokens up), so 1 until the walked form costs nothing.
  int moe_fp4_wgmma_ksplit = 1;
  bool moe_fp4_wgmma_split_ctas = true;
  // moe_experts' device sort of <= 256 (token, expert) pairs in one 256-thread block instead of 1024
  // threads (a decode step's few pairs: a quarter of the barrier width and shared counters). Same outputs;
  // moe_experts() at one token 42.4 -> 41.7 us (H200, session 9).
  bool moe_sort_small = true;
  // Prefill: fp4 experts with at least this many rows per expert on average (0 = off) go through the
  // grouped GEMM that widens each weight tile to bf16 once per 128-row item (moe_prefill_kernels.cu,
  // mma.sync: bit-identical to the batch-invariant mma.sync pipeline, so that mode takes it too).
  int moe_prefill_min_rows = 32;
  // That GEMM on sm_90a wgmma (moe_prefill_wgmma.cu: 37.6 vs 49.2 ms for the 8K prefill's experts,
  // 4 layers); it sums in its own order, so batch-invariant mode keeps the mma.sync kernel.
  bool moe_prefill_wgmma = true;
  // Those steps' experts (act block 128, every weight fitting) on fp8 wgmma instead, in the skinny
  // pipeline (moe_prefill_fp8_wgmma.cu: the act-quant e4m3 codes x fp4 weights widened exactly to e4m3
  // in registers, 128-row items): the 8K prefill's expert GEMMs 37.9 -> 27.6 ms, 4 layers, H200
  // (2026-11-30, docs/PERFORMANCE_CUDA_OPS.md). Ignored in batch-invariant mode.
  bool moe_prefill_fp8 = true;
  // That GEMM's operands K-permuted inside each 32-K block (moe_fp4_wgmma_permuted's order: act and
  // SwiGLU codes written so, fp4 read as stored): its fp4 fragments are ldmatrix words, and its shift
  // tables and act scales one load each, 286 instead of 341 SASS instructions a 128-K stage. Off: the
  // unpermuted operands (bits differ within the tensor core's 32-K sums; docs/PERFORMANCE_CUDA_OPS.md).
  bool moe_prefill_fp8_permuted = true;
  // Steps of at least this many tokens (0 = never) with bf16 q and keys score the lightning indexer on
  // tensor cores (indexer_mma_kernels.cu); fewer, or batch-invariant mode: the SIMT kernel.
  int indexer_mma_min_tokens = 32;
  // How the device sampler fills its top-k / top-p histograms (sampling_cluster.cuh): 0 = one 64-bit
  // shared atomicAdd per id (a compare-and-swap loop on sm_90 that serializes on a tied bin: the H200's
  // 5-17x top-k + top-p regression at >= 8 rows, docs/PERFORMANCE_CUDA_OPS.md 'Device sampler:
  // histogram atomics'); 1 = per-thread runs of one bin added by native 32-bit atomics (never more
  // shared round trips per id, no retries). Same bits. H200 (2026-11-30, tools/gpu/run_sampling.sh, us per call at
  // 1 / 8 / 32 / 128 rows): top-k 50 + top-p 0.95: fill 0 43.0 / 203.5 / 746.6 / 2,532.0, fill 1 35.7 / 62.1
  // / 159.4 / 365.9 (runs summed per warp first, deleted: 45.7 / 81.1 / 234.7 / 496.7); top-p 0.95 alone
  // 0: 73.8 / 219.0 / 831.0 / 2,676.8, 1: 70.4 / 132.0 / 328.0 / 804.7; peaked top-p 4-7% slower with 1
  // (66.4 vs 64.0 at 1 row); greedy and temperature equal. So 1.
  int sampler_histogram_fill = 1;
  // Steps of at most this many rows run the ops a model puts on a side lane (Backend::fork_side_lane:
  // V4's shared expert beside the routing and the routed experts) on a second stream, with its own
  // scratch and cuBLASLt workspace (32 MB); 0 = every op on one stream. Same results either way. H200,
  // 4-layer V4 decode (2026-11-30, two pairs of runs): 1.25 / 2.06 / 4.09 / 7.32 / 9.00 ms with 0 ->
  // 1.13 / 1.91 / 3.89 / 7.03 / 8.76 at batch 1 / 8 / 32 / 128 / 256.
  int side_lane_max_rows = 256;
};

// Sets the field named by "name=value" (ints; bools as 0 / 1 / true / false); an unknown name or a
// malformed value throws deepinfer::Error naming it. For benches that A/B kernel choices.
void set_cuda_option(CudaBackendOptions& options, std::string_view assignment);

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
