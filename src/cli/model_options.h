// Options shared by the commands that run a model: --model and --mode (exact | reference-qat).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "model/deepseek_v4/numerics.h"

namespace deepinfer::cli {

struct ModelOptions {
  std::string model_dir;
  std::string mode;  // empty: the checkpoint's default

  // Adds --model (required) and --mode to `sub`.
  void add_to(CLI::App* sub) {
    sub->add_option("--model", model_dir, "Model directory (config.json + safetensors)")->required();
    sub->add_option("--mode", mode,
                    "Numerics: exact (HF transformers, fp32 activations) or reference-qat (DeepSeek's quantise-"
                    "dequantise steps); default: reference-qat for a quantised checkpoint, else exact")
        ->check(CLI::IsMember({"exact", "reference-qat"}));
  }
  std::optional<model::v4::NumericMode> numeric_mode() const {
    if (mode.empty()) return std::nullopt;
    return model::v4::parse_numeric_mode(mode);
  }
};

}  // namespace deepinfer::cli
