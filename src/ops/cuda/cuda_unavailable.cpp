// The CUDA backend's entry points in a build without CUDA: they report why there is no backend.
#include "common/error.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_loading.h"
#include "ops/cuda/cuda_timing.h"

namespace deepinfer::ops {

std::unique_ptr<Backend> make_cuda_backend(int device) {
  throw_error("CUDA backend for device {} requested, but deepinfer was built without CUDA", device);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return make_cuda_backend(options.device);
}

CudaTiming cuda_time(Backend&, const std::function<void()>&, int, int) {
  throw_error("cuda_time: deepinfer was built without CUDA");
}

CudaDeviceStatus cuda_device_status(int device) {
  throw_error("CUDA device {} requested, but deepinfer was built without CUDA (configure with -DDEEPINFER_CUDA=ON)",
              device);
}

CudaAllocationStats cuda_allocation_stats(int) { return {}; }
void reset_cuda_peak(int) {}

std::unique_ptr<StagedUploader> make_staged_uploader(Backend&, const StagedUploadOptions&) { return nullptr; }

void fill_random_on_device(Backend& backend, Tensor&, const RandomFillSpec&) {
  throw_error("fill_random_on_device: the {} backend is not a CUDA backend (deepinfer was built without CUDA)",
              backend.name());
}

}  // namespace deepinfer::ops
