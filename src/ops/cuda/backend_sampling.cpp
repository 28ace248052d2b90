// CUDA backend: the sampling op (kernels in sampling_kernels.cu). Row contents live on the device
// and are not checked here; the kernel skips out-of-range entry ids and mask rows.
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/sampling_launch.h"

namespace deepinfer::ops::cuda {

void CudaBackend::sample_tokens(const Tensor& logits, const Tensor& rows, const Tensor& entries, const Tensor& masks,
                                Tensor& out) {
  const std::int64_t max_top = check_sample_tokens(logits, rows, entries, masks, out);
  const std::int64_t t_rows = logits.dim(0), vocab = logits.dim(1);
  DI_CHECK(max_top <= kMaxSampleTop, "sample_tokens: {} top logprobs per row; the CUDA sampler keeps at most {}",
           max_top, kMaxSampleTop);
  if (t_rows == 0) return;
  check_on_device(logits, "sample_tokens logits");
  check_on_device(rows, "sample_tokens rows");
  check_on_device(out, "sample_tokens out");
  if (entries.numel() > 0) check_on_device(entries, "sample_tokens entries");
  if (masks.numel() > 0) check_on_device(masks, "sample_tokens masks");
  activate();
  SampleLaunch args;
  args.logits = logits.data<float>();
  args.logits_stride = t_rows <= 1 ? vocab : logits.stride(0);
  args.rows = static_cast<int>(t_rows);
  args.vocab = static_cast<int>(vocab);
  args.row_params = static_cast<const SampleRow*>(rows.raw_data());
  args.entries = static_cast<const SampleEntry*>(entries.raw_data());
  args.num_entries = static_cast<int>(entries.dim(0));
  args.masks = static_cast<const std::uint32_t*>(masks.raw_data());
  args.num_masks = static_cast<int>(masks.dim(0));
  args.work = reinterpret_cast<float*>(scratch(static_cast<std::size_t>(t_rows * vocab) * sizeof(float), "sample_tokens"));
  args.out = out.data<std::int32_t>();
  args.max_top = static_cast<int>(max_top);
  launch_sample_tokens(args, stream_);
  DI_CUDA_CHECK_LAUNCH("sample_tokens");
}

}  // namespace deepinfer::ops::cuda
