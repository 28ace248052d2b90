// The CUDA backend class (internal to src/ops/cuda; CUDA builds only). Every op validates its
// tensors on the host, then enqueues kernels on the backend's own stream; faults found in
// device-resident indices surface as deepinfer::Error at the next synchronize(). Temporaries come
// from one grow-only scratch buffer, so steady-state calls allocate nothing and can be captured
// into CUDA graphs once warmed up (ops/graph.h; capture and staging in backend_graph.cpp).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_arch.h"
#include "ops/cuda/device_rows.h"
#include "ops/graph.h"

namespace deepinfer::ops::cuda {

// Bump layout of one op's temporaries inside the scratch buffer (256-byte aligned pieces).
class ScratchLayout {
 public:
  std::size_t add(std::size_t bytes) {
    const std::size_t offset = total_;
    total_ += (bytes + 255) / 256 * 256;
    return offset;
  }
  std::size_t total() const { return total_; }

 private:
  std::size_t total_ = 0;
};

class CudaBackend final : public Backend, public GraphBackend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  bool grouped_fp8_weights() const override { return options_.grouped_fp8_weights && !options_.batch_invariant; }
  Device device() const override { return Device::cuda(device_); }
  cudaStream_t stream() const { return stream_; }
  const CudaBackendOptions& options() const { return options_; }

  Tensor empty(const Shape& shape, DType dtype) override;
  void copy(const Tensor& src, Tensor& dst) override;
  Tensor upload(const Tensor& host) override;
  void fill(Tensor& dst, float value) override;
  void convert(const Tensor& src, Tensor& dst) override;
  void synchronize() override;
  // The side lane: a second stream (events fork and join it, so graph capture records the
  // branches), its own scratch and cuBLASLt workspace (backend_core.cpp).
  void fork_side_lane(std::int64_t rows) override;
  void return_to_main_lane() override;
  void join_side_lane() override;

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) override;
  void scatter_rows(const Tensor& src, const RowView& dst, const Tensor& rows) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& a, float s, Tensor& out) override;

  void linear(const Tensor& x, const LinearWeight& w, const LinearOptions& options, Tensor& out) override;
  void linear_grouped(const Tensor& x, std::span<const LinearWeight> w, const LinearOptions& options,
                      Tensor& out) override;

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
  void rms_norm_rope(Tensor& x, const Tensor* weight, float eps, const Tensor& positions,
                     const RopeTable& table) override;
  void hc_pre_norm(const Tensor& x, const HcWeights& w, const HcOptions& options, const Tensor& norm_weight,
                   float norm_eps, Tensor& y, Tensor& post, Tensor& comb) override;
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
  void apply_token_mask(Tensor& logits, const Tensor& mask) override;
  void sample_tokens(const Tensor& logits, const Tensor& rows, const Tensor& entries, const Tensor& masks,
                     Tensor& out) override;
  void resolve_sampled_ids(Tensor& ids, const Tensor& sampled) override;
  void add_sampled_to_history(Tensor& rows, Tensor& entries, const Tensor& sources, const Tensor& sampled) override;
  std::unique_ptr<HostReadback> make_readback(std::size_t bytes) override;  // backend_sampling.cpp

  // ---- graphs and staging (GraphBackend, backend_graph.cpp) -----------------------------------
  void begin_capture() override;
  Graph end_capture() override;
  void abort_capture() noexcept override;
  bool capturing() const override;
  std::unique_ptr<detail::HostUploader> make_uploader(std::size_t bytes, int slots) override;
  const void* captured_memory() const override;  // the scratch buffer (replaced when it grows)
  // Throws deepinfer::Error naming `op` when the stream is being captured (for calls that
  // allocate, touch host memory or wait, which a graph cannot hold).
  void check_not_capturing(const char* op) const;

  // ---- helpers shared by the op files -------------------------------------------------------------
  // Makes this backend's device current (ops may be called from any thread).
  void activate() const;
  // Row view of a device tensor (same layout rules as the CPU backend's as_rows).
  DevRows rows_of(const Tensor& t, std::int64_t width, const char* op) const;
  DevRows rows_of(const Tensor& t, const char* op) const { return rows_of(t, t.ndim() == 0 ? 1 : t.dim(-1), op); }
  DevRowSource source_of(const RowView& view, const char* op) const;
  const std::int32_t* i32_of(const Tensor& t, std::int64_t count, const char* what) const;
  const float* f32_of(const Tensor& t, std::int64_t count, const char* what) const;
  float* f32_mut(Tensor& t, std::int64_t count, const char* what) const;
  void check_on_device(const Tensor& t, const char* what) const;
  // At least `bytes` of scratch (grows outside graph capture only; during a capture a larger
  // request is a deepinfer::Error naming `op`); valid until the next op. A buffer replaced by
  // growth stays allocated while a graph captured with it exists.
  std::uint8_t* scratch(std::size_t bytes, const char* op = "an op");
  int* fault_word() const { return err_; }
  // The cuBLASLt workspace of the lane ops are issued on (32 MB each).
  void* cublas_workspace() const { return cublas_workspace_[lane_]; }
  int sm_count() const { return sm_count_; }
  // What this device's architecture allows (kernel and library choices read it; device_arch.h).
  const ArchFeatures& arch() const { return *arch_; }

  // y[M, N] = x · Wᵀ with x rows in `x` (act FP8 fake quant per act_block when > 0).
  void gemm(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out);

 private:
  int device_ = 0;
  CudaBackendOptions options_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  int* err_ = nullptr;
  int sm_count_ = 0;
  const ArchFeatures* arch_ = nullptr;  // never null once constructed (cuda_device_status checked it)
  // Temporaries of each lane's ops ([0] main, [1] side: the lanes' ops may run at once, so they never
  // share a buffer); a buffer replaced by growth stays allocated while a graph that captured it exists.
  struct ScratchArena {
    std::uint8_t* base = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<const void> owner;  // shared with those graphs
  };
  ScratchArena scratch_[2];
  void* cublas_workspace_[2] = {};
  std::size_t cublas_workspace_bytes_ = 0;
  int lane_ = 0;               // the lane ops are issued on: stream_ is its stream
  bool side_forked_ = false;   // between fork_side_lane (that forked) and join_side_lane
  cudaStream_t main_stream_ = nullptr, side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  // Device copies of the per-expert weight tables of moe_experts, keyed by a hash of the pointers.
  std::unordered_map<std::uint64_t, Tensor> expert_tables_;

  void check_faults();
  bool gemm_cublas(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out);
  // FP8 tensor-core paths for quantised weights with FP8 act quant (backend_linear.cpp).
  bool fp8_eligible(const LinearWeight& w, int act_block) const;
  void gemm_skinny(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out);
  // bf16 weights at decode (backend_linear.cpp): the skinny bf16 tensor-core kernel over one or more
  // weights of one shape (x holds their K ranges side by side, out their N ranges).
  bool skinny_bf16_eligible(const DevRows& x, const LinearWeight& w, int act_block) const;
  // The grouped FP8-block projection on sm_90a wgmma (grouped_fp8_wgmma.cu, up to 256 rows).
  bool grouped_fp8_wgmma_eligible(const DevRows& x, std::span<const LinearWeight> w, int act_block) const;
  // FP8 decode with the act quant fused into the GEMM (up to 8 rows, fp8-block weights).
  bool fp8_decode_eligible(const DevRows& x, const LinearWeight& w, int act_block) const;
  void gemm_fp8_decode(const DevRows& x, const LinearWeight& w, int act_block, const DevRows& out);
  // FP8 decode GEMM on sm_90a wgmma (up to 64 rows, fp8 128x128-block weights, act block 128).
  bool fp8_wgmma_eligible(const DevRows& x, const LinearWeight& w, int act_block) const;
  void gemm_fp8_wgmma(const DevRows& x, const LinearWeight& w, const DevRows& out);
  // The split-K fix-up's per-tile counters of the current lane (the lanes' GEMMs may run at once): zeroed
  // when the backend is made (a first FP8 GEMM may come inside a graph capture); each launch leaves them zero.
  int* fp8_tile_flags() const { return fp8_tile_flags_ + lane_ * kFp8TileFlags; }
  static constexpr std::int64_t kFp8TileFlags = 4096;  // 64-row tiles: N up to 262144
  int* fp8_tile_flags_ = nullptr;                      // [2 lanes][kFp8TileFlags]
  void gemm_skinny_bf16(const DevRows& x, std::span<const LinearWeight> ws, const DevRows& out);
  bool gemm_cublas_fp8(const DevRows& x, const LinearWeight& w, const DevRows& out);
  const DevWeight* expert_table(std::span<const ExpertWeights> experts, int which, std::uint64_t key);
  // moe_experts for bf16 activations with fp8/fp4 experts and FP8 act quant: skinny FP8 tensor-core GEMMs
  // (prefill_fp8: moe_experts found the step fit for the fp8 prefill GEMM on 128-row items).
  void moe_experts_skinny(const DevRows& x, const std::int32_t* ids, const float* wts, int k,
                          std::span<const ExpertWeights> experts, std::uint64_t key, const MoeOptions& options,
                          bool prefill_fp8, float* out);
  // moe_experts for f32 activations (exact mode): f32 SIMT GEMMs per expert, no bf16 staging.
  void moe_experts_f32(const DevRows& x, const Tensor& expert_ids, const Tensor& weights,
                       std::span<const ExpertWeights> experts, const MoeOptions& options, float* out);
};

DevWeightFormat dev_format(WeightFormat f);
DevWeight dev_weight(const LinearWeight& w);

}  // namespace deepinfer::ops::cuda
