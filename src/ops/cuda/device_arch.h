// The one place where a GPU's architecture decides what the CUDA backend may use: a row per supported
// compute capability (sm_90 Hopper today; sm_100 Blackwell prepared), looked up once per backend.
// Kernel choices read these features instead of testing compute capabilities themselves.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer::ops::cuda {

enum class GpuArch { kHopper, kBlackwell };

struct ArchFeatures {
  GpuArch arch = GpuArch::kHopper;
  int major = 0, minor = 0;
  std::string_view name;  // for messages: "sm_90 (Hopper: H100, H200)"
  std::string_view build_arch;  // the DEEPINFER_CUDA_ARCHS entry whose kernels run here: "90a"
  // cuBLASLt FP8 GEMM with 128x128 f32 weight-block scales and 128-wide f32 activation scales (DeepSeek's
  // FP8 layout). Without it, large-M FP8 linears stay on deepinfer's own mma.sync kernels.
  bool cublaslt_fp8_block_scales = false;
  // Hopper's warpgroup MMA (sm_90a wgmma: moe_prefill_wgmma.cu); its kernels are built for sm_90a only.
  bool wgmma = false;
  // The op-parity suite and the golden tests have passed on this architecture (others run, with a
  // warning, once their kernels are built).
  bool validated = false;
};

// The features of compute capability major.minor, or nullptr when deepinfer has no kernels for it.
const ArchFeatures* arch_features(int major, int minor);

// The architectures this build compiled kernels for (DEEPINFER_CUDA_ARCHS, e.g. "90a" or "90a;100a").
std::string built_cuda_archs();

// On the current device: 0 (cudaSuccess) when this build holds kernel code it can run, else the
// cudaError_t of the failed lookup (no image for the device). device_arch_probe.cu.
int probe_kernel_image();

// Every supported architecture, for error messages: "sm_90 (Hopper: H100, H200), sm_100 (...)".
std::string supported_archs_text();

}  // namespace deepinfer::ops::cuda
