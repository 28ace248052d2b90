// Putting weights into device memory fast: host tensors through pinned staging buffers on several
// threads (StagedUploader), and dummy weights generated in place (fill_random_on_device). Plain C++
// with no CUDA types; in a build without CUDA, make_staged_uploader returns null and
// fill_random_on_device throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "ops/backend.h"
#include "ops/random_fill.h"

namespace deepinfer::ops {

struct StagedUploadOptions {
  int threads = 4;                               // copy threads, each with its own stream
  std::int64_t buffer_bytes = std::int64_t{64} << 20;  // per pinned staging buffer (two per thread)
  // Called from the copy threads with the bytes staged so far (after every chunk).
  std::function<void(std::int64_t bytes_done)> progress;
};

class StagedUploader {
 public:
  virtual ~StagedUploader() = default;
  // A device tensor of `host`'s shape and dtype, filled once finish() returns. `host` (a CPU tensor,
  // contiguous) is kept alive until its bytes are staged; its memory must not change until then.
  virtual Tensor upload(const Tensor& host) = 0;
  // Waits for every copy; rethrows the first copy error as deepinfer::Error.
  virtual void finish() = 0;
  virtual std::int64_t bytes_done() const = 0;
};

// Threads memcpy chunks of the host tensors (mmap'd safetensors, page faults included) into pinned
// buffers and issue async host->device copies on their own streams, so reading, staging and PCIe
// transfers overlap. Null when `backend` is not a CUDA backend (Backend::upload is the way there).
std::unique_ptr<StagedUploader> make_staged_uploader(Backend& backend, const StagedUploadOptions& options = {});

// Fills device tensor `dst` (contiguous, on `backend`'s CUDA device) with spec's values; the bytes
// equal a host fill with the same spec (ops/random_fill.h). Asynchronous on the backend's stream.
void fill_random_on_device(Backend& backend, Tensor& dst, const RandomFillSpec& spec);

}  // namespace deepinfer::ops
