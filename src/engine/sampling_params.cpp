// Validation and JSON conversion of SamplingParams.
#include "engine/sampling_params.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"

namespace deepinfer::engine {
namespace {

using nlohmann::json;

const std::set<std::string, std::less<>> kSchemaTypes = {"json", "json_object", "regex", "ebnf", "choice",
                                                          "tool_calls"};

const std::set<std::string, std::less<>> kFields = {
    "n",          "temperature",     "top_p",          "top_k",          "min_p",
    "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "stop_token_ids",
    "stop",       "include_stop_str_in_output", "max_tokens", "min_tokens", "ignore_eos",
    "skip_special_tokens", "logprobs", "seq_seed", "seed", "so_args"};

void check_finite(float value, const char* field) {
  DI_CHECK(std::isfinite(value), "sampling params: {} {} is not a finite number", field, value);
}

std::int32_t get_int32(const json& v, const std::string& field) {
  DI_CHECK(v.is_number_integer(), "sampling params: {} must be an integer, got {}", field, v.dump());
  const auto x = v.get<std::int64_t>();
  DI_CHECK(x >= std::numeric_limits<std::int32_t>::min() && x <= std::numeric_limits<std::int32_t>::max(),
           "sampling params: {} {} is outside the int32 range", field, x);
  return static_cast<std::int32_t>(x);
}

float get_float(const json& v, const std::string& field) {
  DI_CHECK(v.is_number(), "sampling params: {} must be a number, got {}", field, v.dump());
  return v.get<float>();
}

bool get_bool(const json& v, const std::string& field) {
  DI_CHECK(v.is_boolean(), "sampling params: {} must be true or false, got {}", field, v.dump());
  return v.get<bool>();
}

std::vector<std::int32_t> get_int_list(const json& v, const std::string& field) {
  DI_CHECK(v.is_array(), "sampling params: {} must be a list of integers, got {}", field, v.dump());
  std::vector<std::int32_t> out;
  for (const json& e : v) out.push_back(get_int32(e, field));
  return out;
}

std::vector<std::string> get_stop(const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  DI_CHECK(v.is_array(), "sampling params: stop must be a string or a list of strings, got {}", v.dump());
  std::vector<std::string> out;
  for (const json& e : v) {
    DI_CHECK(e.is_string(), "sampling params: stop must be a string or a list of strings, got element {}", e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<std::pair<std::int32_t, float>> get_logit_bias(const json& v) {
  DI_CHECK(v.is_object(), "sampling params: logit_bias must be an object of token id -> bias, got {}", v.dump());
  std::vector<std::pair<std::int32_t, float>> out;
  for (const auto& [key, value] : v.items()) {
    std::size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DI_CHECK(used == key.size() && !key.empty() && id >= 0 && id <= std::numeric_limits<std::int32_t>::max(),
             "sampling params: logit_bias key '{}' is not a token id", key);
    out.emplace_back(static_cast<std::int32_t>(id), get_float(value, "logit_bias[" + key + "]"));
  }
  return out;
}

std::uint64_t get_seed(const json& v, const std::string& field) {
  DI_CHECK(v.is_number_integer(), "sampling params: {} must be an integer, got {}", field, v.dump());
  // Negative seeds (OpenAI allows any integer) map to their two's-complement bit pattern.
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  return static_cast<std::uint64_t>(v.get<std::int64_t>());
}

StructuredOutputArgs get_so_args(const json& v) {
  DI_CHECK(v.is_object(), "sampling params: so_args must be an object {{\"schema_type\": ..., \"schema\": ...}}, got {}",
           v.dump());
  StructuredOutputArgs args;
  for (const auto& [key, value] : v.items()) {
    if (key == "schema_type") {
      DI_CHECK(value.is_string(), "sampling params: so_args.schema_type must be a string, got {}", value.dump());
      args.schema_type = value.get<std::string>();
    } else if (key == "schema") {
      // Schemas and choice lists may arrive as JSON values; the grammar layer parses the text.
      args.schema = value.is_string() ? value.get<std::string>() : value.dump();
    } else if (key == "start_after") {
      DI_CHECK(value.is_string(), "sampling params: so_args.start_after must be a string, got {}", value.dump());
      args.start_after = value.get<std::string>();
    } else if (key == "disable_any_whitespace") {
      DI_CHECK(value.is_boolean(), "sampling params: so_args.disable_any_whitespace must be a boolean, got {}",
               value.dump());
      args.disable_any_whitespace = value.get<bool>();
    } else {
      throw_error("sampling params: unknown field so_args.{}", key);
    }
  }
  return args;
}

}  // namespace

void SamplingParams::validate(std::int32_t vocab_size, std::int32_t max_logprobs) const {
  DI_CHECK(n >= 1, "sampling params: n {} must be >= 1", n);
  check_finite(temperature, "temperature");
  DI_CHECK(temperature >= 0.0f, "sampling params: temperature {} must be >= 0", temperature);
  check_finite(top_p, "top_p");
  DI_CHECK(top_p > 0.0f && top_p <= 1.0f, "sampling params: top_p {} must be in (0, 1]", top_p);
  DI_CHECK(top_k >= -1, "sampling params: top_k {} must be -1 (off), 0 (off) or >= 1", top_k);
  check_finite(min_p, "min_p");
  DI_CHECK(min_p >= 0.0f && min_p <= 1.0f, "sampling params: min_p {} must be in [0, 1]", min_p);
  check_finite(repetition_penalty, "repetition_penalty");
  DI_CHECK(repetition_penalty > 0.0f, "sampling params: repetition_penalty {} must be > 0", repetition_penalty);
  check_finite(presence_penalty, "presence_penalty");
  DI_CHECK(presence_penalty >= -2.0f && presence_penalty <= 2.0f,
           "sampling params: presence_penalty {} must be in [-2, 2]", presence_penalty);
  check_finite(frequency_penalty, "frequency_penalty");
  DI_CHECK(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
           "sampling params: frequency_penalty {} must be in [-2, 2]", frequency_penalty);
  for (const auto& [id, bias] : logit_bias) {
    DI_CHECK(id >= 0 && id < vocab_size, "sampling params: logit_bias token id {} is outside the vocabulary [0, {})",
             id, vocab_size);
    check_finite(bias, "logit_bias value");
    DI_CHECK(bias >= -100.0f && bias <= 100.0f, "sampling params: logit_bias[{}] {} must be in [-100, 100]", id, bias);
  }
  for (std::int32_t id : stop_token_ids) {
    DI_CHECK(id >= 0 && id < vocab_size, "sampling params: stop_token_ids entry {} is outside the vocabulary [0, {})",
             id, vocab_size);
  }
  for (std::size_t i = 0; i < stop.size(); ++i) {
    DI_CHECK(!stop[i].empty(), "sampling params: stop[{}] is an empty string", i);
  }
  if (max_tokens) DI_CHECK(*max_tokens >= 1, "sampling params: max_tokens {} must be >= 1", *max_tokens);
  DI_CHECK(min_tokens >= 0, "sampling params: min_tokens {} must be >= 0", min_tokens);
  if (max_tokens) {
    DI_CHECK(min_tokens <= *max_tokens, "sampling params: min_tokens {} exceeds max_tokens {}", min_tokens,
             *max_tokens);
  }
  if (logprobs) {
    DI_CHECK(*logprobs >= 0 && *logprobs <= max_logprobs, "sampling params: logprobs {} must be in [0, {}]",
             *logprobs, max_logprobs);
  }
  if (so_args) {
    DI_CHECK(kSchemaTypes.count(so_args->schema_type) != 0,
             "sampling params: so_args.schema_type '{}' is not one of json, json_object, regex, ebnf, choice, "
             "tool_calls",
             so_args->schema_type);
    DI_CHECK(so_args->schema_type == "json_object" || !so_args->schema.empty(),
             "sampling params: so_args.schema is empty for schema_type '{}'", so_args->schema_type);
  }
}

bool SamplingParams::is_field(const std::string& name) { return kFields.count(name) != 0; }

SamplingParams SamplingParams::from_json(const json& object) {
  DI_CHECK(object.is_object(), "sampling params: expected a JSON object, got {}", object.dump());
  SamplingParams p;
  for (const auto& [key, v] : object.items()) {
    if (!is_field(key)) throw_error("sampling params: unknown field '{}'", key);
    // null means "default" for every field, as OpenAI clients send explicit nulls.
    if (v.is_null()) continue;
    if (key == "n") p.n = get_int32(v, key);
    else if (key == "temperature") p.temperature = get_float(v, key);
    else if (key == "top_p") p.top_p = get_float(v, key);
    else if (key == "top_k") p.top_k = get_int32(v, key);
    else if (key == "min_p") p.min_p = get_float(v, key);
    else if (key == "repetition_penalty") p.repetition_penalty = get_float(v, key);
    else if (key == "presence_penalty") p.presence_penalty = get_float(v, key);
    else if (key == "frequency_penalty") p.frequency_penalty = get_float(v, key);
    else if (key == "logit_bias") p.logit_bias = get_logit_bias(v);
    else if (key == "stop_token_ids") p.stop_token_ids = get_int_list(v, key);
    else if (key == "stop") p.stop = get_stop(v);
    else if (key == "include_stop_str_in_output") p.include_stop_str_in_output = get_bool(v, key);
    else if (key == "max_tokens") p.max_tokens = get_int32(v, key);
    else if (key == "min_tokens") p.min_tokens = get_int32(v, key);
    else if (key == "ignore_eos") p.ignore_eos = get_bool(v, key);
    else if (key == "skip_special_tokens") p.skip_special_tokens = get_bool(v, key);
    else if (key == "logprobs") p.logprobs = get_int32(v, key);
    else if (key == "seq_seed" || key == "seed") p.seq_seed = get_seed(v, key);
    else p.so_args = get_so_args(v);  // "so_args", the last field is_field knows
  }
  return p;
}

json SamplingParams::to_json() const {
  json j = {{"n", n},
            {"temperature", temperature},
            {"top_p", top_p},
            {"top_k", top_k},
            {"min_p", min_p},
            {"repetition_penalty", repetition_penalty},
            {"presence_penalty", presence_penalty},
            {"frequency_penalty", frequency_penalty},
            {"stop_token_ids", stop_token_ids},
            {"stop", stop},
            {"include_stop_str_in_output", include_stop_str_in_output},
            {"min_tokens", min_tokens},
            {"ignore_eos", ignore_eos},
            {"skip_special_tokens", skip_special_tokens}};
  json bias = json::object();
  for (const auto& [id, b] : logit_bias) bias[std::to_string(id)] = b;
  j["logit_bias"] = bias;
  j["max_tokens"] = max_tokens ? json(*max_tokens) : json(nullptr);
  j["logprobs"] = logprobs ? json(*logprobs) : json(nullptr);
  j["seq_seed"] = seq_seed ? json(*seq_seed) : json(nullptr);
  if (so_args) {
    j["so_args"] = json{{"schema_type", so_args->schema_type}, {"schema", so_args->schema}};
    if (!so_args->start_after.empty()) j["so_args"]["start_after"] = so_args->start_after;
    if (so_args->disable_any_whitespace) j["so_args"]["disable_any_whitespace"] = true;
  } else {
    j["so_args"] = nullptr;
  }
  return j;
}

}  // namespace deepinfer::engine
