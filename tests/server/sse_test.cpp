// SSE framing as OpenAI clients read it, and the incremental parser on awkward splits.
#include "server/sse.h"

#include <gtest/gtest.h>

namespace deepinfer::server {
namespace {

TEST(Sse, EventIsOneDataLineAndABlankLine) {
  EXPECT_EQ(sse_event({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("keep\nalive"), ": keep alive\n\n");
}

TEST(Sse, InvalidUtf8InAStringBecomesReplacementCharacter) {
  const std::string half_char = "\xe4\xbd";  // the first two bytes of a three-byte character
  EXPECT_EQ(sse_event({{"t", half_char}}), "data: {\"t\":\"\xef\xbf\xbd\"}\n\n");
}

TEST(Sse, ParserReassemblesEventsFromAnySplit) {
  const std::string stream = sse_event({{"i", 1}}) + ": comment\n\n" + sse_event({{"i", 2}}) + std::string(kSseDone);
  for (std::size_t step = 1; step <= stream.size(); ++step) {
    SseParser parser;
    std::vector<std::string> events;
    for (std::size_t i = 0; i < stream.size(); i += step)
      for (auto& e : parser.feed(std::string_view(stream).substr(i, step))) events.push_back(e);
    ASSERT_EQ(events.size(), 3u) << "step " << step;
    EXPECT_EQ(events[0], "{\"i\":1}");
    EXPECT_EQ(events[1], "{\"i\":2}");
    EXPECT_EQ(events[2], "[DONE]");
  }
}

TEST(Sse, ParserHandlesCrLfMultiLineDataAndNoSpace) {
  SseParser parser;
  const auto events = parser.feed("data:a\r\ndata: b\r\n\r\nevent: x\rdata: c\r\r");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "a\nb");
  EXPECT_EQ(events[1], "c");
  EXPECT_TRUE(parser.feed("data: incomplete\n").empty());
}

}  // namespace
}  // namespace deepinfer::server
