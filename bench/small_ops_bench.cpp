// The decode step's small CUDA ops on V4-Flash shapes (hc_mult 4, hidden 4096, 64 query heads of 512,
// indexer 64 heads of 128, top-k 512) at a few token counts, each timed alone as the median of CUDA
// graph replays (ops::cuda_time), with variants that isolate one stage of a fused op: hc_head (no
// Sinkhorn, no norm) vs hc_mix (Sinkhorn, no collapse) vs hc_pre vs hc_pre_norm, rms_norm + rope vs
// rms_norm_rope. Prints one markdown table; "no GPU" elsewhere.
// usage: small_ops_bench [--tokens 1,8,32]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_timing.h"
#include "tensor/device_info.h"

namespace {

using namespace deepinfer;
using namespace deepinfer::ops;

// Host tensor of uniform values in [-scale, scale) (xorshift: fast and deterministic).
Tensor host_random(const Shape& shape, float scale, std::uint64_t seed, DType dtype = DType::kF32) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  std::uint64_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f) * scale;
  }
  Tensor t = Tensor::from_f32(shape, v);
  return dtype == DType::kF32 ? t : t.to(dtype);
}

Tensor host_i32(const Shape& shape, std::int32_t value) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  std::fill(t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel(), value);
  return t;
}

struct Row {
  std::string op;
  std::int64_t tokens;
  double us;
};

void time_row(Backend& b, std::vector<Row>& rows, const std::string& op, std::int64_t t,
              const std::function<void()>& body) {
  const CudaTiming tm = cuda_time(b, body, 5, 20);
  rows.push_back({op, t, tm.median_ms * 1e3});
  std::fprintf(stderr, "%s T=%lld: %.2f us\n", op.c_str(), static_cast<long long>(t), tm.median_ms * 1e3);
}

// mHC sites and the norms / rotation around them for t tokens.
void bench_mhc(Backend& b, std::int64_t t, std::vector<Row>& rows) {
  const int n = 4;
  const std::int64_t d = 4096, mixes = (2 + n) * n;
  const HcWeights w{b.upload(host_random({mixes, n * d}, 0.02f, 1)), b.upload(host_random({mixes}, 0.5f, 2)),
                    b.upload(host_random({3}, 0.5f, 3))};
  const HcWeights head{b.upload(host_random({n, n * d}, 0.02f, 4)), b.upload(host_random({n}, 0.5f, 5)),
                       b.upload(host_random({1}, 0.5f, 6))};
  const Tensor x = b.upload(host_random({t, n, d}, 1.0f, 7, DType::kBF16));
  const Tensor norm = b.upload(host_random({d}, 1.0f, 8, DType::kBF16));
  Tensor y = b.empty({t, d}, DType::kBF16), post = b.empty({t, n}, DType::kF32), comb = b.empty({t, n, n}, DType::kF32);
  Tensor pre = b.empty({t, n}, DType::kF32), out = b.empty({t, n, d}, DType::kBF16);
  const HcOptions hc;
  time_row(b, rows, "hc_head (partials + collapse, no Sinkhorn)", t, [&] { b.hc_head(x, head, hc, y); });
  time_row(b, rows, "hc_mix (partials + Sinkhorn, no collapse)", t, [&] { b.hc_mix(x, w, hc, pre, post, comb); });
  time_row(b, rows, "hc_pre", t, [&] { b.hc_pre(x, w, hc, y, post, comb); });
  time_row(b, rows, "hc_pre_norm", t, [&] { b.hc_pre_norm(x, w, hc, norm, 1e-6f, y, post, comb); });
  time_row(b, rows, "hc_pre + rms_norm", t, [&] {
    b.hc_pre(x, w, hc, y, post, comb);
    b.rms_norm(y, &norm, 1e-6f, y);
  });
  time_row(b, rows, "hc_post", t, [&] { b.hc_post(y, x, post, comb, out); });

  const RopeTable rope{b.upload(host_random({32}, 0.5f, 9)), 64};
  const Tensor positions = b.upload(host_i32({t}, 1000));
  Tensor q = b.upload(host_random({t, 64, 512}, 1.0f, 10, DType::kBF16));
  Tensor latent = b.upload(host_random({t, 1024}, 1.0f, 11, DType::kBF16));
  const Tensor latent_w = b.upload(host_random({1024}, 1.0f, 12, DType::kBF16));
  time_row(b, rows, "rms_norm [T, 1024]", t, [&] { b.rms_norm(latent, &latent_w, 1e-6f, latent); });
  time_row(b, rows, "rms_norm [T, 4096]", t, [&] { b.rms_norm(y, &norm, 1e-6f, y); });
  time_row(b, rows, "rms_norm + rope [T, 64, 512]", t, [&] {
    b.rms_norm(q, nullptr, 1e-6f, q);
    b.rope(q, positions, rope, false);
  });
  time_row(b, rows, "rms_norm_rope [T, 64, 512]", t, [&] { b.rms_norm_rope(q, nullptr, 1e-6f, positions, rope); });
}

// The CSA layer's indexer scores and top-k at a 1K context (256 compressed keys; scores 512 wide).
void bench_indexer(Backend& b, std::int64_t t, std::vector<Row>& rows) {
  const std::int64_t keys = 256, width = 512;
  const Tensor q = b.upload(host_random({t, 64, 128}, 1.0f, 20, DType::kBF16));
  const RowView pool = RowView::contiguous(b.upload(host_random({keys, 128}, 1.0f, 21, DType::kBF16)));
  const Tensor weights = b.upload(host_random({t, 64}, 0.1f, 22));
  const Tensor base = b.upload(host_i32({t}, 0)), count = b.upload(host_i32({t}, static_cast<std::int32_t>(keys)));
  Tensor scores = b.empty({t, width}, DType::kF32);
  time_row(b, rows, "indexer_scores (256 keys)", t, [&] { b.indexer_scores(q, pool, base, count, weights, scores); });
  const Tensor positions = b.upload(host_i32({t}, 1023)), offsets = b.upload(host_i32({t}, 128));
  Tensor picks = b.empty({t, 512}, DType::kI32);
  time_row(b, rows, "topk_visible (256 visible, k 512)", t,
           [&] { b.topk_visible(scores, positions, 4, 512, offsets, picks); });
}

std::vector<std::int64_t> parse_tokens(int argc, char** argv) {
  std::vector<std::int64_t> tokens = {1, 8, 32};
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--tokens") != 0) continue;
    tokens.clear();
    std::string list = argv[i + 1];
    for (std::size_t p = 0; p <= list.size();) {
      const std::size_t q = list.find(',', p);
      tokens.push_back(std::stoll(list.substr(p, q == std::string::npos ? std::string::npos : q - p)));
      if (q == std::string::npos) break;
      p = q + 1;
    }
  }
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  const auto info = deepinfer::cuda_device_info();
  if (info.count == 0) {
    std::printf("small_ops_bench: no GPU (%s); nothing to measure\n", info.reason.c_str());
    return 0;
  }
  try {
    auto b = make_cuda_backend(0);
    std::vector<Row> rows;
    for (const std::int64_t t : parse_tokens(argc, argv)) {
      bench_mhc(*b, t, rows);
      bench_indexer(*b, t, rows);
    }
    std::printf("# Decode small ops on %s (median of CUDA graph replays, 5 calls per graph)\n\n", info.name.c_str());
    std::printf("| op | tokens | us per call |\n| --- | ---: | ---: |\n");
    for (const Row& r : rows)
      std::printf("| %s | %lld | %.2f |\n", r.op.c_str(), static_cast<long long>(r.tokens), r.us);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "small_ops_bench: %s\n", e.what());
    return 1;
  }
}
