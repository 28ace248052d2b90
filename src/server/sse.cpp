// SSE framing (WHATWG HTML "server-sent events" event stream format, data fields only).
#include "server/sse.h"

#include "server/api_error.h"

namespace deepinfer::server {

std::string sse_event(const nlohmann::json& data) {
  std::string out = "data: ";
  out += dump_json(data);
  out += "\n\n";
  return out;
}

std::string sse_comment(std::string_view text) {
  std::string out = ": ";
  for (const char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  out += "\n\n";
  return out;
}

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  for (const char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the \n of a \r\n pair: the line already ended
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = (c == '\r');
    if (c == '\n' || c == '\r') finish_line();
    else line_ += c;
  }
  std::vector<std::string> events;
  events.swap(events_);
  return events;
}

void SseParser::finish_line() {
  if (line_.empty()) {  // blank line: dispatch the event, if it had data
    if (has_data_) events_.push_back(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_[0] != ':') {
    const auto colon = line_.find(':');
    const std::string_view field = std::string_view(line_).substr(0, colon);
    std::string_view value;
    if (colon != std::string::npos) {
      value = std::string_view(line_).substr(colon + 1);
      if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

}  // namespace deepinfer::server
