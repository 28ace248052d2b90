// The GEMM micro-kernel built for avx512 (see gemm_kernel.inc; compile flags in CMakeLists.txt).
#define DI_GEMM_NS avx512
#define DI_GEMM_MR 4
#define DI_GEMM_NR 4
#include "ops/cpu/gemm_kernel.inc"
