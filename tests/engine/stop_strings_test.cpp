// StopStringMatcher: holdback across chunk boundaries, first match wins, text after it dropped.
#include "engine/stop_strings.h"

#include <gtest/gtest.h>

namespace deepinfer::engine {
namespace {

// Feeds `text` in chunks cut at `cuts` and returns the emitted text; checks on the way that
// nothing emitted is ever taken back (emitted text is always a prefix of the final answer).
std::string feed(StopStringMatcher& m, const std::string& text, const std::vector<std::size_t>& cuts,
                 const std::string& final_answer, int* stop_index) {
  std::string out;
  std::size_t at = 0;
  *stop_index = -1;
  std::vector<std::size_t> ends = cuts;
  ends.push_back(text.size());
  for (std::size_t end : ends) {
    StopStringMatcher::Result r = m.push(std::string_view(text).substr(at, end - at));
    out += r.text;
    EXPECT_EQ(final_answer.compare(0, out.size(), out), 0) << "emitted '" << out << "' then took it back";
    if (r.stop_index >= 0) *stop_index = r.stop_index;
    at = end;
  }
  if (*stop_index < 0) out += m.flush();
  return out;
}

TEST(StopStrings, EverySplitOfTheTextGivesTheSameResult) {
  const std::string text = "Hello wor<|end|>ld <|en";
  const std::vector<std::string> stops = {"<|end|>", "xyz"};
  for (bool include : {false, true}) {
    const std::string want = include ? "Hello wor<|end|>" : "Hello wor";
    for (std::size_t a = 0; a <= text.size(); ++a) {
      for (std::size_t b = a; b <= text.size(); ++b) {
        StopStringMatcher m(stops, include);
        int stop = -1;
        EXPECT_EQ(feed(m, text, {a, b}, want, &stop), want) << "cuts " << a << "," << b;
        EXPECT_EQ(stop, 0);
        EXPECT_TRUE(m.stopped());
      }
    }
  }
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStillBecomeAStop) {
  StopStringMatcher m({"STOP"}, false);
  EXPECT_EQ(m.push("abcST").text, "abc");
  EXPECT_EQ(m.held_bytes(), 2u);
  EXPECT_EQ(m.push("X").text, "STX");  // the partial match broke: released
  EXPECT_EQ(m.push("S").text, "");
  EXPECT_EQ(m.flush(), "S");  // end of stream without a stop: the held text is real text
}

TEST(StopStrings, EarliestMatchWinsAcrossStopStrings) {
  StopStringMatcher m({"bcd", "ab"}, false);
  const StopStringMatcher::Result r = m.push("xabcd");
  EXPECT_EQ(r.text, "x");
  EXPECT_EQ(r.stop_index, 1);
  EXPECT_EQ(m.push("more").text, "");  // done after a stop
}

TEST(StopStrings, OverlappingPrefixesAreHeldUntilDecided) {
  StopStringMatcher m({"aab"}, false);
  std::string out;
  for (char c : std::string("aaaab")) out += m.push(std::string(1, c)).text;
  EXPECT_EQ(out, "aa");
  EXPECT_TRUE(m.stopped());
}

TEST(StopStrings, NoStopsPassEverythingThrough) {
  StopStringMatcher m;
  EXPECT_EQ(m.push("anything").text, "anything");
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace deepinfer::engine
