// CUDA backend: graph capture/replay (ops/graph.h) and the pinned host slots of StagingBuffer.
// Captures run in thread-local mode: this thread's unsafe calls (allocation, synchronous copies)
// are caught by the backend's own checks first, with an error naming the op; other threads (the
// engine's scheduler, loaders on other backends) are not restricted.
#include <vector>

#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"

namespace deepinfer::ops::cuda {
namespace {

class CudaGraphExec final : public detail::GraphExec {
 public:
  CudaGraphExec(cudaGraphExec_t exec, std::size_t nodes, cudaStream_t stream, int device)
      : exec_(exec), nodes_(nodes), stream_(stream), device_(device) {}
  ~CudaGraphExec() override {
    // Replays may still be in flight; their memory (held by the Graph) is released after this.
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(exec_);
    cudaSetDevice(previous);
  }
  CudaGraphExec(const CudaGraphExec&) = delete;
  CudaGraphExec& operator=(const CudaGraphExec&) = delete;

  void replay() override {
    int current = -1;
    DI_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) DI_CUDA_CHECK(cudaSetDevice(device_));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    DI_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
    DI_CHECK(status == cudaStreamCaptureStatusNone, "Graph::replay: cannot replay a graph while capturing another");
    DI_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }
  std::size_t num_nodes() const override { return nodes_; }

 private:
  cudaGraphExec_t exec_;
  std::size_t nodes_;
  cudaStream_t stream_;
  int device_;
};

// Pinned host memory for `slots` copies of the staging layout, one event per slot marking when the
// device has read it.
class CudaUploader final : public detail::HostUploader {
 public:
  CudaUploader(CudaBackend& backend, std::size_t bytes, int slots) : backend_(backend), bytes_(bytes) {
    backend.check_not_capturing("StagingBuffer (pinned host allocation)");
    backend.activate();
    const cudaError_t status = cudaHostAlloc(&host_, bytes * static_cast<std::size_t>(slots), cudaHostAllocDefault);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw_error("StagingBuffer: cannot allocate {} bytes of pinned host memory ({})",
                  bytes * static_cast<std::size_t>(slots), cudaGetErrorString(status));
    }
    events_.assign(static_cast<std::size_t>(slots), nullptr);
    recorded_.assign(static_cast<std::size_t>(slots), false);
    for (cudaEvent_t& e : events_) DI_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~CudaUploader() override {
    cudaStreamSynchronize(backend_.stream());
    for (cudaEvent_t e : events_)
      if (e != nullptr) cudaEventDestroy(e);
    cudaFreeHost(host_);
  }
  CudaUploader(const CudaUploader&) = delete;
  CudaUploader& operator=(const CudaUploader&) = delete;

  void* host_slot(int slot) override { return static_cast<std::uint8_t*>(host_) + bytes_ * static_cast<std::size_t>(slot); }

  void upload(int slot, std::size_t bytes, void* device) override {
    backend_.check_not_capturing("StagingBuffer::upload (stage inputs before begin_capture)");
    backend_.activate();
    DI_CUDA_CHECK(cudaMemcpyAsync(device, host_slot(slot), bytes, cudaMemcpyHostToDevice, backend_.stream()));
    DI_CUDA_CHECK(cudaEventRecord(events_[static_cast<std::size_t>(slot)], backend_.stream()));
    recorded_[static_cast<std::size_t>(slot)] = true;
  }

  void wait(int slot) override {
    if (!recorded_[static_cast<std::size_t>(slot)]) return;
    backend_.check_not_capturing("StagingBuffer::host (write step inputs before begin_capture)");
    DI_CUDA_CHECK(cudaEventSynchronize(events_[static_cast<std::size_t>(slot)]));
    recorded_[static_cast<std::size_t>(slot)] = false;
  }

 private:
  CudaBackend& backend_;
  std::size_t bytes_;
  void* host_ = nullptr;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> recorded_;
};

}  // namespace

bool CudaBackend::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DI_CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

void CudaBackend::check_not_capturing(const char* op) const {
  DI_CHECK(!capturing(),
           "CUDA backend: {} cannot run during graph capture (it allocates, copies from/to host memory or waits "
           "for the device); run it before begin_capture or after end_capture",
           op);
}

void CudaBackend::begin_capture() {
  activate();
  DI_CHECK(!capturing(), "begin_capture: the CUDA backend is capturing a graph already");
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

Graph CudaBackend::end_capture() {
  activate();
  DI_CHECK(capturing(), "end_capture: the CUDA backend is not capturing (begin_capture first)");
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph);
  if (status != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; do not let later launch checks see this one
    throw_error("end_capture: the capture was invalidated ({}: {}); a call that cannot be captured ran on this "
                "thread",
                cudaGetErrorName(status), cudaGetErrorString(status));
  }
  std::size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  cudaError_t step = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (step == cudaSuccess) step = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is independent of its template
  DI_CUDA_CHECK(step);
  // Uploading now makes the first replay as cheap as the later ones.
  const cudaError_t upload = cudaGraphUpload(exec, stream_);
  if (upload != cudaSuccess) {
    cudaGraphExecDestroy(exec);
    DI_CUDA_CHECK(upload);
  }
  Graph out(std::make_unique<CudaGraphExec>(exec, nodes, stream_, device_));
  // Ops captured scratch pointers: the buffer outlives any later growth while the graph exists.
  for (const ScratchArena& arena : scratch_)
    if (arena.owner != nullptr) out.keep_alive(arena.owner);
  return out;
}

void CudaBackend::abort_capture() noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &status) != cudaSuccess || status == cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return;
  }
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
}

// Every op's temporaries come from the scratch buffers, so every capture holds them (end_capture); the
// main lane's address changes only when it grows (the old buffer stays allocated while a graph holds
// it). The side lane's buffer needs no check: a graph replays the one it captured, kept alive.
const void* CudaBackend::captured_memory() const { return scratch_[0].base; }

std::unique_ptr<detail::HostUploader> CudaBackend::make_uploader(std::size_t bytes, int slots) {
  return std::make_unique<CudaUploader>(*this, bytes, slots);
}

}  // namespace deepinfer::ops::cuda
