// parse_json: nlohmann's parser with a depth limit and file-naming errors.
#include "io/json_util.h"

#include "common/error.h"

namespace deepinfer::io {

nlohmann::json parse_json(std::string_view text, std::string_view label) {
  using json = nlohmann::json;
  const json::parser_callback_t limit_depth = [label](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw_error("{}: JSON nested deeper than {} levels", label, kMaxJsonDepth);
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit_depth);
  } catch (const json::exception& e) {
    throw_error("{}: not valid JSON: {}", label, e.what());
  }
}

}  // namespace deepinfer::io
