// Per-request sampling parameters (vLLM's SamplingParams surface), their validation with errors
// that name the field and value, and parsing from JSON (CLI --input lines, server bodies).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::engine {

// Structured-output constraint, passed through to the grammar subsystem, which validates and
// compiles it (issue 8). Here only the shape is checked.
struct StructuredOutputArgs {
  std::string schema_type;  // json | json_object | regex | ebnf | choice | tool_calls
  std::string schema;       // JSON schema text, regex, EBNF text, a JSON array of choices, a tool-call spec
  // When set, the output is free until this text has been generated (e.g. "</think>" in thinking
  // mode, however many tokens spell it); the constraint applies to what follows.
  std::string start_after = {};
  // JSON without free whitespace (only the ", " and ": " separators), as vLLM's
  // disable_any_whitespace: small or confused models cannot loop on whitespace.
  bool disable_any_whitespace = false;
  bool operator==(const StructuredOutputArgs&) const = default;
};

struct SamplingParams {
  std::int32_t n = 1;                    // completions per prompt, sharing the prompt's pages
  float temperature = 1.0f;              // 0 = greedy
  float top_p = 1.0f;                    // (0, 1]
  std::int32_t top_k = -1;               // -1 or 0 = off
  float min_p = 0.0f;                    // [0, 1]
  float repetition_penalty = 1.0f;       // > 0; 1 = off (prompt and output tokens)
  float presence_penalty = 0.0f;         // [-2, 2] (output tokens)
  float frequency_penalty = 0.0f;        // [-2, 2] (output tokens)
  std::vector<std::pair<std::int32_t, float>> logit_bias;  // token id -> bias in [-100, 100]
  std::vector<std::int32_t> stop_token_ids;  // finish when sampled (kept in the output ids)
  std::vector<std::string> stop;         // finish when the text contains one (cut from the text)
  bool include_stop_str_in_output = false;
  std::optional<std::int32_t> max_tokens;  // unset = until max_model_len
  std::int32_t min_tokens = 0;           // stop tokens and EOS are masked until this many
  bool ignore_eos = false;
  bool skip_special_tokens = true;       // for the detokenized text only
  // Top log-probabilities per output token; when set, the sampled token's own log-probability
  // is reported too (vLLM semantics). At most EngineConfig::max_logprobs.
  std::optional<std::int32_t> logprobs;
  // Makes sampling a pure function of (seq_seed, position): the same tokens whatever the batch.
  std::optional<std::uint64_t> seq_seed;
  std::optional<StructuredOutputArgs> so_args;

  bool is_greedy() const { return temperature == 0.0f; }

  // Checks every field; throws deepinfer::Error "sampling params: <field> <value> ..." for the
  // first bad one. Token ids are checked against vocab_size.
  void validate(std::int32_t vocab_size, std::int32_t max_logprobs = 20) const;

  // Reads the fields of a JSON object by the names above ("seed" is accepted for seq_seed and
  // "stop" may be a string or a list); an unknown field or a wrong type is an error naming it.
  // Values are not range-checked here (validate does that).
  static SamplingParams from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
  // Whether `name` is a field from_json understands (front-ends that mix sampling fields with
  // their own, like the CLI's input lines, use it to split an object).
  static bool is_field(const std::string& name);
};

}  // namespace deepinfer::engine
