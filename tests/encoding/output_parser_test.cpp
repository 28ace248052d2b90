// Output parser behaviour on whole outputs: the reasoning/content split, DSML tool calls with the
// argument JSON DeepSeek's reference decoder builds (decode_dsml_to_arguments), recovery from
// malformed output, and the shape of streamed deltas.
#include "encoding/output_parser.h"

#include "encoding/test_util.h"

namespace deepinfer::encoding {
namespace {

using namespace testing;  // NOLINT

ParserOptions options(bool thinking_open, ChatFormat format = ChatFormat::kDeepSeekV4) {
  ParserOptions o;
  o.format = format;
  o.thinking_open = thinking_open;
  return o;
}

const std::string kCalls = "<｜DSML｜tool_calls>";
const std::string kCallsEnd = "</｜DSML｜tool_calls>";

std::string invoke(std::string_view name, std::string_view params) {
  return cat("<｜DSML｜invoke name=\"", name, "\">\n", params, "</｜DSML｜invoke>\n");
}

std::string param(std::string_view key, bool is_string, std::string_view value) {
  return cat("<｜DSML｜parameter name=\"", key, "\" string=\"", is_string ? "true" : "false", "\">",
             value, "</｜DSML｜parameter>\n");
}

TEST(OutputParser, SplitsReasoningFromContentAtThinkEnd) {
  const ParsedOutput out = parse_output("Let me think.</think>The answer is 4.", options(true));
  EXPECT_EQ(out.reasoning_content, "Let me think.");
  EXPECT_EQ(out.content, "The answer is 4.");
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(OutputParser, WithoutThinkEndEverythingIsReasoning) {
  const ParsedOutput out = parse_output("still thinking </thin", options(true));
  EXPECT_EQ(out.reasoning_content, "still thinking </thin");
  EXPECT_EQ(out.content, "");
}

TEST(OutputParser, ChatModeKeepsThinkTagsAsContent) {
  const ParsedOutput out = parse_output("a</think>b", options(false));
  EXPECT_EQ(out.reasoning_content, "");
  EXPECT_EQ(out.content, "a</think>b");
}

TEST(OutputParser, RepeatedThinkOpenIsNotReasoning) {
  EXPECT_EQ(parse_output("<think>r</think>c", options(true)).reasoning_content, "r");
  EXPECT_EQ(parse_output("x<think>r</think>c", options(true)).reasoning_content, "x<think>r");
}

TEST(OutputParser, EndOfSentenceEndsTheOutput) {
  const ParsedOutput out = parse_output(cat("r</think>Hi", kEos, "junk"), options(true));
  EXPECT_EQ(out.reasoning_content, "r");
  EXPECT_EQ(out.content, "Hi");
}

TEST(OutputParser, ParsesDsmlToolCallsLikeTheReferenceDecoder) {
  const std::string text = cat(
      "Need weather.</think>\n\n", kCalls, "\n",
      invoke("get_weather", cat(param("city", true, "Oslo \"Norway\"\n"), param("days", false, "3"),
                                param("opts", false, "{\"hourly\": true, \"n\": [1, 2]}"))),
      invoke("ping", ""), kCallsEnd, kEos);
  const ParsedOutput out = parse_output(text, options(true));
  EXPECT_EQ(out.reasoning_content, "Need weather.");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].id, "call_0");
  EXPECT_EQ(out.tool_calls[0].type, "function");
  EXPECT_EQ(out.tool_calls[0].name, "get_weather");
  EXPECT_EQ(out.tool_calls[0].arguments,
            R"({"city": "Oslo \"Norway\"\n", "days": 3, "opts": {"hourly": true, "n": [1, 2]}})");
  EXPECT_EQ(out.tool_calls[1].id, "call_1");
  EXPECT_EQ(out.tool_calls[1].arguments, "{}");
}

TEST(OutputParser, ContentBeforeAndAfterBlocksAndCallsAcrossBlocks) {
  const std::string text = cat("Sure.\n\n", kCalls, "\n", invoke("a", param("x", false, "1")),
                               kCallsEnd, "\nand\n", kCalls, invoke("b", ""), kCallsEnd);
  ParserOptions o = options(false);
  o.tool_call_id_prefix = "req7-";
  const ParsedOutput out = parse_output(text, o);
  EXPECT_EQ(out.content, "Sure.\nand");
  ASSERT_EQ(out.tool_calls.size(), 2u);
  EXPECT_EQ(out.tool_calls[0].id, "req7-0");
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"x": 1})");
  EXPECT_EQ(out.tool_calls[1].id, "req7-1");
  EXPECT_EQ(out.tool_calls[1].name, "b");
}

TEST(OutputParser, NonStringValueThatIsNotJsonBecomesAString) {
  const std::string text =
      cat(kCalls, invoke("run", cat(param("cmd", false, "ls -la | wc"), param("n", false, " 7 "))),
          kCallsEnd);
  const ParsedOutput out = parse_output(text, options(false));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"cmd": "ls -la | wc", "n": 7})");
}

TEST(OutputParser, NonStringValueWithANulByteIsAString) {
  // Found by the fuzzer: nlohmann's lexer stops at NUL, so "1\0x" validated as the JSON 1.
  const std::string value("1\0x", 3);
  const std::string text = cat(kCalls, invoke("f", param("n", false, value)), kCallsEnd);
  const ParsedOutput out = parse_output(text, options(false));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"n": "1\u0000x"})");
  EXPECT_TRUE(nlohmann::json::accept(out.tool_calls[0].arguments));
}

TEST(OutputParser, RepeatedParameterKeepsTheFirst) {
  const std::string text =
      cat(kCalls, invoke("f", cat(param("a", true, "1"), param("a", false, "2"))), kCallsEnd);
  EXPECT_EQ(parse_output(text, options(false)).tool_calls.at(0).arguments, R"({"a": "1"})");
}

TEST(OutputParser, BlockThatNeverStartsACallStaysText) {
  const std::string bad = cat("\n\n", kCalls, "\nhello", kCallsEnd, " bye");
  ParsedOutput out = parse_output(cat("x", bad), options(false));
  EXPECT_EQ(out.content, cat("x", bad));
  EXPECT_TRUE(out.tool_calls.empty());
  // Inside reasoning, such a block stays reasoning.
  out = parse_output(cat("r", bad, "</think>c"), options(true));
  EXPECT_EQ(out.reasoning_content, cat("r", bad));
  EXPECT_EQ(out.content, "c");
  // A second block after a broken one still parses.
  out = parse_output(cat(kCalls, "oops ", kCalls, invoke("f", ""), kCallsEnd), options(false));
  EXPECT_EQ(out.content, cat(kCalls, "oops "));
  ASSERT_EQ(out.tool_calls.size(), 1u);
}

TEST(OutputParser, GarbageAfterACommittedCallClosesItAndStaysContent) {
  const std::string text = cat(kCalls, "\n<｜DSML｜invoke name=\"f\">\n", param("a", true, "x"),
                               "garbage", kCallsEnd);
  const ParsedOutput out = parse_output(text, options(false));
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"a": "x"})");
  EXPECT_EQ(out.content, cat("garbage", kCallsEnd));
}

TEST(OutputParser, OutputCutInsideAValueStillGivesJsonArguments) {
  const std::string text = cat(kCalls, "<｜DSML｜invoke name=\"write\">\n",
                               "<｜DSML｜parameter name=\"body\" string=\"true\">partial te");
  EXPECT_EQ(parse_output(text, options(false)).tool_calls.at(0).arguments,
            R"({"body": "partial te"})");
  const std::string cut_header = cat(kCalls, "<｜DSML｜invoke name=\"wri");
  const ParsedOutput out = parse_output(cut_header, options(false));
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, cut_header);
}

TEST(OutputParser, ToolCallsOffLeavesDsmlAsContent) {
  ParserOptions o = options(false);
  o.tool_calls = false;
  const std::string text = cat(kCalls, invoke("f", ""), kCallsEnd);
  EXPECT_EQ(parse_output(text, o).content, text);
}

TEST(OutputParser, V41UsesTheSpacedTags) {
  const std::string text =
      "r</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"x\" "
      "string=\"false\">[1]</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  const ParsedOutput out = parse_output(text, options(true, ChatFormat::kDeepSeekV41));
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.tool_calls.size(), 1u);
  EXPECT_EQ(out.tool_calls[0].arguments, R"({"x": [1]})");
  // V4 tags are plain text to a V4.1 parser.
  const std::string v4_block = cat(kCalls, invoke("f", ""), kCallsEnd);
  EXPECT_EQ(parse_output(v4_block, options(false, ChatFormat::kDeepSeekV41)).content, v4_block);
}

TEST(OutputParser, HoldsBackAPossibleMarkerUntilItIsDecided) {
  OutputParser parser(options(true));
  OutputDelta d = parser.feed("abc</th");
  EXPECT_EQ(d.reasoning_content, "abc");
  EXPECT_FALSE(parser.reasoning_done());
  d = parser.feed("ink>x\n");
  EXPECT_EQ(d.reasoning_content, "");
  EXPECT_EQ(d.content, "x");  // "\n" may start "\n\n<｜DSML｜tool_calls>"
  EXPECT_TRUE(parser.reasoning_done());
  d = parser.feed(cat("\n<｜end▁of▁sen"));
  EXPECT_EQ(d.content, "");
  d = parser.finish();
  EXPECT_EQ(d.content, "\n\n<｜end▁of▁sen");
  EXPECT_TRUE(parser.finished());
  EXPECT_TRUE(parser.feed("more").empty());
}

TEST(OutputParser, StreamsToolCallsTheOpenAiWay) {
  const std::string text = cat(kCalls, invoke("f", cat(param("s", true, "hello world"),
                                                       param("n", false, "42"))),
                               kCallsEnd);
  OutputParser parser(options(false));
  std::vector<ToolCallDelta> deltas;
  for (const char c : text) {
    for (ToolCallDelta& d : parser.feed(std::string_view(&c, 1)).tool_calls) {
      deltas.push_back(std::move(d));
    }
  }
  for (ToolCallDelta& d : parser.finish().tool_calls) deltas.push_back(std::move(d));
  ASSERT_GT(deltas.size(), 3u);  // string values stream piece by piece
  EXPECT_EQ(deltas[0].id, "call_0");
  EXPECT_EQ(deltas[0].name, "f");
  std::string arguments;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    EXPECT_EQ(deltas[i].index, 0);
    if (i > 0) {
      EXPECT_TRUE(deltas[i].id.empty() && deltas[i].name.empty());
    }
    arguments += deltas[i].arguments;
  }
  EXPECT_EQ(arguments, R"({"s": "hello world", "n": 42})");
  EXPECT_EQ(parser.result().tool_calls.at(0).arguments, arguments);
}

}  // namespace
}  // namespace deepinfer::encoding
