// UTF-8 repair must agree with Python's errors='replace' (maximal subparts), and the streaming
// helper must hold back exactly the completable tail.
#include <gtest/gtest.h>

#include "common/utf8.h"

namespace deepinfer::utf8 {
namespace {

const std::string kR(kReplacement);

TEST(Utf8, ReplacesEachMaximalInvalidSubpartWithOneReplacementCharacter) {
  // Expected values are Python's bytes.decode('utf-8', errors='replace').
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", "abc"},
      {"\xC3\xA9", "\xC3\xA9"},
      {"\xFF", kR},
      {"\xC0\x80", kR + kR},                       // overlong: C0 can never start a sequence
      {"\xED\xA0\x80", kR + kR + kR},              // a surrogate: ED A0 is invalid at the second byte
      {"\xF4\x90\x80\x80", kR + kR + kR + kR},     // above U+10FFFF
      {"\xF0\x9F\x98" "a", kR + "a"},              // truncated 4-byte sequence, one replacement
      {"\xE2\x82\x28", kR + "("},
      {"\xE2\x28\xA1", kR + "(" + kR},
      {"\xF0\x28\x8C\xBC", kR + "(" + kR + kR},
      {"abc\xE4\xB8", "abc" + kR},                 // truncated at the end
      {"\xE4\xB8\xE4\xB8\xAD", kR + "\xE4\xB8\xAD"},
      {"\x80\x80" "abc", kR + kR + "abc"},
      {"\xF8\xA1\xA1\xA1\xA1", kR + kR + kR + kR + kR},
  };
  for (const auto& [input, expected] : cases) {
    EXPECT_EQ(to_valid(input), expected) << "input bytes: " << ::testing::PrintToString(input);
    EXPECT_EQ(is_valid(input), input == expected);
  }
}

TEST(Utf8, IncompleteTailIsOnlyACompletablePrefix) {
  EXPECT_EQ(incomplete_tail_length(""), 0u);
  EXPECT_EQ(incomplete_tail_length("ab"), 0u);
  EXPECT_EQ(incomplete_tail_length("a\xE4"), 1u);
  EXPECT_EQ(incomplete_tail_length("a\xE4\xB8"), 2u);
  EXPECT_EQ(incomplete_tail_length("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(incomplete_tail_length("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_tail_length("\xF0\x9F"), 2u);
  EXPECT_EQ(incomplete_tail_length("\xED\xA0"), 0u);  // can never complete: a surrogate
  EXPECT_EQ(incomplete_tail_length("\xFF"), 0u);
  EXPECT_EQ(incomplete_tail_length("\x80"), 0u);
  EXPECT_EQ(incomplete_tail_length("\xC3"), 1u);
}

TEST(Utf8, EncodesAndDecodesEveryScalarValue) {
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    std::string s;
    append_code_point(s, cp);
    ASSERT_TRUE(is_valid(s)) << std::hex << static_cast<std::uint32_t>(cp);
    std::size_t pos = 0;
    ASSERT_EQ(decode_valid(s, pos), cp);
    ASSERT_EQ(pos, s.size());
  }
}

}  // namespace
}  // namespace deepinfer::utf8
