// OpenAI error bodies and the status-to-type mapping clients (the openai SDK) expect.
#include "server/api_error.h"

namespace deepinfer::server {
namespace {

std::string type_for_status(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

std::string ApiError::type() const { return type_for_status(status_); }

nlohmann::json ApiError::to_json() const { return error_body(status_, what(), param_, code_); }

nlohmann::json error_body(int status, const std::string& message, const std::string& param,
                          const std::string& code) {
  nlohmann::json error = {{"message", message},
                          {"type", type_for_status(status)},
                          {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  return {{"error", std::move(error)}};
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace deepinfer::server
