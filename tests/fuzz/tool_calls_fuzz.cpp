// libFuzzer target: the tool-call grammar front end (spec JSON with tags, tools and their
// parameter schemas) and the matcher on whatever it compiles.
#include "grammar_fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  deepinfer::grammar::fuzz::run_constraint(deepinfer::grammar::ConstraintKind::kToolCalls, data, size);
  return 0;
}
