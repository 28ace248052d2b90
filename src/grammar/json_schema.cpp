// JSON Schema converter: walks the schema, resolves local $refs to (possibly recursive) rules and
// emits grammar IR; every keyword is either enforced exactly, ignored as an annotation, or an error.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "grammar/json_values.h"

namespace deepinfer::grammar {
namespace {

using json = nlohmann::ordered_json;

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default", "examples", "$comment", "$schema", "$id", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "discriminator", "example"};
const std::set<std::string, std::less<>> kSupported = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
    "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::vector<std::string> kTypes = {"null", "boolean", "object", "array", "string", "number", "integer"};

class SchemaConverter {
 public:
  SchemaConverter(const json& root, const JsonSchemaOptions& options) : root_(root), options_(options) {}

  Grammar convert() {
    RuleId r = g_.add_rule("root");
    g_.set_root(r);
    g_.set_body(r, value(root_, "#"));  // like xgrammar: no whitespace around the document
    return std::move(g_);
  }

  Grammar convert_json_object() {
    RuleId r = g_.add_rule("root");
    g_.set_root(r);
    g_.set_body(r, any_object());
    return std::move(g_);
  }

 private:
  ExprId ws() {
    if (!options_.any_whitespace) return g_.empty();
    ByteSet s;
    s.set(' ');
    s.set('\n');
    s.set('\t');
    return g_.star(g_.bytes(s));
  }
  ExprId comma() { return options_.any_whitespace ? g_.seq({ws(), g_.byte(','), ws()}) : g_.literal(", "); }
  ExprId colon() { return options_.any_whitespace ? g_.seq({ws(), g_.byte(':'), ws()}) : g_.literal(": "); }

  // Any JSON value, as one shared recursive rule.
  ExprId any_value() {
    if (any_value_rule_ < 0) {
      any_value_rule_ = g_.add_unique_rule("json_value");
      RuleId v = any_value_rule_;
      ExprId items = g_.seq({g_.ref(v), g_.star(g_.seq({comma(), g_.ref(v)}))});
      ExprId array = g_.seq({g_.byte('['), ws(), g_.optional(items), ws(), g_.byte(']')});
      g_.set_body(v, g_.alt({any_object(), array, json_string(g_, 0, kUnbounded),
                             json_number(g_, std::nullopt, false, std::nullopt, false, "#"),
                             g_.literal("true"), g_.literal("false"), g_.literal("null")}));
    }
    return g_.ref(any_value_rule_);
  }
  ExprId any_object() {
    if (any_value_rule_ < 0) {
      any_value();
      // any_value() built the object through this function; the rule exists now.
    }
    if (any_object_rule_ < 0) {
      any_object_rule_ = g_.add_unique_rule("json_object");
      ExprId member = g_.seq({json_string(g_, 0, kUnbounded), colon(), g_.ref(any_value_rule_)});
      ExprId members = g_.seq({member, g_.star(g_.seq({comma(), member}))});
      g_.set_body(any_object_rule_, g_.seq({g_.byte('{'), ws(), g_.optional(members), ws(), g_.byte('}')}));
    }
    return g_.ref(any_object_rule_);
  }

  const json& resolve(const std::string& ref, const std::string& path) {
    if (ref == "#") return root_;
    if (ref.rfind("#/", 0) != 0) throw_error("json schema: {}: only local $ref ('#/...') is supported, got '{}'", path, ref);
    try {
      std::string pointer = ref.substr(1);
      // $ref values are URI fragments: percent-decode before JSON-pointer decoding.
      std::string decoded;
      for (std::size_t i = 0; i < pointer.size(); ++i) {
        if (pointer[i] == '%' && i + 2 < pointer.size()) {
          decoded += static_cast<char>(std::stoi(pointer.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          decoded += pointer[i];
        }
      }
      return root_.at(json::json_pointer(decoded));
    } catch (const std::exception&) {
      throw_error("json schema: {}: $ref '{}' does not resolve", path, ref);
    }
  }

  ExprId ref_rule(const std::string& ref, const std::string& path) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return g_.ref(it->second);
    const json& target = resolve(ref, path);
    std::string hint = ref.substr(ref.find_last_of('/') + 1);
    RuleId r = g_.add_unique_rule(hint.empty() ? "ref" : hint);
    ref_rules_.emplace(ref, r);
    g_.set_body(r, value(target, ref));
    return g_.ref(r);
  }

  void check_keywords(const json& s, const std::string& path) {
    for (const auto& [key, v] : s.items()) {
      if (kAnnotations.contains(key) || kSupported.contains(key)) continue;
      if (key == "uniqueItems" && v == false) continue;
      throw_error("json schema: unsupported keyword '{}' at {}", key, path);
    }
  }

  // Keys of s besides annotations and the listed ones; composition keywords may not mix with them.
  void require_alone(const json& s, const std::string& keyword, const std::string& path) {
    for (const auto& [key, v] : s.items()) {
      if (key == keyword || kAnnotations.contains(key)) continue;
      throw_error("json schema: keyword '{}' next to '{}' at {} is not supported", key, keyword, path);
    }
  }

  ExprId value(const json& s, const std::string& path) {
    struct DepthGuard {
      int& depth;
      explicit DepthGuard(int& d) : depth(d) { ++depth; }
      ~DepthGuard() { --depth; }
    } guard(depth_);
    DI_CHECK(depth_ <= kMaxDepth, "json schema: nested deeper than {} levels at {}", kMaxDepth, path);
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      throw_error("json schema: the schema at {} is false and matches nothing", path);
    }
    DI_CHECK(s.is_object(), "json schema: the schema at {} must be an object or a boolean", path);
    check_keywords(s, path);
    if (s.contains("$ref")) {
      require_alone(s, "$ref", path);
      DI_CHECK(s["$ref"].is_string(), "json schema: $ref at {} must be a string", path);
      return ref_rule(s["$ref"].get<std::string>(), path);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (s.contains(key)) return composition(s, key, path);
    }
    if (s.contains("const") || s.contains("enum")) return enumeration(s, path);
    std::vector<std::string> types = types_of(s, path);
    std::vector<ExprId> options;
    for (const std::string& t : types) options.push_back(typed(s, t, path));
    return g_.alt(std::move(options));
  }

  std::vector<std::string> types_of(const json& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const auto& e : t) {
          DI_CHECK(e.is_string(), "json schema: 'type' at {} must hold strings", path);
          types.push_back(e.get<std::string>());
        }
      } else {
        throw_error("json schema: 'type' at {} must be a string or an array", path);
      }
      for (const auto& name : types) {
        DI_CHECK(std::find(kTypes.begin(), kTypes.end(), name) != kTypes.end(),
                 "json schema: unknown type '{}' at {}", name, path);
      }
      if (std::find(types.begin(), types.end(), "number") != types.end()) {
        std::erase(types, std::string("integer"));  // integers are numbers already
      }
      DI_CHECK(!types.empty(), "json schema: empty 'type' at {}", path);
      return types;
    }
    // No type: infer it from the keywords present (a tighter but valid choice); none -> any value.
    auto has = [&](std::initializer_list<const char*> keys) {
      return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return s.contains(k); });
    };
    if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
    if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
    if (types.empty()) types.push_back("any");
    return types;
  }

  ExprId typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "any") return any_value();
    if (type == "null") return g_.literal("null");
    if (type == "boolean") return g_.alt({g_.literal("true"), g_.literal("false")});
    if (type == "string") return string_value(s, path);
    if (type == "integer") return integer_value(s, path);
    if (type == "number") return number_value(s, path);
    if (type == "array") return array_value(s, path);
    return object_value(s, path);
  }

  ExprId composition(const json& s, const std::string& key, const std::string& path);
  ExprId enumeration(const json& s, const std::string& path);
  ExprId string_value(const json& s, const std::string& path);
  ExprId integer_value(const json& s, const std::string& path);
  ExprId number_value(const json& s, const std::string& path);
  ExprId array_value(const json& s, const std::string& path);
  ExprId object_value(const json& s, const std::string& path);
  bool provably_disjoint(const json& a, const json& b, int depth);
  std::set<std::string> possible_types(const json& s, int depth);

  const json& root_;
  JsonSchemaOptions options_;
  Grammar g_;
  static constexpr int kMaxDepth = 128;
  int depth_ = 0;
  RuleId any_value_rule_ = -1;
  RuleId any_object_rule_ = -1;
  std::map<std::string, RuleId> ref_rules_;
};

ExprId SchemaConverter::composition(const json& s, const std::string& key, const std::string& path) {
  require_alone(s, key, path);
  const json& branches = s[key];
  DI_CHECK(branches.is_array() && !branches.empty(), "json schema: '{}' at {} must be a non-empty array", key, path);
  if (key == "allOf") {
    DI_CHECK(branches.size() == 1, "json schema: 'allOf' with more than one schema at {} is not supported", path);
    return value(branches[0], path + "/allOf/0");
  }
  if (key == "oneOf") {
    for (std::size_t i = 0; i < branches.size(); ++i) {
      for (std::size_t j = i + 1; j < branches.size(); ++j) {
        if (!provably_disjoint(branches[i], branches[j], 0)) {
          throw_error("json schema: 'oneOf' at {}: branches {} and {} may both match a value, which oneOf forbids; "
                      "use anyOf or make them distinguishable (types, const discriminator, required keys)",
                      path, i, j);
        }
      }
    }
  }
  std::vector<ExprId> options;
  for (std::size_t i = 0; i < branches.size(); ++i) {
    options.push_back(value(branches[i], fmt::format("{}/{}/{}", path, key, i)));
  }
  return g_.alt(std::move(options));
}

namespace {

bool value_has_type(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  return true;
}

std::string json_type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  return v.is_number_integer() ? "integer" : "number";
}

}  // namespace

ExprId SchemaConverter::enumeration(const json& s, const std::string& path) {
  for (const auto& [key, v] : s.items()) {
    if (key != "enum" && key != "const" && key != "type" && !kAnnotations.contains(key)) {
      throw_error("json schema: keyword '{}' next to enum/const at {} is not supported", key, path);
    }
  }
  std::vector<json> values;
  if (s.contains("const")) {
    values.push_back(s["const"]);
  } else {
    DI_CHECK(s["enum"].is_array() && !s["enum"].empty(), "json schema: 'enum' at {} must be a non-empty array", path);
    for (const auto& v : s["enum"]) values.push_back(v);
  }
  std::vector<std::string> types = s.contains("type") ? types_of(s, path) : std::vector<std::string>{};
  std::vector<ExprId> options;
  for (const json& v : values) {
    bool ok = types.empty() || std::any_of(types.begin(), types.end(), [&](const auto& t) { return value_has_type(v, t); });
    if (ok) options.push_back(g_.literal(v.dump()));
  }
  DI_CHECK(!options.empty(), "json schema: no enum/const value at {} has the schema's type", path);
  return g_.alt(std::move(options));
}

ExprId SchemaConverter::string_value(const json& s, const std::string& path) {
  auto length = [&](const char* key, int fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    DI_CHECK(v.is_number_integer() && v.get<long long>() >= 0 && v.get<long long>() <= 10000,
             "json schema: '{}' at {} must be an integer in [0, 10000]", key, path);
    return static_cast<int>(v.get<long long>());
  };
  int min = length("minLength", 0);
  int max = length("maxLength", kUnbounded);
  bool has_length = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("pattern") || s.contains("format")) {
    const char* key = s.contains("pattern") ? "pattern" : "format";
    DI_CHECK(!(s.contains("pattern") && s.contains("format")),
             "json schema: 'pattern' together with 'format' at {} is not supported", path);
    DI_CHECK(!has_length, "json schema: '{}' together with minLength/maxLength at {} is not supported", key, path);
    DI_CHECK(s[key].is_string(), "json schema: '{}' at {} must be a string", key, path);
    std::string text = s[key].get<std::string>();
    return s.contains("pattern") ? json_string_pattern(g_, text, path) : json_string_format(g_, text, path);
  }
  DI_CHECK(max == kUnbounded || max >= min, "json schema: maxLength below minLength at {}", path);
  return json_string(g_, min, max);
}

namespace {

struct Bound {
  std::optional<double> value;
  bool exclusive = false;
};

// Combines minimum/exclusiveMinimum (or the maximum pair) into the tighter bound.
Bound numeric_bound(const nlohmann::ordered_json& s, const char* inclusive_key, const char* exclusive_key, bool lower,
                    const std::string& path) {
  Bound b;
  auto number = [&](const char* key) {
    DI_CHECK(s[key].is_number(), "json schema: '{}' at {} must be a number", key, path);
    return s[key].get<double>();
  };
  if (s.contains(inclusive_key)) b.value = number(inclusive_key);
  if (s.contains(exclusive_key)) {
    if (s[exclusive_key].is_boolean()) {  // draft 4: a flag on the inclusive bound
      b.exclusive = s[exclusive_key].get<bool>() && b.value.has_value();
    } else {
      double v = number(exclusive_key);
      if (!b.value || (lower ? v >= *b.value : v <= *b.value)) {
        b.value = v;
        b.exclusive = true;
      }
    }
  }
  if (b.value) DI_CHECK(std::fabs(*b.value) < 1e18, "json schema: bound {} at {} is out of range", *b.value, path);
  return b;
}

}  // namespace

ExprId SchemaConverter::integer_value(const json& s, const std::string& path) {
  Bound lo = numeric_bound(s, "minimum", "exclusiveMinimum", true, path);
  Bound hi = numeric_bound(s, "maximum", "exclusiveMaximum", false, path);
  std::optional<long long> l;
  std::optional<long long> h;
  if (lo.value) l = static_cast<long long>(lo.exclusive ? std::floor(*lo.value) + 1 : std::ceil(*lo.value));
  if (hi.value) h = static_cast<long long>(hi.exclusive ? std::ceil(*hi.value) - 1 : std::floor(*hi.value));
  DI_CHECK(!(l && h && *l > *h), "json schema: no integer satisfies the bounds at {}", path);
  return json_integer(g_, l, h);
}

ExprId SchemaConverter::number_value(const json& s, const std::string& path) {
  Bound lo = numeric_bound(s, "minimum", "exclusiveMinimum", true, path);
  Bound hi = numeric_bound(s, "maximum", "exclusiveMaximum", false, path);
  return json_number(g_, lo.value, lo.exclusive, hi.value, hi.exclusive, path);
}

ExprId SchemaConverter::array_value(const json& s, const std::string& path) {
  auto count = [&](const char* key, int fallback) {
    if (!s.contains(key)) return fallback;
    DI_CHECK(s[key].is_number_integer() && s[key].get<long long>() >= 0 && s[key].get<long long>() <= 10000,
             "json schema: '{}' at {} must be an integer in [0, 10000]", key, path);
    return static_cast<int>(s[key].get<long long>());
  };
  int min = count("minItems", 0);
  int max = count("maxItems", kUnbounded);
  DI_CHECK(max == kUnbounded || max >= min, "json schema: maxItems below minItems at {}", path);
  std::vector<ExprId> prefix;
  if (s.contains("prefixItems")) {
    DI_CHECK(s["prefixItems"].is_array(), "json schema: 'prefixItems' at {} must be an array", path);
    for (std::size_t i = 0; i < s["prefixItems"].size(); ++i) {
      prefix.push_back(value(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", path, i)));
    }
  }
  std::optional<ExprId> extra;
  if (s.contains("items")) {
    if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
      // A rule of its own: repeats then copy a reference, and the automaton decides whether the
      // item is small enough to inline into every copy.
      RuleId item = g_.add_unique_rule("item");
      g_.set_body(item, value(s["items"], path + "/items"));
      extra = g_.ref(item);
    }
  } else if (prefix.empty() || !options_.strict) {
    extra = any_value();
  }
  auto k = static_cast<int>(prefix.size());
  ExprId open = g_.seq({g_.byte('['), ws()});
  ExprId close = g_.seq({ws(), g_.byte(']')});
  if (k > 0) {
    DI_CHECK(max == kUnbounded || max >= k, "json schema: maxItems below the number of prefixItems at {}", path);
    std::vector<ExprId> parts{open};
    for (int i = 0; i < k; ++i) {
      if (i) parts.push_back(comma());
      parts.push_back(prefix[i]);
    }
    if (extra) {
      int extra_max = max == kUnbounded ? kUnbounded : max - k;
      parts.push_back(g_.repeat(g_.seq({comma(), *extra}), std::max(min - k, 0), extra_max));
    } else {
      DI_CHECK(min <= k, "json schema: minItems above the number of prefixItems with no more items allowed at {}", path);
    }
    parts.push_back(close);
    return g_.seq(std::move(parts));
  }
  if (!extra || max == 0) {
    DI_CHECK(min == 0, "json schema: minItems {} but no items are allowed at {}", min, path);
    return g_.seq({open, close});
  }
  ExprId rest = g_.repeat(g_.seq({comma(), *extra}), std::max(min - 1, 0), max == kUnbounded ? kUnbounded : max - 1);
  ExprId items = g_.seq({*extra, rest});
  return g_.seq({open, min == 0 ? g_.optional(items) : items, close});
}

ExprId SchemaConverter::object_value(const json& s, const std::string& path) {
  struct Property {
    std::string name;
    ExprId value;
    bool required;
  };
  std::set<std::string> required;
  if (s.contains("required")) {
    DI_CHECK(s["required"].is_array(), "json schema: 'required' at {} must be an array", path);
    for (const auto& r : s["required"]) {
      DI_CHECK(r.is_string(), "json schema: 'required' at {} must hold strings", path);
      required.insert(r.get<std::string>());
    }
  }
  std::optional<ExprId> additional;
  bool additional_explicit_false = false;
  if (s.contains("additionalProperties")) {
    const json& a = s["additionalProperties"];
    if (a.is_boolean() && !a.get<bool>()) {
      additional_explicit_false = true;
    } else {
      additional = value(a, path + "/additionalProperties");
    }
  } else if (!options_.strict) {
    additional = any_value();
  }
  std::vector<Property> props;
  std::vector<std::string> names;
  if (s.contains("properties")) {
    DI_CHECK(s["properties"].is_object(), "json schema: 'properties' at {} must be an object", path);
    for (const auto& [name, schema] : s["properties"].items()) {
      props.push_back({name, value(schema, path + "/properties/" + name), required.contains(name)});
      names.push_back(name);
    }
  }
  for (const std::string& name : required) {
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    DI_CHECK(!additional_explicit_false,
             "json schema: required property '{}' at {} is not in properties and additionalProperties is false", name,
             path);
    props.push_back({name, additional ? *additional : any_value(), true});
    names.push_back(name);
  }
  std::optional<ExprId> extra_member;
  if (additional) extra_member = g_.seq({json_key_excluding(g_, names), colon(), *additional});
  auto n = static_cast<int>(props.size());
  // Rules chained by tail references, so the automaton shares every continuation: after[i] =
  // something emitted, property i next; before[i] = nothing emitted yet; take[i] = emit property
  // i, then after[i + 1] (one copy of each property's value whichever way it is reached).
  std::vector<RuleId> after(n + 1);
  std::vector<RuleId> before(n + 1);
  std::vector<RuleId> take(n);
  for (int i = 0; i <= n; ++i) {
    after[i] = g_.add_unique_rule("obj_after");
    before[i] = g_.add_unique_rule("obj_before");
    if (i < n) take[i] = g_.add_unique_rule("obj_take");
  }
  ExprId close = g_.seq({ws(), g_.byte('}')});
  ExprId extras = extra_member ? g_.star(g_.seq({comma(), *extra_member})) : g_.empty();
  g_.set_body(after[n], g_.seq({extras, close}));
  g_.set_body(before[n], extra_member ? g_.alt({g_.byte('}'), g_.seq({*extra_member, g_.ref(after[n])})})
                                      : g_.byte('}'));
  for (int i = n - 1; i >= 0; --i) {
    ExprId member = g_.seq({g_.literal(json(props[i].name).dump()), colon(), props[i].value});
    g_.set_body(take[i], g_.seq({member, g_.ref(after[i + 1])}));
    ExprId take_after = g_.seq({comma(), g_.ref(take[i])});
    g_.set_body(after[i], props[i].required ? take_after : g_.alt({take_after, g_.ref(after[i + 1])}));
    g_.set_body(before[i], props[i].required ? g_.ref(take[i]) : g_.alt({g_.ref(take[i]), g_.ref(before[i + 1])}));
  }
  return g_.seq({g_.byte('{'), ws(), g_.ref(before[0])});
}

std::set<std::string> SchemaConverter::possible_types(const json& s, int depth) {
  std::set<std::string> all(kTypes.begin(), kTypes.end());
  if (depth > 32 || !s.is_object()) return all;
  if (s.contains("$ref") && s["$ref"].is_string()) return possible_types(resolve(s["$ref"].get<std::string>(), "#"), depth + 1);
  if (s.contains("const")) return {json_type_name(s["const"])};
  if (s.contains("enum") && s["enum"].is_array()) {
    std::set<std::string> out;
    for (const auto& v : s["enum"]) out.insert(json_type_name(v));
    return out;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s.contains(key) && s[key].is_array()) {
      std::set<std::string> out;
      for (const auto& b : s[key]) out.merge(possible_types(b, depth + 1));
      return out;
    }
  }
  if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() == 1) return possible_types(s["allOf"][0], depth + 1);
  std::vector<std::string> types = types_of(s, "#");
  if (types.size() == 1 && types[0] == "any") return all;
  std::set<std::string> out(types.begin(), types.end());
  if (out.contains("number")) out.insert("integer");
  return out;
}

// True when no value our grammar produces for a can validate against b, and vice versa: by type,
// by disjoint const/enum values, by a discriminating const property, or by a required key the
// other side can never produce.
bool SchemaConverter::provably_disjoint(const json& a_in, const json& b_in, int depth) {
  if (depth > 32) return false;
  const json& a = a_in.is_object() && a_in.contains("$ref") ? resolve(a_in["$ref"].get<std::string>(), "#") : a_in;
  const json& b = b_in.is_object() && b_in.contains("$ref") ? resolve(b_in["$ref"].get<std::string>(), "#") : b_in;
  if (&a != &a_in || &b != &b_in) return provably_disjoint(a, b, depth + 1);
  std::set<std::string> ta = possible_types(a, 0);
  std::set<std::string> tb = possible_types(b, 0);
  bool types_overlap = std::any_of(ta.begin(), ta.end(), [&](const std::string& t) { return tb.contains(t); });
  if (!types_overlap) return true;
  auto values = [](const json& s) -> std::optional<std::vector<json>> {
    if (!s.is_object()) return std::nullopt;
    if (s.contains("const")) return std::vector<json>{s["const"]};
    if (s.contains("enum") && s["enum"].is_array()) return std::vector<json>(s["enum"].begin(), s["enum"].end());
    return std::nullopt;
  };
  auto disjoint_values = [](const std::vector<json>& x, const std::vector<json>& y) {
    return std::none_of(x.begin(), x.end(), [&](const json& v) { return std::find(y.begin(), y.end(), v) != y.end(); });
  };
  auto va = values(a);
  auto vb = values(b);
  if (va && vb) return disjoint_values(*va, *vb);
  if (!(a.is_object() && b.is_object() && ta == std::set<std::string>{"object"} && tb == ta)) return false;
  auto props = [](const json& s) { return s.contains("properties") && s["properties"].is_object() ? s["properties"] : json::object(); };
  auto reqs = [](const json& s) {
    std::set<std::string> out;
    if (s.contains("required") && s["required"].is_array()) {
      for (const auto& r : s["required"]) {
        if (r.is_string()) out.insert(r.get<std::string>());
      }
    }
    return out;
  };
  auto closed = [&](const json& s) {
    return s.contains("additionalProperties") ? s["additionalProperties"] == false : options_.strict;
  };
  // Outputs of x never validate against y.
  auto fails = [&](const json& x, const json& y) {
    json px = props(x);
    json py = props(y);
    for (const std::string& q : reqs(y)) {
      if (!px.contains(q) && closed(x)) return true;
    }
    for (const std::string& p : reqs(x)) {
      if (!px.contains(p) || !py.contains(p)) continue;
      auto vx = values(px[p]);
      auto vy = values(py[p]);
      if (vx && vy && disjoint_values(*vx, *vy)) return true;
    }
    return false;
  };
  return fails(a, b) && fails(b, a);
}

}  // namespace

Grammar grammar_from_json_schema(std::string_view schema, const JsonSchemaOptions& options) {
  nlohmann::ordered_json root = nlohmann::ordered_json::parse(schema, nullptr, false);
  DI_CHECK(!root.is_discarded(), "json schema: the schema is not valid JSON");
  return SchemaConverter(root, options).convert();
}

Grammar grammar_json_object(const JsonSchemaOptions& options) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  return SchemaConverter(root, options).convert_json_object();
}

}  // namespace deepinfer::grammar
