// libFuzzer target for V4.1 Engram hashing. Input: bytes. Checks: normalize_token_text accepts any
// valid UTF-8 (else throws deepinfer::Error only) and yields valid UTF-8 that normalises again
// without error; row ids of a tiny hasher over ids drawn from the input (some DEAD) stay inside
// their buckets, and token-by-token hashing from the last ids equals one-shot hashing.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "model/engram/engram_hash.h"
#include "model/engram/token_map.h"

namespace {

using deepinfer::model::engram::EngramHasher;

const EngramHasher& hasher() {
  static const EngramHasher h = [] {
    deepinfer::io::ModelConfig c;
    c.arch = deepinfer::io::ModelArch::kDeepseekV41;
    c.engram.layer_ids = {1, 7};
    c.engram.vocab_size = 50;
    c.engram.max_ngram_size = 4;
    c.engram.n_heads = 3;
    c.engram.head_dim = 32;
    c.engram.pad_token_id = 2;
    std::vector<std::int32_t> cmap(64);
    for (std::size_t i = 0; i < cmap.size(); ++i) cmap[i] = static_cast<std::int32_t>((i * 7) % 40);
    return EngramHasher(c, cmap, 40);
  }();
  return h;
}

void check_row_ids(const std::uint8_t* data, std::size_t size) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < size && ids.size() < 64; ++i)
    ids.push_back(data[i] >= 250 ? deepinfer::model::engram::kDeadToken : static_cast<std::int32_t>(data[i] % 64));
  const EngramHasher& h = hasher();
  const auto cols = static_cast<std::size_t>(h.columns());
  for (int layer = 0; layer < h.num_layers(); ++layer) {
    std::vector<std::int32_t> whole(ids.size() * cols), one(cols);
    h.row_ids(layer, {}, 0, ids, whole);
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const std::size_t from = t - std::min<std::size_t>(t, 3);
      h.row_ids(layer, std::span(ids).subspan(from, t - from), static_cast<std::int64_t>(t), std::span(ids).subspan(t, 1),
                one);
      for (std::size_t k = 0; k < cols; ++k) {
        const std::int32_t row = whole[t * cols + k];
        if (row != one[k] || row < h.offsets(layer)[k] || row >= h.offsets(layer)[k] + h.primes(layer)[k])
          __builtin_trap();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const std::string once = deepinfer::model::engram::normalize_token_text(text);
    try {
      (void)deepinfer::model::engram::normalize_token_text(once);
    } catch (const deepinfer::Error&) {
      __builtin_trap();  // the output of a normalisation must be valid UTF-8
    }
  } catch (const deepinfer::Error&) {
  }
  check_row_ids(data, size);
  return 0;
}
