// Marker search for the streaming output parsers: the earliest of several markers in a text, and
// how much of a text's tail could still grow into a marker (and so must be held back).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace deepinfer::encoding {

struct MarkerHit {
  std::size_t pos = std::string_view::npos;  // npos: no marker in the text
  std::size_t which = 0;                     // index into the marker list
};

// The earliest occurrence of any marker; on a tie, the first marker in the list.
MarkerHit find_first_marker(std::string_view text, std::span<const std::string_view> markers);

// The length of the longest tail of `text` that is a proper prefix of some marker.
std::size_t partial_marker_length(std::string_view text,
                                  std::span<const std::string_view> markers);

}  // namespace deepinfer::encoding
