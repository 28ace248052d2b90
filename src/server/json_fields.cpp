// Typed field access for request validation.
#include "server/json_fields.h"

#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace deepinfer::server {

nlohmann::json parse_json_body(std::string_view body) {
  nlohmann::json value = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) throw ApiError(400, "request body is not valid JSON", "", "invalid_json");
  if (!value.is_object())
    throw ApiError(400, fmt::format("request body must be a JSON object, got {}", json_type_name(value)), "",
                   "invalid_json");
  return value;
}

nlohmann::ordered_json parse_ordered_json_body(std::string_view body) {
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_object()) throw ApiError(400, "request body is not a JSON object", "", "invalid_json");
  return value;
}

std::string shorten(std::string_view text) {
  constexpr std::size_t kMax = 64;
  if (text.size() <= kMax) return std::string(text);
  return fmt::format("{}...", text.substr(0, kMax));
}

std::string json_type_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();
}

JsonFields::JsonFields(const nlohmann::json& value, std::string path) : object_(value), path_(std::move(path)) {
  if (!value.is_object()) bad_field(path_.empty() ? "body" : path_, "must be an object, got {}", json_type_name(value));
}

bool JsonFields::has(std::string_view key) const { return get(key) != nullptr; }

const nlohmann::json* JsonFields::get(std::string_view key) const {
  const auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string JsonFields::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

std::optional<bool> JsonFields::boolean(std::string_view key) const {
  const auto* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) bad_field(path(key), "must be a boolean, got {}", json_type_name(*v));
  return v->get<bool>();
}

std::optional<int64_t> JsonFields::integer(std::string_view key, int64_t min, int64_t max) const {
  const auto* v = get(key);
  if (v == nullptr) return std::nullopt;
  int64_t result = 0;
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad_field(path(key), "must be in [{}, {}], got {}", min, max, u);
    result = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    result = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
      bad_field(path(key), "must be an integer, got {}", d);
    result = static_cast<int64_t>(d);
  } else {
    bad_field(path(key), "must be an integer, got {}", json_type_name(*v));
  }
  if (result < min || result > max) bad_field(path(key), "must be in [{}, {}], got {}", min, max, result);
  return result;
}

std::optional<uint64_t> JsonFields::bits64(std::string_view key) const {
  const auto* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer()) return static_cast<uint64_t>(v->get<int64_t>());
  bad_field(path(key), "must be an integer, got {}", json_type_name(*v));
}

std::optional<double> JsonFields::number(std::string_view key, double min, double max) const {
  const auto* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) bad_field(path(key), "must be a number, got {}", json_type_name(*v));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) bad_field(path(key), "must be in [{}, {}], got {}", min, max, d);
  return d;
}

std::optional<std::string> JsonFields::string(std::string_view key) const {
  const auto* v = get(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) bad_field(path(key), "must be a string, got {}", json_type_name(*v));
  return v->get<std::string>();
}

std::optional<std::string> JsonFields::one_of(std::string_view key,
                                              std::initializer_list<std::string_view> allowed) const {
  auto value = string(key);
  if (!value) return std::nullopt;
  for (const auto a : allowed)
    if (*value == a) return value;
  bad_field(path(key), "must be one of {}, got '{}'", fmt::join(allowed, ", "), shorten(*value));
}

}  // namespace deepinfer::server
