// OpCheckBackend: each op on the device backend and on the CPU reference with host copies of the same
// inputs (taken before the device call, so in-place ops compare like with like), error per call.
#include "golden/op_check_backend.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace deepinfer::golden {

std::string shape_text(const Tensor& t) {
  if (!t.defined()) return "[]";
  std::string s = "[";
  for (int i = 0; i < t.ndim(); ++i) s += (i ? ", " : "") + std::to_string(t.dim(i));
  return s + "]";
}

namespace {

std::string dtype_text(const Tensor& t) { return t.dtype() == DType::kBF16 ? "bf16" : t.dtype() == DType::kF32 ? "f32" : "?"; }

// Accumulates one op's error over several outputs.
struct ErrorSum {
  double diff2 = 0, ref2 = 0, max_abs = 0, max_ref = 0;
  std::int64_t int_mismatches = 0, nan_outputs = 0;
  bool nonfinite = false;

  void add(const Tensor& got, const Tensor& want) {
    if (got.dtype() == DType::kI32) {
      const auto* g = got.data<std::int32_t>();
      const auto* w = want.data<std::int32_t>();
      for (std::int64_t i = 0; i < got.numel(); ++i) int_mismatches += g[i] != w[i];
      return;
    }
    const Tensor g = got.to(DType::kF32), w = want.to(DType::kF32);
    const float* gp = g.data<float>();
    const float* wp = w.data<float>();
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      nan_outputs += std::isnan(gp[i]);
      if (std::isfinite(wp[i])) max_ref = std::max(max_ref, static_cast<double>(std::fabs(wp[i])));
      if (gp[i] == wp[i] || (std::isnan(gp[i]) && std::isnan(wp[i]))) {  // equal infinities, unwritten NaN rows
        if (std::isfinite(wp[i])) ref2 += static_cast<double>(wp[i]) * wp[i];
        continue;
      }
      if (!std::isfinite(gp[i]) || !std::isfinite(wp[i])) {
        nonfinite = true;
        continue;
      }
      const double d = static_cast<double>(gp[i]) - static_cast<double>(wp[i]);
      diff2 += d * d;
      ref2 += static_cast<double>(wp[i]) * wp[i];
      max_abs = std::max(max_abs, std::fabs(d));
    }
  }
};

}  // namespace

Tensor OpCheckBackend::host(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return t.defined() ? Tensor::empty(t.shape(), t.dtype()) : Tensor();
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  snapshot();
  dev_.copy(t, h);
  return h;
}

Tensor OpCheckBackend::host_weight(const Tensor& t) {
  if (!t.defined()) return Tensor();
  auto it = weights_.find(t.raw_data());
  if (it != weights_.end() && it->second.shape() == t.shape() && it->second.dtype() == t.dtype()) return it->second;
  Tensor h = host(t);
  weights_[t.raw_data()] = h;
  return h;
}

ops::LinearWeight OpCheckBackend::host_weight(const ops::LinearWeight& w) {
  return ops::LinearWeight{w.format, host_weight(w.data), host_weight(w.scale), w.block};
}

ops::RowView OpCheckBackend::host_rows(const ops::RowView& v) {
  return ops::RowView{host(v.pool), host(v.page_table), v.page_rows, v.num_rows};
}

Tensor OpCheckBackend::empty(const Shape& shape, DType dtype) {
  Tensor t = dev_.empty(shape, dtype);
  if (t.numel() == 0) return t;
  if (poison_) {  // all-ones bytes: NaN in f32 and bf16, -1 in i32
    std::vector<std::uint8_t> ones(t.nbytes(), 0xFF);
    const Tensor src = Tensor::view_of(ones.data(), Shape{static_cast<std::int64_t>(ones.size())}, DType::kU8, nullptr);
    Tensor dst = Tensor::view_of(t.raw_data(), src.shape(), DType::kU8, nullptr, dev_.device());
    dev_.copy(src, dst);
  }
  // Hand out a view whose owner we can watch: freed allocations drop out of the stray-write check.
  auto holder = std::make_shared<Tensor>(t);
  std::shared_ptr<const void> owner(holder, holder->raw_data());
  tracked_.push_back({owner, t.raw_data(), t.nbytes()});
  return Tensor::view_of(t.raw_data(), shape, dtype, owner, dev_.device());
}

Tensor OpCheckBackend::upload(const Tensor& host_tensor) {
  Tensor d = dev_.upload(host_tensor);
  // The CPU model computes with the host weight, the op checks with the device copy: they must agree.
  const Tensor back = host(d), want = host_tensor.is_contiguous() ? host_tensor : host_tensor.clone();
  if (std::memcmp(back.raw_data(), want.raw_data(), want.nbytes()) != 0) ++bad_uploads_;
  return d;
}

std::vector<std::uint8_t> OpCheckBackend::read_bytes(const void* device_ptr, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  Tensor h = Tensor::view_of(out.data(), Shape{static_cast<std::int64_t>(n)}, DType::kU8, nullptr);
  const Tensor bytes = Tensor::view_of(const_cast<void*>(device_ptr), h.shape(), DType::kU8, nullptr, dev_.device());
  dev_.copy(bytes, h);
  return out;
}

void OpCheckBackend::snapshot() {
  if (!check_strays_) return;
  std::erase_if(tracked_, [](const Tracked& t) { return t.owner.expired(); });
  before_.clear();
  for (const Tracked& t : tracked_) before_.push_back(read_bytes(t.ptr, t.bytes));
}

std::int64_t OpCheckBackend::stray_writes(const std::vector<const Tensor*>& outputs, std::string* where) {
  if (!check_strays_) return 0;
  std::int64_t stray = 0;
  for (std::size_t i = 0; i < before_.size() && i < tracked_.size(); ++i) {
    std::vector<std::uint8_t> now = read_bytes(tracked_[i].ptr, tracked_[i].bytes);
    const auto base = reinterpret_cast<std::uintptr_t>(tracked_[i].ptr);
    const std::uintptr_t end = base + now.size();
    // Bytes the op may write (each dim-0 row of each output; inner dims are contiguous) are reset to
    // their old value, so whatever still differs was written outside the outputs.
    for (const Tensor* t : outputs) {
      if (!t->defined() || t->numel() == 0) continue;
      const std::int64_t rows = t->ndim() == 0 ? 1 : t->dim(0);
      const std::size_t row_bytes = t->nbytes() / static_cast<std::size_t>(rows);
      const std::size_t pitch = t->ndim() == 0 ? row_bytes : dtype_bytes(t->dtype(), t->stride(0));
      const auto first = reinterpret_cast<std::uintptr_t>(t->raw_data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::uintptr_t lo = std::max(base, first + static_cast<std::uintptr_t>(r) * pitch);
        const std::uintptr_t hi = std::min(end, first + static_cast<std::uintptr_t>(r) * pitch + row_bytes);
        if (lo < hi) std::memcpy(now.data() + (lo - base), before_[i].data() + (lo - base), hi - lo);
      }
    }
    for (std::size_t b = 0; b < now.size(); ++b) {
      if (now[b] == before_[i][b]) continue;
      if (stray++ == 0 && where)
        *where = "allocation of " + std::to_string(now.size()) + " bytes, byte " + std::to_string(b);
    }
  }
  return stray;
}

void OpCheckBackend::record(std::string op, const std::vector<const Tensor*>& device_out,
                            const std::vector<Tensor*>& ref_out) {
  std::string where;
  const std::int64_t stray = stray_writes(device_out, &where);
  if (stray > 0) op += " STRAY WRITES: " + std::to_string(stray) + " bytes outside the outputs, first at " + where;
  ErrorSum e;
  for (std::size_t i = 0; i < device_out.size(); ++i) {
    if (!device_out[i]->defined() || device_out[i]->numel() == 0) continue;
    e.add(host(*device_out[i]), *ref_out[i]);
  }
  OpCheck c;
  c.call = static_cast<std::int64_t>(checks_.size());
  c.op = op;
  c.rel_l2 = e.nonfinite ? std::numeric_limits<double>::quiet_NaN()
                         : (e.ref2 > 0 ? std::sqrt(e.diff2 / e.ref2) : std::sqrt(e.diff2));
  c.max_abs = e.max_abs;
  c.rel_max = e.nonfinite ? std::numeric_limits<double>::quiet_NaN() : (e.max_ref > 0 ? e.max_abs / e.max_ref : e.max_abs);
  c.int_mismatches = e.int_mismatches;
  c.stray_bytes = stray;
  // A NaN output means a read of memory nothing wrote (allocations are poisoned) or a broken op;
  // row stores legitimately hold poisoned rows that were never written.
  if (op.rfind("scatter_rows", 0) != 0) c.nan_outputs = e.nan_outputs;
  checks_.push_back(std::move(c));
}

void OpCheckBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  Tensor hout = host(out);
  ref_.embedding(host(ids), host_weight(table), hout);
  snapshot();
  dev_.embedding(ids, table, out);
  record("embedding " + shape_text(out), {&out}, {&hout});
}

void OpCheckBackend::gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) {
  Tensor hout = host(out);
  ref_.gather_rows(host(src), host(rows), hout);
  snapshot();
  dev_.gather_rows(src, rows, out);
  record("gather_rows " + shape_text(out), {&out}, {&hout});
}

void OpCheckBackend::scatter_rows(const Tensor& src, const ops::RowView& dst, const Tensor& rows) {
  ops::RowView hdst = host_rows(dst);
  ref_.scatter_rows(host(src), hdst, host(rows));
  snapshot();
  dev_.scatter_rows(src, dst, rows);
  record("scatter_rows " + shape_text(src) + " into " + shape_text(dst.pool) + (dst.page_table.defined() ? " paged" : ""),
         {&dst.pool}, {&hdst.pool});
}

void OpCheckBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  Tensor ha = host(a), hb = host(b), hout = host(out);
  ref_.add(ha, hb, hout);
  snapshot();
  dev_.add(a, b, out);
  record("add " + shape_text(out), {&out}, {&hout});
}

void OpCheckBackend::scale(const Tensor& a, float s, Tensor& out) {
  Tensor ha = host(a), hout = host(out);
  ref_.scale(ha, s, hout);
  snapshot();
  dev_.scale(a, s, out);
  record("scale " + shape_text(out), {&out}, {&hout});
}

void OpCheckBackend::linear(const Tensor& x, const ops::LinearWeight& w, const ops::LinearOptions& options,
                            Tensor& out) {
  Tensor hx = host(x), hout = host(out);
  ref_.linear(hx, host_weight(w), options, hout);
  snapshot();
  dev_.linear(x, w, options, out);
  record("linear " + dtype_text(x) + shape_text(x) + " W" + shape_text(w.data) + " fmt " +
             std::to_string(static_cast<int>(w.format)) + " act_quant " + std::to_string(options.act_quant_block) +
             " -> " + dtype_text(out),
         {&out}, {&hout});
}

void OpCheckBackend::rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) {
  Tensor hx = host(x), hout = host(out), hw = weight ? host_weight(*weight) : Tensor();
  ref_.rms_norm(hx, weight ? &hw : nullptr, eps, hout);
  snapshot();
  dev_.rms_norm(x, weight, eps, out);
  record("rms_norm " + dtype_text(x) + shape_text(x) + (weight ? " weighted" : "") +
             (x.raw_data() == out.raw_data() ? " in place" : ""),
         {&out}, {&hout});
}

void OpCheckBackend::rope(Tensor& x, const Tensor& positions, const ops::RopeTable& table, bool inverse) {
  Tensor hx = host(x);
  ref_.rope(hx, host(positions), ops::RopeTable{host_weight(table.inv_freq), table.rope_dim}, inverse);
  snapshot();
  dev_.rope(x, positions, table, inverse);
  record(std::string(inverse ? "rope inverse " : "rope ") + dtype_text(x) + shape_text(x), {&x}, {&hx});
}

void OpCheckBackend::hadamard(Tensor& x) {
  Tensor hx = host(x);
  ref_.hadamard(hx);
  snapshot();
  dev_.hadamard(x);
  record("hadamard " + dtype_text(x) + shape_text(x), {&x}, {&hx});
}

void OpCheckBackend::fake_quant_fp8(Tensor& x, std::int64_t col_begin, std::int64_t col_end, int block) {
  Tensor hx = host(x);
  ref_.fake_quant_fp8(hx, col_begin, col_end, block);
  snapshot();
  dev_.fake_quant_fp8(x, col_begin, col_end, block);
  record("fake_quant_fp8 " + dtype_text(x) + shape_text(x) + " cols " + std::to_string(col_begin) + ".." +
             std::to_string(col_end) + " block " + std::to_string(block),
         {&x}, {&hx});
}

void OpCheckBackend::fake_quant_fp4(Tensor& x, int block, ops::Fp4ScaleKind scale_kind) {
  Tensor hx = host(x);
  ref_.fake_quant_fp4(hx, block, scale_kind);
  snapshot();
  dev_.fake_quant_fp4(x, block, scale_kind);
  record("fake_quant_fp4 " + dtype_text(x) + shape_text(x), {&x}, {&hx});
}

void OpCheckBackend::sparse_attention(const Tensor& q, std::span<const ops::RowView> sources, const Tensor& indices,
                                      const Tensor& sinks, const ops::AttentionOptions& options, Tensor& out) {
  std::vector<ops::RowView> hsources;
  std::string desc = "sparse_attention q" + dtype_text(q) + shape_text(q) + " idx" + shape_text(indices) + " sources";
  for (const ops::RowView& s : sources) {
    hsources.push_back(host_rows(s));
    desc += " " + dtype_text(s.pool) + shape_text(s.pool) + "/" + std::to_string(s.num_rows);
  }
  Tensor hout = host(out);
  ref_.sparse_attention(host(q), hsources, host(indices), host_weight(sinks), options, hout);
  snapshot();
  dev_.sparse_attention(q, sources, indices, sinks, options, out);
  record(desc + (options.round_probs_bf16 ? " bf16 probs" : ""), {&out}, {&hout});
}

void OpCheckBackend::indexer_scores(const Tensor& q, const ops::RowView& keys, const Tensor& row_base,
                                    const Tensor& num_keys, const Tensor& weights, Tensor& out) {
  Tensor hout = host(out);
  ref_.indexer_scores(host(q), host_rows(keys), host(row_base), host(num_keys), host(weights), hout);
  snapshot();
  dev_.indexer_scores(q, keys, row_base, num_keys, weights, out);
  record("indexer_scores q" + shape_text(q) + " keys " + shape_text(out), {&out}, {&hout});
}

void OpCheckBackend::topk_visible(const Tensor& scores, const Tensor& positions, int ratio, int k,
                                  const Tensor& offsets, Tensor& out) {
  Tensor hout = host(out);
  ref_.topk_visible(host(scores), host(positions), ratio, k, host(offsets), hout);
  snapshot();
  dev_.topk_visible(scores, positions, ratio, k, offsets, out);
  record("topk_visible " + shape_text(scores) + " k " + std::to_string(k) + " ratio " + std::to_string(ratio),
         {&out}, {&hout});
}

void OpCheckBackend::candidate_mask(const Tensor& scores, const Tensor& positions, int ratio, int block,
                                    int top_blocks, Tensor& out) {
  Tensor hout = host(out);
  ref_.candidate_mask(host(scores), host(positions), ratio, block, top_blocks, hout);
  snapshot();
  dev_.candidate_mask(scores, positions, ratio, block, top_blocks, out);
  record("candidate_mask " + shape_text(scores) + " block " + std::to_string(block), {&out}, {&hout});
}

void OpCheckBackend::compressor_update(const Tensor& kv, const Tensor& score, const Tensor& ape,
                                       const Tensor& positions, const Tensor& slots, ops::CompressorState& state,
                                       Tensor& out) {
  ops::CompressorState hs{host(state.kv), host(state.score), state.ratio, state.overlap};
  Tensor hout = host(out);
  ref_.compressor_update(host(kv), host(score), host_weight(ape), host(positions), host(slots), hs, hout);
  snapshot();
  dev_.compressor_update(kv, score, ape, positions, slots, state, out);
  record("compressor_update " + shape_text(kv) + " ratio " + std::to_string(state.ratio) +
             (state.overlap ? " overlap" : "") + " out " + shape_text(out),
         {&out, &state.kv, &state.score}, {&hout, &hs.kv, &hs.score});
}

void OpCheckBackend::hc_pre(const Tensor& x, const ops::HcWeights& w, const ops::HcOptions& options, Tensor& y,
                            Tensor& post, Tensor& comb) {
  const ops::HcWeights hw{host_weight(w.fn), host_weight(w.base), host_weight(w.scale)};
  Tensor hy = host(y), hpost = host(post), hcomb = host(comb);
  ref_.hc_pre(host(x), hw, options, hy, hpost, hcomb);
  snapshot();
  dev_.hc_pre(x, w, options, y, post, comb);
  record("hc_pre " + dtype_text(x) + shape_text(x), {&y, &post, &comb}, {&hy, &hpost, &hcomb});
}

void OpCheckBackend::hc_post(const Tensor& f, const Tensor& residual, const Tensor& post, const Tensor& comb,
                             Tensor& out) {
  Tensor hout = host(out);
  ref_.hc_post(host(f), host(residual), host(post), host(comb), hout);
  snapshot();
  dev_.hc_post(f, residual, post, comb, out);
  record("hc_post " + dtype_text(residual) + shape_text(residual), {&out}, {&hout});
}

void OpCheckBackend::hc_head(const Tensor& x, const ops::HcWeights& w, const ops::HcOptions& options, Tensor& y) {
  const ops::HcWeights hw{host_weight(w.fn), host_weight(w.base), host_weight(w.scale)};
  Tensor hy = host(y);
  ref_.hc_head(host(x), hw, options, hy);
  snapshot();
  dev_.hc_head(x, w, options, y);
  record("hc_head " + shape_text(x), {&y}, {&hy});
}

void OpCheckBackend::moe_route(const Tensor& logits, const Tensor* bias, const Tensor* tid2eid, const Tensor* token_ids,
                               const ops::RouteOptions& options, Tensor& expert_ids, Tensor& weights) {
  Tensor hbias = bias ? host_weight(*bias) : Tensor(), htid = tid2eid ? host_weight(*tid2eid) : Tensor();
  Tensor htok = token_ids ? host(*token_ids) : Tensor();
  Tensor hids = host(expert_ids), hw = host(weights);
  ref_.moe_route(host(logits), bias ? &hbias : nullptr, tid2eid ? &htid : nullptr, token_ids ? &htok : nullptr, options,
                 hids, hw);
  snapshot();
  dev_.moe_route(logits, bias, tid2eid, token_ids, options, expert_ids, weights);
  record("moe_route " + shape_text(logits) + (tid2eid ? " hash" : ""), {&expert_ids, &weights}, {&hids, &hw});
}

void OpCheckBackend::moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                                 std::span<const ops::ExpertWeights> experts, const ops::MoeOptions& options,
                                 Tensor& out) {
  std::vector<ops::ExpertWeights> hexperts;
  hexperts.reserve(experts.size());
  for (const ops::ExpertWeights& e : experts)
    hexperts.push_back({host_weight(e.w1), host_weight(e.w3), host_weight(e.w2)});
  Tensor hout = host(out);
  ref_.moe_experts(host(x), host(expert_ids), host(weights), hexperts, options, hout);
  snapshot();
  dev_.moe_experts(x, expert_ids, weights, experts, options, out);
  record("moe_experts " + dtype_text(x) + shape_text(x) + " ids" + shape_text(expert_ids) + " fmt " +
             std::to_string(experts.empty() ? -1 : static_cast<int>(experts[0].w1.format)) + " act_quant " +
             std::to_string(options.act_quant_block),
         {&out}, {&hout});
}

void OpCheckBackend::swiglu(const Tensor& gate, const Tensor& up, float limit, Tensor& out) {
  Tensor hout = host(out);
  ref_.swiglu(host(gate), host(up), limit, hout);
  snapshot();
  dev_.swiglu(gate, up, limit, out);
  record("swiglu " + dtype_text(gate) + shape_text(gate), {&out}, {&hout});
}

void OpCheckBackend::argmax(const Tensor& logits, Tensor& out) {
  Tensor hout = host(out);
  ref_.argmax(host(logits), hout);
  snapshot();
  dev_.argmax(logits, out);
  record("argmax " + shape_text(logits), {&out}, {&hout});
}

}  // namespace deepinfer::golden
