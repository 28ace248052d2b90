// libFuzzer target for the config.json parser. Input: JSON text. Checks: no crash, hang or stray
// exception (only deepinfer::Error); an accepted config serialises to the released spelling and
// parses back to the same ModelConfig; for small models the weight manifest builds with unique names.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"
#include "io/model_config.h"
#include "model/weight_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  deepinfer::io::ModelConfig config;
  try {
    config = deepinfer::io::parse_model_config(text, "fuzz.json");
  } catch (const deepinfer::Error&) {
    return 0;
  }
  try {
    if (!(deepinfer::io::parse_model_config(deepinfer::io::model_config_to_json(config), "roundtrip") == config))
      __builtin_trap();
  } catch (const deepinfer::Error&) {
    __builtin_trap();  // an accepted config must serialise to one that is accepted again
  }
  const std::int64_t blocks = config.num_layers + config.draft.num_stages;
  const std::int64_t experts = std::max(config.n_routed_experts, config.draft.n_routed_experts);
  if (blocks * (experts + 64) <= 20000) {
    try {
      std::set<std::string> names;
      for (const auto& entry : deepinfer::model::build_weight_manifest(config))
        if (!names.insert(entry.name).second) __builtin_trap();
    } catch (const deepinfer::Error&) {
      // Tensors too large to describe: reported, not crashed on.
    }
  }
  return 0;
}
