// A differential backend for locating model-level defects of a device backend: every op runs on the
// device and, on host copies of the very same inputs, on the CPU reference; each call's error is
// recorded, so a wrong op shows up by name and shape instead of as a wrong logit at the end.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace deepinfer::golden {

// One checked op call.
struct OpCheck {
  std::int64_t call = 0;  // running number of checked calls
  std::string op;         // op name plus shapes / options
  double rel_l2 = 0;      // ‖device − cpu‖ / ‖cpu‖ over every output (NaN where either is NaN)
  double max_abs = 0;     // max |device − cpu|
  double rel_max = 0;     // max |device − cpu| / max |cpu| (the logit tests' measure)
  std::int64_t int_mismatches = 0;  // differing integer outputs (indices, ids)
  std::int64_t nan_outputs = 0;     // NaN elements the device op wrote (poisoned memory read)
  std::int64_t stray_bytes = 0;     // bytes the device op changed outside its outputs (any allocation)
};

class OpCheckBackend final : public ops::Backend {
 public:
  // `device` runs the model; `reference` (the CPU backend) checks each op on host copies.
  OpCheckBackend(ops::Backend& device, ops::Backend& reference) : dev_(device), ref_(reference) {}

  const std::vector<OpCheck>& checks() const { return checks_; }
  void clear() { checks_.clear(); }
  std::int64_t bad_uploads() const { return bad_uploads_; }
  // Byte-compares every live allocation around each device op (slow: tiny models only).
  void set_check_strays(bool on) { check_strays_ = on; }
  // Fills every new allocation with NaN bytes, so a read of memory nothing wrote shows up.
  void set_poison(bool on) { poison_ = on; }

  std::string_view name() const override { return "op-check"; }
  bool grouped_fp8_weights() const override { return dev_.grouped_fp8_weights(); }
  Device device() const override { return dev_.device(); }
  // Tracks every allocation (workspace blocks, state): a device op that changes a byte outside its
  // outputs is reported (out-of-bounds tile stores, wrong strides) — invisible to the output check.
  Tensor empty(const Shape& shape, DType dtype) override;
  void copy(const Tensor& src, Tensor& dst) override { dev_.copy(src, dst); }
  // Checks that the device copy equals the host tensor the CPU model uses (counted in bad_uploads()).
  Tensor upload(const Tensor& host) override;
  void fill(Tensor& dst, float value) override { dev_.fill(dst, value); }
  void convert(const Tensor& src, Tensor& dst) override { dev_.convert(src, dst); }
  void synchronize() override { dev_.synchronize(); }

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) override;
  void scatter_rows(const Tensor& src, const ops::RowView& dst, const Tensor& rows) override;
  void add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& a, float s, Tensor& out) override;
  void linear(const Tensor& x, const ops::LinearWeight& w, const ops::LinearOptions& options, Tensor& out) override;
  void rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override;
  void rope(Tensor& x, const Tensor& positions, const ops::RopeTable& table, bool inverse) override;
  void hadamard(Tensor& x) override;
  void fake_quant_fp8(Tensor& x, std::int64_t col_begin, std::int64_t col_end, int block) override;
  void fake_quant_fp4(Tensor& x, int block, ops::Fp4ScaleKind scale_kind) override;
  void sparse_attention(const Tensor& q, std::span<const ops::RowView> sources, const Tensor& indices,
                        const Tensor& sinks, const ops::AttentionOptions& options, Tensor& out) override;
  void indexer_scores(const Tensor& q, const ops::RowView& keys, const Tensor& row_base, const Tensor& num_keys,
                      const Tensor& weights, Tensor& out) override;
  void topk_visible(const Tensor& scores, const Tensor& positions, int ratio, int k, const Tensor& offsets,
                    Tensor& out) override;
  void candidate_mask(const Tensor& scores, const Tensor& positions, int ratio, int block, int top_blocks,
                      Tensor& out) override;
  void compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape, const Tensor& positions,
                         const Tensor& slots, ops::CompressorState& state, Tensor& out) override;
  void hc_pre(const Tensor& x, const ops::HcWeights& w, const ops::HcOptions& options, Tensor& y, Tensor& post,
              Tensor& comb) override;
  void hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
               Tensor& out) override;
  void hc_head(const Tensor& x, const ops::HcWeights& w, const ops::HcOptions& options, Tensor& y) override;
  void moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                 const ops::RouteOptions& options, Tensor& expert_ids, Tensor& weights) override;
  void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                   std::span<const ops::ExpertWeights> experts, const ops::MoeOptions& options,
                   Tensor& out) override;
  void swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) override;
  void argmax(const Tensor& logits, Tensor& out) override;

 private:
  Tensor host(const Tensor& t);         // a fresh host copy (undefined stays undefined)
  Tensor host_weight(const Tensor& t);  // cached by device address: weights never change
  ops::LinearWeight host_weight(const ops::LinearWeight& w);
  ops::RowView host_rows(const ops::RowView& v);
  void snapshot();  // copies every tracked allocation to before_ (just before the device op)
  std::int64_t stray_writes(const std::vector<const Tensor*>& outputs, std::string* where);
  // Compares device outputs with the reference's host outputs and records one OpCheck.
  void record(std::string op, const std::vector<const Tensor*>& device_out, const std::vector<Tensor*>& ref_out);

  ops::Backend& dev_;
  ops::Backend& ref_;
  std::map<const void*, Tensor> weights_;
  struct Tracked {
    std::weak_ptr<const void> owner;
    const void* ptr = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<std::uint8_t> read_bytes(const void* device_ptr, std::size_t n);
  std::vector<Tracked> tracked_;
  bool check_strays_ = true;
  bool poison_ = false;
  std::int64_t bad_uploads_ = 0;
  std::vector<std::vector<std::uint8_t>> before_;
  std::vector<OpCheck> checks_;
};

// "[2, 64, 128]" — shapes in op descriptions.
std::string shape_text(const Tensor& t);

}  // namespace deepinfer::golden
