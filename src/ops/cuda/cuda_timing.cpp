// cuda_time(): replays a captured CUDA graph of backend ops and times it with CUDA events.
#include "ops/cuda/cuda_timing.h"

#include <algorithm>
#include <vector>

#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"

namespace deepinfer::ops {

CudaTiming cuda_time(Backend& backend, const std::function<void()>& body, int calls_per_graph, int repeats) {
  auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend);
  DI_CHECK(cuda_backend != nullptr, "cuda_time: backend '{}' is not the CUDA backend", backend.name());
  DI_CHECK(calls_per_graph > 0 && repeats > 0, "cuda_time: calls {} / repeats {} must be positive", calls_per_graph,
           repeats);
  cuda_backend->activate();
  const cudaStream_t stream = cuda_backend->stream();
  body();  // warm-up: scratch, cuBLASLt handles, expert tables
  backend.synchronize();

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  try {
    for (int i = 0; i < calls_per_graph; ++i) body();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start = nullptr, stop = nullptr;
  DI_CUDA_CHECK(cudaEventCreate(&start));
  DI_CUDA_CHECK(cudaEventCreate(&stop));
  DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // first replay uploads the graph
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    DI_CUDA_CHECK(cudaEventRecord(start, stream));
    DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DI_CUDA_CHECK(cudaEventRecord(stop, stream));
    DI_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0.0f;
    DI_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(static_cast<double>(elapsed) / calls_per_graph);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  backend.synchronize();
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

}  // namespace deepinfer::ops
