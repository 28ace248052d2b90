// StagedUploader on CUDA (pinned double buffers per copy thread, one stream each) and the in-place
// dummy-weight fill.
#include "ops/cuda/device_loading.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/random_fill_launch.h"

namespace deepinfer::ops {
namespace {

cuda::CudaBackend& cuda_backend_of(Backend& backend, const char* what) {
  auto* be = dynamic_cast<cuda::CudaBackend*>(&backend);
  DI_CHECK(be != nullptr, "{}: needs the CUDA backend, got {}", what, backend.name());
  return *be;
}

class CudaStagedUploader final : public StagedUploader {
 public:
  CudaStagedUploader(cuda::CudaBackend& backend, const StagedUploadOptions& options)
      : be_(backend), options_(options) {
    const int threads = std::clamp(options.threads, 1, 32);
    options_.buffer_bytes = std::max<std::int64_t>(options.buffer_bytes, std::int64_t{1} << 20);
    be_.activate();
    workers_.resize(static_cast<std::size_t>(threads));
    try {
      for (Worker& w : workers_) {
        DI_CUDA_CHECK(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking));
        for (Slot& s : w.slots) {
          DI_CUDA_CHECK(cudaHostAlloc(&s.pinned, static_cast<std::size_t>(options_.buffer_bytes), cudaHostAllocDefault));
          DI_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
        }
      }
    } catch (...) {
      release();
      throw;
    }
    for (std::size_t t = 0; t < workers_.size(); ++t) workers_[t].thread = std::thread([this, t] { run(workers_[t]); });
  }

  ~CudaStagedUploader() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (Worker& w : workers_)
      if (w.thread.joinable()) w.thread.join();
    release();
  }

  Tensor upload(const Tensor& host) override {
    DI_CHECK(host.device().is_cpu(), "staged upload: tensor {} is not in host memory", host.shape());
    const Tensor src = host.is_contiguous() ? host : host.clone();
    Tensor out = be_.empty(src.shape(), src.dtype());
    const auto bytes = static_cast<std::int64_t>(src.nbytes());
    const auto* base = static_cast<const std::uint8_t*>(src.raw_data());
    auto* dst = static_cast<std::uint8_t*>(out.raw_data());
    // Bounded look-ahead: converted host tensors (not mmap views) wait in RAM until staged.
    const std::int64_t limit = 4 * options_.buffer_bytes * static_cast<std::int64_t>(workers_.size());
    for (std::int64_t offset = 0; offset < bytes; offset += options_.buffer_bytes) {
      const std::int64_t n = std::min(options_.buffer_bytes, bytes - offset);
      std::unique_lock<std::mutex> lock(mu_);
      room_cv_.wait(lock, [&] { return queued_bytes_ < limit || !error_.empty(); });
      queue_.push_back({src, out, base + offset, dst + offset, n});
      queued_bytes_ += n;
      lock.unlock();
      work_cv_.notify_one();
    }
    return out;
  }

  void finish() override {
    std::unique_lock<std::mutex> lock(mu_);
    room_cv_.wait(lock, [&] { return (queue_.empty() && busy_ == 0) || !error_.empty(); });
    const std::string error = error_;
    lock.unlock();
    DI_CHECK(error.empty(), "staged upload: {}", error);
    be_.activate();
    for (Worker& w : workers_) DI_CUDA_CHECK(cudaStreamSynchronize(w.stream));
  }

  std::int64_t bytes_done() const override { return done_.load(); }

 private:
  struct Job {
    Tensor keep;  // holds the host memory until staged
    // Holds the device memory until the copy is queued: if loading fails and the weights are freed
    // first, cudaFree waits for the queued copy instead of the copy landing in freed memory.
    Tensor keep_dst;
    const std::uint8_t* src;
    std::uint8_t* dst;
    std::int64_t bytes;
  };
  struct Slot {
    void* pinned = nullptr;
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  struct Worker {
    std::thread thread;
    cudaStream_t stream = nullptr;
    Slot slots[2];
  };

  void run(Worker& w) {
    cudaSetDevice(be_.device().index);
    int next = 0;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        ++busy_;
      }
      std::string failure;
      bool failed_before = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        failed_before = !error_.empty();
      }
      try {
        if (!failed_before) {  // after a failure the rest is drained without copying
          stage(w.slots[next], w.stream, job);
          next ^= 1;
        }
      } catch (const std::exception& e) {
        failure = e.what();
      }
      job.keep = Tensor();
      job.keep_dst = Tensor();
      done_.fetch_add(job.bytes);
      {
        std::lock_guard<std::mutex> lock(mu_);
        queued_bytes_ -= job.bytes;
        --busy_;
        if (!failure.empty() && error_.empty()) error_ = failure;
      }
      room_cv_.notify_all();
      if (options_.progress) options_.progress(done_.load());
    }
  }

  // Waits until the slot's previous copy left its buffer, fills it, queues the copy.
  static void stage(Slot& slot, cudaStream_t stream, const Job& job) {
    if (slot.used) DI_CUDA_CHECK(cudaEventSynchronize(slot.done));
    std::memcpy(slot.pinned, job.src, static_cast<std::size_t>(job.bytes));
    DI_CUDA_CHECK(cudaMemcpyAsync(job.dst, slot.pinned, static_cast<std::size_t>(job.bytes), cudaMemcpyHostToDevice,
                                  stream));
    DI_CUDA_CHECK(cudaEventRecord(slot.done, stream));
    slot.used = true;
  }

  void release() noexcept {
    for (Worker& w : workers_) {
      if (w.stream != nullptr) cudaStreamSynchronize(w.stream);
      for (Slot& s : w.slots) {
        if (s.done != nullptr) cudaEventDestroy(s.done);
        if (s.pinned != nullptr) cudaFreeHost(s.pinned);
        s = Slot{};
      }
      if (w.stream != nullptr) cudaStreamDestroy(w.stream);
      w.stream = nullptr;
    }
  }

  cuda::CudaBackend& be_;
  StagedUploadOptions options_;
  std::vector<Worker> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, room_cv_;
  std::deque<Job> queue_;
  std::int64_t queued_bytes_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  std::string error_;
  std::atomic<std::int64_t> done_{0};
};

}  // namespace

std::unique_ptr<StagedUploader> make_staged_uploader(Backend& backend, const StagedUploadOptions& options) {
  auto* be = dynamic_cast<cuda::CudaBackend*>(&backend);
  if (be == nullptr) return nullptr;
  return std::make_unique<CudaStagedUploader>(*be, options);
}

void fill_random_on_device(Backend& backend, Tensor& dst, const RandomFillSpec& spec) {
  cuda::CudaBackend& be = cuda_backend_of(backend, "fill_random_on_device");
  be.check_on_device(dst, "fill_random_on_device");
  DI_CHECK(dst.is_contiguous(), "fill_random_on_device: tensor {} must be contiguous", dst.shape());
  be.activate();
  cuda::launch_random_fill(dst.raw_data(), static_cast<std::int64_t>(dst.nbytes()), spec, be.sm_count(), be.stream());
  DI_CUDA_CHECK_LAUNCH("random_fill");
}

}  // namespace deepinfer::ops
