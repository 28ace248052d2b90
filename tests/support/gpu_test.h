// Shared helpers for tests that need a GPU: they skip with a clear message where there is none.
#pragma once

#include <gtest/gtest.h>

#include "tensor/device_info.h"

#define DEEPINFER_REQUIRE_GPU()                                                      \
  do {                                                                               \
    const auto gpu_info = ::deepinfer::cuda_device_info();                           \
    if (gpu_info.count == 0) GTEST_SKIP() << "GPU test skipped: " << gpu_info.reason; \
  } while (false)
