// Stop-string detection on streamed text. Text is released only when no stop string can still
// begin inside it: the longest tail that is a prefix of some stop string is held back until the
// next increment decides it, so a stop string split over chunks is never half-emitted.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::engine {

class StopStringMatcher {
 public:
  StopStringMatcher() = default;
  StopStringMatcher(std::vector<std::string> stops, bool include_stop_in_output);

  struct Result {
    std::string text;     // safe to emit now
    int stop_index = -1;  // which stop string matched, -1 if none
  };

  // Feeds newly detokenized text. After a match (stop_index >= 0) the matcher is done: text up
  // to the match (plus the stop string itself with include_stop_in_output) is returned and any
  // further push returns nothing.
  Result push(std::string_view text);
  // End of stream without a match: everything still held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  std::size_t held_bytes() const { return held_.size(); }
  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  bool stopped_ = false;
  std::string held_;
  std::size_t max_stop_len_ = 0;
};

}  // namespace deepinfer::engine
