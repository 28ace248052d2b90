// CUDA backend linear layers: picks the kernel for a GEMM (bf16 weights at decode: the skinny bf16
// tensor-core kernel, also for the grouped projection in one launch; FP8 tensor cores for quantised weights
// with FP8 act quant: the skinny register-fragment GEMM for few rows, cuBLASLt's block-scaled FP8
// GEMM for many; the bf16 tensor-core kernel with in-tile dequantisation, split over K when the
// output has too few tiles, which batch-invariant mode runs at every M; cuBLASLt on a bf16 copy of
// the weight; SIMT f32 for f32 activations, f32 weights and odd K) and stages the activations.
#include <algorithm>

#include "ops/cpu/gemm.h"
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/grouped_fp8_wgmma.h"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume about a pointer.
std::uint32_t pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// Whether the tensor-core kernel can stream this weight: 16-byte aligned rows and base.
bool mma_compatible(const LinearWeight& w) {
  const std::int64_t k = w.in_features();
  const auto base = reinterpret_cast<std::uintptr_t>(w.data.raw_data());
  if (base % 16 != 0) return false;
  switch (w.format) {
    case WeightFormat::kBF16: return k % 8 == 0;
    case WeightFormat::kFp8Block: return k % 16 == 0;
    case WeightFormat::kFp4: return k % 32 == 0;
    case WeightFormat::kF32: return false;
  }
  return false;
}

// cuBLASLt handles of one matmul, released on every path out.
struct LtMatmul {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtMatmul() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// outᵀ [N, M] = W [K, N]ᵀ · xᵀ [K, M] in cuBLASLt's column-major view: operands of `type` (x rows `ldb`
// apart), f32 compute, out bf16 or f32 (rows out.stride apart); the preference allows `workspace` bytes.
void lt_describe(LtMatmul& mm, cudaDataType_t type, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t ldb,
                 const DevRows& out, const std::size_t& workspace) {
  DI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&mm.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans = CUBLAS_OP_T, no_trans = CUBLAS_OP_N;
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)));
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)));
  DI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.a, type, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), k));
  DI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.b, type, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(m), ldb));
  DI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&mm.d, out.bf16 ? CUDA_R_16BF : CUDA_R_32F,
                                             static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(m), out.stride));
  DI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&mm.pref));
  DI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                       sizeof(workspace)));
}

// cuBLASLt's first choice for the described matmul; false when it has none.
bool lt_heuristic(cublasLtHandle_t lt, const LtMatmul& mm, cublasLtMatmulHeuristicResult_t& heuristic) {
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(lt, mm.desc, mm.a, mm.b, mm.d, mm.d, mm.pref, 1, &heuristic, &found);
  return status == CUBLAS_STATUS_SUCCESS && found > 0;
}

}  // namespace

void CudaBackend::linear(const Tensor& x, const LinearWeight& w, const LinearOptions& options, Tensor& out) {
  cpu::validate_weight(w);
  check_on_device(w.data, "linear weight");
  if (w.quantized()) check_on_device(w.scale, "linear weight scale");
  const std::int64_t k = w.in_features();
  const std::int64_t n = w.out_features();
  const DevRows xr = rows_of(x, k, "linear x");
  const DevRows orow = rows_of(out, n, "linear out");
  DI_CHECK(orow.rows == xr.rows, "linear: x {} · W{}ᵀ does not give out {}", x.shape(), w.data.shape(), out.shape());
  DI_CHECK(options.act_quant_block >= 0, "linear: act_quant_block {} must be >= 0", options.act_quant_block);
  gemm(xr, w, options.act_quant_block, orow);
}

void CudaBackend::gemm(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out) {
  const std::int64_t m = x.rows, n = out.width, k = x.width;
  if (m == 0 || n == 0) return;
  activate();
  const DevWeight dw = dev_weight(w);
  // f32 activations (the exact numeric mode) stay f32: the SIMT kernel sums f32 products in K order,
  // as the CPU reference does. Rounding them to bf16 for the tensor cores (4e-3 per projection) was
  // enough to flip near-tied router/indexer choices and FP8 scales in the whole model.
  if (!mma_compatible(w) || !x.bf16) {
    ScratchLayout layout;
    const std::size_t a_off = layout.add(static_cast<std::size_t>(m * k) * sizeof(float));
    std::uint8_t* base = scratch(layout.total());
    auto* a = reinterpret_cast<float*>(base + a_off);
    launch_act_prep_f32(x, act_block, a, k, stream_);
    SimtGemmArgs args;
    args.a = a;
    args.lda = k;
    args.m = m;
    args.n = n;
    args.k = k;
    args.w = dw;
    args.format = static_cast<int>(dev_format(w.format));
    args.out = out;
    launch_simt_gemm(args, stream_);
    DI_CUDA_CHECK_LAUNCH("linear (simt)");
    return;
  }
  if (options_.bf16_skinny_linear && skinny_bf16_eligible(x, w, act_block)) {
    gemm_skinny_bf16(x, std::span<const LinearWeight>(&w, 1), out);
    return;
  }
  // FP8 tensor cores: the act quant yields exactly the reference's e4m3 codes and power-of-two
  // scales, every product is exact, only the f32 summation order differs. Not in batch-invariant
  // mode: the skinny GEMM's K split and cuBLASLt's kernel choice depend on M.
  if (!options_.batch_invariant && fp8_eligible(w, act_block)) {
    if (fp8_wgmma_eligible(x, w, act_block)) {
      gemm_fp8_wgmma(x, w, out);
      return;
    }
    // Measured on the H200 (docs/PERFORMANCE_CUDA_OPS.md): the skinny GEMM wins up to 8 rows; up to 32 rows it
    // still wins on weights of <= 8M elements, cuBLASLt on larger ones.
    const std::int64_t skinny_rows = options_.skinny_max_rows;
    if (m <= skinny_rows || (m <= 4 * skinny_rows && n * k <= (std::int64_t{8} << 20))) {
      if (fp8_decode_eligible(x, w, act_block)) {
        gemm_fp8_decode(x, w, act_block, out);
      } else {
        gemm_skinny(x, w, act_block, out);
      }
      return;
    }
    if (options_.fp8_cublas && arch_->cublaslt_fp8_block_scales && w.format == WeightFormat::kFp8Block &&
        w.block == 128 && act_block == 128 && gemm_cublas_fp8(x, w, out))
      return;
  }
  if (!options_.batch_invariant && options_.cublas_min_rows > 0 && m >= options_.cublas_min_rows &&
      (w.format == WeightFormat::kBF16 || w.block % 8 == 0) && gemm_cublas(x, w, act_block, out))
    return;
  constexpr std::int64_t kLargeWeight = std::int64_t{1} << 28;  // elements: the logits head
  if (!options_.batch_invariant && options_.cublas_large_min_rows > 0 && m >= options_.cublas_large_min_rows &&
      w.format == WeightFormat::kBF16 && n * k >= kLargeWeight && gemm_cublas(x, w, act_block, out))
    return;

  const std::int64_t kpad = ceil_div(k, kGemmBK) * kGemmBK;
  // bf16 rows the kernels can read as they are (no act quant, K a whole number of 64-wide tiles, 16-byte
  // aligned rows) are read in place: no staging launch (the copy is exact, so the same bits).
  const bool in_place = act_block <= 0 && x.bf16 && k == kpad && x.stride % 8 == 0 &&
                        reinterpret_cast<std::uintptr_t>(x.base) % 16 == 0;
  if (!options_.batch_invariant && m <= kGemvRows) {  // decode: the memory-bound GEMV
    ScratchLayout layout;
    const std::size_t a_off = layout.add(in_place ? 0 : static_cast<std::size_t>(m * kpad) * 2);
    auto* a = reinterpret_cast<std::uint16_t*>(scratch(layout.total()) + a_off);
    if (!in_place) launch_act_prep_bf16(x, act_block, a, kpad, stream_);
    MmaGemmArgs args;
    args.a = in_place ? static_cast<const std::uint16_t*>(x.base) : a;
    args.lda = in_place ? x.stride : kpad;
    args.m = m;
    args.n = n;
    args.k = k;
    args.w = dw;
    args.out[0] = out.base;
    args.ldo = out.stride;
    args.out_bf16 = out.bf16;
    launch_gemv(dev_format(w.format), false, args, 1, 1, stream_);
    DI_CUDA_CHECK_LAUNCH("linear (gemv)");
    return;
  }
  const MmaTile tile = m <= 16 ? MmaTile::kSmall : (m <= 64 ? MmaTile::kMedium : MmaTile::kLarge);
  const MmaTileShape shape = mma_tile_shape(tile);
  const std::int64_t ktiles = kpad / kGemmBK;
  const std::int64_t n_tiles = ceil_div(n, shape.bn);
  // Split K when the output tiles cannot fill the GPU. In batch-invariant mode the split count
  // depends on (N, K) only, so a row's summation order never depends on M.
  std::int64_t tiles = n_tiles * ceil_div(m, shape.bm);
  if (options_.batch_invariant) tiles = ceil_div(n, 64);
  std::int64_t splits = 1;
  if (tiles < sm_count_) splits = std::min<std::int64_t>({ceil_div(2 * sm_count_, tiles), ktiles / 2, 32});
  splits = std::max<std::int64_t>(splits, 1);
  const std::int64_t per_split = ceil_div(ktiles, splits);
  splits = ceil_div(ktiles, per_split);

  ScratchLayout layout;
  const std::size_t a_off = layout.add(in_place ? 0 : static_cast<std::size_t>(m * kpad) * 2);
  const std::size_t p_off = layout.add(splits > 1 ? static_cast<std::size_t>(splits * m * n) * sizeof(float) : 0);
  std::uint8_t* base = scratch(layout.total());
  auto* a = reinterpret_cast<std::uint16_t*>(base + a_off);
  if (!in_place) launch_act_prep_bf16(x, act_block, a, kpad, stream_);
  MmaGemmArgs args;
  args.a = in_place ? static_cast<const std::uint16_t*>(x.base) : a;
  args.lda = in_place ? x.stride : kpad;
  args.m = m;
  args.n = n;
  args.k = k;
  args.ktiles = static_cast<int>(ktiles);
  args.ktiles_per_split = static_cast<int>(per_split);
  args.w = dw;
  args.out[0] = out.base;
  args.ldo = out.stride;
  args.out_bf16 = out.bf16;
  args.partial = splits > 1 ? reinterpret_cast<float*>(base + p_off) : nullptr;
  launch_mma_gemm(dev_format(w.format), tile, false, args, static_cast<int>(n_tiles),
                  static_cast<int>(ceil_div(m, shape.bm)), static_cast<int>(splits), stream_);
  DI_CUDA_CHECK_LAUNCH("linear (mma)");
  if (splits > 1) {
    launch_splitk_reduce(args.partial, static_cast<int>(splits), m, n, out, stream_);
    DI_CUDA_CHECK_LAUNCH("linear (split-K reduce)");
  }
}

void CudaBackend::linear_grouped(const Tensor& x, std::span<const LinearWeight> w, const LinearOptions& options,
                                 Tensor& out) {
  check_linear_grouped(x, w, out);
  const LinearWeight& w0 = w.front();
  const std::int64_t k = w0.in_features(), n = w0.out_features();
  const auto groups = static_cast<std::int64_t>(w.size());
  const DevRows xr = rows_of(x, groups * k, "linear_grouped x");
  // One group is a plain linear (whose own dispatch is faster on single weights, docs/PERFORMANCE_CUDA_OPS.md).
  bool one_launch =
      groups >= 2 && groups <= kMaxLinearGroups && skinny_bf16_eligible(xr, w0, options.act_quant_block);
  for (const LinearWeight& wg : w) {
    cpu::validate_weight(wg);
    check_on_device(wg.data, "linear_grouped weight");
    if (wg.quantized()) check_on_device(wg.scale, "linear_grouped weight scale");
    one_launch = one_launch && reinterpret_cast<std::uintptr_t>(wg.data.raw_data()) % 16 == 0 &&
                 (!wg.quantized() || (wg.scale.is_contiguous() && wg.scale.dtype() == w0.scale.dtype() &&
                                      wg.scale.dim(1) == w0.scale.dim(1)));
  }
  if (grouped_fp8_wgmma_eligible(xr, w, options.act_quant_block)) {
    const DevRows orow = rows_of(out, groups * n, "linear_grouped out");
    if (xr.rows == 0 || n == 0) return;
    activate();
    GroupedFp8WgmmaArgs args;
    const DevWeight dw = dev_weight(w0);
    args.x = xr;
    args.n = n;
    args.k = k;
    args.groups = static_cast<int>(groups);
    for (std::size_t g = 0; g < w.size(); ++g) {
      args.w[g] = w[g].data.raw_data();
      args.w_scale[g] = w[g].scale.raw_data();
    }
    args.scale_ld = dw.scale_ld;
    args.block = dw.block;
    args.scale_f32 = dw.scale_f32;
    args.out = orow.base;
    args.ldo = orow.stride;
    args.out_bf16 = orow.bf16;
    args.wide_tiles = options_.grouped_fp8_wgmma_wide ? 1 : 0;
    launch_grouped_fp8_wgmma(args, stream_);
    DI_CUDA_CHECK_LAUNCH("linear_grouped (fp8 wgmma)");
    return;
  }
  if (!one_launch) {  // the reference loop (each linear picks its own path)
    Backend::linear_grouped(x, w, options, out);
    return;
  }
  const DevRows orow = rows_of(out, groups * n, "linear_grouped out");
  if (xr.rows == 0 || n == 0) return;
  activate();
  gemm_skinny_bf16(xr, w, orow);
}

// The grouped FP8-block projection on wgmma (grouped_fp8_wgmma.cu): up to kGroupedFp8WgmmaMaxRows bf16
// rows read in place, every group FP8 [n, k] with the same square 128- or 32-blocks and scale layout.
bool CudaBackend::grouped_fp8_wgmma_eligible(const DevRows& x, std::span<const LinearWeight> w, int act_block) const {
  if (!options_.grouped_fp8_wgmma || !arch_->wgmma || options_.batch_invariant || act_block > 0 || !x.bf16 ||
      x.rows > kGroupedFp8WgmmaMaxRows || w.size() < 2 || w.size() > static_cast<std::size_t>(kMaxLinearGroups) ||
      reinterpret_cast<std::uintptr_t>(x.base) % 16 != 0 || x.stride % 8 != 0)
    return false;
  const LinearWeight& w0 = w.front();
  const std::int64_t n = w0.out_features(), k = w0.in_features();
  if (w0.format != WeightFormat::kFp8Block || (w0.block != 128 && w0.block != 32) || n % 64 != 0 || k % 128 != 0)
    return false;
  return std::all_of(w.begin(), w.end(), [&](const LinearWeight& wg) {
    return wg.format == w0.format && wg.block == w0.block && wg.data.is_contiguous() &&
           reinterpret_cast<std::uintptr_t>(wg.data.raw_data()) % 16 == 0 && wg.scale.is_contiguous() &&
           wg.scale.dtype() == w0.scale.dtype() && wg.scale.shape() == w0.scale.shape();
  });
}

// The skinny bf16 kernel reads x in place with 16-byte loads and streams the weight rows whole: bf16, or
// FP8 blocks of a multiple of 16 (a 16-row tile within one block row) without act quant.
bool CudaBackend::skinny_bf16_eligible(const DevRows& x, const LinearWeight& w, int act_block) const {
  const std::int64_t rows = std::min<std::int64_t>(options_.bf16_skinny_max_rows, kSkinnyBf16MaxRows);
  const bool fp8 = w.format == WeightFormat::kFp8Block && w.block % 16 == 0 && w.block >= 32;
  return !options_.batch_invariant && x.rows <= rows && (w.format == WeightFormat::kBF16 || fp8) &&
         act_block <= 0 && x.bf16 && w.in_features() % 32 == 0 && reinterpret_cast<std::uintptr_t>(x.base) % 16 == 0 &&
         x.stride % 8 == 0 && w.data.is_contiguous() && reinterpret_cast<std::uintptr_t>(w.data.raw_data()) % 16 == 0;
}

void CudaBackend::gemm_skinny_bf16(const DevRows& x, std::span<const LinearWeight> ws, const DevRows& out) {
  SkinnyBf16Args args;
  args.x = x;
  args.n = ws.front().out_features();
  args.k = ws.front().in_features();
  args.groups = static_cast<int>(ws.size());
  for (std::size_t g = 0; g < ws.size(); ++g) args.w[g] = ws[g].data.raw_data();
  if (ws.front().format == WeightFormat::kFp8Block) {
    const DevWeight dw = dev_weight(ws.front());
    args.fp8 = 1;
    args.scale_ld = dw.scale_ld;
    args.block = dw.block;
    args.scale_f32 = dw.scale_f32;
    for (std::size_t g = 0; g < ws.size(); ++g) args.w_scale[g] = ws[g].scale.raw_data();
  }
  args.out = out.base;
  args.ldo = out.stride;
  args.out_bf16 = out.bf16;
  args.splits = skinny_bf16_splits(args.n, args.k);
  launch_skinny_bf16(args, options_.bf16_skinny_unroll, stream_);
  DI_CUDA_CHECK_LAUNCH("linear (bf16 skinny)");
}

bool CudaBackend::fp8_eligible(const LinearWeight& w, int act_block) const {
  const std::int64_t k = w.in_features();
  const bool fp8 = w.format == WeightFormat::kFp8Block && w.block % 16 == 0;
  const bool fp4 = w.format == WeightFormat::kFp4 && w.block == 32;
  return (fp8 || fp4) && act_block > 0 && act_block % 32 == 0 && act_block <= 128 && k % 32 == 0 &&
         reinterpret_cast<std::uintptr_t>(w.data.raw_data()) % 16 == 0;
}

// Few rows: FP8 act quant to codes, then the skinny tensor-core GEMM streams the weight once per
// group of up to 32 rows.
void CudaBackend::gemm_skinny(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out) {
  const std::int64_t m = x.rows, n = out.width, k = x.width;
  const std::int64_t ldx = ceil_div(k, 16) * 16;
  const std::int64_t kb = ceil_div(k, act_block);
  ScratchLayout layout;
  const std::size_t c_off = layout.add(static_cast<std::size_t>(m * ldx));
  const std::size_t s_off = layout.add(static_cast<std::size_t>(kb * m) * sizeof(float));
  std::uint8_t* base = scratch(layout.total());
  auto* scales = reinterpret_cast<float*>(base + s_off);
  launch_act_quant_codes(x, act_block, base + c_off, ldx, scales, m, stream_);
  const int group = m <= kSkinnyRowsSmall ? kSkinnyRowsSmall : kSkinnyRowsLarge;
  const int grid_y = static_cast<int>(ceil_div(m, group));
  SkinnyGemmArgs args;
  args.x = base + c_off;
  args.ldx = ldx;
  args.xs = scales;
  args.xs_ld = m;
  args.act_block = act_block;
  args.m = m;
  args.n = n;
  args.k = k;
  args.w = dev_weight(w);
  args.out[0] = out.base;
  args.ldo = out.stride;
  args.out_bf16 = out.bf16;
  launch_skinny_gemm(dev_format(w.format), group, false, args, grid_y, 1, stream_);
  DI_CUDA_CHECK_LAUNCH("linear (fp8 skinny)");
}

// Few rows (options: 1) of bf16 x on an fp8-block weight: the act quant runs inside the GEMM's blocks
// (one launch instead of two; the same codes and scales, the skinny GEMM's arithmetic).
bool CudaBackend::fp8_decode_eligible(const DevRows& x, const LinearWeight& w, int act_block) const {
  const std::int64_t k = x.width;
  return x.rows <= std::min(options_.fp8_fused_max_rows, kFp8DecodeMaxRows) && x.bf16 &&
         w.format == WeightFormat::kFp8Block && w.block % 64 == 0 && act_block > 0 && act_block % 64 == 0 &&
         k % act_block == 0 && k <= kFp8DecodeMaxK &&
         reinterpret_cast<std::uintptr_t>(x.base) % 16 == 0 && x.stride % 8 == 0 && w.data.is_contiguous();
}

void CudaBackend::gemm_fp8_decode(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out) {
  Fp8DecodeArgs args;
  args.x = x;
  args.act_block = act_block;
  args.n = out.width;
  args.k = x.width;
  args.w = dev_weight(w);
  args.out = out.base;
  args.ldo = out.stride;
  args.out_bf16 = out.bf16;
  launch_fp8_decode(args, options_.fp8_decode_unroll, stream_);
  DI_CUDA_CHECK_LAUNCH("linear (fp8 decode, fused act quant)");
}

// Up to 64 rows on Hopper's native FP8 MMA (wgmma): the act quant's codes and scales, then one
// launch over (N / 64, splits) CTAs, plus the split-order reduction when K is split (few rows: both
// inside the GEMM launch, options fp8_wgmma_fused_quant_max_rows / fp8_wgmma_fixup_max_rows). Measured on the
// H200 (docs/PERFORMANCE_CUDA_OPS.md, 2026-11-30) against the mma.sync kernels: faster at every decode
// shape up to 32 rows; at 33..64 rows only for K >= 2048 (at K = 1024 a 64-token CTA reads as many
// activation bytes from L2 as weight bytes from HBM, and the skinny kernel wins).
// V4.1's 32x32 blocks (act block 32) take the same kernel with one partial per 32-K step, up to 32 rows.
bool CudaBackend::fp8_wgmma_eligible(const DevRows& x, const LinearWeight& w, int act_block) const {
  const std::int64_t k = w.in_features(), n = w.out_features();
  const bool block128 = w.block == 128 && act_block == 128;
  const bool block32 = w.block == 32 && act_block == 32 && x.rows <= kFp8WgmmaMaxRowsBlock32;
  const bool rows_fit = x.rows <= 32 || (x.rows <= kFp8WgmmaMaxRows && k >= 2048);
  return options_.fp8_wgmma_decode && arch_->wgmma && !options_.batch_invariant && rows_fit &&
         w.format == WeightFormat::kFp8Block && (block128 || block32) && k % 128 == 0 && n % 64 == 0 &&
         w.data.is_contiguous() && reinterpret_cast<std::uintptr_t>(w.data.raw_data()) % 16 == 0;
}

// Zeroed per-tile counters of the wgmma decode GEMM's split-K fix-up for the lane ops are issued on
// (each launch leaves them zero again). Made on first use outside a graph capture (the warm-up step
// before a capture runs the same linears); null during a capture before that: the reduce launch then.
void CudaBackend::gemm_fp8_wgmma(const DevRows& x, const LinearWeight& w, const DevRows& out) {
  const std::int64_t m = x.rows, n = out.width, k = x.width;
  const int splits = fp8_wgmma_decode_splits(n, k, sm_count_);
  // Up to fp8_wgmma_fused_quant_max_rows rows the GEMM quantises its own K ranges (no act-quant launch);
  // up to fp8_wgmma_fixup_max_rows the last CTA of a tile sums the K splits (no reduce launch).
  const bool fused = m <= options_.fp8_wgmma_fused_quant_max_rows && fp8_wgmma_fused_quant_fits(x, k, splits);
  const bool fix_up = splits > 1 && splits <= options_.fp8_wgmma_fixup_max_splits &&
                      m <= std::min(options_.fp8_wgmma_fixup_max_rows, kFp8WgmmaFixupMaxRows) && n / 64 <= kFp8TileFlags;
  int* flags = fix_up ? fp8_tile_flags() : nullptr;
  ScratchLayout layout;
  const std::size_t c_off = layout.add(fused ? 0 : static_cast<std::size_t>(m * k));
  const int block = w.block;  // = the act block (fp8_wgmma_eligible)
  const std::size_t s_off = layout.add(fused ? 0 : static_cast<std::size_t>((k / block) * m) * sizeof(float));
  const std::size_t p_off = layout.add(splits > 1 ? static_cast<std::size_t>(splits * m * n) * sizeof(float) : 0);
  std::uint8_t* base = scratch(layout.total());
  Fp8WgmmaDecodeArgs args;
  args.scale_block = block;
  args.x = base + c_off;
  args.ldx = k;
  args.xs = reinterpret_cast<float*>(base + s_off);
  args.xs_ld = m;
  args.m = m;
  args.n = n;
  args.k = k;
  args.w = dev_weight(w);
  args.out = out.base;
  args.ldo = out.stride;
  args.out_bf16 = out.bf16;
  args.partial = splits > 1 ? reinterpret_cast<float*>(base + p_off) : nullptr;
  args.tile_flags = flags;
  args.xr = x;
  args.fused_quant = fused ? 1 : 0;
  if (!fused) launch_act_quant_codes(x, block, base + c_off, k, reinterpret_cast<float*>(base + s_off), m, stream_);
  launch_fp8_wgmma_decode(args, splits, stream_);
  DI_CUDA_CHECK_LAUNCH("linear (fp8 wgmma decode)");
  if (splits > 1 && flags == nullptr) {
    launch_splitk_reduce(args.partial, splits, m, n, out, stream_);
    DI_CUDA_CHECK_LAUNCH("linear (fp8 wgmma split-K reduce)");
  }
}

// Many rows: cuBLASLt's block-scaled FP8 GEMM (Hopper: 128x128 f32 weight-block scales, 128-element
// f32 activation scales), fed the e4m3 codes of the act quant. Returns false when cuBLASLt offers no
// algorithm for the shape (the caller falls back).
bool CudaBackend::gemm_cublas_fp8(const DevRows& x, const LinearWeight& w, const DevRows& out) {
  const std::int64_t m = x.rows, n = out.width, k = x.width;
  if (k % 16 != 0) return false;
  const std::int64_t kb = ceil_div(k, 128), nb = ceil_div(n, 128);
  const std::int64_t ws_ld = ceil_div(kb, 4) * 4;  // cuBLASLt wants the 128x128 scale rows padded to 4
  ScratchLayout layout;
  const std::size_t c_off = layout.add(static_cast<std::size_t>(m * k));
  const std::size_t xs_off = layout.add(static_cast<std::size_t>(kb * m) * sizeof(float));
  const std::size_t ws_off = layout.add(static_cast<std::size_t>(nb * ws_ld) * sizeof(float));

  LtMatmul mm;
  lt_describe(mm, CUDA_R_8F_E4M3, m, n, k, k, out, cublas_workspace_bytes_);
  const std::int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const std::int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  // Strided views (grouped projections) may start anywhere: tell the heuristic what it may assume.
  const std::uint32_t align_w = pointer_alignment(w.data.raw_data()), align_d = pointer_alignment(out.base);
  DI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w,
                                                       sizeof(align_w)));
  DI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                       sizeof(align_d)));
  DI_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(mm.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                       sizeof(align_d)));
  std::uint8_t* base = scratch(layout.total());
  auto* codes = base + c_off;
  auto* xs = reinterpret_cast<float*>(base + xs_off);
  auto* wscale = reinterpret_cast<float*>(base + ws_off);
  const void* a_scale = wscale;
  const void* b_scale = xs;
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(mm.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  if (!lt_heuristic(lt_, mm, heuristic)) return false;

  launch_act_quant_codes(x, 128, codes, k, xs, m, stream_);
  launch_weight_scale_f32(dev_weight(w), nb, kb, wscale, ws_ld, stream_);
  DI_CUDA_CHECK_LAUNCH("linear (fp8 cublas staging)");
  const float alpha = 1.0f, beta = 0.0f;
  DI_CUBLAS_CHECK(cublasLtMatmul(lt_, mm.desc, &alpha, w.data.raw_data(), mm.a, codes, mm.b, &beta, out.base, mm.d,
                                 out.base, mm.d, &heuristic.algo, cublas_workspace(), cublas_workspace_bytes_, stream_));
  return true;
}

// out = x · Wᵀ through cuBLASLt on bf16 operands (the fp8/fp4 weight is first dequantised to bf16,
// which is exact). Returns false when cuBLASLt offers no algorithm for the shape.
bool CudaBackend::gemm_cublas(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out) {
  const std::int64_t m = x.rows, n = out.width, k = x.width;
  const std::int64_t lda = ceil_div(k, 8) * 8;
  ScratchLayout layout;
  const std::size_t a_off = layout.add(static_cast<std::size_t>(m * lda) * 2);
  const bool need_w = w.format != WeightFormat::kBF16;
  const std::size_t w_off = layout.add(need_w ? static_cast<std::size_t>(n * k) * 2 : 0);
  std::uint8_t* base = scratch(layout.total());

  LtMatmul mm;
  lt_describe(mm, CUDA_R_16BF, m, n, k, lda, out, cublas_workspace_bytes_);
  cublasLtMatmulHeuristicResult_t heuristic{};
  if (!lt_heuristic(lt_, mm, heuristic)) return false;

  auto* a = reinterpret_cast<std::uint16_t*>(base + a_off);
  launch_act_prep_bf16(x, act_block, a, lda, stream_);
  const void* w16 = w.data.raw_data();
  if (need_w) {
    auto* deq = reinterpret_cast<std::uint16_t*>(base + w_off);
    launch_dequant_weight(dev_weight(w), dev_format(w.format), n, k, deq, stream_);
    w16 = deq;
  }
  DI_CUDA_CHECK_LAUNCH("linear (cublas staging)");
  const float alpha = 1.0f, beta = 0.0f;
  DI_CUBLAS_CHECK(cublasLtMatmul(lt_, mm.desc, &alpha, w16, mm.a, a, mm.b, &beta, out.base, mm.d, out.base, mm.d,
                                 &heuristic.algo, cublas_workspace(), cublas_workspace_bytes_, stream_));
  return true;
}

}  // namespace deepinfer::ops::cuda
