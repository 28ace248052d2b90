// How the V4.1 golden tests (v41_golden_test, cuda_golden_test) build a fixture's model the way HF
// ran it: exact numerics plus HF's QAT fake-quant where meta says HF applied it, and the Engram hasher
// of the tokenizer saved beside the checkpoint.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>

#include "io/checkpoint.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/weights.h"
#include "model/deepseek_v41/model.h"
#include "model/engram/engram_hash.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::golden {

// The hasher of a checkpoint with Engram layers: the compressed map of the tokenizer saved beside it
// (the DeepSeek tokenizer cut to the model's 512 ids, tests/golden/README.md).
inline std::shared_ptr<const model::engram::EngramHasher> hasher_for(const io::ModelConfig& config,
                                                                     const std::filesystem::path& model_dir) {
  if (config.engram.layer_ids.empty()) return nullptr;
  const auto map = model::engram::build_compressed_token_map(tokenizer::Tokenizer::load(model_dir));
  return std::make_shared<const model::engram::EngramHasher>(config, map);
}

// Whether HF applied its QAT fake-quant (window KV FP8, compressed KV FP4, indexer FP4) on a case.
inline bool hf_kv_fake_quant(const nlohmann::json& meta) {
  return meta.at("reference").at("hf_kv_fake_quant").get<bool>();
}

// exact mode, plus HF's QAT fake-quant where the fixture says HF applied it (and `fake_quant`).
inline model::v4::Numerics hf_numerics(const io::ModelConfig& config, const nlohmann::json& meta,
                                       bool fake_quant = true) {
  auto n = model::v4::Numerics::for_mode(model::v4::NumericMode::kExact, config);
  if (fake_quant && hf_kv_fake_quant(meta)) {
    n.kv_quant_block = 32;
    n.kv_quant_whole = true;
    n.compressed_kv_fp4 = true;
    n.indexer_fp4 = true;
  }
  return n;
}

// A case's V4.1 model on `backend` with hf_numerics.
inline std::unique_ptr<model::v41::Model> load_v41(const io::Checkpoint& checkpoint, const nlohmann::json& meta,
                                                   ops::Backend& backend, bool fake_quant = true) {
  const io::ModelConfig& config = checkpoint.config();
  return model::v41::Model::load(*model::v4::checkpoint_weights(checkpoint), config, backend,
                                 hf_numerics(config, meta, fake_quant), hasher_for(config, checkpoint.directory()));
}

}  // namespace deepinfer::golden
