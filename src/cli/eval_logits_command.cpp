// `deepinfer eval-logits`: the model's f32 logits at every position of a token-id prompt, written
// as a NumPy .npy array [T, vocab] (streamed chunk by chunk, so long prompts need no T×vocab buffer).
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/command.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "common/logging.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/executor.h"
#include "model/weight_manifest.h"
#include "ops/backend.h"

namespace deepinfer::cli {
namespace {

std::vector<std::int32_t> parse_ids(const std::string& text) {
  DI_CHECK(text.find_first_not_of(" \t") != std::string::npos, "--ids is empty: a prompt needs at least one token");
  std::vector<std::int32_t> ids;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    DI_CHECK(!item.empty() && ec == std::errc() && end == item.data() + item.size() && value >= 0 &&
                 value <= INT32_MAX,
             "--ids: '{}' (item {}) is not a token id", item, ids.size() + 1);
    ids.push_back(static_cast<std::int32_t>(value));
    pos = comma + 1;
  }
  return ids;
}

// NumPy format 1.0: magic, version, header length, a Python dict literal padded with spaces to a
// multiple of 64 bytes and ended by a newline; then the data, here little-endian f32 in C order.
std::string npy_header(std::int64_t rows, std::int64_t cols) {
  std::string dict = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(dict.size() & 0xff));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict;
}

// --load-format dummy: random weights of the geometry in --model (a directory's config.json, or a
// config file), cut to --num-layers; on a GPU generated in device memory (dummy_weights.h).
std::unique_ptr<model::SequenceModel> load_dummy(const std::string& model, int layers, std::uint64_t seed,
                                                 std::optional<model::v4::NumericMode> mode, ops::Backend& backend) {
  const std::filesystem::path path =
      std::filesystem::is_directory(model) ? std::filesystem::path(model) / "config.json" : std::filesystem::path(model);
  const io::ModelConfig config = model::v4::dummy_model_config(io::load_model_config(path), layers);
  std::int64_t bytes = 0;
  for (const model::ManifestEntry& e : model::build_weight_manifest(config)) bytes += e.released_bytes();
  const auto start = std::chrono::steady_clock::now();
  auto m = model::v4::load_dummy_model(config, seed, backend, mode.value_or(model::v4::NumericMode::kReferenceQat));
  backend.synchronize();
  log::info("dummy weights: {} layers of {}, {:.2f} GB as released, made and loaded in {:.1f} s", config.num_layers,
            path.string(), static_cast<double>(bytes) / 1e9,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return m;
}

}  // namespace

void register_eval_logits(CLI::App& app) {
  auto* sub = app.add_subcommand("eval-logits", "Write the model's logits for every prompt position as a .npy file");
  struct Options {
    ModelOptions model;
    std::string ids;
    std::string output;
    int chunk = 512;
    std::string device = "cpu";
    std::string load_format = "auto";
    int num_layers = 0;
    std::uint64_t seed = 0;
  };
  auto opts = std::make_shared<Options>();
  opts->model.add_to(sub);
  sub->add_option("--ids", opts->ids, "Prompt token ids, comma separated (e.g. 0,5,17)")->required();
  sub->add_option("--output,-o", opts->output, "Output .npy file: float32 [tokens, vocab]")->required();
  sub->add_option("--chunk", opts->chunk, "Tokens per forward pass (prefill chunk size)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--device", opts->device, "Backend: cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--load-format", opts->load_format,
                  "auto: the checkpoint in --model; dummy: random weights of its V4 / V4.1 geometry (--model may then "
                  "be a config.json), FP8 dense + FP4 experts as released, for benchmarks")
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->capture_default_str();
  sub->add_option("--num-layers", opts->num_layers, "dummy: keep the first N layers (0 = all)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--seed", opts->seed, "dummy: weight seed")->capture_default_str();
  set_handler(sub, [opts] {
    const std::vector<std::int32_t> ids = parse_ids(opts->ids);
    auto backend = model::make_backend(opts->device);
    model::v4::LoadedModel loaded;
    if (opts->load_format == "dummy") {
      loaded.model = load_dummy(opts->model.model_dir, opts->num_layers, opts->seed, opts->model.numeric_mode(), *backend);
    } else {
      DI_CHECK(opts->num_layers == 0, "--num-layers needs --load-format dummy");
      loaded = model::load_checkpoint(opts->model.model_dir, opts->model.numeric_mode(), *backend);
    }
    model::SequenceModel& m = *loaded.model;
    const std::int64_t vocab = m.config().vocab_size;
    log::info("eval-logits: {} tokens, mode {}", ids.size(), model::v4::numeric_mode_name(m.numerics().mode));
    for (std::size_t i = 0; i < ids.size(); ++i)
      DI_CHECK(ids[i] < vocab, "--ids: token id {} (item {}) is outside the vocabulary of {} tokens", ids[i], i + 1,
               vocab);
    std::ofstream out(opts->output, std::ios::binary | std::ios::trunc);
    DI_CHECK(out.good(), "cannot write {}", opts->output);
    out << npy_header(static_cast<std::int64_t>(ids.size()), vocab);
    auto seq = m.new_sequence();
    const auto chunk = static_cast<std::size_t>(opts->chunk);
    for (std::size_t p = 0; p < ids.size(); p += chunk) {
      const std::size_t n = std::min(chunk, ids.size() - p);
      Tensor logits = backend->empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
      const model::v4::Model::Chunk c{seq.get(), std::span(ids).subspan(p, n), static_cast<std::int32_t>(n)};
      m.forward({&c, 1}, logits);
      Tensor host = Tensor::empty(logits.shape(), DType::kF32);
      backend->copy(logits, host);
      out.write(static_cast<const char*>(host.raw_data()), static_cast<std::streamsize>(host.nbytes()));
    }
    out.close();
    DI_CHECK(!out.fail(), "writing {} failed", opts->output);
    return 0;
  });
}

}  // namespace deepinfer::cli
