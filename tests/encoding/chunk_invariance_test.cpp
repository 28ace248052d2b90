// The output parser gives the same result whatever the streaming chunk boundaries: every output
// of a corpus (well-formed and malformed) is re-split at every byte offset, byte by byte, and at
// random multi-splits. Also: encoder -> parser round trips of assistant turns with tool calls.
#include "encoding/chat_encoder.h"
#include "encoding/output_parser.h"
#include "encoding/test_util.h"

#include <random>

namespace deepinfer::encoding {
namespace {

using namespace testing;  // NOLINT

struct Case {
  std::string name;
  std::string text;
  ParserOptions options;
};

ParserOptions opts(bool thinking, ChatFormat format = ChatFormat::kDeepSeekV4,
                   bool tool_calls = true) {
  ParserOptions o;
  o.format = format;
  o.thinking_open = thinking;
  o.tool_calls = tool_calls;
  return o;
}

std::vector<Case> corpus() {
  const std::string b = "<｜DSML｜tool_calls>", e = "</｜DSML｜tool_calls>";
  const std::string inv = "<｜DSML｜invoke name=\"", inv_end = "</｜DSML｜invoke>";
  const std::string p = "<｜DSML｜parameter name=\"", p_end = "</｜DSML｜parameter>";
  const std::string call_a = cat(inv, "get_weather\">\n", p, "city\" string=\"true\">Zürich \"Z\"\n",
                                 "tab\t😀 <｜tool", p_end, "\n", p, "n\" string=\"false\">[1, {\"k\": ",
                                 "null}]", p_end, "\n", inv_end, "\n");
  const std::string call_b = cat(inv, "ping\">\n", inv_end);
  return {
      {"reasoning_content_and_calls", cat("I should check </thin the weather.</think>Sure.\n\n", b,
                                          "\n", call_a, call_b, "\n", e, kEos), opts(true)},
      {"content_only_thinking", "<think>plan</think>Answer < 5 and \n\n a </tool_calls>",
       opts(true)},
      {"chat_mode_content", cat("Hello\n\n", "</think><think>\n<｜DSML｜ x", kEos, "ignored"),
       opts(false)},
      {"block_without_call", cat("x\n\n", b, "\nhello ", e, " tail\n", b, call_b, e), opts(false)},
      {"broken_block_inside_reasoning", cat("r\n", b, " nope", "</think>c"), opts(true)},
      {"garbage_after_call", cat(b, "\n", inv, "f\">\n", p, "a\" string=\"true\">v", p_end,
                                 "\n<｜DSML｜paramete garbage ", e, " after"), opts(false)},
      {"truncated_string_value", cat("t</think>", b, "\n", inv, "w\">\n", p,
                                     "body\" string=\"true\">line1\nline2 </｜DSML｜param"),
       opts(true)},
      {"truncated_json_value", cat(b, inv, "w\">", p, "x\" string=\"false\">{\"a\": [1,"),
       opts(false)},
      {"truncated_header", cat("c", b, "\n", inv, "na"), opts(false)},
      {"duplicates_and_bad_json", cat(b, inv, "f\">", p, "a\" string=\"false\">not json", p_end,
                                      p, "a\" string=\"true\">again", p_end, p,
                                      "b\" string=\"false\">  -1.5e3 ", p_end, inv_end, e),
       opts(false)},
      {"bad_string_flag", cat(b, inv, "f\">", p, "a\" string=\"maybe\">v", p_end, inv_end, e),
       opts(false)},
      {"two_blocks_and_eos_inside", cat(b, call_b, e, "mid", b, call_b, e, "<｜end▁of▁sent",
                                        kEos, b), opts(false)},
      {"tool_calls_disabled", cat("r</think>", b, call_b, e), opts(true, ChatFormat::kDeepSeekV4,
                                                                  false)},
      {"v41_block", cat("r</think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n",
                        "<｜DSML｜ parameter name=\"x\" string=\"true\">a\"b</｜DSML｜ parameter>\n",
                        "</｜DSML｜ invoke>\n</｜DSML｜ calls>", kEos),
       opts(true, ChatFormat::kDeepSeekV41)},
      {"partial_markers_everywhere", "<<\n\n<｜\n<｜DSML｜tool<｜end<think></think</think>x<",
       opts(true)},
  };
}

bool same(const ParsedOutput& a, const ParsedOutput& b) {
  if (a.reasoning_content != b.reasoning_content || a.content != b.content ||
      a.tool_calls.size() != b.tool_calls.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.tool_calls.size(); ++i) {
    const ParsedToolCall& x = a.tool_calls[i];
    const ParsedToolCall& y = b.tool_calls[i];
    if (x.id != y.id || x.name != y.name || x.arguments != y.arguments) return false;
  }
  return true;
}

std::string describe(const ParsedOutput& out) {
  std::string s = "reasoning=[" + out.reasoning_content + "] content=[" + out.content + "]";
  for (const ParsedToolCall& call : out.tool_calls) {
    s += " call{" + call.id + "," + call.name + "," + call.arguments + "}";
  }
  return s;
}

// Feeds `text` cut at `cuts` (sorted offsets) and checks the delta protocol on the way.
ParsedOutput parse_in_pieces(const std::string& text, const std::vector<std::size_t>& cuts,
                             const ParserOptions& options) {
  OutputParser parser(options);
  int started = 0;
  auto check = [&](const OutputDelta& delta) {
    for (const ToolCallDelta& d : delta.tool_calls) {
      if (d.index == started) {  // a call's first delta names it
        EXPECT_FALSE(d.id.empty());
        EXPECT_FALSE(d.name.empty());
        ++started;
      } else {
        EXPECT_LT(d.index, started);
        EXPECT_TRUE(d.id.empty() && d.name.empty());
      }
    }
  };
  std::size_t begin = 0;
  for (const std::size_t cut : cuts) {
    check(parser.feed(std::string_view(text).substr(begin, cut - begin)));
    begin = cut;
  }
  check(parser.feed(std::string_view(text).substr(begin)));
  check(parser.finish());
  return parser.result();
}

TEST(OutputParserChunks, EverySplitGivesTheOneShotResult) {
  for (const Case& c : corpus()) {
    SCOPED_TRACE(c.name);
    const ParsedOutput whole = parse_output(c.text, c.options);
    for (const ParsedToolCall& call : whole.tool_calls) {
      EXPECT_TRUE(nlohmann::json::accept(call.arguments)) << call.arguments;
    }
    for (std::size_t k = 0; k <= c.text.size(); ++k) {
      const ParsedOutput split = parse_in_pieces(c.text, {k}, c.options);
      ASSERT_TRUE(same(whole, split)) << "split at " << k << "\nwhole: " << describe(whole)
                                      << "\nsplit: " << describe(split);
    }
    std::vector<std::size_t> every_byte(c.text.size());
    for (std::size_t k = 0; k < c.text.size(); ++k) every_byte[k] = k;
    ASSERT_TRUE(same(whole, parse_in_pieces(c.text, every_byte, c.options)));
  }
}

TEST(OutputParserChunks, RandomMultiSplitsGiveTheOneShotResult) {
  std::mt19937 rng(20260917);
  for (const Case& c : corpus()) {
    SCOPED_TRACE(c.name);
    const ParsedOutput whole = parse_output(c.text, c.options);
    std::uniform_int_distribution<std::size_t> offset(0, c.text.size());
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::size_t> cuts(1 + trial % 12);
      for (std::size_t& cut : cuts) cut = offset(rng);
      std::sort(cuts.begin(), cuts.end());
      const ParsedOutput split = parse_in_pieces(c.text, cuts, c.options);
      ASSERT_TRUE(same(whole, split)) << "trial " << trial << "\nwhole: " << describe(whole)
                                      << "\nsplit: " << describe(split);
    }
  }
}

TEST(OutputParserChunks, CorpusOutcomesAreTheIntendedOnes) {
  const std::vector<Case> cases = corpus();
  const ParsedOutput first = parse_output(cases[0].text, cases[0].options);
  EXPECT_EQ(first.reasoning_content, "I should check </thin the weather.");
  EXPECT_EQ(first.content, "Sure.");
  ASSERT_EQ(first.tool_calls.size(), 2u);
  EXPECT_EQ(first.tool_calls[0].arguments,
            "{\"city\": \"Zürich \\\"Z\\\"\\ntab\\t😀 <｜tool\", \"n\": [1, {\"k\": null}]}");
  const ParsedOutput dup = parse_output(cases[9].text, cases[9].options);
  EXPECT_EQ(dup.tool_calls.at(0).arguments, R"({"a": "not json", "b": -1.5e3})");
  const ParsedOutput bad_flag = parse_output(cases[10].text, cases[10].options);
  ASSERT_EQ(bad_flag.tool_calls.size(), 1u);
  EXPECT_EQ(bad_flag.tool_calls[0].arguments, "{}");  // the broken parameter ends the call
}

// Assistant turns rendered by the encoder parse back into the same calls.
TEST(OutputParserChunks, EncoderOutputParsesBackIntoTheSameCalls) {
  for (const ChatFormat format : {ChatFormat::kDeepSeekV4, ChatFormat::kDeepSeekV41}) {
    EncodeOptions options;
    options.format = format;
    options.tools = {weather_tool()};
    const std::vector<ToolCall> calls = {
        call("1", "get_weather", R"({"city": "Lyon \"FR\"\n\tstr", "days": 3, "f": -0.25,
            "ok": true, "none": null, "deep": {"a": [1, "x", {"b": false}]}, "list": []})"),
        call("2", "noop", "{}"),
        call("3", "echo", R"({"text": "中文 🌍 <tag> & \\ back"})")};
    const std::vector<Message> messages = {msg("user", "go"),
                                           assistant("Let me check.", "Plan it.", calls)};
    const std::string prompt = encode_chat(messages, options).prompt;
    const std::string head = cat(kAssistant, kThinkStart);
    const std::size_t start = prompt.find(head) + head.size();
    // The options the request's own prompt (without the answer) gives the parser.
    const EncodeResult request = encode_chat(std::vector{messages[0]}, options);
    const ParserOptions parser_options = parser_options_for(options, request);
    EXPECT_TRUE(parser_options.thinking_open);
    EXPECT_TRUE(parser_options.tool_calls);
    EXPECT_EQ(parser_options.format, format);
    const ParsedOutput out = parse_output(prompt.substr(start), parser_options);
    EXPECT_EQ(out.reasoning_content, "Plan it.");
    EXPECT_EQ(out.content, "Let me check.");
    ASSERT_EQ(out.tool_calls.size(), calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(out.tool_calls[i].name, calls[i].name);
      EXPECT_EQ(Json::parse(out.tool_calls[i].arguments), Json::parse(calls[i].arguments));
    }
  }
}

}  // namespace
}  // namespace deepinfer::encoding
