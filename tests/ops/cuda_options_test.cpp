// CudaBackendOptions set by name (ops::set_cuda_option, the benches' --cuda-option): plain C++, no GPU.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "ops/cuda/cuda_backend.h"

namespace deepinfer::ops {
namespace {

TEST(CudaOptions, IntAndBoolFieldsAreSetByName) {
  CudaBackendOptions o;
  set_cuda_option(o, "cublas_large_min_rows=16");
  set_cuda_option(o, "bf16_skinny_linear=1");
  set_cuda_option(o, "moe_fp4_wgmma=false");
  set_cuda_option(o, "sampler_histogram_fill=0");
  EXPECT_EQ(o.cublas_large_min_rows, 16);
  EXPECT_TRUE(o.bf16_skinny_linear);
  EXPECT_FALSE(o.moe_fp4_wgmma);
  EXPECT_EQ(o.sampler_histogram_fill, 0);
  EXPECT_EQ(o.cublas_min_rows, CudaBackendOptions{}.cublas_min_rows);  // others untouched
}

std::string error_of(const char* assignment) {
  CudaBackendOptions o;
  try {
    set_cuda_option(o, assignment);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaOptions, BadAssignmentsNameTheProblem) {
  EXPECT_NE(error_of("no_such_option=1").find("unknown CUDA option 'no_such_option'"), std::string::npos);
  EXPECT_NE(error_of("no_such_option=1").find("cublas_min_rows"), std::string::npos);  // lists the known ones
  EXPECT_NE(error_of("cublas_min_rows=8x").find("'8x' is not an integer"), std::string::npos);
  EXPECT_NE(error_of("cublas_min_rows=").find("'' is not an integer"), std::string::npos);
  EXPECT_NE(error_of("moe_fp4_wgmma=yes").find("'yes' is not a boolean"), std::string::npos);
  EXPECT_NE(error_of("moe_fp4_wgmma").find("is not name=value"), std::string::npos);
  EXPECT_NE(error_of("=1").find("is not name=value"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::ops
