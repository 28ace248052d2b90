// `deepinfer version`: the build's version and backends.
#include <fmt/format.h>

#include "cli/command.h"
#include "tensor/device_info.h"

namespace deepinfer::cli {

void register_version(CLI::App& app) {
  auto* sub = app.add_subcommand("version", "Print the version and the compiled backends");
  set_handler(sub, [] {
    const auto gpu = cuda_device_info();
    fmt::print("deepinfer {}\ncuda backend: {}\n", DEEPINFER_VERSION, built_with_cuda() ? "built" : "not built");
    if (gpu.count > 0) fmt::print("gpu: {} x {} (sm_{})\n", gpu.count, gpu.name, gpu.compute_capability);
    else fmt::print("gpu: none ({})\n", gpu.reason);
    return 0;
  });
}

}  // namespace deepinfer::cli
