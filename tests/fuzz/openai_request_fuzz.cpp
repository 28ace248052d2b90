// libFuzzer target for the server's request parsing: the input is an HTTP body given to every
// endpoint's parser. Checks: no crash or hang, and the only exception that escapes is ApiError
// with a 4xx status (what the server turns into an OpenAI error reply); accepted requests
// serialise back to JSON, and the SSE parser takes the body without trouble.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_protocol.h"
#include "server/sse.h"

namespace {

using namespace deepinfer::server;

constexpr int32_t kVocab = 129280;

template <typename Fn>
void expect_only_api_errors(Fn fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
  }
  // Anything else propagates out of LLVMFuzzerTestOneInput and libFuzzer reports it.
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  expect_only_api_errors([&] {
    const auto json = parse_json_body(body);
    const auto ordered = parse_ordered_json_body(body);
    expect_only_api_errors([&] {
      const auto r = parse_completion_request(json, kVocab);
      if (r.prompts.empty() || r.common.n < 1) std::abort();
      dump_json(r.common.sampling.structured_output);
    });
    expect_only_api_errors([&] {
      const auto r = parse_chat_request(json, ordered, kVocab, ChatDefaults{});
      if (!r.encode_request.contains("messages")) std::abort();
      (void)r.encode_request.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    });
    expect_only_api_errors([&] { parse_tokenize_request(json, ordered, ChatDefaults{}); });
    expect_only_api_errors([&] { parse_detokenize_request(json, kVocab); });
  });
  SseParser parser;
  parser.feed(body);
  return 0;
}
