// The op interface every backend implements (CPU reference, CUDA): memory movement plus one
// virtual function per model op. Outputs are preallocated by the caller (so a CUDA backend can
// capture graphs); activations may be f32 or bf16 — each op computes in f32 and rounds to the
// output tensor's dtype. An output row depends only on its own inputs; whether also its bits are
// independent of how many rows were computed together (batch invariance) depends on the backend:
// always on the CPU; on CUDA only with batch_invariant (DEEPINFER_BATCH_INVARIANT=1), since by
// default the GEMM / attention kernel and split are chosen by the number of rows (docs/CUDA.md).
// Aliasing: rope, hadamard and fake_quant_* work in place by definition; rms_norm (out == x),
// scale and add (out == a), swiglu (out == gate) and convert may write over their input; every
// other op's outputs must not overlap its inputs (hc_post in particular reads every stream of a
// token to write each one).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/error.h"
#include "ops/op_types.h"
#include "tensor/tensor.h"

namespace deepinfer::ops {

// Throws deepinfer::Error unless x, w and out fit Backend::linear_grouped (backends share it).
void check_linear_grouped(const Tensor& x, std::span<const LinearWeight> w, const Tensor& out);

// A pinned host buffer and the copies into it from one backend's device (Backend::make_readback).
class HostReadback {
 public:
  virtual ~HostReadback() = default;
  // Enqueues the copy of `src` (contiguous, on the backend's device, at most the capacity) behind
  // the work queued so far and returns without waiting.
  virtual void enqueue(const Tensor& src) = 0;
  // Waits for the last enqueued copy (surfacing device errors) and returns its bytes.
  virtual const void* wait() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;

  // ---- memory -----------------------------------------------------------------------------
  // Uninitialised device memory.
  virtual Tensor empty(const Shape& shape, DType dtype) = 0;
  // Copies between any two tensors of equal shape and dtype (host or this device); rows may be
  // strided along dim 0.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // A device copy of a host weight (zero-copy on the CPU backend).
  virtual Tensor upload(const Tensor& host) = 0;
  // Sets every element of a float tensor to `value` (±inf allowed).
  virtual void fill(Tensor& dst, float value) = 0;
  // Elementwise dtype conversion (f32 <-> bf16), equal shapes.
  virtual void convert(const Tensor& src, Tensor& dst) = 0;
  // Waits for queued work (no-op on the CPU).
  virtual void synchronize() = 0;

  // ---- a second lane of ops ----------------------------------------------------------------
  // Ops that may run alongside the main sequence (the CUDA backend: a side stream with its own
  // scratch, where it finds overlap worth it for `rows` activation rows; elsewhere every op runs in
  // issue order, which gives the same results). After fork_side_lane ops run on the side lane, after
  // everything issued before it; after return_to_main_lane they run on the main lane again, alongside
  // the side lane's; after join_side_lane the main lane waits for the side lane's ops. A tensor one
  // lane writes must not be read or written by the other before the join. Use SideLane (below).
  virtual void fork_side_lane(std::int64_t rows) { (void)rows; }
  virtual void return_to_main_lane() {}
  virtual void join_side_lane() {}

  // ---- elementwise / rows -----------------------------------------------------------------
  // out[t, ..., :] = table[ids[t], :] for every middle index (expands one embedding to n copies).
  // ids: i32 [T]; table: f32/bf16 [V, D]; out: [T, D] or [T, n, D].
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  // out[i, :] = src[rows[i], :]; rows: i32 [n].
  virtual void gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) = 0;
  // dst logical row rows[i] = src[i, :]; rows: i32 [n]; -1 = row i is not written.
  virtual void scatter_rows(const Tensor& src, const RowView& dst, const Tensor& rows) = 0;
  // out = a + b (equal shapes).
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // out = a * s.
  virtual void scale(const Tensor& a, float s, Tensor& out) = 0;

  // ---- linear algebra ---------------------------------------------------------------------
  // out[M, N] = x[M, K] · Wᵀ, accumulated in f32 in an order fixed per output element.
  // x rows may be strided (dim-0 stride >= K); so may out's (grouped projections use views).
  virtual void linear(const Tensor& x, const LinearWeight& w, const LinearOptions& options, Tensor& out) = 0;
  // Block-diagonal linear (the grouped output projection): out[:, g·N .. (g+1)·N] = x[:, g·K .. (g+1)·K] · W_gᵀ
  // for the G weights, all of one format and shape [N, K]; x: [M, G·K], out: [M, G·N] (rows may be
  // strided). The default is the loop of linear() over column views (the reference); a backend may
  // run it in one launch (CUDA: the same bits as its loop when single linears take the same kernel,
  // else the loop's values up to f32 summation order).
  virtual void linear_grouped(const Tensor& x, std::span<const LinearWeight> w, const LinearOptions& options,
                              Tensor& out);
  // Whether a grouped projection stored as FP8 blocks but computed on the exact bf16 dequantisation
  // without act quant (wo_a: MODEL_SPEC, convert.py) should be loaded as stored: the backend then
  // widens the codes exactly inside its GEMM (half the bytes of the bf16 copy, the same products). The
  // CPU reference keeps the bf16 copy (faster there: no per-call decoding).
  virtual bool grouped_fp8_weights() const { return false; }

  // ---- normalisation / position -------------------------------------------------------------
  // RMSNorm over the last dim: out = x · rsqrt(mean(x²) + eps) (· weight when given).
  virtual void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) = 0;
  // In place on x [T, H, d] (or [T, d]): interleaved-pair rotation of the last rope_dim dims by
  // angle positions[t] · inv_freq[i]; inverse = the conjugate rotation. positions: i32 [T].
  virtual void rope(Tensor& x, const Tensor& positions, const RopeTable& table, bool inverse) = 0;
  // rms_norm(x, weight, eps, x) then rope(x, positions, table, false), in place (the query heads'
  // and the window K=V row's norm + rotation). The base class runs the two ops; a backend may fuse
  // them but must match the two ops within their parity bounds.
  virtual void rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions,
                             const RopeTable& table);
  // In place, each row's last dim (a power of two): normalised Walsh–Hadamard (Sylvester order,
  // scale n^-1/2).
  virtual void hadamard(Tensor& x) = 0;

  // ---- quantise → dequantise (reference QAT) ------------------------------------------------
  // In place on columns [col_begin, col_end) of each row: FP8 E4M3 per block of `block` with
  // power-of-two scales (MODEL_SPEC A3.2).
  virtual void fake_quant_fp8(Tensor& x, std::int64_t col_begin, std::int64_t col_end, int block) = 0;
  // In place on whole rows: FP4 E2M1 per block with the given scale kind.
  virtual void fake_quant_fp4(Tensor& x, int block, Fp4ScaleKind scale_kind) = 0;

  // ---- attention ---------------------------------------------------------------------------
  // Sparse MQA with a per-head sink. q: [T, H, d]; the KV rows are the concatenation of
  // `sources` (source s covers virtual rows [Σ_{<s} num_rows, +num_rows)); indices: i32 [T, K]
  // into that concatenation, -1 = skip. Online softmax over blocks of options.block indices; the
  // sink adds exp(sink_h - max) to the denominator only. out: [T, H, d].
  virtual void sparse_attention(const Tensor& q, std::span<const RowView> sources, const Tensor& indices,
                                const Tensor& sinks, const AttentionOptions& options, Tensor& out) = 0;
  // Lightning-indexer scores of a batch in which each token reads its own sequence's keys: token t
  // scores its entries s < num_keys[t], entry s being logical row row_base[t] + s of keys:
  //   out[t, s] = Σ_h weights[t, h] · ReLU(q[t, h] · keys[row_base[t] + s]),  and -inf for s >= num_keys[t].
  // q: [T, H, d]; weights: f32 [T, H]; row_base, num_keys: i32 [T]; out: f32 [T, n] (row stride may
  // exceed n; num_keys[t] <= n). Launch shapes depend on T and n only.
  virtual void indexer_scores(const Tensor& q, const RowView& keys, const Tensor& row_base, const Tensor& num_keys,
                              const Tensor& weights, Tensor& out) = 0;
  // Per row t: the k highest scores among the entries visible at positions[t] (entry s visible
  // iff (s + 1) · ratio <= positions[t] + 1) whose score is not -inf (masked out), ordered by score
  // descending then index ascending; writes index + offsets[t], or -1 where fewer than k qualify.
  // offsets: i32 [T]; out: i32 [T, k] (rows may be strided).
  virtual void topk_visible(const Tensor& scores, const Tensor& positions, int ratio, int k, const Tensor& offsets,
                            Tensor& out) = 0;

  // V4.1 hierarchical candidates (MODEL_SPEC B4.4), per row t: the entries visible at positions[t]
  // (s < min(n, (positions[t] + 1) / ratio)) in blocks of `block`, each block scored by the max of
  // its visible entries, the block of the newest visible entry always kept; the top `top_blocks`
  // blocks with a finite score (ties: lower block) give out[t, s] = 0 for their entries, every
  // other entry (and every entry of a row that sees none) -inf. scores, out: f32 [T, n].
  virtual void candidate_mask(const Tensor& scores, const Tensor& positions, int ratio, int block, int top_blocks,
                              Tensor& out) = 0;

  // ---- KV compressor -------------------------------------------------------------------------
  // Feeds projected rows (kv, score: f32 [T, coff·d]; ape: f32 [ratio, coff·d]) of a batch into the
  // state pool: row t is position positions[t] of the sequence in state slot slots[t] (-1: padding,
  // ignored). A sequence's rows must be consecutive rows with consecutive positions. Each row that
  // completes a group ((p + 1) % ratio == 0) writes the group's pooled row to out[t]; every other
  // row of out (f32 [T, d]) is zeroed. The slot's ring then holds its last coff·ratio rows.
  virtual void compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape, const Tensor& positions,
                                 const Tensor& slots, CompressorState& state, Tensor& out) = 0;

  // ---- mHC (hyper-connections) ---------------------------------------------------------------
  // From the stream x [T, n, D]: mixes = (fn · flat(x)) · rsqrt(mean(x²) + norm_eps); pre/post/comb
  // per MODEL_SPEC A4.2 with Sinkhorn; y[T, D] = Σ_i pre_i x_i; post: f32 [T, n]; comb: f32 [T, n, n].
  virtual void hc_pre(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y, Tensor& post,
                      Tensor& comb) = 0;
  // out[t, k, :] = post[t, k] · f[t, :] + Σ_j comb[t, j, k] · residual[t, j, :].
  virtual void hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                       Tensor& out) = 0;
  // hc_pre, then rms_norm(y, &norm_weight, norm_eps, y): the entry of every V4 attention / FFN
  // sub-block. The base class runs the two ops (the reference numerics); a backend may fuse them
  // but must give the same result as the two ops within their parity bounds.
  virtual void hc_pre_norm(const Tensor& x, const HcWeights& w, const HcOptions& options, const Tensor& norm_weight,
                           float norm_eps, Tensor& y, Tensor& post, Tensor& comb);
  // Final collapse: y = Σ_i (sigmoid(mix_i · scale + base_i) + hc_eps) · x_i.
  virtual void hc_head(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y) = 0;

  // ---- V4.1 ops (the base class throws "not implemented on <backend> yet") -------------------
  // The coefficients of one mHC site without the collapse (V4.1's single-pass mHC applies a
  // site's pre weights one site later, MODEL_SPEC B4.1): pre f32 [T, n] = sigmoid(mix·scale₀ +
  // base) + hc_eps; post and comb as hc_pre.
  virtual void hc_mix(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& pre, Tensor& post,
                      Tensor& comb);
  // y[t, :] = Σ_i pre[t, i] · x[t, i, :] (f32, stream order). x: [T, n, D]; pre: f32 [T, n]; y: [T, D].
  virtual void hc_collapse(const Tensor& x, const Tensor& pre, Tensor& y);
  // Engram read-out gate (MODEL_SPEC B4.7), per token t and copy i:
  //   dot = Σ_d x[t,i,d]·omega[i,d]·key[t,i,d] · rsqrt(mean(x_i²)+eps) · rsqrt(mean(key_i²)+eps) / sqrt(D),
  //   gate = sigmoid(sign(dot)·sqrt(max(|dot|, 1e-6))),  out[t,i,:] = x[t,i,:] + gate · value[t,:].
  // x, out: [T, n, D] (out may be x); key: T rows of n·D (rows may be strided); value: [T, D]; omega: f32 [n, D].
  virtual void engram_gate(const Tensor& x, const Tensor& key, const Tensor& value, const Tensor& omega, float eps,
                           Tensor& out);

  // ---- MoE -----------------------------------------------------------------------------------
  // Router: scores = score_func(logits); selection = top-k of scores + bias (learned) or
  // tid2eid[token_ids] (hash); weights = normalised unbiased scores of the selection · route_scale.
  // logits: f32 [T, E]; bias: f32 [E] or null; tid2eid: i32 [V, k] or null (then token_ids null);
  // expert_ids: i32 [T, k]; weights: f32 [T, k].
  virtual void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                         const RouteOptions& options, Tensor& expert_ids, Tensor& weights) = 0;
  // out[t] = Σ_k w2_e(weights[t,k] · silu(clamp(w1_e x)) · clamp(w3_e x)) over e = expert_ids[t,k],
  // accumulated in f32 in ascending expert order. x: [T, D]; out: f32 [T, D].
  virtual void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                           std::span<const ExpertWeights> experts, const MoeOptions& options, Tensor& out) = 0;
  // out = silu(min(gate, limit)) · clamp(up, -limit, limit) (limit 0 = no clamp).
  virtual void swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) = 0;

  // ---- sampling helpers ----------------------------------------------------------------------
  // out[t] = argmax over logits[t, :] (lowest index on ties). out: i32 [T].
  virtual void argmax(const Tensor& logits, Tensor& out) = 0;
  // Structured outputs: logits[t, v] = -inf where bit v % 32 of mask[t, v / 32] is clear (what the
  // sampler does first, before bias, penalties and temperature). logits: f32 [T, V] (rows may be
  // strided); mask: i32 [T, ceil(V / 32)]. The default works on host tensors (the CPU backend).
  virtual void apply_token_mask(Tensor& logits, const Tensor& mask);
  // The whole sampling decision per logits row, bit-identical to engine::Sampler for the same
  // logits (ops/sampling.h, ops/sampling_math.h): raw bans, logprob statistics, structured-output
  // mask, bias, bans, penalties, temperature, top-k / min-p / top-p, Philox-seeded Gumbel-max.
  // logits: f32 [T, V] (rows may be strided); rows: i32 [T, kSampleRowWords] (SampleRow);
  // entries: i32 [N, 2] (SampleEntry); masks: i32 [M, ceil(V / 32)] (M may be 0); out: i32
  // [T, sample_out_words(max_top)] with max_top >= every row's num_top_logprobs. Entry ids and
  // mask rows must be in range (the default checks; device kernels skip bad ones). The default
  // works on host tensors (the CPU backend); logits are not modified.
  virtual void sample_tokens(const Tensor& logits, const Tensor& rows, const Tensor& entries, const Tensor& masks,
                             Tensor& out);
  // A step's input ids from an earlier step's device samples (the engine launches step N+1 before
  // N's tokens reach the host): ids[t] = sampled[-1 - ids[t], 0] where ids[t] < 0, unchanged where
  // >= 0 (a row -1 - ids[t] >= R gives 0). ids: i32 [T]; sampled: i32 [R, W] (sample_tokens' out),
  // both contiguous. Stream-ordered, no host synchronisation (capturable). The default works on
  // host tensors.
  virtual void resolve_sampled_ids(Tensor& ids, const Tensor& sampled);
  // The same step's penalty history: row t with sources[t] >= 0 waits for the token x =
  // sampled[sources[t], 0]. Its seen list [seen_begin, seen_end) and count list [count_begin,
  // count_end), where not empty, end with one reserved entry: x already among the others -> the
  // range drops the reserved entry (and x's count grows by 1); else the reserved entry becomes x
  // (count 1). rows: i32 [T, kSampleRowWords]; entries: i32 [N, 2]; sources: i32 [T]; sampled:
  // i32 [R, W]; all contiguous, rows and entries updated in place. Stream-ordered, no host sync.
  virtual void add_sampled_to_history(Tensor& rows, Tensor& entries, const Tensor& sources, const Tensor& sampled);
  // An asynchronous device -> host copy of up to `bytes` (the token read-back of device sampling,
  // which must not wait for the next step queued behind it). The default copies at enqueue().
  virtual std::unique_ptr<HostReadback> make_readback(std::size_t bytes);

 protected:
  // sample_tokens' shape and dtype checks (every backend); returns max_top.
  static std::int64_t check_sample_tokens(const Tensor& logits, const Tensor& rows, const Tensor& entries,
                                          const Tensor& masks, const Tensor& out);
  // add_sampled_to_history's shape and dtype checks (every backend).
  static void check_add_sampled_to_history(const Tensor& rows, const Tensor& entries, const Tensor& sources,
                                           const Tensor& sampled);
};

// A side lane for one scope: forks at construction, joins at join() or, if an op threw first, at
// destruction (so the backend is back on its main lane whatever happens).
class SideLane {
 public:
  SideLane(Backend& backend, std::int64_t rows) : backend_(backend) { backend_.fork_side_lane(rows); }
  SideLane(const SideLane&) = delete;
  SideLane& operator=(const SideLane&) = delete;
  ~SideLane() {
    if (joined_) return;
    try {
      backend_.join_side_lane();
    } catch (...) {  // an error is already on its way out (or the device is lost): nothing to add
    }
  }
  void return_to_main() { backend_.return_to_main_lane(); }
  void join() {
    joined_ = true;
    backend_.join_side_lane();
  }

 private:
  Backend& backend_;
  bool joined_ = false;
};

inline void Backend::apply_token_mask(Tensor& logits, const Tensor& mask) {
  DI_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2 && (logits.dim(0) <= 1 || logits.stride(1) == 1),
           "apply_token_mask: logits {} must be f32 [T, V]", logits.shape());
  const std::int64_t rows = logits.dim(0), vocab = logits.dim(1), words = (vocab + 31) / 32;
  DI_CHECK(mask.dtype() == DType::kI32 && mask.shape() == Shape({rows, words}) && mask.is_contiguous(),
           "apply_token_mask: mask {} for logits {} must be i32 [T, ceil(V / 32)]", mask.shape(), logits.shape());
  DI_CHECK(logits.device().is_cpu() && mask.device().is_cpu(), "apply_token_mask: the {} backend needs host tensors",
           name());
  const auto* bits = static_cast<const std::uint32_t*>(mask.raw_data());
  for (std::int64_t t = 0; t < rows; ++t) {
    float* row = logits.data<float>() + t * logits.stride(0);
    for (std::int64_t v = 0; v < vocab; ++v)
      if (((bits[t * words + (v >> 5)] >> (v & 31)) & 1u) == 0) row[v] = -INFINITY;
  }
}

// The CPU reference backend (OpenMP threads; DEEPINFER_NUM_THREADS).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace deepinfer::ops
