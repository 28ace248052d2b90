// Marker search for the streaming output parsers (see marker_scan.h).
#include "encoding/marker_scan.h"

#include <algorithm>

namespace deepinfer::encoding {

MarkerHit find_first_marker(std::string_view text, std::span<const std::string_view> markers) {
  MarkerHit best;
  for (std::size_t m = 0; m < markers.size(); ++m) {
    if (markers[m].empty()) continue;
    const std::size_t pos = text.find(markers[m]);
    if (pos < best.pos) best = MarkerHit{pos, m};
  }
  return best;
}

std::size_t partial_marker_length(std::string_view text,
                                  std::span<const std::string_view> markers) {
  std::size_t longest = 0;
  for (const std::string_view marker : markers) {
    const std::size_t max_len = std::min(marker.size() - (marker.empty() ? 0 : 1), text.size());
    for (std::size_t len = max_len; len > longest; --len) {
      if (text.substr(text.size() - len) == marker.substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace deepinfer::encoding
