// Plain argument structs shared by every backend's ops: weight matrices in their stored formats,
// row stores addressed through an optional page table, and the per-op option bundles.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace deepinfer::ops {

// How a weight matrix [out, in] is stored.
enum class WeightFormat : std::uint8_t {
  kF32,       // f32 [out, in]
  kBF16,      // bf16 [out, in]
  kFp8Block,  // e4m3 [out, in] + scale [ceil(out/b), ceil(in/b)] (ue8m0 or f32), b = block
  kFp4,       // packed e2m1 [out, in] (kF4E2M1, low nibble = even k) + scale [out, in/32] (ue8m0 or f32)
};

// A linear layer's weight: y = x · Wᵀ. `data` and `scale` live on the backend's device.
struct LinearWeight {
  WeightFormat format = WeightFormat::kF32;
  Tensor data;
  Tensor scale;   // undefined for kF32 / kBF16
  int block = 0;  // kFp8Block: square block edge (128 for V4, 32 for V4.1); kFp4: K-block (32)

  std::int64_t out_features() const { return data.dim(0); }
  std::int64_t in_features() const { return data.dim(1); }
  bool quantized() const { return format == WeightFormat::kFp8Block || format == WeightFormat::kFp4; }
};

// Rows of fixed width addressed by a logical row number. Without a page table, logical row r is
// physical row r of `pool`; with one, it is row `page_table[r / page_rows] * page_rows + r % page_rows`
// (the engine's paged caches). Ops only read/write rows < num_rows.
struct RowView {
  Tensor pool;        // [physical_rows, width] (more dims are flattened into width)
  Tensor page_table;  // i32 [num_pages] on the device, or undefined for contiguous storage
  std::int64_t page_rows = 0;
  std::int64_t num_rows = 0;

  static RowView contiguous(const Tensor& rows) { return RowView{rows, Tensor(), 0, rows.dim(0)}; }
  std::int64_t width() const { return pool.numel() / (pool.ndim() == 0 ? 1 : pool.dim(0)); }
};

struct LinearOptions {
  // >0: fake-quantise the input to FP8 E4M3 with power-of-two scales per block of this many
  // elements along K before the product (reference act_quant). Only meaningful for quantised weights.
  int act_quant_block = 0;
};

// Inverse frequencies of one RoPE flavour (base, optional YaRN already folded in), [rope_dim / 2] f32.
struct RopeTable {
  Tensor inv_freq;
  int rope_dim = 0;
};

enum class Fp4ScaleKind : std::uint8_t {
  kUE8M0,  // power-of-two scale, amax clamped below at 6·2^-126 (V4 / V4.1 indexer)
  kE4M3,   // e4m3-rounded scale, amax clamped below at 6·2^-9 (V4.1 compressed KV)
};

struct AttentionOptions {
  float scale = 1.0f;
  // Reference-QAT: probabilities are rounded to bf16 before P·V (denominator stays f32).
  bool round_probs_bf16 = false;
  // Online-softmax block length over the index list (the reference kernel uses 64).
  int block = 64;
};

// Mixing parameters of one mHC site.
struct HcWeights {
  Tensor fn;     // f32 [(2 + n_hc) * n_hc, n_hc * D] (head: [n_hc, n_hc * D])
  Tensor base;   // f32 [(2 + n_hc) * n_hc] (head: [n_hc])
  Tensor scale;  // f32 [3] (head: [1])
};

struct HcOptions {
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};

// The KV compressors' partial groups of every sequence of a batch (MODEL_SPEC A4.4/A5): per state
// slot a ring of the raw projected rows of its last coff·ratio positions (position p in ring row
// p mod (coff·ratio)), f32 [num_slots · coff·ratio, coff·d]; score rows already include the learned
// position bias. A fresh slot is kv = 0, score = -inf. With overlap (CSA, ratio 4) each entry also
// pools the previous group's first halves.
struct CompressorState {
  Tensor kv;
  Tensor score;
  int ratio = 0;
  bool overlap = false;

  std::int64_t ring_rows() const { return (overlap ? 2 : 1) * std::int64_t{ratio}; }
  std::int64_t num_slots() const { return ring_rows() == 0 ? 0 : kv.dim(0) / ring_rows(); }
};

enum class ScoreFunc : std::uint8_t { kSqrtSoftplus, kSigmoid, kSoftmax };

struct RouteOptions {
  int top_k = 0;
  float route_scale = 1.0f;
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  bool normalize = true;      // renormalise the selected weights to sum 1 (non-softmax scores)
  float normalize_eps = 0.0f; // V4: 0; V4.1: 1e-20
};

// One routed expert: SwiGLU with w1 (gate), w3 (up), w2 (down).
struct ExpertWeights {
  LinearWeight w1;
  LinearWeight w3;
  LinearWeight w2;
};

struct MoeOptions {
  float swiglu_limit = 0.0f;   // 0 disables the clamp
  int act_quant_block = 0;     // FP8 fake quant of expert inputs (quantised weights only)
  // dtype the expert's gate/up outputs and its weighted intermediate are rounded to before w2
  // (bf16 in reference-QAT, f32 in exact).
  DType intermediate_dtype = DType::kF32;
};

}  // namespace deepinfer::ops
