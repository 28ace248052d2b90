// The switch of launch_chained (dependent_launch.cuh): programmatic dependent launch on or off for the
// kernels the calling thread launches, set by the backend whose op is running (CudaBackend::activate).
#include "ops/cuda/kernels.h"

namespace deepinfer::ops::cuda {
namespace {
thread_local bool g_dependent_launch = true;
}  // namespace

void set_dependent_launch(bool on) { g_dependent_launch = on; }

bool dependent_launch_enabled() { return g_dependent_launch; }

}  // namespace deepinfer::ops::cuda
