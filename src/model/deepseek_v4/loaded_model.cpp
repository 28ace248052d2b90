// Opening a V4 or V4.1 checkpoint directory as a runnable model.
#include "model/deepseek_v4/loaded_model.h"

#include <numeric>

#include "common/env.h"
#include "common/error.h"
#include "common/logging.h"
#include "model/deepseek_v41/model.h"
#include "model/engram/token_map.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model::v4 {
namespace {

// The Engram hasher of a V4.1 directory: the compressed token map of its tokenizer.json; else,
// when the config states the map's size, of DEEPINFER_TOKENIZER_DIR's tokenizer (tiny test
// checkpoints; the hasher checks the size); else the identity map over the vocabulary.
std::shared_ptr<const engram::EngramHasher> open_hasher(const std::filesystem::path& dir, const io::ModelConfig& c) {
  if (c.engram.layer_ids.empty()) return nullptr;
  std::filesystem::path tokenizer_dir;
  const std::filesystem::path fallback = env::flags().tokenizer_dir;
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    tokenizer_dir = dir;
  } else if (c.engram.compressed_vocab_size != 0 && !fallback.empty() &&
             std::filesystem::exists(fallback / "tokenizer.json")) {
    tokenizer_dir = fallback;
    log::info("{}: no tokenizer.json; the Engram token map comes from {}", dir.string(), fallback.string());
  }
  if (!tokenizer_dir.empty()) {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tokenizer_dir);
    return std::make_shared<const engram::EngramHasher>(c, engram::build_compressed_token_map(tok));
  }
  DI_CHECK(c.engram.compressed_vocab_size == 0,
           "{}: the Engram layers need the tokenizer's compressed token map ({} ids), but there is no tokenizer.json "
           "(nor one in DEEPINFER_TOKENIZER_DIR)",
           dir.string(), c.engram.compressed_vocab_size);
  log::info("{}: no tokenizer.json; Engram hashes use the identity token map over {} ids", dir.string(), c.vocab_size);
  std::vector<std::int32_t> identity(static_cast<std::size_t>(c.vocab_size));
  std::iota(identity.begin(), identity.end(), 0);
  return std::make_shared<const engram::EngramHasher>(c, std::move(identity), c.vocab_size);
}

}  // namespace

LoadedModel open_model(const std::filesystem::path& directory, std::optional<NumericMode> mode,
                       ops::Backend& backend) {
  LoadedModel m;
  m.checkpoint = std::make_unique<io::Checkpoint>(io::Checkpoint::open(directory));
  m.weights = checkpoint_weights(*m.checkpoint);
  const io::ModelConfig& config = m.checkpoint->config();
  const Numerics numerics = Numerics::for_mode(mode.value_or(default_numeric_mode(config)), config);
  if (config.arch == io::ModelArch::kDeepseekV41) {
    if (config.vision.present)
      log::info("{}: the vision tower's weights are ignored (text-only serving)", directory.string());
    m.model = v41::Model::load(*m.weights, config, backend, numerics, open_hasher(directory, config),
                               v41::ReplayOptions::from_env(config));
  } else {
    m.model = Model::load(*m.weights, config, backend, numerics);
  }
  return m;
}

}  // namespace deepinfer::model::v4
