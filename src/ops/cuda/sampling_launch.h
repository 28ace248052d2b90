// Launch wrapper of the device sampler (sampling_kernels.cu). Internal to src/ops/cuda (CUDA
// builds only); backend_sampling.cpp validates the tensors and fills SampleLaunch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/sampling.h"

namespace deepinfer::ops::cuda {

// The most top logprobs one row may ask for (the engine's max_logprobs is 20 by default).
inline constexpr int kMaxSampleTop = 64;

struct SampleLaunch {
  const float* logits = nullptr;
  std::int64_t logits_stride = 0;  // floats between rows
  int rows = 0;
  int vocab = 0;
  const SampleRow* row_params = nullptr;
  const SampleEntry* entries = nullptr;
  int num_entries = 0;
  const std::uint32_t* masks = nullptr;
  int num_masks = 0;
  float* work = nullptr;       // [rows, vocab] scratch
  std::int32_t* out = nullptr;  // [rows, sample_out_words(max_top)]
  int max_top = 0;
};

void launch_sample_tokens(const SampleLaunch& args, cudaStream_t stream);

}  // namespace deepinfer::ops::cuda
