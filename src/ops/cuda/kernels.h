// Launch wrappers of the CUDA backend's kernels and their argument structs. Internal to
// src/ops/cuda and compiled only in CUDA builds (it names cudaStream_t); the host code (.cpp)
// validates tensors, fills these structs and calls the wrappers on the backend's stream.
#pragma once

#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/device_rows.h"

namespace deepinfer::ops::cuda {

// Whether launch_chained (dependent_launch.cuh) launches kernels as programmatic dependents of the
// stream's previous kernel: CudaBackendOptions::dependent_launch, set per thread by the backend at the
// entry of each op (CudaBackend::activate). Results are the same either way; only launches overlap.
void set_dependent_launch(bool on);
bool dependent_launch_enabled();

// ---- rows ---------------------------------------------------------------------------------------
enum class BinaryOp : int { kAdd = 0, kSwiglu = 1, kScale = 2 };

void launch_fill(const DevRows& m, float value, cudaStream_t stream);
void launch_convert(const DevRows& src, const DevRows& dst, cudaStream_t stream);
void launch_embedding(const std::int32_t* ids, std::int64_t count, const DevRows& table, const DevRows& out,
                      std::int64_t copies, int* err, cudaStream_t stream);
void launch_gather_rows(const DevRows& src, const std::int32_t* rows, const DevRows& out, int* err,
                        cudaStream_t stream);
void launch_scatter_rows(const DevRows& src, const DevRowSource& dst, const std::int32_t* rows, int* err,
                         cudaStream_t stream);
void launch_binary(const DevRows& a, const DevRows& b, const DevRows& out, BinaryOp op, float param,
                   cudaStream_t stream);
// Threads per row of rms_norm; the fused hc_pre + rms_norm uses the same count and order.
constexpr int kNormThreads = 512;
void launch_rms_norm(const DevRows& x, const DevRows* weight, float eps, const DevRows& out, cudaStream_t stream);
// The rotation of the fused rms_norm + rope: row r's position is positions[r / heads]; interleaved
// pairs of the last rope_dim columns turn forward.
struct RopeRows {
  const std::int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  std::int64_t heads = 1;
  int rope_dim = 0;
};
// Whether launch_rms_norm_rope takes rows of this width (in registers, pairs on even columns).
bool rms_norm_rope_fits(std::int64_t width, int rope_dim);
void launch_rms_norm_rope(const DevRows& x, const DevRows* weight, float eps, const RopeRows& rope,
                          cudaStream_t stream);
void launch_rope(const DevRows& x, std::int64_t heads, const std::int32_t* positions, const float* inv_freq,
                 int rope_dim, bool inverse, cudaStream_t stream);
void launch_hadamard(const DevRows& x, cudaStream_t stream);
// kind 0 = FP8 E4M3 pow2 scale, 1 = FP4 with UE8M0 scale, 2 = FP4 with E4M3 scale.
void launch_fake_quant(const DevRows& x, std::int64_t col_begin, std::int64_t col_end, int block, int kind,
                       cudaStream_t stream);
void launch_argmax(const DevRows& logits, std::int32_t* out, cudaStream_t stream);
// logits (f32 rows) = -inf where the row's mask bit is clear; mask: [rows, ceil(width / 32)] words.
void launch_token_mask(const DevRows& logits, const std::uint32_t* mask, cudaStream_t stream);

// ---- GEMM ---------------------------------------------------------------------------------------
enum class MmaTile : int { kSmall, kMedium, kLarge };
struct MmaTileShape {
  int bm;
  int bn;
};
MmaTileShape mma_tile_shape(MmaTile tile);
constexpr int kGemmBK = 64;

struct MmaGemmArgs {
  const std::uint16_t* a = nullptr;  // bf16 [rows, lda], zero padded to ktiles * 64
  std::int64_t lda = 0;
  const std::int32_t* a_rows = nullptr;  // optional row gather
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  int ktiles = 0;
  int ktiles_per_split = 0;
  DevWeight w;                              // dense
  const DevWeight* tables[2] = {nullptr, nullptr};  // grouped: per-expert weights of each set
  void* out[2] = {nullptr, nullptr};
  std::int64_t ldo = 0;
  int out_bf16 = 0;
  float* partial = nullptr;  // dense split-K: [splits][m][n]
  const int4* items = nullptr;      // grouped: {expert, row_begin, rows, 0}
  const int* item_count = nullptr;
  int gemv_split = 1;  // decode GEMV: warps sharing one row pair's K (set by launch_gemv)
};

struct SimtGemmArgs {
  const float* a = nullptr;  // f32 [m, lda]
  std::int64_t lda = 0;
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  DevWeight w;
  int format = 0;  // DevWeightFormat
  DevRows out;
};

void launch_act_prep_bf16(const DevRows& x, int act_block, std::uint16_t* out, std::int64_t ld, cudaStream_t stream);
void launch_act_prep_f32(const DevRows& x, int act_block, float* out, std::int64_t ld, cudaStream_t stream);
void launch_mma_gemm(DevWeightFormat format, MmaTile tile, bool grouped, const MmaGemmArgs& args, int grid_x,
                     int grid_y, int grid_z, cudaStream_t stream);
// Decode GEMV for at most kGemvRows activation rows per block (dense: grid_y = ceil(M / 4); grouped:
// items of <= 4 rows). Same arguments as the tensor-core kernel; no split-K.
constexpr int kGemvRows = 4;
void launch_gemv(DevWeightFormat format, bool grouped, const MmaGemmArgs& args, int grid_y, int grid_z,
                 cudaStream_t stream);
// Prefill grouped GEMM for fp4 experts (moe_prefill_kernels.cu): items of <= kMoePrefillRows rows,
// bf16 A (a_rows gather) zero padded to K, each fp4 weight tile widened to bf16 once in shared memory
// for the whole item; f32 (or bf16) out. moe_prefill_fits: ue8m0 block-32 scales, n % 128 == 0,
// K % 512 == 0 and K <= kMoePrefillMaxK, 16-byte aligned weight and scale rows. grid_y = max items,
// grid_z = weight sets.
constexpr int kMoePrefillRows = 128;
constexpr int kMoePrefillMaxK = 4096;
bool moe_prefill_fits(const DevWeight& w, DevWeightFormat format, std::int64_t n, std::int64_t k, std::int64_t ldo);
void launch_moe_prefill_gemm(const MmaGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream);
// The same GEMM on sm_90a warpgroup MMA (moe_prefill_wgmma.cu; same requirements, same grid).
void launch_moe_prefill_wgmma(const MmaGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream);
void launch_simt_gemm(const SimtGemmArgs& args, cudaStream_t stream);
void launch_splitk_reduce(const float* partial, int splits, std::int64_t m, std::int64_t n, const DevRows& out,
                          cudaStream_t stream);
void launch_dequant_weight(const DevWeight& w, DevWeightFormat format, std::int64_t n, std::int64_t k,
                           std::uint16_t* out, cudaStream_t stream);

// ---- FP8 tensor-core paths (fp8_skinny_kernels.cu) ------------------------------------------------
// FP8 act quant to real codes (gemm_kernels.cu; block % 32 == 0, block <= 128): e4m3 codes [rows, ld]
// (zero padded) and the power-of-two f32 block scales, block-major: scales[(k / block) * scale_ld + row]
// (cuBLASLt's VEC128 layout for block 128).
// k_permuted (x.width % 32 == 0): code i stored at position (i & ~31) | (i % 32 / 2) | (i % 2 << 4), even
// elements of each 32-column block first (the routed experts' wgmma kernel, moe_fp4_wgmma.cu).
void launch_act_quant_codes(const DevRows& x, int block, std::uint8_t* codes, std::int64_t ld, float* scales,
                            std::int64_t scale_ld, cudaStream_t stream, bool k_permuted = false);
// Weight block scales (ue8m0 or f32, [rows, cols]) as f32 [rows, ld] (ld >= cols, zero padded).
void launch_weight_scale_f32(const DevWeight& w, std::int64_t rows, std::int64_t cols, float* out, std::int64_t ld,
                             cudaStream_t stream);

// Skinny GEMM on FP8 tensor cores (m16n8k32 e4m3): out[row, n] = Σ_k W[n, k] · x[row, k] for fp8-block or
// fp4 weights and e4m3-coded activations; K % 32 == 0, act_block % 32 == 0.
struct SkinnyGemmArgs {
  const std::uint8_t* x = nullptr;  // e4m3 codes [rows, ldx] (ldx % 16 == 0)
  std::int64_t ldx = 0;
  const float* xs = nullptr;        // activation scales [(k / act_block) * xs_ld + row]
  std::int64_t xs_ld = 0;
  int act_block = 128;
  const std::int32_t* x_rows = nullptr;  // grouped: activation row of each placed row (else identity)
  std::int64_t m = 0;  // dense rows
  std::int64_t n = 0;
  std::int64_t k = 0;
  int splits = 1;  // K ranges per 16-row tile (set by launch_skinny_gemm)
  int min_passes = 1;  // launch_skinny_fp4_wide: loads-in-flight passes a warp keeps when K is split
  DevWeight w;     // dense weight; grouped: any expert's (its block and alignment pick the load width)
  const DevWeight* tables[2] = {nullptr, nullptr};
  const int4* items = nullptr;  // grouped: {expert, row_begin, rows <= group_rows, 0}
  const int* item_count = nullptr;
  void* out[2] = {nullptr, nullptr};
  std::int64_t ldo = 0;
  int out_bf16 = 0;
  // launch_moe_fp4_wgmma only: its K order, k_ranges equal K ranges (1 or 2; (K / 128) % k_ranges ==
  // 0) each summed from 0 in ascending K, the range sums added in order; and the CTAs per tile,
  // k_splits (1: one CTA walks the ranges and adds them; k_ranges: one CTA per range, range s writing
  // its sums split_stride elements after range s - 1's, added in order by the consumer). The same
  // bits either way.
  int k_ranges = 1;
  int k_splits = 1;
  std::int64_t split_stride = 0;
};
// Rows one block multiplies with each weight fragment: 8 (decode) or 32.
constexpr int kSkinnyRowsSmall = 8;
constexpr int kSkinnyRowsLarge = 32;
// Dense: grid_y = ceil(m / group_rows); grouped: grid_y = max items, grid_z = weight sets.
void launch_skinny_gemm(DevWeightFormat format, int group_rows, bool grouped, const SkinnyGemmArgs& args, int grid_y,
                        int grid_z, cudaStream_t stream);
// Decode linears for bf16 weights on bf16 tensor cores (skinny_bf16_kernels.cu): out[row, g·n + c] =
// Σ_k W_g[c, k] · x[row, g·k + k] for groups g (one group: a plain linear; several: the block-diagonal
// grouped projection in one launch). x: bf16 rows read in place (base and row stride 16-byte aligned),
// at most kSkinnyBf16MaxRows rows; K % 32 == 0; each W_g bf16 [n, k] contiguous and 16-byte aligned, or
// FP8-block [n, k] (e4m3, square blocks of a multiple of 16) dequantised exactly in registers, no act quant.
constexpr int kSkinnyBf16MaxRows = 32;
constexpr int kMaxLinearGroups = 16;
struct SkinnyBf16Args {
  DevRows x;
  std::int64_t n = 0;  // output columns per group
  std::int64_t k = 0;  // K per group
  int groups = 1;
  const void* w[kMaxLinearGroups] = {};
  // FP8-block weights (fp8 != 0): e4m3 codes in w, each group's block scales (rows of scale_ld, f32 or
  // ue8m0 bytes) dequantised exactly to bf16 in registers: the same bits as on the host's bf16 copy.
  int fp8 = 0;
  const void* w_scale[kMaxLinearGroups] = {};
  std::int64_t scale_ld = 0;
  int block = 0;
  int scale_f32 = 0;
  void* out = nullptr;
  std::int64_t ldo = 0;
  int out_bf16 = 0;
  int splits = 1;  // K ranges per 16-row tile: skinny_bf16_splits(n, k)
};
// The K split of the bf16 skinny kernel for one [n, k] weight (a function of the shape only).
int skinny_bf16_splits(std::int64_t n, std::int64_t k);
// unroll: 32-K steps in flight per warp (the per-row-count default when <= 0).
void launch_skinny_bf16(const SkinnyBf16Args& args, int unroll, cudaStream_t stream);
// Dense FP8 decode linear with the act quant fused in (fp8_decode_kernels.cu): bf16 x (base and row
// stride 16-byte aligned, K % act_block == 0, act_block and the weight block multiples of 64,
// K <= kFp8DecodeMaxK), fp8-block weight; each block quantises its <= 8 rows into shared memory
// (codes and scales bit-identical to launch_act_quant_codes) and runs the skinny GEMM's arithmetic.
constexpr int kFp8DecodeMaxRows = 8;
constexpr std::int64_t kFp8DecodeMaxK = 16384;
struct Fp8DecodeArgs {
  DevRows x;
  int act_block = 128;
  std::int64_t n = 0;
  std::int64_t k = 0;
  DevWeight w;
  void* out = nullptr;
  std::int64_t ldo = 0;
  int out_bf16 = 0;
  int splits = 1;  // set by launch_fp8_decode (one wave of blocks)
};
std::size_t fp8_decode_smem_bytes(std::int64_t k, int act_block);
// unroll: 16-byte weight loads per row in flight per warp (4 or 8; <= 0 = 4).
void launch_fp8_decode(const Fp8DecodeArgs& args, int unroll, cudaStream_t stream);
// Dense FP8 decode GEMM on sm_90a wgmma (fp8_wgmma_decode.cu): 1..kFp8WgmmaMaxRows rows of act-quant
// codes (launch_act_quant_codes, block 128) on an fp8 weight with 128x128 block scales, N % 64 == 0,
// K % 128 == 0, contiguous 16-byte aligned weight. `splits` K ranges (fp8_wgmma_decode_splits: from
// N, K and the SM count, never M); with splits > 1 the kernel writes f32 partials [splits][m][n] and
// launch_splitk_reduce sums them in split order.
// scale_block 32 (V4.1: 32x32 weight blocks, act block 32): up to kFp8WgmmaMaxRowsBlock32 rows.
constexpr int kFp8WgmmaMaxRows = 64;
constexpr int kFp8WgmmaMaxRowsBlock32 = 32;
struct Fp8WgmmaDecodeArgs {
  int scale_block = 128;            // weight block = act block: 128 (V4) or 32 (V4.1)
  const std::uint8_t* x = nullptr;  // e4m3 codes [m, ldx] (ldx % 16 == 0)
  std::int64_t ldx = 0;
  const float* xs = nullptr;  // act scales [(k / 128) * xs_ld + row]
  std::int64_t xs_ld = 0;
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  DevWeight w;
  void* out = nullptr;  // used when partial == nullptr
  std::int64_t ldo = 0;
  int out_bf16 = 0;
  float* partial = nullptr;  // [splits][m][n] f32 when splits > 1 (the caller runs launch_splitk_reduce)
  // With partial and m <= kFp8WgmmaFixupMaxRows: one zeroed counter per 64-row tile (>= n / 64). The
  // last CTA of a tile to finish sums the tile's split partials in split order (launch_splitk_reduce's
  // order) and resets its counter, so no reduce launch follows. Null: the caller runs launch_splitk_reduce.
  int* tile_flags = nullptr;
  // fused_quant (m <= 8, fp8_wgmma_fused_quant_fits): x and xs are unused; each CTA quantises its own
  // K range of the bf16 rows xr into shared memory after its wait (codes and scales bit-identical to
  // launch_act_quant_codes), so no act-quant launch precedes it.
  DevRows xr;
  int fused_quant = 0;
  int kblocks_per_split = 0;  // set by launch_fp8_wgmma_decode
};
constexpr int kFp8WgmmaFixupMaxRows = 8;
// Whether fused_quant may be set for these rows with this many K splits (m <= 8, 16-byte aligned bf16
// rows, at most 4096 K per CTA).
bool fp8_wgmma_fused_quant_fits(const DevRows& x, std::int64_t k, int splits);
int fp8_wgmma_decode_splits(std::int64_t n, std::int64_t k, int sm_count);
// Chained to the stream's previous kernel (the act quant, or with fused_quant whatever wrote x;
// dependent_launch.cuh) like every kernel: its CTAs stream their first weight stages before they wait.
void launch_fp8_wgmma_decode(const Fp8WgmmaDecodeArgs& args, int splits, cudaStream_t stream);
// Grouped fp4 GEMM with 16-byte weight loads (moe_fp4_kernels.cu): ue8m0 weight scales whose rows
// start 4-byte aligned, K % 128 == 0, act_block == 128; items of <= kSkinnyRowsMid rows. grid_y = max
// items, grid_z = weight sets (the launch itself is one wave walking the active items).
constexpr int kSkinnyRowsMid = 16;
void launch_skinny_fp4_wide(int group_rows, const SkinnyGemmArgs& args, int grid_y, int grid_z, cudaStream_t stream);
// The same grouped fp4 GEMM (same arguments, act_block 128 or 32) on sm_90a warpgroup MMA
// (moe_fp4_wgmma.cu): one CTA per (64 weight rows, item, weight set); grid_y = max items, grid_z =
// weight sets; items of <= 8 / 16 / 32 rows by group_rows. Launch only where ArchFeatures::wgmma and
// moe_fp4_wgmma_fits(n, k, every expert's weight) (fp4, ue8m0 scales of block 32, rows 4-byte aligned).
// args.act_block 32 (V4.1) for group_rows <= 16 only (the register-A form). Its K order: 32-K partials
// scaled in f32 and summed in ascending K, so a token's bits never depend on its item or batch.
constexpr std::int64_t kMoeFp4WgmmaMaxK = 16384;
bool moe_fp4_wgmma_fits(std::int64_t n, std::int64_t k, const DevWeight& w);
struct MoeFp4WgmmaConfig {
  // The register-A form's ring depth (0: 10 for items of 8 where the grid has <= 4 CTAs per SM of
  // sm_count, else 5; or 5 / 10 forced).
  int stages = 0;
  bool k_permuted = false;  // args.x holds K-permuted codes (launch_act_quant_codes)
  // The register-A form's prologue (item, tables, first weight stages and scales) before its
  // griddepcontrol.wait: only where the items (args.items, item_count, x_rows) were written before the
  // kernel's predecessor started, i.e. by a moe_sort at least two launches back on the stream.
  bool early = false;
  bool split_ctas = true;  // moe_fp4_wgmma_cta_splits may split K ranges over CTAs
  int sm_count = 0;
};
// The CTAs per tile for a launch of these items whose K order has k_ranges ranges: k_ranges where the
// unsplit grid would be one partial wave of items of 8 (config.split_ctas, stages 0), else 1.
int moe_fp4_wgmma_cta_splits(int group_rows, std::int64_t n, int k_ranges, int grid_y, int grid_z,
                             const MoeFp4WgmmaConfig& config);
void launch_moe_fp4_wgmma(int group_rows, const SkinnyGemmArgs& args, int grid_y, int grid_z,
                          const MoeFp4WgmmaConfig& config, cudaStream_t stream);
// The prefill expert GEMM on fp8 wgmma (moe_prefill_fp8_wgmma.cu): the skinny pipeline's arguments (e4m3
// act-quant codes, act_block 128) for items of <= kMoePrefillRows rows, 128 weight rows per CTA; grid_y =
// max items, grid_z = weight sets. Launch only where ArchFeatures::wgmma and moe_prefill_fp8_fits(n, k,
// every expert's weight): fp4 with ue8m0 block-32 scales (rows 4-byte aligned), n % 128 == 0, k % 128 ==
// 0, k <= kMoePrefillFp8MaxK, 16-byte aligned weight. Its K order is fixed by K and the weight tile alone.
constexpr std::int64_t kMoePrefillFp8MaxK = 8192;
bool moe_prefill_fp8_fits(std::int64_t n, std::int64_t k, const DevWeight& w);
// k_permuted: args.x holds K-permuted codes (launch_act_quant_codes' order; the fp4 weights are read as
// stored).
void launch_moe_prefill_fp8(const SkinnyGemmArgs& args, int grid_y, int grid_z, bool k_permuted, cudaStream_t stream);

// ---- attention ------------------------------------------------------------------------------------
constexpr int kMaxAttnSources = 4;
constexpr int kMaxHeadsPerCta = 16;

struct AttentionArgs {
  DevRows q;  // [T * H, d]
  DevRowSource src[kMaxAttnSources];
  std::int64_t src_start[kMaxAttnSources + 1] = {};
  int num_sources = 0;
  const std::int32_t* idx = nullptr;
  std::int64_t idx_stride = 0;
  int kcount = 0;
  const float* sinks = nullptr;
  float scale = 1.0f;
  int round_probs = 0;
  int block = 64;
  DevRows out;  // [T * H, d]
  int heads = 0;
  int d = 0;
  int heads_per_cta = 16;
  int splits = 1;
  int blocks_per_split = 0;
  float* part_ml = nullptr;   // [T * H * splits][2]
  float* part_acc = nullptr;  // [T * H * splits][d]
  int* err = nullptr;
};

struct IndexerArgs {
  DevRows q;  // [T * H, d]
  DevRowSource keys;
  const std::int32_t* row_base = nullptr;  // [T]: logical key row of each token's entry 0
  const std::int32_t* num_keys = nullptr;  // [T]
  std::int64_t width = 0;                  // out columns (entries past num_keys[t] get -inf)
  const float* weights = nullptr;  // [T, H]
  float* out = nullptr;
  std::int64_t out_stride = 0;
  int heads = 0;
  int d = 0;
  int* err = nullptr;
};

struct TopkArgs {
  const float* scores = nullptr;
  std::int64_t score_stride = 0;
  std::int64_t n = 0;
  const std::int32_t* positions = nullptr;
  int ratio = 1;
  int k = 0;
  const std::int32_t* offsets = nullptr;  // [rows]
  int pow2 = 1;  // power of two >= k
  std::int32_t* out = nullptr;
  std::int64_t out_stride = 0;
};

// V4.1 candidate mask: per-row block maxima (scratch), their top-k (launch_topk_visible), the mask.
struct CandidateArgs {
  const float* scores = nullptr;  // [T, n]
  float* out = nullptr;           // [T, n]
  const std::int32_t* positions = nullptr;
  std::int64_t n = 0;
  int ratio = 1;
  int block = 1;
  std::int64_t blocks = 0;
  int take = 0;                    // blocks kept per row
  float* best = nullptr;           // scratch [T, blocks]
  std::int32_t* all_visible = nullptr;  // scratch [T]: blocks - 1 (every block passes top-k's visibility)
  std::int32_t* zeros = nullptr;        // scratch [T]
  std::int32_t* picked = nullptr;       // scratch [T, take]
};
void launch_candidate_mask(const CandidateArgs& args, std::int64_t rows, cudaStream_t stream);

std::size_t attention_smem_bytes(int heads_per_cta, int d, int block);
std::size_t indexer_smem_bytes(int heads, int d);
void launch_sparse_attention(const AttentionArgs& args, std::int64_t tokens, cudaStream_t stream);
// Tensor-core variant (sparse_attention_mma.cu) for bf16 q and KV rows (16-byte aligned), d of 128,
// 256 or 512 and block 64; f32 activations and other shapes stay on the SIMT kernel above. plan
// sets heads_per_cta (16 or 64), splits and blocks_per_split (in 64-index tiles; never a split in
// batch-invariant mode); part_ml / part_acc are used as above when splits > 1.
bool sparse_attention_mma_eligible(const AttentionArgs& args);
void plan_sparse_attention_mma(AttentionArgs& args, std::int64_t tokens, int sm_count, bool batch_invariant);
void launch_sparse_attention_mma(const AttentionArgs& args, std::int64_t tokens, cudaStream_t stream);
void launch_indexer_scores(const IndexerArgs& args, std::int64_t tokens, cudaStream_t stream);
// Tensor-core variant for prefill-sized steps (indexer_mma_kernels.cu): bf16 q and keys with 16-byte
// aligned rows, d % 16 == 0 (<= 256), heads % 16 == 0 (<= 128). Same grid limits as the SIMT kernel.
bool indexer_mma_eligible(const IndexerArgs& args);
void launch_indexer_scores_mma(const IndexerArgs& args, std::int64_t tokens, cudaStream_t stream);
void launch_topk_visible(const TopkArgs& args, std::int64_t rows, cudaStream_t stream);

// ---- compressor / mHC ------------------------------------------------------------------------------
struct CompressorArgs {
  const float* kv = nullptr;
  const float* score = nullptr;
  const float* ape = nullptr;
  float* state_kv = nullptr;
  float* state_score = nullptr;
  float* out = nullptr;                 // [T, d]
  const std::int32_t* positions = nullptr;  // [T]
  const std::int32_t* slots = nullptr;      // [T], -1 = padding
  std::int64_t num_slots = 0;               // state pool slots (a slot past them is a fault)
  int* err = nullptr;
  std::int64_t tokens = 0;
  int ratio = 0;
  int overlap = 0;
  std::int64_t d = 0;
  std::int64_t width = 0;
};

struct HcArgs {
  DevRows x;  // [T, n * D]
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
  int n = 0;
  std::int64_t d = 0;
  float norm_eps = 0.0f;
  float hc_eps = 0.0f;
  int iters = 0;
  int head = 0;
  DevRows y;  // [T, D]; base null = no collapse (hc_mix)
  float* post = nullptr;
  float* comb = nullptr;
  float* pre = nullptr;  // f32 [T, n] pre weights out, or null (hc_mix)
  float* partial = nullptr;  // scratch: f32 [hc_mix_partial_floats(T, n, D, head)]
  DevRows norm_w;            // [1, D] RMSNorm weight: y <- rms_norm(y) in the same kernel (base null = none)
  float rms_eps = 0.0f;
};

// Engram read-out gate (MODEL_SPEC B4.7): one block per (token, copy).
struct EngramGateArgs {
  DevRows x;      // [T, n * D]
  DevRows key;    // [T, n * D]
  DevRows value;  // [T, D]
  const float* omega = nullptr;  // f32 [n, D]
  int n = 0;
  std::int64_t d = 0;
  float eps = 0.0f;
  DevRows out;  // [T, n * D], may alias x
};

void launch_compressor(const CompressorArgs& args, cudaStream_t stream);
// Floats of scratch launch_hc_mix needs for T tokens (per-slice partial sums of the mixes).
std::int64_t hc_mix_partial_floats(std::int64_t tokens, int n, std::int64_t d, bool head);
void launch_hc_mix(const HcArgs& args, cudaStream_t stream);
// Prefill-sized steps (mhc_prefill_kernels.cu): the partial sums of launch_hc_mix for >= kHcMixPrefillRows
// bf16 rows from one block per (slice, 64 tokens), bit-identical to the per-token kernel (same products
// and summation order). False (nothing launched) unless the shape fits and split / threads are the
// per-token kernel's 512 / 512.
constexpr std::int64_t kHcMixPrefillRows = 64;
bool launch_hc_mix_partial_prefill(const HcArgs& args, std::int64_t split, int threads, cudaStream_t stream);
// y[t, c] = Σ_i pre[t, i] · x[t, i·D + c] (f32, stream order).
void launch_hc_collapse(const DevRows& x, const float* pre, int n, std::int64_t d, const DevRows& y,
                        cudaStream_t stream);
void launch_engram_gate(const EngramGateArgs& args, cudaStream_t stream);
void launch_hc_post(const DevRows& f, const DevRows& residual, const float* post, const float* comb, int n,
                    std::int64_t d, const DevRows& out, cudaStream_t stream);

// ---- MoE ----------------------------------------------------------------------------------------
struct RouteArgs {
  const float* logits = nullptr;
  std::int64_t tokens = 0;
  int experts = 0;
  const float* bias = nullptr;
  const std::int32_t* tid2eid = nullptr;
  std::int64_t vocab = 0;
  const std::int32_t* token_ids = nullptr;
  int k = 0;
  float route_scale = 1.0f;
  int score_func = 0;  // 0 sqrtsoftplus, 1 sigmoid, 2 softmax
  int normalize = 1;
  float normalize_eps = 0.0f;
  std::int32_t* ids = nullptr;
  float* weights = nullptr;
  int* err = nullptr;
};

struct MoeSortArgs {
  const std::int32_t* ids = nullptr;  // [pairs]
  const float* weights = nullptr;     // [pairs]
  std::int64_t pairs = 0;
  int k = 0;
  int experts = 0;
  int bm = 16;
  std::int32_t* pos = nullptr;     // [pairs] placed row of each pair (-1 = bad id)
  std::int32_t* a_rows = nullptr;  // [pairs] token of each placed row
  float* rw = nullptr;             // [pairs] routing weight of each placed row
  int4* items = nullptr;
  int* item_count = nullptr;
  int* err = nullptr;
  int small_block = 0;  // <= 256 pairs: one 256-thread block instead of 1024 threads (the same outputs)
};

struct MoeSwigluArgs {
  const float* gate = nullptr;  // [P, inter]
  const float* up = nullptr;
  int splits = 1;                 // gate / up: sums of this many K-split partials, split_stride elements apart
  std::int64_t split_stride = 0;
  const float* rw = nullptr;
  std::int64_t inter = 0;
  float limit = 0.0f;
  int mid_bf16 = 0;
  int act_block = 0;
  std::uint16_t* out = nullptr;  // bf16 [P, ld]
  float* out_f32 = nullptr;      // or f32 [P, ld] (exact mode: f32 activations end to end)
  std::uint8_t* codes = nullptr; // or e4m3 codes [P, ld] + scales[(j / act_block) * scales_ld + p] (skinny GEMM)
  int codes_k_permuted = 0;      // codes K-permuted in 32-column blocks (launch_act_quant_codes; inter % 32 == 0)
  // Let the next kernel's CTAs launch before this kernel's wait (the w2 GEMM with the early prologue:
  // it reads nothing this kernel writes before its own wait).
  int early_dependents = 0;
  float* code_scales = nullptr;
  std::int64_t scales_ld = 0;
  std::int64_t ld = 0;
};

struct MoeCombineArgs {
  const float* y = nullptr;  // [P, d]
  int splits = 1;                 // y: the sum of this many K-split partials, split_stride elements apart
  std::int64_t split_stride = 0;
  const std::int32_t* pos = nullptr;
  const std::int32_t* ids = nullptr;
  int k = 0;
  std::int64_t d = 0;
  int mid_bf16 = 0;
  float* out = nullptr;  // [T, d]
};

void launch_moe_route(const RouteArgs& args, cudaStream_t stream);
void launch_moe_sort(const MoeSortArgs& args, cudaStream_t stream);
void launch_moe_swiglu(const MoeSwigluArgs& args, std::int64_t rows, cudaStream_t stream);
void launch_moe_combine(const MoeCombineArgs& args, std::int64_t tokens, cudaStream_t stream);

}  // namespace deepinfer::ops::cuda
