// CUDA backend: the sampling op (kernels in sampling_kernels.cu), ids resolved from earlier samples,
// and the pinned asynchronous read-back of samples. Row contents live on the device and are not
// checked here; the kernel skips out-of-range entry ids and mask rows.
#include <cuda_runtime.h>

#include <initializer_list>

#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/sampling_launch.h"

namespace deepinfer::ops::cuda {
namespace {

// Pinned host memory and an event behind each copy: wait() blocks on that copy only, not on work
// queued after it (the engine's next step).
class CudaReadback final : public HostReadback {
 public:
  CudaReadback(CudaBackend& backend, std::size_t bytes) : backend_(backend), bytes_(bytes) {
    backend.check_not_capturing("make_readback (pinned host allocation)");
    backend.activate();
    // The fault words ride behind the payload, so a step's device faults surface at its wait().
    const cudaError_t status = cudaHostAlloc(&host_, fault_offset() + sizeof(int) * kErrorWords, cudaHostAllocDefault);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw_error("readback: cannot allocate {} bytes of pinned host memory ({})", bytes, cudaGetErrorString(status));
    }
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaReadback() override {
    if (recorded_) cudaEventSynchronize(event_);
    cudaEventDestroy(event_);
    cudaFreeHost(host_);
  }
  CudaReadback(const CudaReadback&) = delete;
  CudaReadback& operator=(const CudaReadback&) = delete;

  void enqueue(const Tensor& src) override {
    DI_CHECK(src.is_contiguous() && src.nbytes() <= bytes_, "readback: {} bytes into a buffer of {}", src.nbytes(),
             bytes_);
    backend_.check_on_device(src, "readback source");
    backend_.check_not_capturing("readback (a device -> host copy)");
    backend_.activate();
    DI_CUDA_CHECK(cudaMemcpyAsync(host_, src.raw_data(), src.nbytes(), cudaMemcpyDeviceToHost, backend_.stream()));
    DI_CUDA_CHECK(cudaMemcpyAsync(faults(), backend_.fault_word(), sizeof(int) * kErrorWords, cudaMemcpyDeviceToHost,
                                  backend_.stream()));
    DI_CUDA_CHECK(cudaEventRecord(event_, backend_.stream()));
    recorded_ = true;
  }
  const void* wait() override {
    if (recorded_) {
      backend_.activate();
      DI_CUDA_CHECK(cudaEventSynchronize(event_));
      recorded_ = false;
      // A fault raised by the work before the copy (a bad id, a page-table miss): the word stays set on
      // the device until reported, so synchronize() throws it with its text (rare; it waits for the
      // work queued since, which is fine on an error path).
      if (faults()[0] != 0) backend_.synchronize();
    }
    return host_;
  }

 private:
  std::size_t fault_offset() const { return (bytes_ + 15) / 16 * 16; }
  int* faults() const { return reinterpret_cast<int*>(static_cast<char*>(host_) + fault_offset()); }

  CudaBackend& backend_;
  std::size_t bytes_;
  void* host_ = nullptr;
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

}  // namespace

std::unique_ptr<HostReadback> CudaBackend::make_readback(std::size_t bytes) {
  return std::make_unique<CudaReadback>(*this, bytes);
}

void CudaBackend::add_sampled_to_history(Tensor& rows, Tensor& entries, const Tensor& sources, const Tensor& sampled) {
  check_add_sampled_to_history(rows, entries, sources, sampled);
  if (rows.dim(0) == 0) return;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&rows, &sources, &sampled})
    check_on_device(*t, "add_sampled_to_history");
  if (entries.numel() > 0) check_on_device(entries, "add_sampled_to_history entries");
  activate();
  launch_add_sampled_to_history(static_cast<SampleRow*>(rows.raw_data()), static_cast<int>(rows.dim(0)),
                                static_cast<SampleEntry*>(entries.raw_data()), static_cast<int>(entries.dim(0)),
                                sources.data<std::int32_t>(), sampled.data<std::int32_t>(),
                                static_cast<int>(sampled.dim(0)), static_cast<int>(sampled.dim(1)), stream_);
  DI_CUDA_CHECK_LAUNCH("add_sampled_to_history");
}

void CudaBackend::resolve_sampled_ids(Tensor& ids, const Tensor& sampled) {
  DI_CHECK(ids.dtype() == DType::kI32 && ids.ndim() == 1 && ids.is_contiguous(), "resolve_sampled_ids: ids {} must be i32 [T]",
           ids.shape());
  DI_CHECK(sampled.dtype() == DType::kI32 && sampled.ndim() == 2 && sampled.dim(1) >= 1 && sampled.is_contiguous(),
           "resolve_sampled_ids: sampled {} must be i32 [R, W]", sampled.shape());
  if (ids.numel() == 0) return;
  check_on_device(ids, "resolve_sampled_ids ids");
  check_on_device(sampled, "resolve_sampled_ids sampled");
  activate();
  launch_resolve_sampled_ids(ids.data<std::int32_t>(), static_cast<int>(ids.numel()), sampled.data<std::int32_t>(),
                             static_cast<int>(sampled.dim(0)), static_cast<int>(sampled.dim(1)), stream_);
  DI_CUDA_CHECK_LAUNCH("resolve_sampled_ids");
}

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
  // One scratch block: the working rows, then (8-byte aligned) the chunk partials.
  const std::size_t work_bytes = (static_cast<std::size_t>(t_rows * vocab) * sizeof(float) + 255) / 256 * 256;
  args.chunks_per_row = sample_chunks_per_row(static_cast<int>(vocab));
  const std::size_t chunk_bytes = static_cast<std::size_t>(t_rows * args.chunks_per_row) * sizeof(double);
  std::uint8_t* base = scratch(work_bytes + chunk_bytes, "sample_tokens");
  args.work = reinterpret_cast<float*>(base);
  args.chunk_sums = reinterpret_cast<double*>(base + work_bytes);
  args.out = out.data<std::int32_t>();
  args.max_top = static_cast<int>(max_top);
  args.histogram_fill = options_.sampler_histogram_fill;
  launch_sample_tokens(args, stream_);
  DI_CUDA_CHECK_LAUNCH("sample_tokens");
}

}  // namespace deepinfer::ops::cuda
