// The regex engine must iterate matches like HF's Oniguruma binding and classify every code point
// as Oniguruma does (fixture from tools/make_tokenizer_fixtures.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "common/error.h"
#include "common/utf8.h"
#include "tokenizer/unicode_regex.h"

namespace deepinfer::tokenizer {
namespace {

std::vector<std::pair<std::size_t, std::size_t>> spans(const UnicodeRegex& re, std::string_view text) {
  std::vector<MatchSpan> matches;
  re.find_all(text, matches);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& m : matches) out.emplace_back(m.start, m.end);
  return out;
}

using Spans = std::vector<std::pair<std::size_t, std::size_t>>;

TEST(UnicodeRegex, EmptyMatchRightAfterAMatchIsSkippedLikeOniguruma) {
  const UnicodeRegex re("a*", "test");
  EXPECT_EQ(spans(re, "bab"), (Spans{{0, 0}, {1, 2}, {3, 3}}));
  EXPECT_EQ(spans(re, ""), (Spans{{0, 0}}));
  EXPECT_EQ(spans(re, "aa"), (Spans{{0, 2}}));
  // Empty matches step over whole characters, never into the middle of one.
  EXPECT_EQ(spans(UnicodeRegex("x*", "test"), "é"), (Spans{{0, 0}, {2, 2}}));
}

TEST(UnicodeRegex, LookaheadSeesOnlyTheSubject) {
  const UnicodeRegex re(R"(\s+(?!\S)|\s+)", "test");
  EXPECT_EQ(spans(re, "a   b"), (Spans{{1, 3}, {3, 4}}));
  EXPECT_EQ(spans(re, "a   "), (Spans{{1, 4}}));
}

TEST(UnicodeRegex, LiteralPatternsMatchVerbatim) {
  const UnicodeRegex re("a.b", "test", UnicodeRegex::Options{.literal = true, .anchored = false});
  EXPECT_EQ(spans(re, "axb a.b"), (Spans{{4, 7}}));
}

TEST(UnicodeRegex, RewritesClassesToOnigurumaTablesOnlyWhereTheyDiffer) {
  const std::string letters = to_oniguruma_classes(R"(\p{L})");
  EXPECT_EQ(letters.rfind(R"([\p{L}\x{1c89}-\x{1c8a})", 0), 0u) << letters;
  EXPECT_EQ(letters.back(), ']');
  const std::string in_class = to_oniguruma_classes(R"([^\r\n\p{N}])");
  EXPECT_EQ(in_class.rfind(R"([^\r\n\p{N}\x{10d40}-\x{10d49})", 0), 0u) << in_class;
  EXPECT_EQ(to_oniguruma_classes(R"(\p{Lu}\d\Q\p{L}\E[]\p{Han}])"), R"(\p{Lu}\d\Q\p{L}\E[]\p{Han}])");
  EXPECT_EQ(to_oniguruma_classes(R"(\s)").find("180e"), std::string::npos);
}

TEST(UnicodeRegex, ReportsBadPatternsWithTheirLocation) {
  try {
    UnicodeRegex("(unclosed", "pre_tokenizer.pretokenizers[0].pattern");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre_tokenizer.pretokenizers[0].pattern"), std::string::npos) << e.what();
  }
}

// Every code point, every class: our rewritten PCRE2 class vs Oniguruma's as HF tokenizers ran it.
TEST(UnicodeRegex, ClassifiesEveryCodePointLikeHfTokenizers) {
  std::ifstream in(std::string(DEEPINFER_SOURCE_DIR) + "/tests/tokenizer/fixtures/unicode_classes.json");
  ASSERT_TRUE(in.good());
  const auto expected = nlohmann::json::parse(in);
  std::string all;
  std::vector<std::size_t> offsets;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    offsets.push_back(all.size());
    utf8::append_code_point(all, cp);
  }
  std::vector<char32_t> cp_of_offset(all.size() + 1, 0);
  {
    std::size_t i = 0;
    for (char32_t cp = 0; cp < 0x110000; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      cp_of_offset[offsets[i++]] = cp;
    }
  }
  const std::vector<std::pair<std::string, std::string>> classes = {
      {"L", R"(\p{L})"}, {"N", R"(\p{N})"}, {"P", R"(\p{P})"}, {"S", R"(\p{S})"}, {"M", R"(\p{M})"}, {"s", R"(\s)"}};
  for (const auto& [name, pattern] : classes) {
    std::vector<char32_t> want;
    for (const auto& range : expected.at(name))
      for (auto cp = range[0].get<std::uint32_t>(); cp <= range[1].get<std::uint32_t>(); ++cp) want.push_back(cp);
    std::vector<MatchSpan> matches;
    UnicodeRegex(pattern, "test").find_all(all, matches);
    std::vector<char32_t> got;
    for (const auto& m : matches) got.push_back(cp_of_offset[m.start]);
    ASSERT_EQ(got.size(), want.size()) << "class " << pattern;
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], want[i]) << "class " << pattern << " differs at U+" << std::hex << static_cast<std::uint32_t>(want[i]);
  }
}

}  // namespace
}  // namespace deepinfer::tokenizer
