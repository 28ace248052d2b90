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
  float* work = nullptr;        // [rows, vocab] scratch
  double* chunk_sums = nullptr;  // [rows, chunks_per_row] scratch (log-sum-exp chunk partials)
  std::int64_t chunks_per_row = 0;
  std::int32_t* out = nullptr;  // [rows, sample_out_words(max_top)]
  int max_top = 0;
  // How the selects fill their histograms (CudaBackendOptions::sampler_histogram_fill): 0 one 64-bit
  // atomic per id, 1 row_cluster::hist_fill_runs. The same bins.
  int histogram_fill = 1;
};

// Log-sum-exp chunks of a row of `vocab` ids (the size of a row's chunk_sums).
std::int64_t sample_chunks_per_row(int vocab);
void launch_sample_tokens(const SampleLaunch& args, cudaStream_t stream);
// Backend::add_sampled_to_history (rows whose source is past sampled_rows are left alone).
void launch_add_sampled_to_history(SampleRow* rows, int n, SampleEntry* entries, int num_entries,
                                   const std::int32_t* sources, const std::int32_t* sampled, int sampled_rows, int width,
                                   cudaStream_t stream);
// ids[t] = sampled[(-1 - ids[t]) * width] where ids[t] < 0 (0 past `rows`).
void launch_resolve_sampled_ids(std::int32_t* ids, int n, const std::int32_t* sampled, int rows, int width,
                                cudaStream_t stream);

}  // namespace deepinfer::ops::cuda
