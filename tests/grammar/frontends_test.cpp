// The regex, EBNF, choice and JSON-schema front ends: what they accept and reject, and clear
// errors (naming the construct, keyword, path, line) for what they cannot enforce exactly.
#include <gtest/gtest.h>

#include "grammar/grammar_test_support.h"

namespace deepinfer::grammar {
namespace {

using testing::accepts;
using testing::compile;

void expect_error(ConstraintKind kind, const std::string& text, const std::string& fragment) {
  try {
    compile(kind, text);
    ADD_FAILURE() << "no error for " << text;
  } catch (const deepinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Regex, FullMatchWithPythonSyntax) {
  auto g = compile(ConstraintKind::kRegex, R"((?P<y>\d{4})-(0[1-9]|1[0-2])(?:T\d\d)?)");
  EXPECT_TRUE(accepts(g, "2024-07"));
  EXPECT_TRUE(accepts(g, "2024-12T23"));
  EXPECT_FALSE(accepts(g, "2024-13"));
  EXPECT_FALSE(accepts(g, "x2024-07"));
  auto cls = compile(ConstraintKind::kRegex, R"([^a-c\d]+[\u00e9-\u00ea]\.?)");
  EXPECT_TRUE(accepts(cls, "xyz\xC3\xA9"));
  EXPECT_TRUE(accepts(cls, "\xE4\xB8\xAD\xC3\xAA."));
  EXPECT_FALSE(accepts(cls, "b\xC3\xA9"));
  auto anchors = compile(ConstraintKind::kRegex, "^a{2,}b*$");
  EXPECT_TRUE(accepts(anchors, "aaab"));
  EXPECT_FALSE(accepts(anchors, "ab"));
  auto literal_brace = compile(ConstraintKind::kRegex, "x{,2}{a}");
  EXPECT_TRUE(accepts(literal_brace, "xx{a}"));
}

TEST(Regex, UnsupportedConstructsAreNamedErrors) {
  expect_error(ConstraintKind::kRegex, R"((a)\1)", "backreferences");
  expect_error(ConstraintKind::kRegex, "a(?=b)", "lookaround");
  expect_error(ConstraintKind::kRegex, R"(\bword)", "word boundaries");
  expect_error(ConstraintKind::kRegex, "(?i)abc", "inline flags");
  expect_error(ConstraintKind::kRegex, "a*+", "possessive");
  expect_error(ConstraintKind::kRegex, "(ab", "missing )");
  expect_error(ConstraintKind::kRegex, "ab)", "unbalanced");
  expect_error(ConstraintKind::kRegex, "[z-a]", "reversed");
  expect_error(ConstraintKind::kRegex, "*a", "nothing to repeat");
  expect_error(ConstraintKind::kRegex, "a{3,1}", "min repeat greater");
}

TEST(Ebnf, GbnfSyntaxWithRepetitionAndClasses) {
  auto g = compile(ConstraintKind::kEbnf,
                   "# comment\nroot ::= greeting \" \" name{1,2}\ngreeting ::= \"hi\" | \"hello\"\n"
                   "name ::= [A-Z] [a-z]* \"!\"?");
  EXPECT_TRUE(accepts(g, "hi Bob"));
  EXPECT_TRUE(accepts(g, "hello AnnBo!"));
  EXPECT_FALSE(accepts(g, "hey Bob"));
  EXPECT_FALSE(accepts(g, "hi bob"));
}

TEST(Ebnf, DirectLeftRecursionBecomesIteration) {
  auto g = compile(ConstraintKind::kEbnf, "root ::= e\ne ::= e \"+\" t | t\nt ::= t \"*\" f | f\nf ::= [0-9] | \"(\" e \")\"");
  EXPECT_TRUE(accepts(g, "1+2*3"));
  EXPECT_TRUE(accepts(g, "(1+2)*(3)"));
  EXPECT_FALSE(accepts(g, "1+"));
  EXPECT_FALSE(accepts(g, "(1"));
}

TEST(Ebnf, ErrorsNameLineColumnAndRule) {
  expect_error(ConstraintKind::kEbnf, "root ::= a\n", "rule 'a' is not defined");
  expect_error(ConstraintKind::kEbnf, "start ::= \"x\"", "no 'root' rule");
  expect_error(ConstraintKind::kEbnf, "root ::= \"x\"\nroot ::= \"y\"", "line 2 column 1");
  expect_error(ConstraintKind::kEbnf, "root ::= \"x", "unterminated string");
  expect_error(ConstraintKind::kEbnf, "root ::= a\na ::= b \"x\"\nb ::= a | \"y\"", "left recursion");
  expect_error(ConstraintKind::kEbnf, "root ::= \"a\" (= \"b\")", "lookahead");
}

TEST(Choice, ExactlyOneOfTheStrings) {
  auto g = compile(ConstraintKind::kChoice, R"(["red","green","re"])");
  EXPECT_TRUE(accepts(g, "re"));
  EXPECT_TRUE(accepts(g, "red"));
  EXPECT_FALSE(accepts(g, "gree"));
  expect_error(ConstraintKind::kChoice, "red,green", "JSON array");
}

TEST(JsonSchema, ObjectsKeepDeclaredOrderAndRequiredKeys) {
  auto g = compile(ConstraintKind::kJsonSchema,
                   R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]})");
  EXPECT_TRUE(accepts(g, R"({"b":"x"})"));
  EXPECT_TRUE(accepts(g, R"({ "a": 1, "b": "x", "c": true })"));
  EXPECT_TRUE(accepts(g, R"({"b":"x","c":false})"));
  EXPECT_FALSE(accepts(g, R"({"a":1})"));
  EXPECT_FALSE(accepts(g, R"({"b":"x","a":1})"));
  EXPECT_FALSE(accepts(g, R"({"b":"x","d":1})"));  // strict: no undeclared keys
}

TEST(JsonSchema, AdditionalPropertiesNeverReuseDeclaredNames) {
  auto g = compile(ConstraintKind::kJsonSchema,
                   R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"string"}})");
  EXPECT_TRUE(accepts(g, R"({"id":1,"x":"y"})"));
  EXPECT_TRUE(accepts(g, R"({"idx":"y"})"));
  EXPECT_FALSE(accepts(g, R"({"id":"y"})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"id":"y"})"));
}

TEST(JsonSchema, IntegerAndNumberBoundsAreExact) {
  auto g = compile(ConstraintKind::kJsonSchema, R"({"type":"integer","minimum":-12,"maximum":305})");
  for (int v : {-12, -1, 0, 9, 10, 99, 100, 299, 305}) EXPECT_TRUE(accepts(g, std::to_string(v))) << v;
  for (int v : {-13, -100, 306, 310, 1000}) EXPECT_FALSE(accepts(g, std::to_string(v))) << v;
  EXPECT_FALSE(accepts(g, "007"));
  auto x = compile(ConstraintKind::kJsonSchema, R"({"type":"number","exclusiveMinimum":0,"maximum":2})");
  for (const char* v : {"0.001", "1", "1.999", "2", "2.000"}) EXPECT_TRUE(accepts(x, v)) << v;
  for (const char* v : {"0", "0.0", "-0.5", "2.001", "3", "1e1"}) EXPECT_FALSE(accepts(x, v)) << v;
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"number","minimum":0.5})", "non-integer bound");
}

TEST(JsonSchema, StringsLengthsPatternsAndFormats) {
  auto len = compile(ConstraintKind::kJsonSchema, R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(accepts(len, R"("ab")"));
  EXPECT_TRUE(accepts(len, "\"\\n\xC3\xA9\\u0041\""));
  EXPECT_FALSE(accepts(len, R"("a")"));
  EXPECT_FALSE(accepts(len, R"("abcd")"));
  EXPECT_FALSE(accepts(len, R"("\ud83d\ude00")"));  // surrogate escapes would miscount
  auto pat = compile(ConstraintKind::kJsonSchema, R"({"type":"string","pattern":"^a\"b$"})");
  EXPECT_TRUE(accepts(pat, R"("a\"b")"));
  auto date = compile(ConstraintKind::kJsonSchema, R"({"type":"string","format":"date"})");
  EXPECT_TRUE(accepts(date, R"("2024-02-28")"));
  EXPECT_FALSE(accepts(date, R"("2024-02-30")"));
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"string","format":"int32"})", "unsupported string format 'int32'");
}

TEST(JsonSchema, ArraysPrefixItemsAndCounts) {
  auto g = compile(ConstraintKind::kJsonSchema, R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})");
  EXPECT_TRUE(accepts(g, "[1]"));
  EXPECT_TRUE(accepts(g, "[1, 2]"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, "[1,2,3]"));
  auto t = compile(ConstraintKind::kJsonSchema, R"({"type":"array","prefixItems":[{"type":"string"},{"type":"null"}]})");
  EXPECT_TRUE(accepts(t, R"(["a",null])"));
  EXPECT_FALSE(accepts(t, R"(["a",null,1])"));
}

TEST(JsonSchema, RefsRecursionEnumsAndUnions) {
  auto g = compile(ConstraintKind::kJsonSchema,
                   R"({"$defs":{"n":{"type":"object","properties":{"v":{"enum":[1,"two",null]},"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/n"})");
  EXPECT_TRUE(accepts(g, R"({"v":1,"next":{"v":"two","next":{"v":null,"next":null}}})"));
  EXPECT_FALSE(accepts(g, R"({"v":2,"next":null})"));
}

TEST(JsonSchema, UnsupportedOrInexactKeywordsAreNamedErrors) {
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"string","contentEncoding":"base64"})", "'contentEncoding' at #");
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"object","properties":{"a":{"not":{}}}})", "'not' at #/properties/a");
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"array","uniqueItems":true})", "'uniqueItems'");
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"integer","multipleOf":3})", "'multipleOf'");
  expect_error(ConstraintKind::kJsonSchema, R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", "oneOf");
  expect_error(ConstraintKind::kJsonSchema, R"({"allOf":[{"type":"integer"},{"minimum":1}]})", "allOf");
  expect_error(ConstraintKind::kJsonSchema, R"({"$ref":"#/$defs/missing"})", "does not resolve");
  expect_error(ConstraintKind::kJsonSchema, R"({"type":"strin"})", "unknown type 'strin'");
  expect_error(ConstraintKind::kJsonSchema, "{not json", "not valid JSON");
  expect_error(ConstraintKind::kJsonSchema, "false", "matches nothing");
}

TEST(JsonSchema, DiscriminatedOneOfIsAccepted) {
  auto g = compile(ConstraintKind::kJsonSchema,
                   R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k","x"]},{"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]})");
  EXPECT_TRUE(accepts(g, R"({"k":"a","x":1})"));
  EXPECT_TRUE(accepts(g, R"({"k":"b"})"));
  EXPECT_FALSE(accepts(g, R"({"k":"b","x":1})"));
}

TEST(JsonObject, AnyObjectButNotOtherValues) {
  auto g = compile(ConstraintKind::kJsonObject, "");
  EXPECT_TRUE(accepts(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "[1]"));
  EXPECT_FALSE(accepts(g, R"({"a":})"));
}

}  // namespace
}  // namespace deepinfer::grammar
