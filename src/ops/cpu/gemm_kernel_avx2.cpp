// The GEMM micro-kernel built for avx2 (see gemm_kernel.inc; compile flags in CMakeLists.txt).
#define DI_GEMM_NS avx2
#define DI_GEMM_MR 2
#define DI_GEMM_NR 2
#include "ops/cpu/gemm_kernel.inc"
