// libFuzzer target: arbitrary bytes as tokenizer.json. Loading must either succeed or throw
// deepinfer::Error (never crash, hang or throw anything else); a loaded tokenizer must encode and
// decode a fixed text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const auto tok = deepinfer::tokenizer::Tokenizer::from_json(json, {}, "fuzz.json");
    const auto ids = tok.encode("Hello, 世界! 123 <｜User｜> \xFF", true);
    (void)tok.decode(ids, true);
  } catch (const deepinfer::Error&) {
    // the expected way to reject bad input
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_json_fuzz: unexpected exception type: %s\n", e.what());
    std::abort();
  }
  return 0;
}
