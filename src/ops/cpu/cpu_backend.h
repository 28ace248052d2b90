// The CPU reference backend: every op of ops::Backend on host memory, vectorisable loops and
// OpenMP threads. Its results are the batch-invariant reference the CUDA backend is checked against.
// The methods are implemented by topic in the sibling .cpp files.
#pragma once

#include "ops/backend.h"

namespace deepinfer::ops::cpu {

class CpuBackend final : public Backend {
 public:
  // num_threads 0 = DEEPINFER_NUM_THREADS, or every core when that is unset.
  explicit CpuBackend(int num_threads = 0);

  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device::cpu(); }

  Tensor empty(const Shape& shape, DType dtype) override;
  void copy(const Tensor& src, Tensor& dst) override;
  Tensor upload(const Tensor& host) override { return host; }
  void fill(Tensor& dst, float value) override;
  void convert(const Tensor& src, Tensor& dst) override;
  void synchronize() override {}

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) override;
  void scatter_rows(const Tensor& src, const RowView& dst, const Tensor& rows) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& a, float s, Tensor& out) override;

  void linear(const Tensor& x, const LinearWeight& w, const LinearOptions& options, Tensor& out) override;

  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override;
  void rope(Tensor& x, const Tensor& positions, const RopeTable& table, bool inverse) override;
  void hadamard(Tensor& x) override;

  void fake_quant_fp8(Tensor& x, std::int64_t col_begin, std::int64_t col_end, int block) override;
  void fake_quant_fp4(Tensor& x, int block, Fp4ScaleKind scale_kind) override;

  void sparse_attention(const Tensor& q, std::span<const RowView> sources, const Tensor& indices,
                        const Tensor& sinks, const AttentionOptions& options, Tensor& out) override;
  void indexer_scores(const Tensor& q, const RowView& keys, const Tensor& row_base, const Tensor& num_keys,
                      const Tensor& weights, Tensor& out) override;
  void topk_visible(const Tensor& scores, const Tensor& positions, int ratio, int k, const Tensor& offsets,
                    Tensor& out) override;

  void candidate_mask(const Tensor& scores, const Tensor& positions, int ratio, int block, int top_blocks,
                      Tensor& out) override;
  void compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape, const Tensor& positions,
                         const Tensor& slots, CompressorState& state, Tensor& out) override;

  void hc_pre(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y, Tensor& post,
              Tensor& comb) override;
  void hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
               Tensor& out) override;
  void hc_head(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& y) override;
  void hc_mix(const Tensor& x, const HcWeights& w, const HcOptions& options, Tensor& pre, Tensor& post,
              Tensor& comb) override;
  void hc_collapse(const Tensor& x, const Tensor& pre, Tensor& y) override;
  void engram_gate(const Tensor& x, const Tensor& key, const Tensor& value, const Tensor& omega, float eps,
                   Tensor& out) override;

  void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                 const RouteOptions& options, Tensor& expert_ids, Tensor& weights) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                   std::span<const ExpertWeights> experts, const MoeOptions& options, Tensor& out) override;
  void swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) override;

  void argmax(const Tensor& logits, Tensor& out) override;
};

}  // namespace deepinfer::ops::cpu
