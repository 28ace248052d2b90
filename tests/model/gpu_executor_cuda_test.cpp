// The GPU executor's device pieces on a real GPU (each test skips without one): dummy weights made
// in device memory hold the host generator's bytes, staged uploads arrive intact, device checks are
// deepinfer::Error, and the allocation counters the memory planner reads follow tensors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/model_config.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_loading.h"
#include "support/gpu_test.h"

namespace deepinfer {
namespace {

Tensor to_host(ops::Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  be.copy(t, h);
  return h;
}

TEST(GpuExecutor, DummyWeightsMadeOnTheDeviceEqualTheHostGeneratorsBytes) {
  DEEPINFER_REQUIRE_GPU();
  const io::ModelConfig config = model::v4::dummy_model_config(
      io::load_model_config(std::string(DEEPINFER_SOURCE_DIR) + "/tests/io/fixtures/v4_flash.release.json"), 1);
  auto backend = ops::make_cuda_backend(0);
  const auto host = model::v4::dummy_weights(config, 7);
  const auto device = model::v4::dummy_weights(config, 7, backend.get());
  // FP8 block weight, packed FP4 expert, bf16 embedding, f32 mHC mixing weight; small ones stay on the host.
  for (const char* name : {"layers.0.attn.wq_b.weight", "layers.0.ffn.experts.3.w2.weight", "embed.weight",
                           "layers.0.hc_attn_fn", "layers.0.attn.wq_b.scale", "layers.0.attn_norm.weight"}) {
    const Tensor want = host->tensor(name);
    const Tensor got = device->tensor(name);
    EXPECT_EQ(got.device().is_cpu(), want.nbytes() < (std::size_t{1} << 20)) << name;
    const Tensor got_host = got.device().is_cpu() ? got : to_host(*backend, got);
    ASSERT_EQ(got_host.nbytes(), want.nbytes()) << name;
    EXPECT_EQ(std::memcmp(got_host.raw_data(), want.raw_data(), want.nbytes()), 0) << name;
  }
}

TEST(GpuExecutor, StagedUploadsArriveIntactAcrossChunksAndThreads) {
  DEEPINFER_REQUIRE_GPU();
  auto backend = ops::make_cuda_backend(0);
  ops::StagedUploadOptions options;
  options.threads = 3;
  options.buffer_bytes = std::int64_t{1} << 20;  // small buffers: every big tensor spans several chunks
  auto uploader = ops::make_staged_uploader(*backend, options);
  ASSERT_NE(uploader, nullptr);
  std::mt19937 rng(5);
  std::vector<Tensor> hosts, devices;
  std::int64_t total = 0;
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1} << 20, 3 * (std::int64_t{1} << 20) + 5,
                         std::int64_t{10'000'019}}) {
    Tensor h = Tensor::empty(Shape{n}, DType::kU8);
    for (std::int64_t i = 0; i < n; ++i) h.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(rng());
    devices.push_back(uploader->upload(h));
    hosts.push_back(h);
    total += n;
  }
  uploader->finish();
  EXPECT_EQ(uploader->bytes_done(), total);
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const Tensor back = to_host(*backend, devices[i]);
    EXPECT_EQ(std::memcmp(back.raw_data(), hosts[i].raw_data(), hosts[i].nbytes()), 0) << "tensor " << i;
  }
  EXPECT_EQ(ops::make_staged_uploader(*ops::make_cpu_backend()), nullptr);
}

// A measurement, not a check: GB/s of the staged uploader (8 threads) and of Backend::upload
// (pageable cudaMemcpy) for one host buffer of DEEPINFER_UPLOAD_BENCH_GB GB, in the order
// staged, plain, staged (the first touch of the pages is paid by the first staged run).
TEST(GpuExecutor, StagedUploadThroughputWhenAsked) {
  DEEPINFER_REQUIRE_GPU();
  const char* gb = std::getenv("DEEPINFER_UPLOAD_BENCH_GB");
  if (gb == nullptr) GTEST_SKIP() << "set DEEPINFER_UPLOAD_BENCH_GB to measure";
  auto backend = ops::make_cuda_backend(0);
  const auto bytes = static_cast<std::int64_t>(std::atof(gb) * 1e9);
  constexpr std::int64_t kPiece = std::int64_t{256} << 20;  // uploaded as tensors of 256 MB, like large weights
  Tensor host = Tensor::empty(Shape{bytes}, DType::kU8);
  std::memset(host.raw_data(), 0x5a, static_cast<std::size_t>(bytes));
  const auto seconds = [](auto start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (const char* how : {"staged", "plain", "staged"}) {
    std::vector<Tensor> keep;
    const auto start = std::chrono::steady_clock::now();
    std::unique_ptr<ops::StagedUploader> up;
    if (std::string(how) == "staged") {
      ops::StagedUploadOptions o;
      o.threads = 8;
      up = ops::make_staged_uploader(*backend, o);
    }
    for (std::int64_t off = 0; off < bytes; off += kPiece) {
      const Tensor piece = host.narrow(0, off, std::min(kPiece, bytes - off));
      keep.push_back(up ? up->upload(piece) : backend->upload(piece));
    }
    if (up) up->finish();
    backend->synchronize();
    const double s = seconds(start);
    std::printf("upload %s: %.2f GB in %.3f s = %.1f GB/s\n", how, bytes / 1e9, s, bytes / 1e9 / s);
  }
}

TEST(GpuExecutor, BadDeviceIndexIsAnErrorNamingTheVisibleDevices) {
  DEEPINFER_REQUIRE_GPU();
  const ops::CudaDeviceStatus info = ops::cuda_device_status(0);
  EXPECT_EQ(info.major, 9);
  EXPECT_GT(info.total_bytes, info.free_bytes);
  EXPECT_GT(info.free_bytes, 0);
  try {
    ops::cuda_device_status(63);
    FAIL() << "device 63 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device 63 requested, but"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::make_cuda_backend(63), Error);
  EXPECT_THROW(ops::cuda_device_status(-1), Error);
}

TEST(GpuExecutor, AllocationCountersFollowTensorsAndKeepThePeak) {
  DEEPINFER_REQUIRE_GPU();
  auto backend = ops::make_cuda_backend(0);
  const std::int64_t before = ops::cuda_allocation_stats(0).live_bytes;
  ops::reset_cuda_peak(0);
  {
    Tensor t = backend->empty(Shape{std::int64_t{1} << 24}, DType::kU8);
    EXPECT_EQ(ops::cuda_allocation_stats(0).live_bytes, before + (std::int64_t{1} << 24));
  }
  EXPECT_EQ(ops::cuda_allocation_stats(0).live_bytes, before);
  EXPECT_GE(ops::cuda_allocation_stats(0).peak_bytes, before + (std::int64_t{1} << 24));
}

}  // namespace
}  // namespace deepinfer
