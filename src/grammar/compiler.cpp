// Constraint kinds, choice lists and the caching GrammarCompiler.
#include "grammar/compiler.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/ebnf.h"
#include "grammar/regex.h"
#include "grammar/tool_calls.h"

namespace deepinfer::grammar {

ConstraintKind parse_constraint_kind(std::string_view name) {
  if (name == "json" || name == "json_schema") return ConstraintKind::kJsonSchema;
  if (name == "json_object") return ConstraintKind::kJsonObject;
  if (name == "regex") return ConstraintKind::kRegex;
  if (name == "ebnf" || name == "grammar") return ConstraintKind::kEbnf;
  if (name == "choice") return ConstraintKind::kChoice;
  if (name == "tool_calls") return ConstraintKind::kToolCalls;
  throw_error("structured output: unknown schema_type '{}' (expected json, json_object, regex, ebnf, choice or tool_calls)",
              name);
}

std::string_view constraint_kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonSchema: return "json";
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kEbnf: return "ebnf";
    case ConstraintKind::kChoice: return "choice";
    case ConstraintKind::kToolCalls: return "tool_calls";
  }
  return "";
}

Grammar grammar_from_choices(const std::vector<std::string>& choices) {
  DI_CHECK(!choices.empty(), "structured output: 'choice' needs at least one string");
  Grammar g;
  RuleId root = g.add_rule("root");
  std::vector<ExprId> options;
  for (const std::string& c : choices) options.push_back(g.literal(c));
  g.set_body(root, g.alt(std::move(options)));
  g.set_root(root);
  return g;
}

Grammar grammar_from_constraint(const ConstraintSpec& spec, const JsonSchemaOptions& json_options) {
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema:
      return grammar_from_json_schema(spec.text, json_options);
    case ConstraintKind::kJsonObject:
      return grammar_json_object(json_options);
    case ConstraintKind::kRegex:
      return grammar_from_regex(spec.text);
    case ConstraintKind::kEbnf:
      return grammar_from_ebnf(spec.text);
    case ConstraintKind::kToolCalls:
      return grammar_from_tool_calls(spec.text);
    case ConstraintKind::kChoice: {
      auto j = nlohmann::json::parse(spec.text, nullptr, false);
      DI_CHECK(!j.is_discarded() && j.is_array(), "structured output: 'choice' must be a JSON array of strings");
      std::vector<std::string> choices;
      for (const auto& c : j) {
        DI_CHECK(c.is_string(), "structured output: 'choice' must be a JSON array of strings");
        choices.push_back(c.get<std::string>());
      }
      return grammar_from_choices(choices);
    }
  }
  throw_error("structured output: unknown constraint kind");
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool, std::size_t cache_entries,
                                 JsonSchemaOptions json_options)
    : vocab_(std::move(vocab)), pool_(pool), capacity_(cache_entries), json_options_(json_options) {}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const ConstraintSpec& spec) {
  std::string key = std::string(constraint_kind_name(spec.kind)) + (spec.compact_json ? "\1" : "") + '\0' + spec.text;
  {
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  JsonSchemaOptions json_options = json_options_;
  if (spec.compact_json) json_options.any_whitespace = false;
  auto compiled = compile_grammar(grammar_from_constraint(spec, json_options), vocab_, pool_);
  std::lock_guard lock(mutex_);
  if (capacity_ == 0 || index_.contains(key)) return compiled;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace deepinfer::grammar
