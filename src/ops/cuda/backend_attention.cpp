// CUDA backend attention-side ops: sparse attention with sinks, lightning-indexer scores and
// top-k, and the KV compressor. Host code validates and plans; kernels are in attention_kernels.cu
// and mhc_compressor_kernels.cu.
#include <algorithm>
#include <bit>

#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {

constexpr std::size_t kMaxSmem = 227 * 1024;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

void CudaBackend::sparse_attention(const Tensor& q, std::span<const RowView> sources, const Tensor& indices,
                                   const Tensor& sinks, const AttentionOptions& options, Tensor& out) {
  DI_CHECK(q.ndim() == 3 && out.shape() == q.shape(), "sparse_attention: q {} and out {} must be [T, H, d]",
           q.shape(), out.shape());
  DI_CHECK(!sources.empty() && sources.size() <= static_cast<std::size_t>(kMaxAttnSources),
           "sparse_attention: {} KV sources (1..{} supported)", sources.size(), kMaxAttnSources);
  const std::int64_t t_count = q.dim(0);
  const auto heads = static_cast<int>(q.dim(1));
  const auto d = static_cast<int>(q.dim(2));
  DI_CHECK(d <= 512, "sparse_attention: head_dim {} above the 512 this kernel supports", d);
  DI_CHECK(options.block > 0 && options.block <= 256, "sparse_attention: block {} must be in [1, 256]",
           options.block);
  AttentionArgs a;
  std::int64_t total = 0;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    a.src[s] = source_of(sources[s], "sparse_attention KV");
    DI_CHECK(a.src[s].rows.width == d, "sparse_attention: KV rows of {} for head_dim {}", a.src[s].rows.width, d);
    a.src_start[s] = total;
    total += sources[s].num_rows;
  }
  a.num_sources = static_cast<int>(sources.size());
  a.src_start[sources.size()] = total;
  DI_CHECK(indices.dtype() == DType::kI32 && indices.ndim() == 2 && indices.dim(0) == t_count &&
               indices.stride(1) == 1,
           "sparse_attention: indices {} must be i32 [T={}, K]", indices.shape(), t_count);
  check_on_device(indices, "sparse_attention indices");
  a.sinks = f32_of(sinks, heads, "sparse_attention sinks");
  a.q = rows_of(q, d, "sparse_attention q");
  a.out = rows_of(out, d, "sparse_attention out");
  a.idx = indices.data<std::int32_t>();
  a.idx_stride = indices.stride(0);
  a.kcount = static_cast<int>(indices.dim(1));
  a.scale = options.scale;
  a.round_probs = options.round_probs_bf16 ? 1 : 0;
  a.block = options.block;
  a.heads = heads;
  a.d = d;
  a.heads_per_cta = std::min(heads, kMaxHeadsPerCta);
  a.err = err_;
  DI_CHECK(attention_smem_bytes(a.heads_per_cta, d, a.block) <= kMaxSmem,
           "sparse_attention: head_dim {} with block {} needs too much shared memory", d, a.block);
  if (t_count == 0 || heads == 0) return;
  std::int64_t splits = 1;
  const bool mma = sparse_attention_mma_eligible(a);  // tensor cores for bf16 q and KV, block 64
  if (mma) {
    plan_sparse_attention_mma(a, t_count, sm_count_, options_.batch_invariant);
    splits = a.splits;
  } else {
    // Split the index list across blocks when the grid alone cannot fill the GPU (decode). The
    // split changes the summation order, so batch-invariant mode keeps one split.
    const std::int64_t nblocks = ceil_div(std::max(a.kcount, 1), a.block);
    const std::int64_t ctas = t_count * ceil_div(heads, a.heads_per_cta);
    if (!options_.batch_invariant && ctas < 2 * sm_count_)
      splits = std::min<std::int64_t>(nblocks, ceil_div(2 * sm_count_, ctas));
    a.blocks_per_split = static_cast<int>(ceil_div(nblocks, splits));
    splits = ceil_div(nblocks, a.blocks_per_split);
    a.splits = static_cast<int>(splits);
  }
  activate();
  if (splits > 1) {
    ScratchLayout layout;
    const std::size_t ml_off = layout.add(static_cast<std::size_t>(t_count * heads * splits * 2) * sizeof(float));
    const std::size_t acc_off = layout.add(static_cast<std::size_t>(t_count * heads * splits * d) * sizeof(float));
    std::uint8_t* base = scratch(layout.total());
    a.part_ml = reinterpret_cast<float*>(base + ml_off);
    a.part_acc = reinterpret_cast<float*>(base + acc_off);
  }
  if (mma)
    launch_sparse_attention_mma(a, t_count, stream_);
  else
    launch_sparse_attention(a, t_count, stream_);
  DI_CUDA_CHECK_LAUNCH("sparse_attention");
}

void CudaBackend::indexer_scores(const Tensor& q, const RowView& keys, const Tensor& row_base, const Tensor& num_keys,
                                 const Tensor& weights, Tensor& out) {
  DI_CHECK(q.ndim() == 3, "indexer_scores: q {} must be [T, H, d]", q.shape());
  const std::int64_t t_count = q.dim(0);
  IndexerArgs a;
  a.heads = static_cast<int>(q.dim(1));
  a.d = static_cast<int>(q.dim(2));
  a.keys = source_of(keys, "indexer_scores keys");
  DI_CHECK(a.keys.rows.width == a.d, "indexer_scores: keys of width {} for q {}", a.keys.rows.width, q.shape());
  a.weights = f32_of(weights, t_count * a.heads, "indexer_scores weights");
  a.row_base = i32_of(row_base, t_count, "indexer_scores row_base");
  a.num_keys = i32_of(num_keys, t_count, "indexer_scores num_keys");
  DI_CHECK(out.dtype() == DType::kF32 && out.ndim() == 2 && out.dim(0) == t_count && out.stride(1) == 1,
           "indexer_scores: out {} must be f32 [{}, n]", out.shape(), t_count);
  check_on_device(out, "indexer_scores out");
  DI_CHECK(indexer_smem_bytes(a.heads, a.d) <= kMaxSmem, "indexer_scores: {} heads × {} dims exceed shared memory",
           a.heads, a.d);
  a.q = rows_of(q, a.d, "indexer_scores q");
  a.width = out.dim(1);
  a.out = out.data<float>();
  a.out_stride = out.stride(0);
  a.err = err_;
  activate();
  if (!options_.batch_invariant && options_.indexer_mma_min_tokens > 0 && t_count >= options_.indexer_mma_min_tokens &&
      indexer_mma_eligible(a)) {
    launch_indexer_scores_mma(a, t_count, stream_);  // prefill: tensor cores (indexer_mma_kernels.cu)
  } else {
    launch_indexer_scores(a, t_count, stream_);
  }
  DI_CUDA_CHECK_LAUNCH("indexer_scores");
}

void CudaBackend::topk_visible(const Tensor& scores, const Tensor& positions, int ratio, int k, const Tensor& offsets,
                               Tensor& out) {
  DI_CHECK(scores.dtype() == DType::kF32 && scores.ndim() == 2 && scores.stride(1) == 1,
           "topk_visible: scores {} must be f32 [T, n]", scores.shape());
  const std::int64_t t_count = scores.dim(0);
  DI_CHECK(out.dtype() == DType::kI32 && out.ndim() == 2 && out.dim(0) == t_count && out.dim(1) == k &&
               out.stride(1) == 1,
           "topk_visible: out {} must be i32 [{}, {}]", out.shape(), t_count, k);
  DI_CHECK(ratio > 0 && k >= 0 && k <= 16384, "topk_visible: ratio {} / k {} (k <= 16384)", ratio, k);
  check_on_device(scores, "topk_visible scores");
  check_on_device(out, "topk_visible out");
  TopkArgs a;
  a.positions = i32_of(positions, t_count, "topk_visible positions");
  a.offsets = i32_of(offsets, t_count, "topk_visible offsets");
  a.scores = scores.data<float>();
  a.score_stride = scores.stride(0);
  a.n = scores.dim(1);
  a.ratio = ratio;
  a.k = k;
  a.pow2 = static_cast<int>(std::bit_ceil(static_cast<std::uint32_t>(std::max(k, 1))));
  a.out = out.data<std::int32_t>();
  a.out_stride = out.stride(0);
  activate();
  launch_topk_visible(a, t_count, stream_);
  DI_CUDA_CHECK_LAUNCH("topk_visible");
}

void CudaBackend::candidate_mask(const Tensor& scores, const Tensor& positions, int ratio, int block, int top_blocks,
                                 Tensor& out) {
  DI_CHECK(scores.dtype() == DType::kF32 && scores.ndim() == 2 && scores.is_contiguous() && out.shape() == scores.shape() &&
               out.dtype() == DType::kF32 && out.is_contiguous(),
           "candidate_mask: scores {} / out {} must be equal contiguous f32 [T, n]", scores.shape(), out.shape());
  DI_CHECK(ratio > 0 && block > 0 && top_blocks > 0, "candidate_mask: ratio {} / block {} / top_blocks {}", ratio, block,
           top_blocks);
  check_on_device(scores, "candidate_mask scores");
  check_on_device(out, "candidate_mask out");
  const std::int64_t rows = scores.dim(0);
  CandidateArgs a;
  a.scores = scores.data<float>();
  a.out = out.data<float>();
  a.positions = i32_of(positions, rows, "candidate_mask positions");
  a.n = scores.dim(1);
  a.ratio = ratio;
  a.block = block;
  a.blocks = ceil_div(a.n, block);
  a.take = static_cast<int>(std::min<std::int64_t>(top_blocks, a.blocks));
  DI_CHECK(a.take <= 16384, "candidate_mask: {} blocks kept per row (at most 16384)", a.take);
  if (rows == 0 || a.n == 0) return;
  ScratchLayout layout;
  const std::size_t best = layout.add(static_cast<std::size_t>(rows * a.blocks) * sizeof(float));
  const std::size_t all_visible = layout.add(static_cast<std::size_t>(rows) * sizeof(std::int32_t));
  const std::size_t zeros = layout.add(static_cast<std::size_t>(rows) * sizeof(std::int32_t));
  const std::size_t picked = layout.add(static_cast<std::size_t>(rows * a.take) * sizeof(std::int32_t));
  activate();
  std::uint8_t* base = scratch(layout.total(), "candidate_mask");
  a.best = reinterpret_cast<float*>(base + best);
  a.all_visible = reinterpret_cast<std::int32_t*>(base + all_visible);
  a.zeros = reinterpret_cast<std::int32_t*>(base + zeros);
  a.picked = reinterpret_cast<std::int32_t*>(base + picked);
  launch_candidate_mask(a, rows, stream_);
  DI_CUDA_CHECK_LAUNCH("candidate_mask");
}

void CudaBackend::compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape, const Tensor& positions,
                                    const Tensor& slots, CompressorState& state, Tensor& out) {
  const int ratio = state.ratio;
  const bool overlap = state.overlap;
  const std::int64_t coff = overlap ? 2 : 1;
  DI_CHECK(ratio > 0 && ratio <= 128, "compressor_update: ratio {} must be in [1, 128]", ratio);
  DI_CHECK(kv.ndim() == 2 && score.shape() == kv.shape(), "compressor_update: kv {} / score {} must be equal [T, coff·d]",
           kv.shape(), score.shape());
  const std::int64_t t_count = kv.dim(0);
  const std::int64_t width = kv.dim(1);
  const std::int64_t d = width / coff;
  const std::int64_t ring = coff * ratio;
  CompressorArgs a;
  a.kv = f32_of(kv, -1, "compressor_update kv");
  a.score = f32_of(score, -1, "compressor_update score");
  a.ape = f32_of(ape, ratio * width, "compressor_update ape");
  DI_CHECK(ape.ndim() == 2 && ape.dim(0) == ratio && ape.dim(1) == width, "compressor_update: ape {} must be [{}, {}]",
           ape.shape(), ratio, width);
  DI_CHECK(state.kv.ndim() == 2 && state.kv.dim(1) == width && state.kv.dim(0) % ring == 0 &&
               state.score.shape() == state.kv.shape(),
           "compressor_update: state {} must be f32 [slots · {}, {}]", state.kv.shape(), ring, width);
  a.state_kv = f32_mut(state.kv, state.kv.numel(), "compressor_update state kv");
  a.state_score = f32_mut(state.score, state.score.numel(), "compressor_update state score");
  a.positions = i32_of(positions, t_count, "compressor_update positions");
  a.slots = i32_of(slots, t_count, "compressor_update slots");
  a.num_slots = state.num_slots();
  a.err = err_;
  DI_CHECK(out.ndim() == 2 && out.dim(0) == t_count && out.dim(1) == d, "compressor_update: out {} must be f32 [{}, {}]",
           out.shape(), t_count, d);
  a.out = f32_mut(out, t_count * d, "compressor_update out");
  a.tokens = t_count;
  a.ratio = ratio;
  a.overlap = overlap ? 1 : 0;
  a.d = d;
  a.width = width;
  activate();
  launch_compressor(a, stream_);
  DI_CUDA_CHECK_LAUNCH("compressor_update");
}

}  // namespace deepinfer::ops::cuda
