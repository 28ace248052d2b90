// python_json_dumps against Python's own json.dumps(ensure_ascii=False) output, recorded by
// tools/make_chat_fixtures.py.
#include "encoding/python_json.h"

#include "encoding/test_util.h"

namespace deepinfer::encoding {
namespace {

using testing::load_fixture;

TEST(PythonJson, MatchesPythonJsonDumpsOnRecordedValues) {
  const Json fixture = load_fixture("python_json_dumps.json");
  ASSERT_GE(fixture["cases"].size(), 10u);
  for (const Json& c : fixture["cases"]) {
    EXPECT_EQ(python_json_dumps(c["value"]), c["dumps"].get<std::string>());
  }
}

TEST(PythonJson, KeepsInsertionOrderOfKeys) {
  const Json value = Json::parse(R"({"z": 1, "a": {"y": 2, "b": 3}})");
  EXPECT_EQ(python_json_dumps(value), R"({"z": 1, "a": {"y": 2, "b": 3}})");
}

TEST(PythonJson, EscapingPiecewiseEqualsEscapingWhole) {
  const std::string text = "a\"b\\c\nd\x01\xe4\xb8\xad";
  std::string whole;
  append_json_escaped(whole, text);
  std::string pieces;
  for (const char c : text) append_json_escaped(pieces, std::string_view(&c, 1));
  EXPECT_EQ(whole, pieces);
  EXPECT_EQ(json_quote(text), "\"a\\\"b\\\\c\\nd\\u0001\xe4\xb8\xad\"");
}

}  // namespace
}  // namespace deepinfer::encoding
