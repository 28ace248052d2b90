// Stop-string matching with holdback across streamed chunks.
#include "engine/stop_strings.h"

#include <algorithm>

namespace deepinfer::engine {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop_in_output)
    : stops_(std::move(stops)), include_stop_(include_stop_in_output) {
  for (const std::string& s : stops_) max_stop_len_ = std::max(max_stop_len_, s.size());
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view text) {
  Result result;
  if (stopped_) return result;
  if (stops_.empty()) {
    result.text.assign(text);
    return result;
  }
  held_.append(text);
  // Everything before held_ was released because no stop string could start there, and held_
  // is shorter than the longest stop, so searching held_ alone finds every new occurrence.
  std::size_t best_pos = std::string::npos;
  int best = -1;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::size_t pos = held_.find(stops_[i]);
    // Earliest match wins; at equal positions the longer stop (listed first on ties) is kept.
    if (pos != std::string::npos && (pos < best_pos || (pos == best_pos && stops_[i].size() > stops_[static_cast<std::size_t>(best)].size()))) {
      best_pos = pos;
      best = static_cast<int>(i);
    }
  }
  if (best >= 0) {
    const std::size_t end = best_pos + (include_stop_ ? stops_[static_cast<std::size_t>(best)].size() : 0);
    result.text = held_.substr(0, end);
    result.stop_index = best;
    held_.clear();
    stopped_ = true;
    return result;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t keep = 0;
  const std::size_t max_keep = std::min(held_.size(), max_stop_len_ - 1);
  for (std::size_t len = max_keep; len > 0; --len) {
    const std::string_view tail = std::string_view(held_).substr(held_.size() - len);
    const bool is_prefix = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
      return s.size() > len && std::string_view(s).substr(0, len) == tail;
    });
    if (is_prefix) {
      keep = len;
      break;
    }
  }
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace deepinfer::engine
