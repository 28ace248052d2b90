// GPU presence detection: on a machine without a GPU the GPU tests skip with a reason.
#include "tensor/device_info.h"

#include <gtest/gtest.h>

#include "support/gpu_test.h"

namespace deepinfer {
namespace {

TEST(DeviceInfo, ReasonGivenWhenNoGpu) {
  const auto info = cuda_device_info();
  if (info.count == 0) {
    EXPECT_FALSE(info.reason.empty());
  } else {
    EXPECT_FALSE(info.name.empty());
  }
}

TEST(DeviceInfo, GpuTestsSkipWithoutDevice) {
  DEEPINFER_REQUIRE_GPU();
  EXPECT_GT(cuda_device_info().compute_capability, 0);
}

}  // namespace
}  // namespace deepinfer
