// Typed, range-checked reads of request JSON: every failure is a 400 that names the field by its
// full path ("messages[2].content", "stream_options.include_usage").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer::server {

// Parses a request body; a syntax error or a non-object is a 400.
nlohmann::json parse_json_body(std::string_view body);
// The same body with its object keys in the order they were sent (for the chat encoding).
nlohmann::ordered_json parse_ordered_json_body(std::string_view body);

class JsonFields {
 public:
  // Throws a 400 naming `path` unless value is an object. path "" means the request body.
  JsonFields(const nlohmann::json& value, std::string path);

  // Present and not null (OpenAI clients send null for "unset").
  bool has(std::string_view key) const;
  // The raw value, or nullptr when absent or null.
  const nlohmann::json* get(std::string_view key) const;
  std::string path(std::string_view key) const;
  const std::string& path() const { return path_; }

  std::optional<bool> boolean(std::string_view key) const;
  // Integers; a float with an integral value (3.0) is accepted as JSON clients sometimes send.
  std::optional<int64_t> integer(std::string_view key, int64_t min, int64_t max) const;
  // Any 64-bit integer, negative values taken modulo 2^64 (seeds).
  std::optional<uint64_t> bits64(std::string_view key) const;
  // Finite numbers in [min, max].
  std::optional<double> number(std::string_view key, double min, double max) const;
  std::optional<std::string> string(std::string_view key) const;
  // A string that must be one of the listed values.
  std::optional<std::string> one_of(std::string_view key, std::initializer_list<std::string_view> allowed) const;

 private:
  const nlohmann::json& object_;
  std::string path_;
};

// A user-supplied string cut to a length fit for an error message.
std::string shorten(std::string_view text);

// The JSON type name of a value, for error messages ("string", "array", ...).
std::string json_type_name(const nlohmann::json& value);

}  // namespace deepinfer::server
