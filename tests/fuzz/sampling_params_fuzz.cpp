// libFuzzer target: SamplingParams from arbitrary JSON. Only deepinfer::Error may escape parsing
// and validation, and parameters that validate must survive a round trip through JSON.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/sampling_params.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  deepinfer::engine::SamplingParams params;
  try {
    params = deepinfer::engine::SamplingParams::from_json(j);
    params.validate(1000, 20);
  } catch (const deepinfer::Error&) {
    return 0;
  }
  const deepinfer::engine::SamplingParams back = deepinfer::engine::SamplingParams::from_json(params.to_json());
  if (back.to_json() != params.to_json()) __builtin_trap();
  return 0;
}
