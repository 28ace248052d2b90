// ConfigFields: multi-spelling, type-checked config.json lookups.
#include "io/config_fields.h"

#include <cmath>

namespace deepinfer::io::detail {

using json = nlohmann::json;

ConfigFields::ConfigFields(const json& object, std::string source, std::string scope)
    : object_(object), source_(std::move(source)), scope_(std::move(scope)) {}

const json* ConfigFields::lookup(std::string_view path) const {
  const json* node = &object_;
  while (!path.empty()) {
    const auto dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!node->is_object()) return nullptr;
    const auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return node->is_null() ? nullptr : node;
}

std::string ConfigFields::names(Spellings spellings) const {
  std::string out;
  for (const auto spelling : spellings) {
    if (!out.empty()) out += " / ";
    out += "'" + field(spelling) + "'";
  }
  return out;
}

bool ConfigFields::any_present(Spellings fields) const {
  for (const auto name : fields)
    if (lookup(name) != nullptr) return true;
  return false;
}

std::optional<ConfigFields::Found> ConfigFields::find(Spellings spellings) const {
  std::optional<Found> found;
  for (const auto spelling : spellings) {
    const json* value = lookup(spelling);
    if (value == nullptr) continue;
    if (!found) {
      found = Found{value, std::string(spelling)};
      continue;
    }
    if (*value != *found->value)
      fail("'{}' = {} contradicts '{}' = {}", field(spelling), value->dump(), field(found->spelling), found->value->dump());
  }
  return found;
}

std::int64_t ConfigFields::to_int(const Found& found, std::int64_t min, std::int64_t max) const {
  const json& v = *found.value;
  std::int64_t value = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail("'{}' = {} is out of range [{}, {}]", field(found.spelling), v.dump(), min, max);
    value = v.get<std::int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && std::trunc(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9.0e18) {
    value = static_cast<std::int64_t>(v.get<double>());
  } else {
    fail("'{}' must be an integer, got {}", field(found.spelling), v.dump());
  }
  if (value < min || value > max) fail("'{}' = {} is out of range [{}, {}]", field(found.spelling), value, min, max);
  return value;
}

std::optional<std::int64_t> ConfigFields::opt_int(Spellings spellings, std::int64_t min, std::int64_t max) const {
  const auto found = find(spellings);
  if (!found) return std::nullopt;
  return to_int(*found, min, max);
}

std::int64_t ConfigFields::req_int(Spellings spellings, std::int64_t min, std::int64_t max) const {
  const auto value = opt_int(spellings, min, max);
  if (!value) fail("missing required field {}", names(spellings));
  return *value;
}

std::optional<double> ConfigFields::opt_number(Spellings spellings) const {
  const auto found = find(spellings);
  if (!found) return std::nullopt;
  if (!found->value->is_number() || !std::isfinite(found->value->get<double>()))
    fail("'{}' must be a finite number, got {}", field(found->spelling), found->value->dump());
  return found->value->get<double>();
}

double ConfigFields::req_number(Spellings spellings) const {
  const auto value = opt_number(spellings);
  if (!value) fail("missing required field {}", names(spellings));
  return *value;
}

std::optional<std::string> ConfigFields::opt_string(Spellings spellings) const {
  const auto found = find(spellings);
  if (!found) return std::nullopt;
  if (!found->value->is_string()) fail("'{}' must be a string, got {}", field(found->spelling), found->value->dump());
  return found->value->get<std::string>();
}

std::string ConfigFields::req_string(Spellings spellings) const {
  const auto value = opt_string(spellings);
  if (!value) fail("missing required field {}", names(spellings));
  return *value;
}

std::optional<bool> ConfigFields::opt_bool(Spellings spellings) const {
  const auto found = find(spellings);
  if (!found) return std::nullopt;
  if (!found->value->is_boolean()) fail("'{}' must be true or false, got {}", field(found->spelling), found->value->dump());
  return found->value->get<bool>();
}

std::optional<std::vector<std::int64_t>> ConfigFields::opt_int_list(Spellings spellings, std::int64_t min,
                                                                     std::int64_t max) const {
  const auto found = find(spellings);
  if (!found) return std::nullopt;
  if (!found->value->is_array()) fail("'{}' must be a list of integers, got {}", field(found->spelling), found->value->dump());
  std::vector<std::int64_t> out;
  out.reserve(found->value->size());
  for (std::size_t i = 0; i < found->value->size(); ++i) {
    const Found item{&(*found->value)[i], fmt::format("{}[{}]", found->spelling, i)};
    out.push_back(to_int(item, min, max));
  }
  return out;
}

std::vector<std::int64_t> ConfigFields::req_int_list(Spellings spellings, std::int64_t min, std::int64_t max) const {
  auto value = opt_int_list(spellings, min, max);
  if (!value) fail("missing required field {}", names(spellings));
  return std::move(*value);
}

std::optional<std::vector<std::string>> ConfigFields::opt_string_list(Spellings spellings) const {
  const auto found = find(spellings);
  if (!found) return std::nullopt;
  if (!found->value->is_array()) fail("'{}' must be a list of strings, got {}", field(found->spelling), found->value->dump());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < found->value->size(); ++i) {
    const json& item = (*found->value)[i];
    if (!item.is_string()) fail("'{}[{}]' must be a string, got {}", field(found->spelling), i, item.dump());
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace deepinfer::io::detail
