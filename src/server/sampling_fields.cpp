// The request fields both generation endpoints share: sampling knobs, limits, streaming, stop
// conditions and structured-output constraints. Ranges follow OpenAI for its own fields and vLLM
// for the extensions it added (top_k, min_p, repetition_penalty, ...).
#include <limits>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/openai_protocol.h"

namespace deepinfer::server {
namespace {

constexpr int kMaxN = 128;
constexpr int kMaxStopStrings = 64;
constexpr int kMaxTokensLimit = std::numeric_limits<int>::max();

std::vector<std::string> parse_stop(const JsonFields& body) {
  const auto* stop = body.get("stop");
  if (stop == nullptr) return {};
  if (stop->is_string()) {
    if (stop->get_ref<const std::string&>().empty()) bad_field("stop", "must not be an empty string");
    return {stop->get<std::string>()};
  }
  if (!stop->is_array()) bad_field("stop", "must be a string or an array of strings, got {}", json_type_name(*stop));
  if (stop->size() > kMaxStopStrings) bad_field("stop", "may hold at most {} strings, got {}", kMaxStopStrings, stop->size());
  std::vector<std::string> result;
  for (std::size_t i = 0; i < stop->size(); ++i) {
    const auto& s = (*stop)[i];
    const auto field = fmt::format("stop[{}]", i);
    if (!s.is_string()) bad_field(field, "must be a string, got {}", json_type_name(s));
    if (s.get_ref<const std::string&>().empty()) bad_field(field, "must not be an empty string");
    result.push_back(s.get<std::string>());
  }
  return result;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const JsonFields& body, int32_t vocab_size) {
  const auto* bias = body.get("logit_bias");
  if (bias == nullptr) return {};
  JsonFields fields(*bias, "logit_bias");
  std::vector<std::pair<int32_t, float>> result;
  for (const auto& [key, value] : bias->items()) {
    int64_t id = -1;
    try {
      std::size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    if (id < 0 || id >= vocab_size)
      bad_field(fields.path(key), "key must be a token id in [0, {}), got '{}'", vocab_size, shorten(key));
    if (value.is_null()) continue;
    const double b = *fields.number(key, -100.0, 100.0);
    result.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
  }
  return result;
}

// response_format, and the regex / grammar / json extras of vLLM and SGLang: kept as given for
// the backend's grammar support; only their outer shape is checked here.
nlohmann::json parse_structured_output(const JsonFields& body) {
  nlohmann::json constraint;
  if (const auto* format = body.get("response_format")) {
    JsonFields fields(*format, "response_format");
    const auto type = fields.one_of("type", {"text", "json_object", "json_schema"});
    if (!type) bad_field("response_format.type", "is required");
    if (*type == "json_schema") {
      const auto* schema = fields.get("json_schema");
      if (schema == nullptr) bad_field("response_format.json_schema", "is required for type json_schema");
      JsonFields schema_fields(*schema, "response_format.json_schema");
      if (!schema_fields.string("name")) bad_field("response_format.json_schema.name", "is required");
      if (const auto* s = schema_fields.get("schema"); s != nullptr && !s->is_object() && !s->is_boolean())
        bad_field("response_format.json_schema.schema", "must be an object, got {}", json_type_name(*s));
      schema_fields.boolean("strict");
    }
    if (*type != "text") constraint = *format;
  }
  for (const char* key : {"regex", "grammar", "ebnf"}) {
    if (const auto value = body.string(key)) {
      if (!constraint.is_null()) bad_field(key, "cannot be combined with another structured-output constraint");
      constraint = {{key, *value}};
    }
  }
  if (const auto* so = body.get("structured_outputs")) {
    JsonFields fields(*so, "structured_outputs");
    if (!constraint.is_null()) bad_field("structured_outputs", "cannot be combined with another constraint");
    constraint = {{"structured_outputs", *so}};
  }
  return constraint;
}

void parse_stream_options(const JsonFields& body, GenerationFields& fields) {
  fields.stream = body.boolean("stream").value_or(false);
  const auto* options = body.get("stream_options");
  if (options == nullptr) return;
  if (!fields.stream) bad_field("stream_options", "is only allowed when 'stream' is true");
  JsonFields o(*options, "stream_options");
  fields.stream_options.include_usage = o.boolean("include_usage").value_or(false);
  fields.stream_options.continuous_usage_stats = o.boolean("continuous_usage_stats").value_or(false);
}

void parse_penalties(const JsonFields& body, SamplingOptions& s) {
  if (auto v = body.number("presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = body.number("frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  if (auto v = body.number("repetition_penalty", 0.0, 100.0)) {
    if (*v <= 0.0) bad_field("repetition_penalty", "must be greater than 0, got {}", *v);
    s.repetition_penalty = static_cast<float>(*v);
  }
}

}  // namespace

std::vector<int32_t> parse_token_ids(const nlohmann::json& value, const std::string& path, int32_t vocab_size) {
  if (!value.is_array()) bad_field(path, "must be an array of token ids, got {}", json_type_name(value));
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const auto& v = value[i];
    if (!v.is_number_integer()) bad_field(fmt::format("{}[{}]", path, i), "must be an integer token id, got {}", json_type_name(v));
    const auto id = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                           : v.get<int64_t>();
    if (id < 0 || id >= vocab_size)
      bad_field(fmt::format("{}[{}]", path, i), "must be a token id in [0, {}), got {}", vocab_size, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

GenerationFields parse_generation_fields(const JsonFields& body, int32_t vocab_size) {
  GenerationFields fields;
  fields.model = body.string("model").value_or("");
  SamplingOptions& s = fields.sampling;
  if (auto v = body.integer("max_tokens", 1, kMaxTokensLimit)) fields.max_tokens = static_cast<int>(*v);
  // Chat's newer name wins when both are given, as in OpenAI and vLLM.
  if (auto v = body.integer("max_completion_tokens", 1, kMaxTokensLimit)) fields.max_tokens = static_cast<int>(*v);
  if (auto v = body.integer("min_tokens", 0, kMaxTokensLimit)) s.min_tokens = static_cast<int>(*v);
  if (fields.max_tokens && s.min_tokens > *fields.max_tokens)
    bad_field("min_tokens", "must not exceed max_tokens ({}), got {}", *fields.max_tokens, s.min_tokens);
  if (auto v = body.integer("n", 1, kMaxN)) fields.n = static_cast<int>(*v);
  if (auto v = body.integer("best_of", 1, kMaxN); v && *v != fields.n)
    bad_field("best_of", "is not supported (only best_of == n), got {}", *v);
  if (auto v = body.number("temperature", 0.0, 2.0)) s.temperature = static_cast<float>(*v);
  if (auto v = body.number("top_p", 0.0, 1.0)) {
    if (*v <= 0.0) bad_field("top_p", "must be in (0, 1], got {}", *v);
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = body.integer("top_k", -1, std::numeric_limits<int32_t>::max())) s.top_k = static_cast<int>(*v);
  if (auto v = body.number("min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  parse_penalties(body, s);
  s.seed = body.bits64("seed");
  s.stop = parse_stop(body);
  if (const auto* ids = body.get("stop_token_ids")) s.stop_token_ids = parse_token_ids(*ids, "stop_token_ids", vocab_size);
  s.ignore_eos = body.boolean("ignore_eos").value_or(false);
  s.include_stop_str_in_output = body.boolean("include_stop_str_in_output").value_or(false);
  s.skip_special_tokens = body.boolean("skip_special_tokens").value_or(true);
  s.logit_bias = parse_logit_bias(body, vocab_size);
  s.structured_output = parse_structured_output(body);
  parse_stream_options(body, fields);
  body.string("user");  // accepted and ignored, but must be a string
  return fields;
}

}  // namespace deepinfer::server
