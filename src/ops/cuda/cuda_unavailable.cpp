// The CUDA backend's entry points in a build without CUDA: they report why there is no backend.
#include "common/error.h"
#include "ops/cuda/cuda_backend.h"
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

}  // namespace deepinfer::ops
