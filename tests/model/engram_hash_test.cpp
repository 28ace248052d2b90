// V4.1 Engram hashing (src/model/engram) against NumPy and HF transformers: NumPy's default_rng
// bounded int64 draws and the hash multipliers, HF's token normalisation and the whole compressed
// token map of the DeepSeek tokenizer (tests/model/engram/engram_hash.json, made by
// tools/make_engram_fixtures.py), the released bucket primes, and the row-id rules.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "model/engram/engram_hash.h"
#include "model/engram/numpy_rng.h"
#include "model/engram/token_map.h"
#include "tokenizer/test_tokenizers.h"

namespace deepinfer::model::engram {
namespace {

const nlohmann::json& fixture() {
  static const nlohmann::json root = nlohmann::json::parse(
      std::ifstream(std::filesystem::path(DEEPINFER_SOURCE_DIR) / "tests/model/engram/engram_hash.json"));
  return root;
}

std::uint64_t u64(const nlohmann::json& v) { return std::stoull(v.get<std::string>()); }

TEST(NumpyRng, BoundedInt64DrawsEqualNumpyDefaultRngForEverySeedAndBoundPath) {
  const auto& cases = fixture().at("rng_integers");
  ASSERT_GE(cases.size(), 50u);
  for (const auto& c : cases) {
    const auto high = static_cast<std::int64_t>(u64(c.at("high")));
    std::vector<std::int64_t> want;
    for (const auto& v : c.at("values")) want.push_back(std::stoll(v.get<std::string>()));
    EXPECT_EQ(default_rng_integers(u64(c.at("seed")), 0, high, want.size()), want)
        << "seed " << c.at("seed") << " high " << high;
  }
}

TEST(NumpyRng, RejectsAnEmptyRange) { EXPECT_THROW(default_rng_integers(1, 5, 5, 1), Error); }

TEST(EngramHash, MultipliersEqualHfForEveryLayerOfTheReleasedVocabulary) {
  for (const auto& [layer, values] : fixture().at("multipliers_99092").items()) {
    std::vector<std::int64_t> want;
    for (const auto& v : values) want.push_back(std::stoll(v.get<std::string>()));
    EXPECT_EQ(hash_multipliers(std::stoi(layer), 4, 99092), want) << "layer " << layer;
    for (const auto m : want) EXPECT_EQ(m % 2, 1);
  }
}

TEST(EngramTokenMap, NormalisationEqualsHfTokenizersNormalizers) {
  for (const auto& example : fixture().at("normalize_examples"))
    EXPECT_EQ(normalize_token_text(example[0].get<std::string>()), example[1].get<std::string>())
        << "input " << example[0];
}

TEST(EngramTokenMap, RejectsInvalidUtf8) { EXPECT_THROW(normalize_token_text("a\xff"), Error); }

const CompressedTokenMap& deepseek_map() {
  static const CompressedTokenMap map = build_compressed_token_map(tokenizer::testing::deepseek_tokenizer());
  return map;
}

TEST(EngramTokenMap, WholeMapOfTheDeepseekTokenizerEqualsHf) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const auto& want = fixture().at("token_map");
  const CompressedTokenMap& map = deepseek_map();
  ASSERT_EQ(map.ids.size(), want.at("len_tokenizer").get<std::size_t>());
  EXPECT_EQ(map.size, want.at("compressed_size").get<std::int64_t>());
  for (const auto& entry : want.at("sample"))
    ASSERT_EQ(map.ids.at(entry[0].get<std::size_t>()), entry[1].get<std::int32_t>()) << "token " << entry[0];
  EXPECT_EQ(fmt::format("{:016x}", token_map_fingerprint(map.ids)), want.at("fnv1a64_le_int32").get<std::string>());
}

io::ModelConfig engram_config(std::vector<int> layers, std::int64_t vocab_size, int max_ngram, int heads) {
  io::ModelConfig c;
  c.arch = io::ModelArch::kDeepseekV41;
  c.engram.layer_ids = std::move(layers);
  c.engram.vocab_size = vocab_size;
  c.engram.max_ngram_size = max_ngram;
  c.engram.n_heads = heads;
  c.engram.head_dim = 32;
  c.engram.pad_token_id = 2;
  return c;
}

TEST(EngramHash, ReleasedBucketPrimesAreConsecutiveAndSumToTheTableSizes) {
  const io::ModelConfig c = engram_config({1, 14}, 16000000, 4, 8);
  std::vector<std::int32_t> identity(129280);
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<std::int32_t>(i);
  const EngramHasher hasher(c, identity, 129280);
  ASSERT_EQ(hasher.columns(), 24);
  std::int64_t previous = 16000000, sums[2] = {0, 0};
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_EQ(hasher.primes(layer).size(), 24u);
    for (std::size_t i = 0; i < 24; ++i) {
      const std::int64_t p = hasher.primes(layer)[i];
      EXPECT_GT(p, previous);
      for (std::int64_t q = previous + 1; q < p; ++q) {  // no prime skipped
        bool composite = false;
        for (std::int64_t d = 2; d * d <= q && !composite; ++d) composite = q % d == 0;
        EXPECT_TRUE(composite) << q << " is prime but was skipped";
      }
      EXPECT_EQ(hasher.offsets(layer)[i], sums[layer]);
      sums[layer] += p;
      previous = p;
    }
  }
  EXPECT_EQ(sums[0], 384006168);
  EXPECT_EQ(sums[1], 384016682);
}

TEST(EngramHash, AConfigStatingAnotherCompressedVocabularyIsRefused) {
  // The released config states 99,092 (the V4.1 tokenizer); this tokenizer's map has 98,627 ids, and
  // hashing with it would silently address other rows (HF raises too).
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  io::ModelConfig c = engram_config({1, 14}, 16000000, 4, 8);
  c.engram.compressed_vocab_size = 99092;
  EXPECT_THROW(EngramHasher(c, deepseek_map()), Error);
  c.engram.compressed_vocab_size = deepseek_map().size;
  const EngramHasher hasher(c, deepseek_map());
  EXPECT_EQ(hasher.multipliers(0), hash_multipliers(1, 4, 98627));
}

// A tiny map: token t -> t / 2 (so 0 and 1 share an id), pad token 2 -> 1.
struct Tiny {
  io::ModelConfig config = engram_config({0, 3}, 100, 4, 2);
  EngramHasher hasher{config, [] {
                        std::vector<std::int32_t> m(40);
                        for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::int32_t>(i / 2);
                        return m;
                      }(),
                      20};
};

std::vector<std::int32_t> rows(const EngramHasher& h, int layer, std::vector<std::int32_t> history,
                               std::int64_t first, std::vector<std::int32_t> tokens) {
  std::vector<std::int32_t> out(tokens.size() * static_cast<std::size_t>(h.columns()));
  h.row_ids(layer, history, first, tokens, out);
  return out;
}

TEST(EngramHash, RowIdsFollowTheRollingXorOfOddMultipliedCompressedIds) {
  const Tiny t;
  const auto& m = t.hasher.multipliers(1);
  // Position 5 of [.., 7, 9, 11 | 13]: x = cmap(13, 11, 9, 7) = 6, 5, 4, 3.
  const auto got = rows(t.hasher, 1, {7, 9, 11}, 5, {13});
  const std::int64_t h2 = (6 * m[0]) ^ (5 * m[1]), h3 = h2 ^ (4 * m[2]), h4 = h3 ^ (3 * m[3]);
  const std::int64_t hashes[3] = {h2, h3, h4};
  for (int col = 0; col < 6; ++col) {
    const auto p = t.hasher.primes(1)[static_cast<std::size_t>(col)];
    EXPECT_EQ(got[static_cast<std::size_t>(col)], hashes[col / 2] % p + t.hasher.offsets(1)[static_cast<std::size_t>(col)]);
  }
}

TEST(EngramHash, SequenceStartAndDeadTokensPadEveryFurtherLookBack) {
  const Tiny t;
  // Position 1: look-backs 2 and 3 are before the start -> pad; equal to a history of DEAD tokens.
  EXPECT_EQ(rows(t.hasher, 0, {8}, 1, {10}), rows(t.hasher, 0, {kDeadToken, kDeadToken, 8}, 5, {10}));
  // A DEAD token at look-back 1 pads look-backs 1..3 whatever lies before it.
  EXPECT_EQ(rows(t.hasher, 0, {20, 22, kDeadToken}, 9, {10}), rows(t.hasher, 0, {30, 32, kDeadToken}, 9, {10}));
  // The pad is the compressed id of engram_pad_id (2 -> 1), so token 3 (-> 1) behind a DEAD token
  // hashes like the padded look-back.
  EXPECT_EQ(rows(t.hasher, 0, {}, 0, {10}), rows(t.hasher, 0, {3, 3, 3}, 3, {10}));
}

TEST(EngramHash, ChunkedRowIdsEqualOneShotRowIdsGivenTheLastThreeIds) {
  const Tiny t;
  const std::vector<std::int32_t> ids = {0, 5, 7, 7, 39, 12, 1, 1, 1, 30, 2, 17};
  for (int layer = 0; layer < 2; ++layer) {
    const auto whole = rows(t.hasher, layer, {}, 0, ids);
    for (std::size_t chunk : {1u, 2u, 5u}) {
      std::vector<std::int32_t> joined;
      for (std::size_t p = 0; p < ids.size(); p += chunk) {
        const std::size_t n = std::min(chunk, ids.size() - p);
        const std::vector<std::int32_t> history(ids.begin() + static_cast<std::ptrdiff_t>(p - std::min<std::size_t>(p, 3)),
                                                ids.begin() + static_cast<std::ptrdiff_t>(p));
        const auto part = rows(t.hasher, layer, history, static_cast<std::int64_t>(p),
                               {ids.begin() + static_cast<std::ptrdiff_t>(p), ids.begin() + static_cast<std::ptrdiff_t>(p + n)});
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, whole) << "layer " << layer << " chunk " << chunk;
    }
    for (std::size_t i = 0; i < whole.size(); ++i) {
      const auto col = i % static_cast<std::size_t>(t.hasher.columns());
      EXPECT_GE(whole[i], t.hasher.offsets(layer)[col]);
      EXPECT_LT(whole[i], t.hasher.offsets(layer)[col] + t.hasher.primes(layer)[col]);
    }
  }
}

TEST(EngramHash, RejectsBadInputsWithErrors) {
  const Tiny t;
  std::vector<std::int32_t> out(6);
  EXPECT_THROW(t.hasher.row_ids(0, std::vector<std::int32_t>{1}, 2, std::vector<std::int32_t>{3}, out), Error);
  EXPECT_THROW(t.hasher.row_ids(0, {}, 0, std::vector<std::int32_t>{40}, out), Error);
  EXPECT_THROW(t.hasher.row_ids(2, {}, 0, std::vector<std::int32_t>{4}, out), Error);
  EXPECT_THROW(t.hasher.row_ids(0, {}, 0, std::vector<std::int32_t>{4, 5}, out), Error);
  io::ModelConfig stated = t.config;
  stated.engram.compressed_vocab_size = 99092;
  EXPECT_THROW(EngramHasher(stated, std::vector<std::int32_t>(40, 0), 20), Error);
  EXPECT_THROW(EngramHasher(t.config, std::vector<std::int32_t>(40, 25), 20), Error);
  EXPECT_THROW(EngramHasher(io::ModelConfig{}, std::vector<std::int32_t>(40, 0), 20), Error);
}

}  // namespace
}  // namespace deepinfer::model::engram
