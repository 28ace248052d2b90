// CUDA backend MoE ops: routing, and the routed experts as a pipeline of grouped GEMMs (pairs sorted
// by expert on the device, w1/w3 in one launch, SwiGLU + FP8 fake quant, w2, then a per-token combine
// in ascending expert order).
#include <algorithm>
#include <string>
#include <vector>

#include "ops/cpu/gemm.h"
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Mixes a pointer into a hash (the identity of an expert set, for expert_table).
std::uint64_t mix_hash(std::uint64_t h, const void* p) {
  h ^= reinterpret_cast<std::uintptr_t>(p) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

// The placement of (token, slot) pairs by expert in the scratch area: placed row of each pair, token
// and routing weight of each placed row, the work items of up to `bm` rows and their count.
struct MoePlacement {
  std::size_t pos_off = 0, rows_off = 0, rw_off = 0, items_off = 0, count_off = 0;
  std::int32_t* pos = nullptr;
  std::int32_t* a_rows = nullptr;
  float* rw = nullptr;
  int4* items = nullptr;
  int* item_count = nullptr;

  void reserve(ScratchLayout& layout, std::int64_t pairs, std::int64_t max_items) {
    pos_off = layout.add(static_cast<std::size_t>(pairs) * 4);
    rows_off = layout.add(static_cast<std::size_t>(pairs) * 4);
    rw_off = layout.add(static_cast<std::size_t>(pairs) * 4);
    items_off = layout.add(static_cast<std::size_t>(max_items) * sizeof(int4));
    count_off = layout.add(sizeof(int));
  }
  void bind(std::uint8_t* base) {
    pos = reinterpret_cast<std::int32_t*>(base + pos_off);
    a_rows = reinterpret_cast<std::int32_t*>(base + rows_off);
    rw = reinterpret_cast<float*>(base + rw_off);
    items = reinterpret_cast<int4*>(base + items_off);
    item_count = reinterpret_cast<int*>(base + count_off);
  }
  // Groups the pairs by expert on the device (stable, so the layout never depends on timing).
  void sort(const std::int32_t* ids, const float* wts, std::int64_t pairs, int k, std::int64_t experts, int bm,
            int* err, bool small_block, cudaStream_t stream) const {
    MoeSortArgs a;
    a.small_block = small_block ? 1 : 0;
    a.ids = ids;
    a.weights = wts;
    a.pairs = pairs;
    a.k = k;
    a.experts = static_cast<int>(experts);
    a.bm = bm;
    a.pos = pos;
    a.a_rows = a_rows;
    a.rw = rw;
    a.items = items;
    a.item_count = item_count;
    a.err = err;
    launch_moe_sort(a, stream);
  }
};

// out[t] = Σ over t's slots, in ascending expert order, of the placed rows pos[t, slot] of y (each the
// sum of its `splits` K-split partials, split_stride elements apart).
void combine_experts(const float* y, const std::int32_t* pos, const std::int32_t* ids, int k, std::int64_t dim,
                     int mid_bf16, int splits, std::int64_t split_stride, float* out, std::int64_t tokens,
                     cudaStream_t stream) {
  MoeCombineArgs c;
  c.y = y;
  c.splits = splits;
  c.split_stride = split_stride;
  c.pos = pos;
  c.ids = ids;
  c.k = k;
  c.d = dim;
  c.mid_bf16 = mid_bf16;
  c.out = out;
  launch_moe_combine(c, tokens, stream);
}

// SwiGLU arguments shared by every expert pipeline (the caller picks the output form).
MoeSwigluArgs swiglu_args(const float* gate, const float* up, const float* rw, std::int64_t inter,
                          const MoeOptions& options) {
  MoeSwigluArgs sw;
  sw.gate = gate;
  sw.up = up;
  sw.rw = rw;
  sw.inter = inter;
  sw.limit = options.swiglu_limit;
  sw.mid_bf16 = options.intermediate_dtype == DType::kBF16 ? 1 : 0;
  sw.act_block = options.act_quant_block;
  return sw;
}

// Prefill path (moe_prefill_kernels.cu): fp4 experts whose every weight fits the 128-row-item GEMM.
bool moe_prefill_ok(std::span<const ExpertWeights> experts, std::int64_t dim, std::int64_t inter) {
  for (const ExpertWeights& ew : experts)
    for (const LinearWeight* w : {&ew.w1, &ew.w3, &ew.w2}) {
      const bool w2 = w == &ew.w2;
      if (!moe_prefill_fits(dev_weight(*w), dev_format(w->format), w2 ? dim : inter, w2 ? inter : dim,
                            w2 ? dim : inter))
        return false;
    }
  return true;
}

// The fp8 prefill GEMM (moe_prefill_fp8_wgmma.cu) for a prefill-sized step (moe_experts decides that):
// switched on, sm_90a, not batch-invariant, act block 128 and every fp4 expert weight fitting it. It runs
// in the skinny pipeline (act-quant codes, SwiGLU codes).
bool moe_prefill_fp8_ok(const CudaBackendOptions& o, bool wgmma, std::span<const ExpertWeights> experts,
                        std::int64_t dim, std::int64_t inter, int act_block) {
  if (!o.moe_prefill_fp8 || !wgmma || o.batch_invariant || act_block != 128) return false;
  for (const ExpertWeights& ew : experts)
    if (ew.w1.format != WeightFormat::kFp4 || !moe_prefill_fp8_fits(inter, dim, dev_weight(ew.w1)) ||
        !moe_prefill_fp8_fits(inter, dim, dev_weight(ew.w3)) || !moe_prefill_fp8_fits(dim, inter, dev_weight(ew.w2)))
      return false;
  return true;
}

}  // namespace

void CudaBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                            const RouteOptions& options, Tensor& expert_ids, Tensor& weights) {
  DI_CHECK(logits.ndim() == 2, "moe_route: logits {} must be [T, E]", logits.shape());
  RouteArgs a;
  a.tokens = logits.dim(0);
  a.experts = static_cast<int>(logits.dim(1));
  a.logits = f32_of(logits, a.tokens * a.experts, "moe_route logits");
  a.k = options.top_k;
  DI_CHECK(a.k > 0 && a.k <= a.experts && a.experts <= 4096, "moe_route: top_k {} for {} experts (<= 4096)", a.k,
           a.experts);
  DI_CHECK(expert_ids.dtype() == DType::kI32 && expert_ids.numel() == a.tokens * a.k && expert_ids.is_contiguous(),
           "moe_route: expert_ids {} for [{}, {}]", expert_ids.shape(), a.tokens, a.k);
  check_on_device(expert_ids, "moe_route expert_ids");
  a.ids = expert_ids.data<std::int32_t>();
  a.weights = f32_mut(weights, a.tokens * a.k, "moe_route weights");
  if (bias != nullptr) a.bias = f32_of(*bias, a.experts, "moe_route bias");
  if (tid2eid != nullptr) {
    DI_CHECK(tid2eid->ndim() == 2 && tid2eid->dim(1) == a.k, "moe_route: tid2eid {} must be i32 [V, {}]",
             tid2eid->shape(), a.k);
    a.tid2eid = i32_of(*tid2eid, -1, "moe_route tid2eid");
    a.vocab = tid2eid->dim(0);
    DI_CHECK(token_ids != nullptr, "moe_route: hash routing needs token ids");
    a.token_ids = i32_of(*token_ids, a.tokens, "moe_route token_ids");
  }
  a.route_scale = options.route_scale;
  a.score_func = options.score_func == ScoreFunc::kSqrtSoftplus ? 0 : (options.score_func == ScoreFunc::kSigmoid ? 1 : 2);
  a.normalize = options.normalize ? 1 : 0;
  a.normalize_eps = options.normalize_eps;
  a.err = err_;
  activate();
  launch_moe_route(a, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_route");
}

// The device array of DevWeight for one of w1 (0), w3 (1), w2 (2) over all experts, cached by the
// identity of the expert set (uploaded once; later calls, graph captures included, reuse it).
const DevWeight* CudaBackend::expert_table(std::span<const ExpertWeights> experts, int which, std::uint64_t key) {
  const std::uint64_t slot = key * 4 + static_cast<std::uint64_t>(which);
  const auto found = expert_tables_.find(slot);
  if (found != expert_tables_.end()) return static_cast<const DevWeight*>(found->second.raw_data());
  std::vector<DevWeight> host(experts.size());
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const ExpertWeights& ew = experts[e];
    host[e] = dev_weight(which == 0 ? ew.w1 : (which == 1 ? ew.w3 : ew.w2));
  }
  const auto bytes = static_cast<std::int64_t>(host.size() * sizeof(DevWeight));
  Tensor table = empty(Shape{bytes}, DType::kU8);
  DI_CUDA_CHECK(cudaMemcpy(table.raw_data(), host.data(), static_cast<std::size_t>(bytes), cudaMemcpyHostToDevice));
  const auto* ptr = static_cast<const DevWeight*>(table.raw_data());
  expert_tables_.emplace(slot, std::move(table));
  return ptr;
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                              std::span<const ExpertWeights> experts, const MoeOptions& options, Tensor& out) {
  DI_CHECK(!experts.empty(), "moe_experts: no experts");
  const ExpertWeights& e0 = experts.front();
  const std::int64_t dim = e0.w1.in_features();
  const std::int64_t inter = e0.w1.out_features();
  std::uint64_t key = experts.size();
  for (const ExpertWeights& ew : experts) {
    for (const LinearWeight* w : {&ew.w1, &ew.w3, &ew.w2}) {
      cpu::validate_weight(*w);
      check_on_device(w->data, "moe_experts weight");
      DI_CHECK(w->format == e0.w1.format && w->block == e0.w1.block && w->format != WeightFormat::kF32 &&
                   (!w->quantized() || w->scale.dtype() == e0.w1.scale.dtype()) &&
                   reinterpret_cast<std::uintptr_t>(w->data.raw_data()) % 16 == 0,
               "moe_experts: every expert weight must share one bf16/fp8/fp4 format, block and scale dtype");
      key = mix_hash(mix_hash(key, w->data.raw_data()), w->quantized() ? w->scale.raw_data() : nullptr);
    }
    DI_CHECK(ew.w1.data.shape() == e0.w1.data.shape() && ew.w3.data.shape() == e0.w1.data.shape() &&
                 ew.w2.in_features() == inter && ew.w2.out_features() == dim,
             "moe_experts: expert shapes differ (w1 {}, w3 {}, w2 {})", ew.w1.data.shape(), ew.w3.data.shape(),
             ew.w2.data.shape());
  }
  const std::int64_t align = e0.w1.format == WeightFormat::kFp4 ? 32 : 16;
  DI_CHECK(dim % align == 0 && inter % align == 0, "moe_experts: dims {} / {} must be multiples of {}", dim, inter,
           align);
  const DevRows xr = rows_of(x, dim, "moe_experts x");
  const std::int64_t t_count = xr.rows;
  DI_CHECK(expert_ids.ndim() == 2 && expert_ids.dim(0) == t_count && expert_ids.dim(1) <= 64,
           "moe_experts: ids {} for {} tokens (k <= 64)", expert_ids.shape(), t_count);
  const int k = static_cast<int>(expert_ids.dim(1));
  const std::int64_t pairs = t_count * k;
  const std::int32_t* ids = i32_of(expert_ids, pairs, "moe_experts expert_ids");
  const float* wts = f32_of(weights, pairs, "moe_experts weights");
  float* o = f32_mut(out, t_count * dim, "moe_experts out");
  if (pairs == 0) return;
  activate();
  const auto n_exp_all = static_cast<std::int64_t>(experts.size());
  if (!xr.bf16) {
    moe_experts_f32(xr, expert_ids, weights, experts, options, o);
    return;
  }

  // Prefill: many rows per fp4 expert take the bf16 pipeline below with the 128-row-item GEMM
  // (bit-identical to its mma.sync kernel, so batch-invariant mode may take it too).
  const bool prefill_sized =
      options_.moe_prefill_min_rows > 0 && pairs >= options_.moe_prefill_min_rows * std::min(n_exp_all, pairs);
  const bool prefill = prefill_sized && moe_prefill_ok(experts, dim, inter);
  // The fp8 prefill GEMM runs in the skinny pipeline below (its codes and scales) on 128-row items.
  const bool prefill_fp8 =
      prefill_sized && moe_prefill_fp8_ok(options_, arch_->wgmma, experts, dim, inter, options.act_quant_block);
  // (The grid's y dimension holds the work items: at most pairs / 8 + experts + 1 of them.)
  if ((!prefill || prefill_fp8) && !options_.batch_invariant && fp8_eligible(e0.w1, options.act_quant_block) &&
      fp8_eligible(e0.w2, options.act_quant_block) && pairs / kSkinnyRowsSmall + n_exp_all + 1 <= 65535) {
    moe_experts_skinny(xr, ids, wts, k, experts, key, options, prefill_fp8, o);
    return;
  }
  const auto n_exp = static_cast<std::int64_t>(experts.size());
  const std::int64_t rows_per_expert = ceil_div(pairs, std::min(n_exp, pairs));
  const MmaTile tile = rows_per_expert <= 16 ? MmaTile::kSmall : (rows_per_expert <= 96 ? MmaTile::kMedium : MmaTile::kLarge);
  const MmaTileShape shape = mma_tile_shape(tile);
  // Decode (a few rows per expert): the GEMV streams each touched expert once; items of <= 4 rows.
  const bool gemv = !options_.batch_invariant && rows_per_expert <= kGemvRows;
  const int item_rows = prefill ? kMoePrefillRows : (gemv ? kGemvRows : shape.bm);
  const std::int64_t max_items = pairs / item_rows + std::min(n_exp, pairs) + 1;
  const std::int64_t kpad1 = ceil_div(dim, kGemmBK) * kGemmBK;
  const std::int64_t kpad2 = ceil_div(inter, kGemmBK) * kGemmBK;

  ScratchLayout layout;
  const std::size_t xa_off = layout.add(static_cast<std::size_t>(t_count * kpad1) * 2);
  const std::size_t gate_off = layout.add(static_cast<std::size_t>(pairs * inter) * 4);
  const std::size_t up_off = layout.add(static_cast<std::size_t>(pairs * inter) * 4);
  const std::size_t h_off = layout.add(static_cast<std::size_t>(pairs * kpad2) * 2);
  const std::size_t y_off = layout.add(static_cast<std::size_t>(pairs * dim) * 4);
  MoePlacement place;
  place.reserve(layout, pairs, max_items);
  const DevWeight* t1 = expert_table(experts, 0, key);
  const DevWeight* t3 = expert_table(experts, 1, key);
  const DevWeight* t2 = expert_table(experts, 2, key);
  std::uint8_t* base = scratch(layout.total());
  auto* xa = reinterpret_cast<std::uint16_t*>(base + xa_off);
  auto* gate = reinterpret_cast<float*>(base + gate_off);
  auto* up = reinterpret_cast<float*>(base + up_off);
  auto* h = reinterpret_cast<std::uint16_t*>(base + h_off);
  auto* y = reinterpret_cast<float*>(base + y_off);
  place.bind(base);

  launch_act_prep_bf16(xr, options.act_quant_block, xa, kpad1, stream_);
  place.sort(ids, wts, pairs, k, n_exp, item_rows, err_, options_.moe_sort_small, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts (sort)");

  const DevWeightFormat format = dev_format(e0.w1.format);
  MmaGemmArgs g;
  g.a = xa;
  g.lda = kpad1;
  g.a_rows = place.a_rows;
  g.m = pairs;
  g.n = inter;
  g.k = dim;
  g.ktiles = static_cast<int>(kpad1 / kGemmBK);
  g.ktiles_per_split = g.ktiles;
  g.tables[0] = t1;
  g.tables[1] = t3;
  g.out[0] = gate;
  g.out[1] = up;
  g.ldo = inter;
  g.items = place.items;
  g.item_count = place.item_count;
  // One grouped GEMM over the placed rows: weight sets 2 (w1, w3) or 1 (w2), n output columns.
  const auto grouped_gemm = [&](const MmaGemmArgs& args, int sets, std::int64_t n) {
    const int items = static_cast<int>(max_items);
    if (prefill && options_.moe_prefill_wgmma && arch_->wgmma && !options_.batch_invariant) {
      launch_moe_prefill_wgmma(args, items, sets, stream_);
    } else if (prefill) {
      launch_moe_prefill_gemm(args, items, sets, stream_);
    } else if (gemv) {
      launch_gemv(format, true, args, items, sets, stream_);
    } else {
      launch_mma_gemm(format, tile, true, args, static_cast<int>(ceil_div(n, shape.bn)), items, sets, stream_);
    }
  };
  grouped_gemm(g, 2, inter);
  DI_CUDA_CHECK_LAUNCH("moe_experts (w1/w3)");

  MoeSwigluArgs sw = swiglu_args(gate, up, place.rw, inter, options);
  sw.out = h;
  sw.ld = kpad2;
  launch_moe_swiglu(sw, pairs, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts (swiglu)");

  MmaGemmArgs g2 = g;
  g2.a = h;
  g2.lda = kpad2;
  g2.a_rows = nullptr;
  g2.n = dim;
  g2.k = inter;
  g2.ktiles = static_cast<int>(kpad2 / kGemmBK);
  g2.ktiles_per_split = g2.ktiles;
  g2.tables[0] = t2;
  g2.tables[1] = nullptr;
  g2.out[0] = y;
  g2.out[1] = nullptr;
  g2.ldo = dim;
  grouped_gemm(g2, 1, dim);
  DI_CUDA_CHECK_LAUNCH("moe_experts (w2)");

  combine_experts(y, place.pos, ids, k, dim, sw.mid_bf16, 1, 0, o, t_count, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts (combine)");
}

// reference-qat: FP8 tensor cores through the skinny grouped GEMM. x is quantised to e4m3 codes once
// per token; pairs are placed by expert on the device (no host read, launch shapes fixed by T), items of
// up to 8 (decode) or 32 rows per expert stream its weights once each; SwiGLU writes the w2 input as
// codes; the combine sums each token's experts in ascending expert order.
void CudaBackend::moe_experts_skinny(const DevRows& x, const std::int32_t* ids, const float* wts, int k,
                                     std::span<const ExpertWeights> experts, std::uint64_t key,
                                     const MoeOptions& options, bool prefill_fp8, float* out) {
  const ExpertWeights& e0 = experts.front();
  const std::int64_t t_count = x.rows, dim = x.width, inter = e0.w1.out_features(), pairs = t_count * k;
  const auto n_exp = static_cast<std::int64_t>(experts.size());
  const int act = options.act_quant_block;
  const std::int64_t rows_per_expert = ceil_div(pairs, std::min(n_exp, pairs));
  // The 16-byte-load fp4 kernel (per GEMM: its K % 128 == 0) for items of 8 or 16 rows.
  const bool wide = options_.moe_fp4_wide && e0.w1.format == WeightFormat::kFp4 && act == 128 &&
                    rows_per_expert <= kSkinnyRowsMid;
  auto wide_ok = [](const LinearWeight& lw) {
    return lw.in_features() % 128 == 0 && lw.scale.dtype() != DType::kF32 && lw.scale.dim(1) % 4 == 0 &&
           reinterpret_cast<std::uintptr_t>(lw.scale.raw_data()) % 4 == 0;
  };
  bool wide1 = wide, wide2 = wide;
  for (const ExpertWeights& ew : experts) {
    wide1 = wide1 && wide_ok(ew.w1) && wide_ok(ew.w3);
    wide2 = wide2 && wide_ok(ew.w2);
  }
  // sm_90a warpgroup MMA (moe_fp4_wgmma.cu): every GEMM of every expert fits, items of 8 / 16 / 32; act
  // block 32 (V4.1) only where moe_fp4_wgmma_act32 asks for it, items of 8 / 16.
  bool wgmma = !prefill_fp8 && options_.moe_fp4_wgmma && arch_->wgmma && e0.w1.format == WeightFormat::kFp4 &&
               (act == 128 || (act == 32 && options_.moe_fp4_wgmma_act32 && rows_per_expert <= kSkinnyRowsMid));
  for (const ExpertWeights& ew : experts)
    wgmma = wgmma && moe_fp4_wgmma_fits(inter, dim, dev_weight(ew.w1)) &&
            moe_fp4_wgmma_fits(inter, dim, dev_weight(ew.w3)) && moe_fp4_wgmma_fits(dim, inter, dev_weight(ew.w2));
  int group = rows_per_expert <= kSkinnyRowsSmall / ((wide1 || wide2) ? 2 : 1)
                  ? kSkinnyRowsSmall
                  : ((wide1 || wide2) && rows_per_expert <= kSkinnyRowsMid ? kSkinnyRowsMid : kSkinnyRowsLarge);
  if (wgmma) {
    group = rows_per_expert <= kSkinnyRowsSmall ? kSkinnyRowsSmall
            : rows_per_expert <= kSkinnyRowsMid ? kSkinnyRowsMid
                                                : kSkinnyRowsLarge;
  }
  if (prefill_fp8) group = kMoePrefillRows;
  const std::int64_t max_items = pairs / group + std::min(n_exp, pairs) + 1;
  // The wgmma GEMMs' K order: two ranges (moe_fp4_wgmma_ksplit = 2) where K / 128 is even, a function
  // of the weight shape only, so a token's bits stay the same alone and in any batch. A small grid
  // (one token) splits the ranges over CTAs, whose partial sums land split_stride apart and are added
  // in range order by the SwiGLU / combine; larger grids walk both in one CTA (the same sums).
  MoeFp4WgmmaConfig wg_config;
  wg_config.stages = options_.moe_fp4_wgmma_stages;
  wg_config.k_permuted =
      (wgmma && options_.moe_fp4_wgmma_permuted) || (prefill_fp8 && options_.moe_prefill_fp8_permuted);
  // (The sort precedes the act quant and the w1/w3 GEMM, so both GEMMs' items are complete before
  // their predecessors start: the early prologue's condition.)
  wg_config.early = options_.moe_fp4_wgmma_early;
  wg_config.split_ctas = options_.moe_fp4_wgmma_split_ctas;
  wg_config.sm_count = sm_count_;
  auto k_ranges = [&](std::int64_t kk) {
    return wgmma && options_.moe_fp4_wgmma_ksplit == 2 && (kk / 128) % 2 == 0 ? 2 : 1;
  };
  const int ranges1 = k_ranges(dim), ranges2 = k_ranges(inter);
  const int grid_y = static_cast<int>(max_items);
  const int splits1 = wgmma ? moe_fp4_wgmma_cta_splits(group, inter, ranges1, grid_y, 2, wg_config) : 1;
  const int splits2 = wgmma ? moe_fp4_wgmma_cta_splits(group, dim, ranges2, grid_y, 1, wg_config) : 1;
  const std::int64_t ld1 = ceil_div(dim, 16) * 16, ld2 = ceil_div(inter, 16) * 16;
  const std::int64_t kb1 = ceil_div(dim, act), kb2 = ceil_div(inter, act);

  ScratchLayout layout;
  const std::size_t xq_off = layout.add(static_cast<std::size_t>(t_count * ld1));
  const std::size_t xs_off = layout.add(static_cast<std::size_t>(kb1 * t_count) * 4);
  const std::size_t gate_off = layout.add(static_cast<std::size_t>(splits1 * pairs * inter) * 4);
  const std::size_t up_off = layout.add(static_cast<std::size_t>(splits1 * pairs * inter) * 4);
  const std::size_t h_off = layout.add(static_cast<std::size_t>(pairs * ld2));
  const std::size_t hs_off = layout.add(static_cast<std::size_t>(kb2 * pairs) * 4);
  const std::size_t y_off = layout.add(static_cast<std::size_t>(splits2 * pairs * dim) * 4);
  MoePlacement place;
  place.reserve(layout, pairs, max_items);
  const DevWeight* t1 = expert_table(experts, 0, key);
  const DevWeight* t3 = expert_table(experts, 1, key);
  const DevWeight* t2 = expert_table(experts, 2, key);
  std::uint8_t* base = scratch(layout.total());
  auto* xs = reinterpret_cast<float*>(base + xs_off);
  auto* gate = reinterpret_cast<float*>(base + gate_off);
  auto* up = reinterpret_cast<float*>(base + up_off);
  auto* hs = reinterpret_cast<float*>(base + hs_off);
  auto* y = reinterpret_cast<float*>(base + y_off);
  place.bind(base);

  place.sort(ids, wts, pairs, k, n_exp, group, err_, options_.moe_sort_small, stream_);
  // The wgmma kernel's (or the fp8 prefill GEMM's) operands K-permuted inside each 32-K block: its act
  // codes are written so (they reach no other kernel: both GEMMs of this call take the same path).
  const bool k_permuted = wg_config.k_permuted;
  launch_act_quant_codes(x, act, base + xq_off, ld1, xs, t_count, stream_, k_permuted);
  DI_CUDA_CHECK_LAUNCH("moe_experts (sort, act quant)");

  const DevWeightFormat format = dev_format(e0.w1.format);
  SkinnyGemmArgs g;
  g.x = base + xq_off;
  g.ldx = ld1;
  g.xs = xs;
  g.xs_ld = t_count;
  g.act_block = act;
  g.x_rows = place.a_rows;
  g.n = inter;
  g.k = dim;
  g.w = dev_weight(e0.w1);  // block and alignment shared by every expert
  g.tables[0] = t1;
  g.tables[1] = t3;
  g.items = place.items;
  g.item_count = place.item_count;
  g.min_passes = options_.moe_fp4_wide_passes;
  g.out[0] = gate;
  g.out[1] = up;
  g.ldo = inter;
  g.k_ranges = ranges1;
  g.k_splits = splits1;
  g.split_stride = pairs * inter;
  // One grouped GEMM over the placed rows (weight sets 2 = w1 and w3, 1 = w2) on the chosen kernel.
  const auto grouped_gemm = [&](const SkinnyGemmArgs& args, int sets, bool wide_loads) {
    if (prefill_fp8) {
      launch_moe_prefill_fp8(args, grid_y, sets, k_permuted, stream_);
    } else if (wgmma) {
      launch_moe_fp4_wgmma(group, args, grid_y, sets, wg_config, stream_);
    } else if (wide_loads) {
      launch_skinny_fp4_wide(group, args, grid_y, sets, stream_);
    } else {
      launch_skinny_gemm(format, group, true, args, grid_y, sets, stream_);
    }
  };
  grouped_gemm(g, 2, wide1);
  DI_CUDA_CHECK_LAUNCH("moe_experts (w1/w3)");

  MoeSwigluArgs sw = swiglu_args(gate, up, place.rw, inter, options);
  sw.splits = splits1;
  sw.split_stride = g.split_stride;
  sw.codes = base + h_off;
  sw.codes_k_permuted = k_permuted ? 1 : 0;
  sw.code_scales = hs;
  sw.scales_ld = pairs;
  sw.ld = ld2;
  // The w2 GEMM's CTAs (early prologue) launch as soon as every SwiGLU CTA has: the w1/w3 GEMM's CTAs
  // all started by then, so they take the SMs its last CTAs free and stream their first weight stages
  // during its tail instead of after the SwiGLU.
  sw.early_dependents = wgmma && wg_config.early && options_.moe_fp4_wgmma_early_w2 ? 1 : 0;
  launch_moe_swiglu(sw, pairs, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts (swiglu)");

  SkinnyGemmArgs g2 = g;
  g2.x = base + h_off;
  g2.ldx = ld2;
  g2.xs = hs;
  g2.xs_ld = pairs;
  g2.x_rows = nullptr;
  g2.n = dim;
  g2.k = inter;
  g2.w = dev_weight(e0.w2);
  g2.tables[0] = t2;
  g2.tables[1] = nullptr;
  g2.out[0] = y;
  g2.out[1] = nullptr;
  g2.ldo = dim;
  g2.k_ranges = ranges2;
  g2.k_splits = splits2;
  g2.split_stride = pairs * dim;
  grouped_gemm(g2, 1, wide2);
  DI_CUDA_CHECK_LAUNCH("moe_experts (w2)");

  combine_experts(y, place.pos, ids, k, dim, sw.mid_bf16, splits2, g2.split_stride, out, t_count, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts (combine)");
}

// Exact mode keeps activations f32 (as the CPU reference and HF do): rounding x and the intermediate
// to bf16 for the tensor cores (~4e-3 per expert) flipped near-tied routing decisions further on. The
// pairs are placed by (expert, token) on the host, each expert's rows go through the f32 SIMT GEMM,
// and the combine kernel sums each token's experts in ascending expert order, as the CPU does.
// Verification only: it reads the ids on the host and synchronises, so (unlike reference-qat's bf16
// path) it cannot be captured in a CUDA graph.
void CudaBackend::moe_experts_f32(const DevRows& x, const Tensor& expert_ids, const Tensor& weights,
                                  std::span<const ExpertWeights> experts, const MoeOptions& options, float* out) {
  const std::int64_t t_count = x.rows, dim = x.width, inter = experts.front().w1.out_features();
  const std::int64_t k = expert_ids.dim(1), pairs = t_count * k;
  const auto n_exp = static_cast<std::int64_t>(experts.size());
  Tensor host_ids = Tensor::empty(expert_ids.shape(), DType::kI32), host_w = Tensor::empty(weights.shape(), DType::kF32);
  copy(expert_ids, host_ids);
  copy(weights, host_w);
  std::vector<std::int64_t> start(static_cast<std::size_t>(n_exp) + 1, 0);
  for (std::int64_t q = 0; q < pairs; ++q) {
    const std::int32_t e = host_ids.data<std::int32_t>()[q];
    DI_CHECK(e >= 0 && e < n_exp, "moe_experts: expert id {} of token {} is outside [0, {})", e, q / k, n_exp);
    ++start[static_cast<std::size_t>(e) + 1];
  }
  for (std::int64_t e = 0; e < n_exp; ++e) start[static_cast<std::size_t>(e) + 1] += start[static_cast<std::size_t>(e)];
  Tensor pos = Tensor::empty(Shape{pairs}, DType::kI32), rows = Tensor::empty(Shape{pairs}, DType::kI32);
  Tensor rw = Tensor::empty(Shape{pairs}, DType::kF32);
  std::vector<std::int64_t> next(start.begin(), start.end() - 1);
  for (std::int64_t q = 0; q < pairs; ++q) {
    const std::int64_t p = next[static_cast<std::size_t>(host_ids.data<std::int32_t>()[q])]++;
    pos.data<std::int32_t>()[q] = static_cast<std::int32_t>(p);
    rows.data<std::int32_t>()[p] = static_cast<std::int32_t>(q / k);
    rw.data<float>()[p] = host_w.data<float>()[q];
  }
  const Tensor d_pos = upload(pos), d_rows = upload(rows), d_rw = upload(rw);
  // Own buffers: gemm() uses the scratch area itself.
  Tensor xq = empty(Shape{t_count, dim}, DType::kF32), xa = empty(Shape{pairs, dim}, DType::kF32);
  Tensor gate = empty(Shape{pairs, inter}, DType::kF32), up = empty(Shape{pairs, inter}, DType::kF32);
  Tensor h = empty(Shape{pairs, inter}, DType::kF32), y = empty(Shape{pairs, dim}, DType::kF32);
  launch_act_prep_f32(x, options.act_quant_block, xq.data<float>(), dim, stream_);
  launch_gather_rows(rows_of(xq, "moe xq"), d_rows.data<std::int32_t>(), rows_of(xa, "moe xa"), err_, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts f32 (gather)");
  auto per_expert = [&](const Tensor& a, int which, Tensor& dst) {
    for (std::int64_t e = 0; e < n_exp; ++e) {
      const std::int64_t s0 = start[static_cast<std::size_t>(e)], r = start[static_cast<std::size_t>(e) + 1] - s0;
      if (r == 0) continue;
      const ExpertWeights& ew = experts[static_cast<std::size_t>(e)];
      const LinearWeight& w = which == 0 ? ew.w1 : which == 1 ? ew.w3 : ew.w2;
      gemm(rows_of(a.narrow(0, s0, r), "moe a"), w, 0, rows_of(dst.narrow(0, s0, r), "moe out"));
    }
  };
  per_expert(xa, 0, gate);
  per_expert(xa, 1, up);
  MoeSwigluArgs sw = swiglu_args(gate.data<float>(), up.data<float>(), d_rw.data<float>(), inter, options);
  sw.out_f32 = h.data<float>();
  sw.ld = inter;
  launch_moe_swiglu(sw, pairs, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts f32 (swiglu)");
  per_expert(h, 2, y);
  combine_experts(y.data<float>(), d_pos.data<std::int32_t>(), i32_of(expert_ids, pairs, "moe_experts expert_ids"),
                  static_cast<int>(k), dim, sw.mid_bf16, 1, 0, out, t_count, stream_);
  DI_CUDA_CHECK_LAUNCH("moe_experts f32 (combine)");
  synchronize();  // the temporaries above are freed on return
}

}  // namespace deepinfer::ops::cuda
