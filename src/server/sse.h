// Server-sent events as OpenAI streams them: one `data: <json>` line per event, a blank line
// after each, `data: [DONE]` at the end. The parser is the client side, for tests and tools.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// "data: <compact json>\n\n" (invalid UTF-8 in strings becomes U+FFFD).
std::string sse_event(const nlohmann::json& data);
// ": <text>\n\n", ignored by SSE clients; keeps idle streams alive and probes for gone clients.
std::string sse_comment(std::string_view text);

// Incremental SSE parser: feed bytes as they arrive, get the data payloads of completed events.
// Handles \n, \r\n and \r line ends, comments, multi-line data and the optional space after ':'.
class SseParser {
 public:
  std::vector<std::string> feed(std::string_view bytes);

 private:
  void finish_line();

  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_was_cr_ = false;
  std::vector<std::string> events_;
};

}  // namespace deepinfer::server
