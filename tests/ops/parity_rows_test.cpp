// CUDA vs CPU parity of the memory and row-wise ops: copies, fill/convert, embedding, row
// gathers/scatters (paged), elementwise ops, RMSNorm, RoPE, RMSNorm + RoPE fused, Hadamard, fake
// quant, argmax, the structured-output token mask.
#include <cmath>
#include <cstring>
#include <random>

#include "ops/parity_util.h"

namespace deepinfer::ops::test {
namespace {

const std::vector<std::int64_t> kRowCounts = {1, 3, 64, 257};
const std::vector<std::int64_t> kWidths = {1, 7, 128, 1000, 4096};

TEST(CudaParity, CopyRoundTripsStridedRowsAndBothDtypes) {
  DEEPINFER_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor host = random_tensor({37, 10}, 1, 1.0f, dtype);
    const Tensor back = to_host(to_gpu(host));
    EXPECT_EQ(rel_error(back, host), 0.0);
    // A strided view (every row of 10 inside rows of 16) copied device -> device -> host.
    Tensor wide = to_gpu(random_tensor({37, 16}, 2, 1.0f, dtype));
    Tensor view = wide.narrow(1, 3, 10);
    Tensor dense = gpu().empty(view.shape(), dtype);
    gpu().copy(view, dense);
    const Tensor want = to_host(wide).narrow(1, 3, 10).clone();
    EXPECT_EQ(rel_error(to_host(dense), want), 0.0);
  }
}

TEST(CudaParity, FillAndConvertMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t rows : kRowCounts)
    for (std::int64_t width : kWidths) {
      SCOPED_TRACE(testing::Message() << rows << "x" << width);
      const Tensor x = random_tensor({rows, width}, 3, 2.0f);
      Tensor want = Tensor::empty(x.shape(), DType::kBF16);
      backend().convert(x, want);
      Tensor got = poisoned(x.shape(), DType::kBF16);
      gpu().convert(to_gpu(x), got);
      EXPECT_EQ(rel_error(to_host(got), want), 0.0);
      Tensor filled = gpu().empty(x.shape(), DType::kF32);
      gpu().fill(filled, -1.5f);
      for (float v : values(to_host(filled))) ASSERT_EQ(v, -1.5f);
    }
}

TEST(CudaParity, EmbeddingGatherScatterMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor table = random_tensor({50, 96}, 4, 1.0f, dtype);
    const Tensor ids = random_i32({9}, 5, 0, 49);
    Tensor want = Tensor::empty({9, 4, 96}, DType::kF32);
    backend().embedding(ids, table, want);
    Tensor got = poisoned({9, 4, 96}, DType::kF32);
    gpu().embedding(to_gpu(ids), to_gpu(table), got);
    expect_parity(got, want, 0.0);

    Tensor gwant = Tensor::empty({9, 96}, dtype);
    backend().gather_rows(table, ids, gwant);
    Tensor ggot = poisoned({9, 96}, dtype);
    gpu().gather_rows(to_gpu(table), to_gpu(ids), ggot);
    expect_parity(ggot, gwant, 0.0);

    // Paged destination: 4 pages of 8 rows, logical rows 0..31 mapped through a shuffled table.
    const Tensor pool = random_tensor({40, 96}, 6, 1.0f, dtype);
    const Tensor pages = i32_tensor({4}, {3, 0, 4, 1});
    const Tensor src = random_tensor({5, 96}, 7, 1.0f, dtype);
    const Tensor rows = i32_tensor({5}, {0, 9, -1, 26, 31});  // -1: not written
    Tensor cpu_pool = pool.clone();
    backend().scatter_rows(src, RowView{cpu_pool, pages, 8, 32}, rows);
    Tensor gpu_pool = to_gpu(pool);
    gpu().scatter_rows(to_gpu(src), RowView{gpu_pool, to_gpu(pages), 8, 32}, to_gpu(rows));
    expect_parity(gpu_pool, cpu_pool, 0.0);
  }
}

TEST(CudaParity, BadTokenIdIsReportedNotCrashed) {
  DEEPINFER_REQUIRE_GPU();
  const Tensor table = to_gpu(random_tensor({10, 8}, 8));
  Tensor out = gpu().empty({2, 8}, DType::kF32);
  gpu().embedding(to_gpu(i32_tensor({2}, {1, 10})), table, out);
  EXPECT_THROW(gpu().synchronize(), Error);
  gpu().synchronize();  // the fault is reported once
}

// The engine collects a launched-ahead step through a pinned read-back, never synchronize(): a fault of
// that step must surface at the read-back's wait(), once, and the read-back must work again after it.
TEST(CudaParity, DeviceFaultSurfacesAtTheReadbackOfItsStep) {
  DEEPINFER_REQUIRE_GPU();
  const Tensor table = to_gpu(random_tensor({10, 8}, 8));
  Tensor out = gpu().empty({2, 8}, DType::kF32);
  std::unique_ptr<HostReadback> readback = gpu().make_readback(static_cast<std::size_t>(out.nbytes()));
  gpu().embedding(to_gpu(i32_tensor({2}, {1, 10})), table, out);
  readback->enqueue(out);
  EXPECT_THROW(readback->wait(), Error);
  gpu().embedding(to_gpu(i32_tensor({2}, {1, 2})), table, out);
  readback->enqueue(out);
  const auto* got = static_cast<const float*>(readback->wait());
  Tensor want = backend().empty({2, 8}, DType::kF32);
  gpu().copy(out, want);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[i], want.data<float>()[i]) << i;
}

TEST(CudaParity, ElementwiseOpsMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t rows : kRowCounts)
    for (std::int64_t width : kWidths)
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << width << " " << dtype_name(dtype));
        const Tensor a = random_tensor({rows, width}, 9, 4.0f, dtype);
        const Tensor b = random_tensor({rows, width}, 10, 4.0f, dtype);
        const Tensor ga = to_gpu(a), gb = to_gpu(b);
        const double tol = dtype == DType::kF32 ? kTolF32 : kTolBf16;
        Tensor want = Tensor::empty(a.shape(), dtype);
        Tensor got = poisoned(a.shape(), dtype);
        backend().add(a, b, want);
        gpu().add(ga, gb, got);
        expect_parity(got, want, tol);
        backend().scale(a, -0.37f, want);
        gpu().scale(ga, -0.37f, got);
        expect_parity(got, want, tol);
        for (float limit : {0.0f, 3.0f}) {
          backend().swiglu(a, b, limit, want);
          gpu().swiglu(ga, gb, limit, got);
          expect_parity(got, want, tol);
        }
      }
}

TEST(CudaParity, RmsNormMatchesCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t rows : kRowCounts)
    for (std::int64_t width : {1, 7, 128, 1000, 4096, 9000})  // 9000: past the kernel's registers
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << width << " " << dtype_name(dtype));
        const Tensor x = random_tensor({rows, width}, 11, 3.0f, dtype);
        const Tensor w = random_tensor({width}, 12, 1.0f, DType::kBF16);
        Tensor want = Tensor::empty(x.shape(), dtype);
        backend().rms_norm(x, &w, 1e-6f, want);
        Tensor got = poisoned(x.shape(), dtype);
        gpu().rms_norm(to_gpu(x), nullptr, 1e-6f, got);  // without weight first: then overwritten
        const Tensor gw = to_gpu(w);
        gpu().rms_norm(to_gpu(x), &gw, 1e-6f, got);
        expect_parity(got, want, dtype == DType::kF32 ? kTolF32 : kTolBf16);
      }
}

TEST(CudaParity, RopeForwardAndInverseMatchCpu) {
  DEEPINFER_REQUIRE_GPU();
  std::vector<float> freq(32);
  for (int i = 0; i < 32; ++i) freq[i] = std::pow(160000.0f, -2.0f * i / 64.0f);
  const Tensor inv_freq = Tensor::from_f32({32}, freq);
  const RopeTable cpu_table{inv_freq, 64};
  const RopeTable gpu_table{to_gpu(inv_freq), 64};
  for (std::int64_t t : {1, 5, 130})
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(testing::Message() << t << " tokens, inverse " << inverse);
      const Tensor x = random_tensor({t, 4, 512}, 13);
      const Tensor pos = random_i32({t}, 14, 0, 1 << 20);
      Tensor want = x.clone();
      backend().rope(want, pos, cpu_table, inverse);
      Tensor got = to_gpu(x);
      gpu().rope(got, to_gpu(pos), gpu_table, inverse);
      expect_parity(got, want, 1e-5);
    }
}

// The fused norm + rotation: within bounds of the CPU's rms_norm then rope, and bit-identical to the
// GPU's own two ops. Widths 512 / 64 (the query heads, a short row) and 100 (a part-filled last warp
// chunk) take the one-warp-per-row kernel at 5 x 64 = 320 rows and the block-per-row kernel below 256
// rows, 4097 with odd pairs and 9000 (past the registers) the two-op fallback.
TEST(CudaParity, RmsNormRopeMatchesCpuAndTheUnfusedGpuOps) {
  DEEPINFER_REQUIRE_GPU();
  std::vector<float> freq(32);
  for (int i = 0; i < 32; ++i) freq[i] = std::pow(10000.0f, -2.0f * i / 64.0f);
  const Tensor inv_freq = Tensor::from_f32({32}, freq);
  const RopeTable cpu_table{inv_freq, 64};
  const RopeTable gpu_table{to_gpu(inv_freq), 64};
  for (std::int64_t width : {64, 100, 512, 4097, 9000})
    for (std::int64_t heads : {1, 64})
      for (std::int64_t t : {1, 5})
        for (DType dtype : {DType::kF32, DType::kBF16})
          for (bool with_weight : {false, true}) {
            if (heads == 64 && width > 512) continue;
            SCOPED_TRACE(testing::Message() << t << "x" << heads << "x" << width << " " << dtype_name(dtype)
                                            << (with_weight ? " weighted" : ""));
            const Tensor x = random_tensor({t, heads, width}, 16, 3.0f, dtype);
            const Tensor w = random_tensor({width}, 17, 1.0f, DType::kBF16);
            const Tensor pos = random_i32({t}, 18, 0, 1 << 16);
            Tensor want = x.clone();
            backend().rms_norm_rope(want, with_weight ? &w : nullptr, 1e-6f, pos, cpu_table);
            const Tensor gw = to_gpu(w), gpos = to_gpu(pos);
            Tensor got = to_gpu(x);
            gpu().rms_norm_rope(got, with_weight ? &gw : nullptr, 1e-6f, gpos, gpu_table);
            expect_parity(got, want, dtype == DType::kF32 ? kTolF32 : kTolBf16);
            Tensor two = to_gpu(x);
            gpu().rms_norm(two, with_weight ? &gw : nullptr, 1e-6f, two);
            gpu().rope(two, gpos, gpu_table, false);
            expect_bits_equal(values(to_host(got)), values(to_host(two)));
          }
}

TEST(CudaParity, HadamardMatchesCpu) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t width : {1, 2, 64, 128, 512, 8192})
    for (std::int64_t rows : {1, 33}) {
      SCOPED_TRACE(testing::Message() << rows << "x" << width);
      const Tensor x = random_tensor({rows, width}, 15);
      Tensor want = x.clone();
      backend().hadamard(want);
      Tensor got = to_gpu(x);
      gpu().hadamard(got);
      expect_parity(got, want, kTolF32);
    }
}

TEST(CudaParity, FakeQuantIsBitExact) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t width : {7, 64, 448, 512, 1000})
    for (int block : {16, 32, 64, 128}) {
      SCOPED_TRACE(testing::Message() << width << " block " << block);
      const Tensor x = random_tensor({9, width}, 16, 5.0f);
      Tensor want = x.clone();
      backend().fake_quant_fp8(want, width / 5, width - 1, block);
      Tensor got = to_gpu(x);
      gpu().fake_quant_fp8(got, width / 5, width - 1, block);
      expect_parity(got, want, 0.0);
      for (Fp4ScaleKind kind : {Fp4ScaleKind::kUE8M0, Fp4ScaleKind::kE4M3}) {
        Tensor want4 = x.clone();
        backend().fake_quant_fp4(want4, block, kind);
        Tensor got4 = to_gpu(x);
        gpu().fake_quant_fp4(got4, block, kind);
        expect_parity(got4, want4, 0.0);
      }
    }
}

TEST(CudaParity, ArgmaxMatchesCpuIncludingTies) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t width : {1, 5, 129280}) {
    Tensor x = random_tensor({6, width}, 17);
    if (width > 5) {  // a tie: the lower index must win
      x.data<float>()[2 * width + 100] = 50.0f;
      x.data<float>()[2 * width + 90000] = 50.0f;
    }
    Tensor want = Tensor::empty({6}, DType::kI32);
    backend().argmax(x, want);
    Tensor got = gpu().empty({6}, DType::kI32);
    gpu().argmax(to_gpu(x), got);
    expect_i32_equal(got, want);
  }
}

// The grammar's bitmask on the logits: bit-identical to the CPU (host) op, exactly the cleared bits
// become -inf, the rest are untouched; strided rows; a mask of the wrong shape is an Error.
TEST(CudaParity, TokenMaskSetsExactlyTheClearedBitsToMinusInf) {
  DEEPINFER_REQUIRE_GPU();
  for (std::int64_t width : {1, 31, 33, 1000, 129280}) {
    for (std::int64_t rows : {1, 5}) {
      const std::int64_t words = (width + 31) / 32;
      Tensor wide = random_tensor({rows, width + 7}, static_cast<std::uint32_t>(width + rows));
      Tensor mask = Tensor::empty({rows, words}, DType::kI32);
      std::mt19937 rng(static_cast<std::uint32_t>(width * 3 + rows));
      for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng());
      // Row 0 allows one token only (a constrained decode's usual case).
      std::fill_n(mask.data<std::int32_t>(), words, 0);
      mask.data<std::int32_t>()[(width - 1) / 32] = static_cast<std::int32_t>(1u << ((width - 1) % 32));
      Tensor want = wide.clone().narrow(1, 0, width);
      backend().apply_token_mask(want, mask);
      Tensor dev_wide = to_gpu(wide);
      Tensor got = dev_wide.narrow(1, 0, width);
      gpu().apply_token_mask(got, to_gpu(mask));
      const Tensor back = to_host(dev_wide);
      std::int64_t masked = 0, cleared = 0;
      for (std::int64_t t = 0; t < rows; ++t) {
        for (std::int64_t v = 0; v < width + 7; ++v) {
          const float g = back.data<float>()[t * (width + 7) + v];
          const float w = v < width ? want.data<float>()[t * want.stride(0) + v] : wide.data<float>()[t * (width + 7) + v];
          ASSERT_EQ(std::memcmp(&g, &w, sizeof(float)), 0) << "row " << t << " column " << v << " of width " << width;
          masked += std::isinf(g) && g < 0;
          if (v < width) cleared += ((mask.data<std::int32_t>()[t * words + v / 32] >> (v % 32)) & 1) == 0;
        }
      }
      EXPECT_EQ(masked, cleared);
      EXPECT_GE(masked, width - 1);  // row 0 alone masks all but one
    }
  }
  Tensor logits = gpu().empty({2, 40}, DType::kF32);
  EXPECT_THROW(gpu().apply_token_mask(logits, gpu().empty({2, 1}, DType::kI32)), Error);
}

}  // namespace
}  // namespace deepinfer::ops::test
