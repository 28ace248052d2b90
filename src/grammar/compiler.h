// The entry point the engine uses: a constraint (kind + text, as in SamplingParams.so_args) is
// turned into a grammar and compiled against the model's vocabulary, with an LRU cache keyed by
// the constraint so repeated schemas cost nothing.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"

namespace deepinfer {
class ThreadPool;
}

namespace deepinfer::grammar {

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kEbnf, kChoice, kToolCalls };

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonSchema;
  // kJsonSchema: the schema; kRegex: the pattern; kEbnf: the grammar; kChoice: a JSON array of
  // strings; kToolCalls: a tool-call spec (tool_calls.h); kJsonObject: unused.
  std::string text;
  bool compact_json = false;  // JSON kinds: no whitespace beyond ", " and ": " (any_whitespace off)
};

// Accepts "json" / "json_schema", "json_object", "regex", "ebnf" / "grammar", "choice", "tool_calls".
ConstraintKind parse_constraint_kind(std::string_view name);
std::string_view constraint_kind_name(ConstraintKind kind);

// The grammar of a constraint; throws deepinfer::Error with a clear message for invalid input.
Grammar grammar_from_constraint(const ConstraintSpec& spec, const JsonSchemaOptions& json_options = {});
// Exactly one of the given strings.
Grammar grammar_from_choices(const std::vector<std::string>& choices);

class GrammarCompiler {
 public:
  GrammarCompiler(std::shared_ptr<const Vocabulary> vocab, ThreadPool* pool = nullptr, std::size_t cache_entries = 128,
                  JsonSchemaOptions json_options = {});

  // Thread-safe. Errors are not cached.
  std::shared_ptr<const CompiledGrammar> compile(const ConstraintSpec& spec);
  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  ThreadPool* pool_;
  std::size_t capacity_;
  JsonSchemaOptions json_options_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace deepinfer::grammar
