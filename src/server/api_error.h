// Errors the server reports to clients in OpenAI's JSON format
// ({"error": {"message", "type", "param", "code"}}), each with its HTTP status.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace deepinfer::server {

class ApiError : public Error {
 public:
  // param names the offending request field ("" when none does); code is OpenAI's short
  // machine-readable code ("" for null).
  ApiError(int status, std::string message, std::string param = "", std::string code = "")
      : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // OpenAI's error type for the status: invalid_request_error, authentication_error, ...
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// 400 naming the field: bad_field("temperature", "must be in [0, 2], got {}", t).
template <typename... Args>
[[noreturn]] void bad_field(const std::string& field, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(400, fmt::format("'{}' {}", field, fmt::format(format, std::forward<Args>(args)...)), field);
}

// The OpenAI error body for any status and message (for errors that are not ApiErrors).
nlohmann::json error_body(int status, const std::string& message, const std::string& param = "",
                          const std::string& code = "");

// Serialises JSON for the wire; invalid UTF-8 (a token cut inside a character) becomes U+FFFD
// instead of an exception.
std::string dump_json(const nlohmann::json& value);

}  // namespace deepinfer::server
