// The architecture table behind device_arch.h. Adding an architecture: a row here, its entry in
// DEEPINFER_CUDA_ARCHS (CMakeLists.txt), and a device run of tools/gpu/run_all_checks.sh before
// `validated` becomes true.
#include "ops/cuda/device_arch.h"

#include <array>

#include "common/error.h"

#ifndef DEEPINFER_CUDA_ARCHS_BUILT
#define DEEPINFER_CUDA_ARCHS_BUILT ""
#endif

namespace deepinfer::ops::cuda {
namespace {

constexpr std::array<ArchFeatures, 2> kArchs{{
    // Hopper: every kernel and the cuBLASLt block-scaled FP8 path measured and checked on the H200.
    {GpuArch::kHopper, 9, 0, "sm_90 (Hopper: H100, H200)", "90a", true, true, true},
    // Blackwell: the mma.sync kernels (FP8 m16n8k32, bf16 m16n8k16, cp.async) are valid sm_100 code;
    // cuBLASLt's 128x128 block-scaled FP8 mode is not assumed there until measured; no wgmma (tcgen05).
    {GpuArch::kBlackwell, 10, 0, "sm_100 (Blackwell: B200, GB200)", "100a", false, false, false},
}};

}  // namespace

const ArchFeatures* arch_features(int major, int minor) {
  for (const ArchFeatures& a : kArchs)
    if (a.major == major && a.minor == minor) return &a;
  return nullptr;
}

std::string built_cuda_archs() {
  std::string archs = DEEPINFER_CUDA_ARCHS_BUILT;
  for (char& c : archs)
    if (c == ',') c = ';';
  return archs;
}

std::string supported_archs_text() {
  std::string text;
  for (const ArchFeatures& a : kArchs) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} with -DDEEPINFER_CUDA_ARCHS containing {}", a.name, a.build_arch);
  }
  return text;
}

}  // namespace deepinfer::ops::cuda
