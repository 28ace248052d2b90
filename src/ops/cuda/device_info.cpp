// CUDA device queries with deepinfer::Error instead of CUDA aborts (no device, no driver, index out
// of range, an architecture without kernels in this build) and the per-device allocation counters behind cuda_allocation_stats.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>

#include "common/error.h"
#include "common/logging.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_arch.h"
#include "ops/cuda/device_memory.h"

namespace deepinfer::ops {
namespace {

constexpr int kMaxDevices = 64;

struct Counters {
  std::atomic<std::int64_t> live{0};
  std::atomic<std::int64_t> peak{0};
};

std::array<Counters, kMaxDevices>& counters() {
  static std::array<Counters, kMaxDevices> all;
  return all;
}

Counters& counters_of(int device) {
  DI_CHECK(device >= 0 && device < kMaxDevices, "CUDA device index {} is out of range [0, {})", device, kMaxDevices);
  return counters()[static_cast<std::size_t>(device)];
}

}  // namespace

namespace cuda {

void note_device_bytes(int device, std::int64_t bytes) {
  if (device < 0 || device >= kMaxDevices) return;
  Counters& c = counters()[static_cast<std::size_t>(device)];
  const std::int64_t now = c.live.fetch_add(bytes) + bytes;
  std::int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace cuda

CudaDeviceStatus cuda_device_status(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw_error("no usable CUDA device: {} ({}); check the NVIDIA driver and CUDA_VISIBLE_DEVICES, or use --device cpu",
                cudaGetErrorName(status), cudaGetErrorString(status));
  }
  DI_CHECK(count > 0, "no CUDA device is visible (CUDA_VISIBLE_DEVICES?); use --device cpu");
  DI_CHECK(device >= 0 && device < count, "CUDA device {} requested, but {} {} visible (cuda:0{})", device, count,
           count == 1 ? "is" : "are", count == 1 ? "" : fmt::format(" .. cuda:{}", count - 1));
  cudaDeviceProp prop{};
  if (const cudaError_t s = cudaGetDeviceProperties(&prop, device); s != cudaSuccess) {
    cudaGetLastError();
    throw_error("CUDA device {}: cannot read its properties: {} ({})", device, cudaGetErrorName(s), cudaGetErrorString(s));
  }
  CudaDeviceStatus info;
  info.device = device;
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  const cuda::ArchFeatures* arch = cuda::arch_features(prop.major, prop.minor);
  DI_CHECK(arch != nullptr, "CUDA device {} ({}) has compute capability {}.{}; deepinfer's CUDA kernels support {}",
           device, info.name, prop.major, prop.minor, cuda::supported_archs_text());
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != device) cudaSetDevice(device);
  const int image = cuda::probe_kernel_image();
  std::size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t mem = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (previous >= 0 && previous != device) cudaSetDevice(previous);
  DI_CHECK(image == 0,
           "CUDA device {} ({}, {}): this build has no kernels for it ({}): it was built with "
           "-DDEEPINFER_CUDA_ARCHS=\"{}\"; configure with -DDEEPINFER_CUDA_ARCHS=\"{};{}\"",
           device, info.name, arch->name, cudaGetErrorName(static_cast<cudaError_t>(image)), cuda::built_cuda_archs(),
           cuda::built_cuda_archs(), arch->build_arch);
  if (!arch->validated) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log::warn("CUDA device {} ({}, {}): deepinfer's kernels have not been validated on this architecture yet; "
                "run tools/gpu/run_all_checks.sh there before trusting its outputs", device, info.name, arch->name);
  }
  if (mem != cudaSuccess) {
    cudaGetLastError();
    throw_error("CUDA device {} ({}): cannot read its memory: {} ({})", device, info.name, cudaGetErrorName(mem),
                cudaGetErrorString(mem));
  }
  info.free_bytes = static_cast<std::int64_t>(free_bytes);
  info.total_bytes = static_cast<std::int64_t>(total_bytes);
  return info;
}

CudaAllocationStats cuda_allocation_stats(int device) {
  const Counters& c = counters_of(device);
  return {c.live.load(), c.peak.load()};
}

void reset_cuda_peak(int device) {
  Counters& c = counters_of(device);
  c.peak.store(c.live.load());
}

}  // namespace deepinfer::ops
