// Internal to io: typed lookup of config.json fields under several spellings at once. A field
// given in two spellings must have the same value in both; errors name the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace deepinfer::io::detail {

using Spellings = std::initializer_list<std::string_view>;

class ConfigFields {
 public:
  // `object` is the JSON object holding the fields; `source` names the file in errors and
  // `scope` ("" or "text_config.") prefixes field names in messages.
  ConfigFields(const nlohmann::json& object, std::string source, std::string scope = "");

  // The value under the first present spelling (paths like "rope_scaling.factor" descend into
  // objects; JSON null counts as absent), after checking that every other present spelling holds
  // an equal value. Also returns which spelling was found.
  struct Found {
    const nlohmann::json* value = nullptr;
    std::string spelling;
  };
  std::optional<Found> find(Spellings spellings) const;
  bool has(Spellings spellings) const { return find(spellings).has_value(); }
  // Whether any of several different fields is present (no agreement check between them).
  bool any_present(Spellings fields) const;

  std::optional<std::int64_t> opt_int(Spellings spellings, std::int64_t min, std::int64_t max) const;
  std::int64_t req_int(Spellings spellings, std::int64_t min, std::int64_t max) const;
  std::optional<double> opt_number(Spellings spellings) const;
  double req_number(Spellings spellings) const;
  std::optional<std::string> opt_string(Spellings spellings) const;
  std::string req_string(Spellings spellings) const;
  std::optional<bool> opt_bool(Spellings spellings) const;
  std::optional<std::vector<std::int64_t>> opt_int_list(Spellings spellings, std::int64_t min, std::int64_t max) const;
  std::vector<std::int64_t> req_int_list(Spellings spellings, std::int64_t min, std::int64_t max) const;
  std::optional<std::vector<std::string>> opt_string_list(Spellings spellings) const;

  // Throws deepinfer::Error "<source>: <message>".
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw Error(source_ + ": " + fmt::format(format, std::forward<Args>(args)...));
  }
  // "text_config.hidden_size" style name for messages.
  std::string field(std::string_view spelling) const { return scope_ + std::string(spelling); }
  const std::string& source() const { return source_; }
  const nlohmann::json& object() const { return object_; }

 private:
  const nlohmann::json& object_;
  std::string source_;
  std::string scope_;

  const nlohmann::json* lookup(std::string_view path) const;
  std::string names(Spellings spellings) const;
  std::int64_t to_int(const Found& found, std::int64_t min, std::int64_t max) const;
};

}  // namespace deepinfer::io::detail
