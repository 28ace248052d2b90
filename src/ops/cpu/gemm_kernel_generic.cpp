// The GEMM micro-kernel built for generic (see gemm_kernel.inc; compile flags in CMakeLists.txt).
#define DI_GEMM_NS generic
#define DI_GEMM_MR 1
#define DI_GEMM_NR 2
#include "ops/cpu/gemm_kernel.inc"
