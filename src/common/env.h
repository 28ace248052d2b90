// Every DEEPINFER_* environment variable is read here, once, into one typed struct; the README's
// table lists them. Nothing else in the code calls getenv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace deepinfer::env {

struct Flags {
  std::string log_level = "warn";         // DEEPINFER_LOG_LEVEL
  std::string hf_model_dir;               // DEEPINFER_HF_MODEL_DIR: default model for examples
  std::string tokenizer_dir;              // DEEPINFER_TOKENIZER_DIR: tokenizer the tests use
  bool batch_invariant = false;           // DEEPINFER_BATCH_INVARIANT
  bool enable_mtp_varlen = false;         // DEEPINFER_ENABLE_MTP_VARLEN
  int use_nextn_decode = 5;               // DEEPINFER_USE_NEXTN_DECODE: max draft length
  std::string yoco_prefill_truncation_mode;  // DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE ("" or compact)
  int yoco_prefill_keep_tokens = 140;     // DEEPINFER_YOCO_PREFILL_KEEP_TOKENS
  int num_threads = 0;                    // DEEPINFER_NUM_THREADS: CPU backend threads, 0 = all cores
  bool cuda_graphs = true;                // DEEPINFER_CUDA_GRAPHS: replay decode steps as CUDA graphs
  bool fp8_wgmma = true;                  // DEEPINFER_FP8_WGMMA=0: dense FP8 decode GEMMs off wgmma
  bool moe_fp4_wgmma = true;              // DEEPINFER_MOE_FP4_WGMMA=0: routed experts' decode GEMMs off wgmma
};

// Parsed on first use; a malformed value throws deepinfer::Error naming the variable and value.
const Flags& flags();

// Parses flags from an arbitrary lookup (tests use this; flags() uses getenv).
Flags parse(std::optional<std::string> (*lookup)(const char* name));

}  // namespace deepinfer::env
