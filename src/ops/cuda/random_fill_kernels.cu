// --load-format dummy on the GPU: fills device tensors with the counter-based values of
// ops/random_fill.h, byte for byte what the host generator writes, at memory-write speed.
#include <cuda_runtime.h>

#include "ops/cuda/dependent_launch.cuh"
#include "ops/cuda/random_fill_launch.h"

namespace deepinfer::ops::cuda {
namespace {

// One thread per 8 bytes (byte kinds: one random word feeds 8 bytes) or per element (float kinds).
__global__ void random_bytes_kernel(std::uint8_t* out, std::int64_t bytes, RandomFillSpec spec) {
  enter_dependent_kernel();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w * 8 < bytes; w += stride) {
    const std::uint64_t word = random_word(spec.key, static_cast<std::uint64_t>(w));
    const std::int64_t begin = w * 8;
    if (begin + 8 <= bytes) {
      std::uint64_t packed = 0;
      for (int b = 0; b < 8; ++b)
        packed |= static_cast<std::uint64_t>(random_byte(spec, word, static_cast<std::uint64_t>(begin + b))) << (8 * b);
      *reinterpret_cast<std::uint64_t*>(out + begin) = packed;  // 8-byte aligned: cudaMalloc base, begin % 8 == 0
    } else {
      for (std::int64_t i = begin; i < bytes; ++i) out[i] = random_byte(spec, word, static_cast<std::uint64_t>(i));
    }
  }
}

__global__ void random_floats_kernel(void* out, std::int64_t count, RandomFillSpec spec) {
  enter_dependent_kernel();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float v = random_uniform(spec, static_cast<std::uint64_t>(i));
    if (spec.kind == RandomFillKind::kF32Uniform) {
      static_cast<float*>(out)[i] = v;
    } else {
      static_cast<std::uint16_t*>(out)[i] = random_bf16_bits(v);
    }
  }
}

}  // namespace

void launch_random_fill(void* out, std::int64_t bytes, const RandomFillSpec& spec, int sm_count, cudaStream_t stream) {
  if (bytes <= 0) return;
  constexpr int kThreads = 256;
  const bool floats = spec.kind == RandomFillKind::kF32Uniform || spec.kind == RandomFillKind::kBf16Uniform;
  const std::int64_t items = floats ? bytes / (spec.kind == RandomFillKind::kF32Uniform ? 4 : 2) : (bytes + 7) / 8;
  const std::int64_t wanted = (items + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < std::int64_t{sm_count} * 16 ? wanted : std::int64_t{sm_count} * 16);
  if (floats) {
    launch_chained(random_floats_kernel, blocks, kThreads, 0, stream, out, items, spec);
  } else {
    launch_chained(random_bytes_kernel, blocks, kThreads, 0, stream, static_cast<std::uint8_t*>(out), bytes, spec);
  }
}

}  // namespace deepinfer::ops::cuda
