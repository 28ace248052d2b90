// Reading V4/V4.1 weights from a WeightSource: shape/dtype checks against the config,
// stored-format detection (float, FP8 block + scale, packed FP4 + scale), the conversions the ops
// need, upload to the backend; plus the loaders of the block parts both models share.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "io/weight_quant.h"
#include "model/deepseek_v4/weights.h"
#include "ops/cuda/device_loading.h"

namespace deepinfer::model::v4 {

inline bool is_float(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// While one is alive on this thread, every WeightLoader on it uploads through `uploader` (pinned
// buffers, several copy threads); the device tensors are filled once the uploader's finish()
// returns, which the owner calls before the first forward. Scopes nest (the inner one wins).
class UploadScope {
 public:
  explicit UploadScope(ops::StagedUploader* uploader);
  ~UploadScope();
  UploadScope(const UploadScope&) = delete;
  UploadScope& operator=(const UploadScope&) = delete;
  static ops::StagedUploader* current();

 private:
  ops::StagedUploader* previous_;
};

class WeightLoader {
 public:
  WeightLoader(const WeightSource& source, const io::ModelConfig& config, ops::Backend& backend)
      : src_(source), c_(config), be_(backend) {}

  // A float tensor of the given shape; f32 when `want_f32` (or when stored as f16).
  Tensor plain(const std::string& name, const Shape& shape, bool want_f32 = false) {
    Tensor t = fetch(name);
    check_shape(name, t, shape);
    DI_CHECK(is_float(t.dtype()), "{}: tensor {} has dtype {}, expected a float type", where(), name,
             dtype_name(t.dtype()));
    if (t.dtype() == DType::kF16 || (want_f32 && t.dtype() != DType::kF32)) t = on_host(t).to(DType::kF32);
    return upload(t);
  }

  Tensor index_table(const std::string& name, const Shape& shape, std::int64_t num_experts) {
    Tensor t = on_host(fetch(name));
    check_shape(name, t, shape);
    DI_CHECK(t.dtype() == DType::kI64 || t.dtype() == DType::kI32, "{}: tensor {} has dtype {}, expected i64 or i32",
             where(), name, dtype_name(t.dtype()));
    Tensor out = Tensor::empty(shape, DType::kI32);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const std::int64_t v = t.dtype() == DType::kI64 ? t.data<std::int64_t>()[i] : t.data<std::int32_t>()[i];
      DI_CHECK(v >= 0 && v < num_experts, "{}: {}[{}] = {} is not an expert id in [0, {})", where(), name, i, v,
               num_experts);
      out.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
    }
    return upload(out);
  }

  // A projection [rows, cols] in whatever form it is stored.
  ops::LinearWeight linear(const std::string& stem, std::int64_t rows, std::int64_t cols) {
    const std::string name = stem + ".weight";
    Tensor w = fetch(name);
    ops::LinearWeight out;
    if (w.dtype() == DType::kF8E4M3) {
      check_shape(name, w, Shape{rows, cols});
      out.format = ops::WeightFormat::kFp8Block;
      out.scale = scale_tensor(stem);
      out.block = fp8_block(name, rows, cols, out.scale);
    } else if (w.dtype() == DType::kI8 || w.dtype() == DType::kU8 || w.dtype() == DType::kF4E2M1) {
      w = io::fp4_view(w.is_contiguous() ? w : w.clone());
      check_shape(name, w, Shape{rows, cols});
      out.format = ops::WeightFormat::kFp4;
      out.scale = scale_tensor(stem);
      out.block = io::kFp4BlockSize;
      DI_CHECK(cols % out.block == 0 && out.scale.shape() == Shape({rows, cols / out.block}),
               "{}: scale of packed FP4 tensor {} is {}, expected [{}, {}]", where(), name, out.scale.shape(), rows,
               cols / out.block);
    } else {
      DI_CHECK(is_float(w.dtype()), "{}: tensor {} has dtype {}, expected float, FP8 or packed FP4", where(), name,
               dtype_name(w.dtype()));
      check_shape(name, w, Shape{rows, cols});
      DI_CHECK(!src_.has(stem + ".scale"), "{}: float tensor {} comes with a scale {}.scale", where(), name, stem);
      if (w.dtype() == DType::kF16) w = w.to(DType::kF32);
      out.format = w.dtype() == DType::kF32 ? ops::WeightFormat::kF32 : ops::WeightFormat::kBF16;
    }
    out.data = upload(w);
    return out;
  }

  // wo_a, split into one slice per output group: computed on its bf16/f32 dequantisation (convert.py),
  // which the loader makes, or kept as FP8 blocks where the backend widens them exactly in its GEMM
  // (Backend::grouped_fp8_weights: the same products from half the bytes).
  std::vector<ops::LinearWeight> grouped(const std::string& stem, int groups, std::int64_t rank, std::int64_t cols) {
    const std::string name = stem + ".weight";
    Tensor w = fetch(name);
    check_shape(name, w, Shape{groups * rank, cols});
    if (w.dtype() == DType::kF8E4M3 && be_.grouped_fp8_weights() &&
        rank % fp8_block(name, groups * rank, cols, fetch(stem + ".scale")) == 0) {
      const Tensor s = scale_tensor(stem), full = upload(w);
      const int b = fp8_block(name, groups * rank, cols, s);
      std::vector<ops::LinearWeight> out;
      for (int g = 0; g < groups; ++g)
        out.push_back({ops::WeightFormat::kFp8Block, full.narrow(0, g * rank, rank), s.narrow(0, g * (rank / b), rank / b),
                       b});
      return out;
    }
    if (w.dtype() == DType::kF8E4M3) {
      const Tensor s = on_host(src_.tensor(stem + ".scale"));
      const int b = fp8_block(name, groups * rank, cols, s);
      w = io::dequantize_fp8_block(on_host(w), s, b, b, DType::kBF16, name);
    } else {
      DI_CHECK(is_float(w.dtype()), "{}: tensor {} has dtype {}, expected float or FP8", where(), name,
               dtype_name(w.dtype()));
      if (w.dtype() == DType::kF16) w = on_host(w).to(DType::kF32);
    }
    const Tensor full = upload(w);
    std::vector<ops::LinearWeight> out;
    for (int g = 0; g < groups; ++g) {
      out.push_back({w.dtype() == DType::kF32 ? ops::WeightFormat::kF32 : ops::WeightFormat::kBF16,
                     full.narrow(0, g * rank, rank), Tensor(), 0});
    }
    return out;
  }

  // A tensor as stored, in host memory (lookup tables that stay on the host).
  Tensor host(const std::string& name, const Shape& shape) {
    Tensor t = on_host(fetch(name));
    check_shape(name, t, shape);
    return t;
  }
  std::string where() const { return src_.describe(); }

  ops::HcWeights hc(const std::string& prefix, std::int64_t mixes, std::int64_t scales) {
    const std::int64_t width = std::int64_t{c_.hc_mult} * c_.hidden_size;
    return {plain(prefix + "_fn", Shape{mixes, width}, true), plain(prefix + "_base", Shape{mixes}, true),
            plain(prefix + "_scale", Shape{scales}, true)};
  }

 private:
  const WeightSource& src_;
  const io::ModelConfig& c_;
  ops::Backend& be_;

  Tensor fetch(const std::string& name) {
    DI_CHECK(src_.has(name), "{}: tensor {} is missing (the config requires it)", where(), name);
    return src_.tensor(name);
  }

  // A source may hand out tensors already on the backend's device (dummy weights made on the GPU):
  // those are used as they are.
  Tensor upload(const Tensor& t) {
    if (!t.device().is_cpu() && t.device() == be_.device()) return t;
    const Tensor host = on_host(t);
    if (ops::StagedUploader* staged = UploadScope::current(); staged != nullptr && !be_.device().is_cpu())
      return staged->upload(host);
    return be_.upload(host.is_contiguous() ? host : host.clone());
  }

  // The host conversions (dtype changes, FP8 dequantisation, index checks) read host memory.
  Tensor on_host(const Tensor& t) {
    if (t.device().is_cpu()) return t;
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    be_.copy(t, h);
    return h;
  }

  void check_shape(const std::string& name, const Tensor& t, const Shape& want) const {
    DI_CHECK(t.shape() == want, "{}: tensor {} has shape {}, but the config implies {}", where(), name, t.shape(), want);
  }

  Tensor scale_tensor(const std::string& stem) {
    Tensor s = fetch(stem + ".scale");
    DI_CHECK(s.ndim() == 2, "{}: scale {}.scale must be 2-D, got {}", where(), stem, s.shape());
    if (s.dtype() != DType::kUE8M0 && s.dtype() != DType::kF32) {
      DI_CHECK(is_float(s.dtype()), "{}: scale {}.scale has dtype {}", where(), stem, dtype_name(s.dtype()));
      s = on_host(s).to(DType::kF32);
    }
    return upload(s);
  }

  // The square FP8 block edge implied by the scale grid (the config's when it states one).
  int fp8_block(const std::string& name, std::int64_t rows, std::int64_t cols, const Tensor& scale) const {
    std::vector<int> candidates = {128, 32, 64, 16, 256};
    if (c_.quant.block_rows > 0) candidates.insert(candidates.begin(), c_.quant.block_rows);
    for (int b : candidates)
      if (scale.ndim() == 2 && scale.dim(0) == (rows + b - 1) / b && scale.dim(1) == (cols + b - 1) / b) return b;
    throw_error("{}: scale of FP8 tensor {} [{}, {}] has shape {}, which fits no square block size", where(), name,
                rows, cols, scale.shape());
  }
};

// wq_a, q_norm, wq_b, wkv, kv_norm, wo_a (per group), wo_b and the sinks of layer prefix `p`.
AttentionWeights load_attention_core(WeightLoader& ld, const io::ModelConfig& c, const std::string& p);
// Router (bias, or tid2eid on hash-routed layers), routed experts and the shared expert.
MoeWeights load_moe(WeightLoader& ld, const io::ModelConfig& c, const io::LayerSpec& spec, const std::string& p);
// embed, the final norm and the lm head (the embedding when tied).
void load_embed_and_head(WeightLoader& ld, const io::ModelConfig& c, Tensor& embed, Tensor& norm,
                         ops::LinearWeight& head);
// attn_norm, ffn_norm and both mHC sites.
void load_block_mixing(WeightLoader& ld, const io::ModelConfig& c, const std::string& p, LayerWeights& lw);

}  // namespace deepinfer::model::v4
