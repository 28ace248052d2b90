// One place that turns an opened model runner, its directory and the engine knobs (LLMOptions)
// into a ready engine: page sizing, EOS ids, tokenizer and detokenizer, padded-vocabulary masking
// and the structured-output factory. deepinfer::LLM and `deepinfer serve` both open theirs here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "deepinfer/llm.h"
#include "engine/engine.h"
#include "io/model_config.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

// What differs between front-ends: serve needs text and an end of generation; the offline API
// also runs id-only models.
struct EngineSetup {
  bool require_tokenizer = false;
  bool require_eos = false;
};

struct OpenedEngine {
  std::unique_ptr<engine::Engine> engine;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // null: the model has none (ids only)
  // so_args work: a tokenizer and EOS ids were found, and the grammar factory is installed.
  bool structured_outputs = false;
  const io::ModelConfig* model_config = nullptr;  // open_engine(path, options): valid while engine lives
  std::string numeric_mode;                       // open_engine(path, options): exact | reference-qat
};

// options.max_model_len, else min(max_position_embeddings, 8192).
std::int32_t resolve_max_model_len(const LLMOptions& options, const io::ModelConfig& model);

// The engine config LLMOptions describe for a model. Pages: options.num_pages; else
// cache_memory_bytes' worth when set; else room for four sequences of max_model_len (the CPU's
// sizing; on a GPU open_engine(path, options) sets num_pages from the memory plan).
engine::EngineConfig make_engine_config(const LLMOptions& options, const io::ModelConfig& model,
                                        const engine::ModelRunner& runner);

// EOS ids from generation_config.json (an id or a list), else the tokenizer's eos token.
std::vector<std::int32_t> read_eos_ids(const std::filesystem::path& model_dir, const tokenizer::Tokenizer* tok);

// Builds the engine over `runner` (opened from model_dir; `model` is its config). The tokenizer
// is options.tokenizer, else model_dir's tokenizer.json if there is one. Ids past the tokenizer's
// vocabulary (a padded embedding) are never sampled and decode to no text.
OpenedEngine open_engine(const std::filesystem::path& model_dir, std::unique_ptr<engine::ModelRunner> runner,
                         const io::ModelConfig& model, const LLMOptions& options, EngineSetup setup = {});

// The model at `model` opened by the executor on options.device (model/executor.h: GPU memory
// plan, staged weight loading, dummy weights), then the engine over it. A config.json path (dummy
// weights) looks for the tokenizer in its directory.
OpenedEngine open_engine(const std::filesystem::path& model, const LLMOptions& options, EngineSetup setup = {});

}  // namespace deepinfer
