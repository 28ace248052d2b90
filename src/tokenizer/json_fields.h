// Typed reads of tokenizer.json fields that name the field's location in every error message.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "common/error.h"

namespace deepinfer::tokenizer {

// node[key] as a boolean; `fallback` when absent or null.
inline bool json_bool(const nlohmann::json& node, const char* key, bool fallback, const std::string& where) {
  const auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  DI_CHECK(it->is_boolean(), "{}.{}: expected a boolean, got {}", where, key, it->dump());
  return it->get<bool>();
}

// The "type" of a component object (normalizer, pre_tokenizer, model, ...).
inline const std::string& json_type(const nlohmann::json& node, const std::string& where) {
  DI_CHECK(node.is_object(), "{}: expected an object, got {}", where, node.dump().substr(0, 80));
  const auto it = node.find("type");
  DI_CHECK(it != node.end() && it->is_string(), "{}: missing string field 'type'", where);
  return it->get_ref<const std::string&>();
}

}  // namespace deepinfer::tokenizer
