// Device-side timing for benchmarks: replays `body` (a sequence of backend ops on the CUDA
// backend's stream) captured as one CUDA graph and times the replays with CUDA events, so launch
// gaps and host work stay out of the numbers. Plain C++; throws when built without CUDA.
#pragma once

#include <functional>

#include "ops/backend.h"

namespace deepinfer::ops {

struct CudaTiming {
  double median_ms = 0.0;  // per call of body
  double min_ms = 0.0;
};

// Runs body once (warm-up: scratch, handles, caches), captures `calls_per_graph` calls into a
// graph, then times `repeats` replays. backend must come from make_cuda_backend.
CudaTiming cuda_time(Backend& backend, const std::function<void()>& body, int calls_per_graph = 10,
                     int repeats = 20);

}  // namespace deepinfer::ops
