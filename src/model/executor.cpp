// open_executor: backend choice, weight loading (staged uploads with a progress bar, or dummy
// weights on the device), the profiling forward and the memory plan.
#include "model/executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "common/error.h"
#include "common/logging.h"
#include "io/checkpoint.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v4/paged_runner.h"
#include "model/deepseek_v4/weight_loader.h"
#include "model/open_engine.h"
#include "model/weight_manifest.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_loading.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Writes a line the user asked to see (show_progress) whatever the log level; else an info log.
void report(bool show, const std::string& line) {
  if (show) {
    log::write(log::Level::kInfo, line);
  } else {
    log::info("{}", line);
  }
}

// Weight-loading progress on stderr: one redrawn line on a terminal (at most 10 times a second),
// else a line at every quarter of a load of 1 GB or more. Called from the copy threads.
class LoadProgress {
 public:
  static constexpr std::int64_t kQuarterLinesFrom = 1'000'000'000;

  LoadProgress(std::int64_t total, bool show) : total_(std::max<std::int64_t>(total, 1)), show_(show),
                                                tty_(show && isatty(fileno(stderr)) != 0) {}

  void update(std::int64_t done) {
    if (!show_) return;
    std::lock_guard<std::mutex> lock(mu_);
    const double s = seconds_since(start_);
    if (tty_) {
      if (s - last_draw_ < 0.1) return;
      last_draw_ = s;
      const double share = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
      const int filled = static_cast<int>(share * 30);
      std::fprintf(stderr, "\rloading weights [%s%s] %3d%% %.2f / %.2f GB %.1f GB/s", std::string(filled, '#').c_str(),
                   std::string(30 - filled, ' ').c_str(), static_cast<int>(share * 100), done / 1e9, total_ / 1e9,
                   done / 1e9 / std::max(s, 1e-3));
      std::fflush(stderr);
    } else if (total_ >= kQuarterLinesFrom) {
      while (next_quarter_ <= 3 && done * 4 >= total_ * next_quarter_) {
        log::write(log::Level::kInfo, fmt::format("loading weights: {}% ({:.2f} of {:.2f} GB, {:.1f} s)",
                                                  25 * next_quarter_, done / 1e9, total_ / 1e9, s));
        ++next_quarter_;
      }
    }
  }

  // The summary line; `bytes` are the device bytes the weights took.
  void finish(std::int64_t bytes, const std::string& how) {
    const double s = seconds_since(start_);
    if (tty_) std::fputc('\n', stderr);
    report(show_, fmt::format("weights: {:.2f} GB on the device in {:.2f} s ({:.1f} GB/s; {})", bytes / 1e9, s,
                              bytes / 1e9 / std::max(s, 1e-6), how));
  }

 private:
  std::mutex mu_;
  const Clock::time_point start_ = Clock::now();
  std::int64_t total_;
  bool show_, tty_;
  double last_draw_ = -1.0;
  std::int64_t next_quarter_ = 1;
};

// Bytes of the backbone tensors the checkpoint stores (the draft stages are not loaded).
std::int64_t checkpoint_weight_bytes(const io::Checkpoint& checkpoint) {
  const io::ModelConfig& config = checkpoint.config();
  std::unordered_set<std::string> wanted;
  for (const ManifestEntry& e : build_weight_manifest(config)) {
    if (e.layer >= config.num_layers) continue;
    wanted.insert(e.name);
    if (const std::string scale = e.scale_name(); !scale.empty()) wanted.insert(scale);
  }
  std::int64_t bytes = 0;
  for (const std::string& name : checkpoint.names())
    if (wanted.count(name) > 0)
      bytes += static_cast<std::int64_t>(dtype_bytes(checkpoint.dtype(name), checkpoint.shape(name).numel()));
  return bytes;
}

std::int64_t manifest_weight_bytes(const io::ModelConfig& config) {
  std::int64_t bytes = 0;
  for (const ManifestEntry& e : build_weight_manifest(config))
    if (e.layer < config.num_layers) bytes += e.released_bytes();
  return bytes;
}

// Loads the weights onto `backend`: dummy ones made in place, or the checkpoint through the staged
// uploader (GPU) or the backend's own upload (CPU).
v4::LoadedModel load_weights_onto(const fs::path& model, const LLMOptions& options, const DeviceSpec& device,
                                  ops::Backend& backend, std::optional<DeviceMemory> memory) {
  std::optional<v4::NumericMode> mode;
  if (options.mode) mode = v4::parse_numeric_mode(*options.mode);
  v4::LoadedModel loaded;
  const std::int64_t live_before = device.cuda ? ops::cuda_allocation_stats(device.index).live_bytes : 0;
  if (options.load_format == "dummy") {
    const fs::path path = fs::is_directory(model) ? model / "config.json" : model;
    const io::ModelConfig config = v4::dummy_model_config(io::load_model_config(path), options.num_layers);
    if (memory) check_weights_fit(*memory, options.gpu_memory_utilization, manifest_weight_bytes(config));
    LoadProgress progress(manifest_weight_bytes(config), options.show_progress && device.cuda);
    loaded.model = v4::load_dummy_model(config, options.seed, backend, mode.value_or(v4::NumericMode::kReferenceQat));
    backend.synchronize();
    if (device.cuda)
      progress.finish(ops::cuda_allocation_stats(device.index).live_bytes - live_before,
                      fmt::format("dummy weights of {} layers generated on {}", config.num_layers, device.name()));
    return loaded;
  }
  DI_CHECK(options.load_format == "auto", "load_format '{}': expected auto or dummy", options.load_format);
  DI_CHECK(options.num_layers == 0, "num_layers {} needs load_format dummy", options.num_layers);
  if (memory) check_weights_fit(*memory, options.gpu_memory_utilization, checkpoint_weight_bytes(io::Checkpoint::open(model)));
  return load_checkpoint(model, mode, backend, options.show_progress, options.load_threads);
}

// The device memory a forward of the batch-token limit takes above what is allocated already
// (vLLM's profiling run): one sequence prefilling min(max_num_batched_tokens, max_model_len) tokens
// with logits for min(that, max_num_seqs) rows (a full decode batch's logits).
std::int64_t profile_activations(SequenceModel& m, const DeviceSpec& device, const LLMOptions& options,
                                 std::int32_t max_model_len) {
  const std::int32_t tokens = std::max(1, std::min(options.max_num_batched_tokens, max_model_len));
  const std::int32_t rows = std::max(1, std::min(tokens, options.max_num_seqs));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  const std::int64_t vocab = m.config().vocab_size;
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919 + 11) % static_cast<std::size_t>(vocab));
  ops::reset_cuda_peak(device.index);
  const std::int64_t before = ops::cuda_allocation_stats(device.index).live_bytes;
  {
    auto seq = m.new_sequence();
    Tensor logits = m.backend().empty(Shape{rows, vocab}, DType::kF32);
    const SequenceModel::Chunk chunk{seq.get(), ids, rows};
    m.forward({&chunk, 1}, logits);
    m.backend().synchronize();
  }
  return ops::cuda_allocation_stats(device.index).peak_bytes - before;
}

}  // namespace

v4::LoadedModel load_checkpoint(const fs::path& directory, std::optional<v4::NumericMode> mode,
                                ops::Backend& backend, bool show_progress, int threads) {
  const Device device = backend.device();
  const bool cuda = !device.is_cpu();
  const std::int64_t live_before = cuda ? ops::cuda_allocation_stats(device.index).live_bytes : 0;
  if (threads <= 0) threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  const std::int64_t expected = cuda ? checkpoint_weight_bytes(io::Checkpoint::open(directory)) : 1;
  LoadProgress progress(expected, show_progress && cuda);
  ops::StagedUploadOptions upload;
  upload.threads = threads;
  // Pinned memory is slow to allocate (~0.4 s for the 1 GB of 8 threads' 64 MB pairs): small
  // checkpoints get smaller buffers.
  upload.buffer_bytes = std::clamp<std::int64_t>(expected / (2 * threads), std::int64_t{1} << 20, std::int64_t{64} << 20);
  upload.progress = [&progress](std::int64_t done) { progress.update(done); };
  std::unique_ptr<ops::StagedUploader> uploader = ops::make_staged_uploader(backend, upload);
  v4::LoadedModel loaded;
  {
    v4::UploadScope scope(uploader.get());
    loaded = v4::open_model(directory, mode, backend);
  }
  if (uploader) uploader->finish();
  backend.synchronize();
  if (cuda)
    progress.finish(ops::cuda_allocation_stats(device.index).live_bytes - live_before,
                    fmt::format("{} copy threads, pinned staging", threads));
  return loaded;
}

std::unique_ptr<ops::Backend> make_backend(const std::string& device) {
  const DeviceSpec spec = parse_device(device);
  if (!spec.cuda) return ops::make_cpu_backend();
  (void)ops::cuda_device_status(spec.index);  // clear errors before any other CUDA work
  return ops::make_cuda_backend(spec.index);
}

namespace {

DeviceMemory device_memory(const DeviceSpec& device) {
  const ops::CudaDeviceStatus info = ops::cuda_device_status(device.index);
  return {fmt::format("{} ({})", device.name(), info.name), info.total_bytes, info.free_bytes};
}

}  // namespace

std::string DeviceSpec::name() const { return cuda ? fmt::format("cuda:{}", index) : "cpu"; }

DeviceSpec parse_device(const std::string& device) {
  if (device == "cpu") return {};
  if (device == "cuda") return {true, 0};
  if (device.starts_with("cuda:")) {
    const std::string index = device.substr(5);
    DI_CHECK(!index.empty() && index.size() < 4 && index.find_first_not_of("0123456789") == std::string::npos,
             "device '{}': expected cpu, cuda or cuda:N", device);
    return {true, std::stoi(index)};
  }
  throw_error("device '{}': expected cpu, cuda or cuda:N", device);
}

ExecutorModel open_executor(const fs::path& model, const LLMOptions& options) {
  const DeviceSpec device = parse_device(options.device);
  std::optional<DeviceMemory> memory;
  std::unique_ptr<ops::Backend> backend = make_backend(options.device);
  // Free once our context exists, as vLLM measures it.
  if (device.cuda) memory = device_memory(device);
  const std::int64_t live_start = device.cuda ? ops::cuda_allocation_stats(device.index).live_bytes : 0;
  v4::LoadedModel loaded = load_weights_onto(model, options, device, *backend, memory);
  const std::int64_t weight_bytes = device.cuda ? ops::cuda_allocation_stats(device.index).live_bytes - live_start : 0;

  ExecutorModel out;
  out.mode = loaded.model->numerics().mode;
  std::int64_t activations = 0;
  if (device.cuda) {
    activations = profile_activations(*loaded.model, device, options,
                                      resolve_max_model_len(options, loaded.model->config()));
  }
  auto runner = std::make_unique<v4::OwningPagedRunner>(std::move(backend), std::move(loaded));
  out.config = &runner->model().config();
  if (device.cuda) {
    const DeviceMemory now = device_memory(device);
    MemoryRequest request;
    request.gpu_memory_utilization = options.gpu_memory_utilization;
    request.cache_memory_bytes = options.cache_memory_bytes;
    request.weight_bytes = weight_bytes;
    request.activation_bytes = activations;
    const std::int64_t tracked = ops::cuda_allocation_stats(device.index).live_bytes - live_start;
    // Memory the process took beyond its tensors (cuBLAS handles, lazily loaded kernel modules),
    // plus a reserve for the buffers made after planning (graphs, sampling, step inputs).
    request.other_bytes = std::max<std::int64_t>(0, (memory->free_at_start - now.free_at_start) - tracked) +
                          (std::int64_t{256} << 20);
    request.free_now = now.free_at_start;
    engine::EngineConfig config = make_engine_config(options, *out.config, *runner);
    config.cache.num_pages = options.num_pages;  // 0: the plan decides (not the CPU's four sequences)
    out.plan = plan_device_memory(*memory, request, runner->cache_spec(), config.cache, config.scheduler.max_num_seqs,
                                  config.scheduler.max_model_len);
    report(options.show_progress, out.plan->summary());
  }
  out.runner = std::move(runner);
  return out;
}

}  // namespace deepinfer::model
