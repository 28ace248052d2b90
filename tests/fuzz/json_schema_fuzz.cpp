// libFuzzer target: the json schema front end and the matcher on whatever it compiles.
#include "grammar_fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  deepinfer::grammar::fuzz::run_constraint(deepinfer::grammar::ConstraintKind::kJsonSchema, data, size);
  return 0;
}
