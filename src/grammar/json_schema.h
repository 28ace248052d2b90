// JSON Schema -> grammar. Properties keep their declared order, required ones always appear; with
// `strict` (the default, like xgrammar) objects take no properties beyond the declared ones unless
// additionalProperties says so. A keyword we cannot enforce exactly is an error naming it and its
// path, never a looser grammar.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct JsonSchemaOptions {
  bool any_whitespace = true;  // [ \n\t]* between tokens; false: ", " and ": " separators only
  bool strict = true;          // absent additionalProperties means false
};

Grammar grammar_from_json_schema(std::string_view schema, const JsonSchemaOptions& options = {});
// Any JSON object (the OpenAI json_object response format).
Grammar grammar_json_object(const JsonSchemaOptions& options = {});

}  // namespace deepinfer::grammar
