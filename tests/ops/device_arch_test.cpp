// The GPU architecture table: which compute capabilities have kernels, what each may use, and the
// text the "unsupported GPU" errors print. Plain C++: runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "ops/cuda/device_arch.h"

namespace deepinfer::ops::cuda {
namespace {

TEST(DeviceArch, HopperIsValidatedAndUsesCublasLtBlockScaledFp8AndWgmma) {
  const ArchFeatures* hopper = arch_features(9, 0);
  ASSERT_NE(hopper, nullptr);
  EXPECT_EQ(hopper->arch, GpuArch::kHopper);
  EXPECT_TRUE(hopper->validated);
  EXPECT_TRUE(hopper->cublaslt_fp8_block_scales);
  EXPECT_TRUE(hopper->wgmma);
  EXPECT_EQ(hopper->build_arch, "90a");
}

TEST(DeviceArch, BlackwellIsPreparedButNotValidatedAndAvoidsUnmeasuredLibraryModes) {
  const ArchFeatures* blackwell = arch_features(10, 0);
  ASSERT_NE(blackwell, nullptr);
  EXPECT_EQ(blackwell->arch, GpuArch::kBlackwell);
  EXPECT_FALSE(blackwell->validated);
  EXPECT_FALSE(blackwell->cublaslt_fp8_block_scales);
  EXPECT_FALSE(blackwell->wgmma);  // sm_90a's wgmma kernels are built for Hopper only
  EXPECT_EQ(blackwell->build_arch, "100a");
}

TEST(DeviceArch, OtherComputeCapabilitiesHaveNoKernels) {
  EXPECT_EQ(arch_features(8, 0), nullptr);  // A100
  EXPECT_EQ(arch_features(8, 9), nullptr);  // L40S
  EXPECT_EQ(arch_features(12, 0), nullptr);  // consumer Blackwell
}

TEST(DeviceArch, SupportedListNamesEveryArchitectureAndItsBuildFlag) {
  const std::string text = supported_archs_text();
  EXPECT_NE(text.find("sm_90"), std::string::npos) << text;
  EXPECT_NE(text.find("sm_100"), std::string::npos) << text;
  EXPECT_NE(text.find("100a"), std::string::npos) << text;
}

TEST(DeviceArch, BuiltArchitecturesAreListedWithSemicolons) {
  const std::string built = built_cuda_archs();
  EXPECT_EQ(built.find(','), std::string::npos) << built;
}

}  // namespace
}  // namespace deepinfer::ops::cuda
