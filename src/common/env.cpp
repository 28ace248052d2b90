// Parsing of the DEEPINFER_* environment variables with strict value checks.
#include "common/env.h"

#include <charconv>
#include <cstdlib>

#include "common/error.h"

namespace deepinfer::env {
namespace {

std::optional<std::string> getenv_lookup(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

bool parse_bool(const char* name, const std::string& value) {
  if (value == "1" || value == "true" || value == "TRUE" || value == "True" || value == "on") return true;
  if (value == "0" || value == "false" || value == "FALSE" || value == "False" || value == "off" ||
      value.empty())
    return false;
  throw_error("environment variable {}='{}' is not a boolean (use 1/0, true/false, on/off)", name, value);
}

int parse_int(const char* name, const std::string& value, int min_value, int max_value) {
  int result = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
  DI_CHECK(ec == std::errc() && end == value.data() + value.size(),
           "environment variable {}='{}' is not an integer", name, value);
  DI_CHECK(result >= min_value && result <= max_value,
           "environment variable {}={} is out of range [{}, {}]", name, result, min_value, max_value);
  return result;
}

}  // namespace

Flags parse(std::optional<std::string> (*lookup)(const char* name)) {
  Flags flags;
  if (auto v = lookup("DEEPINFER_LOG_LEVEL")) flags.log_level = *v;
  if (auto v = lookup("DEEPINFER_HF_MODEL_DIR")) flags.hf_model_dir = *v;
  if (auto v = lookup("DEEPINFER_TOKENIZER_DIR")) flags.tokenizer_dir = *v;
  if (auto v = lookup("DEEPINFER_BATCH_INVARIANT")) flags.batch_invariant = parse_bool("DEEPINFER_BATCH_INVARIANT", *v);
  if (auto v = lookup("DEEPINFER_ENABLE_MTP_VARLEN"))
    flags.enable_mtp_varlen = parse_bool("DEEPINFER_ENABLE_MTP_VARLEN", *v);
  if (auto v = lookup("DEEPINFER_USE_NEXTN_DECODE"))
    flags.use_nextn_decode = parse_int("DEEPINFER_USE_NEXTN_DECODE", *v, 0, 64);
  if (auto v = lookup("DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE")) {
    DI_CHECK(v->empty() || *v == "compact" || *v == "none",
             "environment variable DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE='{}' must be 'compact' or 'none'", *v);
    flags.yoco_prefill_truncation_mode = (*v == "none") ? "" : *v;
  }
  if (auto v = lookup("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS"))
    flags.yoco_prefill_keep_tokens = parse_int("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", *v, 1, 1 << 30);
  if (auto v = lookup("DEEPINFER_NUM_THREADS"))
    flags.num_threads = parse_int("DEEPINFER_NUM_THREADS", *v, 0, 4096);
  if (auto v = lookup("DEEPINFER_CUDA_GRAPHS")) flags.cuda_graphs = parse_bool("DEEPINFER_CUDA_GRAPHS", *v);
  if (auto v = lookup("DEEPINFER_FP8_WGMMA")) flags.fp8_wgmma = parse_bool("DEEPINFER_FP8_WGMMA", *v);
  if (auto v = lookup("DEEPINFER_MOE_FP4_WGMMA"))
    flags.moe_fp4_wgmma = parse_bool("DEEPINFER_MOE_FP4_WGMMA", *v);
  return flags;
}

const Flags& flags() {
  static const Flags parsed = parse(&getenv_lookup);
  return parsed;
}

}  // namespace deepinfer::env
