// `deepinfer generate`: offline generation through deepinfer::LLM for one prompt (text or ids) or
// a JSONL file of prompts with per-line sampling fields; plain text or one JSON object per prompt.
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "deepinfer/llm.h"

namespace deepinfer::cli {
namespace {

// "1,2,3" read as the JSON array [1,2,3], so every item must be a plain non-negative integer.
std::vector<std::int32_t> parse_prompt_ids(const std::string& text) {
  const auto j = nlohmann::json::parse("[" + text + "]", nullptr, false);
  DI_CHECK(!j.is_discarded() && !j.empty(), "--prompt-ids '{}': expected comma-separated token ids", text);
  std::vector<std::int32_t> ids;
  for (const auto& v : j) {
    DI_CHECK(v.is_number_unsigned() && v.get<std::uint64_t>() <= INT32_MAX, "--prompt-ids: {} (item {}) is not a token id",
             v.dump(), ids.size() + 1);
    ids.push_back(v.get<std::int32_t>());
  }
  return ids;
}

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "{} {}: cannot open the file", flag, path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A constraint field of a JSONL line (read with its key order: a schema's properties keep their
// declared order), named as the server names it: regex, grammar / ebnf,
// json_schema (a schema), choice (a list), response_format (OpenAI's object) and structured_outputs
// (vLLM's object). so_args itself goes through SamplingParams.
std::optional<engine::StructuredOutputArgs> line_constraint(const std::string& key, const nlohmann::ordered_json& v) {
  auto string_field = [&](const nlohmann::ordered_json& value, const std::string& name) {
    DI_CHECK(value.is_string(), "\"{}\" must be a string, got {}", name, value.dump());
    return value.get<std::string>();
  };
  auto schema_text = [](const nlohmann::ordered_json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); };
  if (key == "regex") return engine::StructuredOutputArgs{"regex", string_field(v, key)};
  if (key == "grammar" || key == "ebnf") return engine::StructuredOutputArgs{"ebnf", string_field(v, key)};
  if (key == "json_schema") return engine::StructuredOutputArgs{"json", schema_text(v)};
  if (key == "choice") {
    DI_CHECK(v.is_array(), "\"choice\" must be an array of strings, got {}", v.dump());
    return engine::StructuredOutputArgs{"choice", v.dump()};
  }
  if (key == "response_format") {
    DI_CHECK(v.is_object() && v.contains("type"), "\"response_format\" must be an object with a \"type\"");
    const std::string type = string_field(v["type"], "response_format.type");
    if (type == "text") return std::nullopt;
    if (type == "json_object") return engine::StructuredOutputArgs{"json_object", ""};
    DI_CHECK(type == "json_schema", "\"response_format.type\" '{}' is not text, json_object or json_schema", type);
    const auto spec = v.value("json_schema", nlohmann::ordered_json::object());
    DI_CHECK(spec.is_object() && spec.contains("schema"), "\"response_format.json_schema.schema\" is required");
    return engine::StructuredOutputArgs{"json", schema_text(spec["schema"])};
  }
  if (key == "structured_outputs") {
    nlohmann::ordered_json kinds = v.is_object() ? v : nlohmann::ordered_json();
    const bool compact = kinds.is_object() && kinds.value("disable_any_whitespace", false);
    if (kinds.is_object()) kinds.erase("disable_any_whitespace");
    DI_CHECK(kinds.is_object() && kinds.size() == 1, "\"structured_outputs\" must be an object with one of json, "
             "regex, choice, grammar, json_object (and optionally disable_any_whitespace)");
    const auto first = kinds.begin();  // an lvalue iterator: gcc 13's -Wdangling-reference flags value() on a temporary
    const std::string kind = first.key();
    const nlohmann::ordered_json& value = first.value();
    std::optional<engine::StructuredOutputArgs> args;
    if (kind == "json_object") args = engine::StructuredOutputArgs{"json_object", ""};
    else if (kind == "json") args = engine::StructuredOutputArgs{"json", schema_text(value)};
    else args = line_constraint(kind, value);
    if (args) args->disable_any_whitespace = compact;
    return args;
  }
  throw_error("unknown field \"{}\"", key);
}

bool is_constraint_field(const std::string& key) {
  return key == "regex" || key == "grammar" || key == "ebnf" || key == "json_schema" || key == "choice" ||
         key == "response_format" || key == "structured_outputs";
}

// One request of the run: its prompt and params, or why its input line was rejected.
struct Request {
  Prompt prompt;
  SamplingParams params;
  std::optional<std::string> error;
};

// A JSONL line: {"prompt": "..."} or {"prompt_ids": [...]}, plus sampling fields over `base`.
// compact_json: --disable-any-whitespace, which applies to the line's own constraint too.
Request parse_line(const std::string& line, std::size_t line_no, const std::string& file, const SamplingParams& base,
                   bool compact_json) {
  Request r;
  try {
    const auto j = nlohmann::json::parse(line);
    const auto ordered = nlohmann::ordered_json::parse(line);
    DI_CHECK(j.is_object(), "not a JSON object");
    DI_CHECK(j.contains("prompt") != j.contains("prompt_ids"), "give exactly one of \"prompt\" and \"prompt_ids\"");
    nlohmann::json fields = base.to_json();
    std::optional<engine::StructuredOutputArgs> constraint = base.so_args;
    int constraints = 0;
    for (const auto& [key, value] : j.items()) {
      if (key == "prompt") {
        DI_CHECK(value.is_string(), "\"prompt\" must be a string");
        r.prompt = Prompt::from_text(value.get<std::string>());
      } else if (key == "prompt_ids") {
        DI_CHECK(value.is_array(), "\"prompt_ids\" must be an array of token ids");
        for (const auto& v : value) {
          DI_CHECK(v.is_number_integer(), "\"prompt_ids\" holds {}, not a token id", v.dump());
          r.prompt.token_ids.push_back(v.get<std::int32_t>());
        }
      } else if (is_constraint_field(key)) {
        constraint = line_constraint(key, ordered[key]);
        ++constraints;
      } else {
        DI_CHECK(SamplingParams::is_field(key), "unknown field \"{}\"", key);
        fields[key] = value;
        if (key == "so_args") ++constraints;
      }
    }
    DI_CHECK(constraints <= 1, "give at most one structured-output field (so_args, regex, grammar, json_schema, ...)");
    r.params = SamplingParams::from_json(fields);
    if (constraints == 0 || !j.contains("so_args")) r.params.so_args = constraint;
    if (r.params.so_args && compact_json) r.params.so_args->disable_any_whitespace = true;
  } catch (const std::exception& e) {
    r.error = fmt::format("{} line {}: {}", file, line_no, e.what());
  }
  return r;
}

nlohmann::json to_json(const RequestResult& r, const std::optional<std::string>& input_error) {
  nlohmann::json j;
  j["prompt_ids"] = r.prompt_token_ids;
  if (input_error || r.error) {
    j["error"] = input_error ? *input_error : *r.error;
    return j;
  }
  const CompletionResult& c = r.outputs.at(0);
  j["token_ids"] = c.token_ids;
  j["text"] = c.text ? nlohmann::json(*c.text) : nlohmann::json(nullptr);
  j["finish_reason"] = c.finish_reason;
  return j;
}

struct Options {
  ModelOptions model;
  LLMOptions engine;
  std::string prompt, prompt_ids, input;
  std::int32_t max_tokens = 64;
  float temperature = 1.0f, top_p = 1.0f;
  std::int32_t top_k = -1;
  std::optional<std::uint64_t> seed;
  bool ignore_eos = false, json = false;
  std::string json_schema, regex, grammar, choice;  // structured output for every prompt
  bool disable_any_whitespace = false;
};

// --json-schema FILE|JSON, --regex, --grammar FILE, --choice a,b,c: the base constraint.
std::optional<engine::StructuredOutputArgs> flag_constraint(const Options& o) {
  DI_CHECK(o.json_schema.empty() + o.regex.empty() + o.grammar.empty() + o.choice.empty() >= 3,
           "give at most one of --json-schema, --regex, --grammar and --choice");
  if (!o.regex.empty()) return engine::StructuredOutputArgs{"regex", o.regex};
  if (!o.grammar.empty()) return engine::StructuredOutputArgs{"ebnf", read_text_file(o.grammar, "--grammar")};
  if (!o.json_schema.empty()) {
    const auto first = o.json_schema.find_first_not_of(" \t\r\n");
    const bool inline_json = first != std::string::npos && (o.json_schema[first] == '{' || o.json_schema[first] == '[');
    return engine::StructuredOutputArgs{
        "json", inline_json ? o.json_schema : read_text_file(o.json_schema, "--json-schema")};
  }
  if (!o.choice.empty()) {
    nlohmann::json list = nlohmann::json::array();
    std::size_t start = 0;
    for (std::size_t comma; (comma = o.choice.find(',', start)) != std::string::npos; start = comma + 1)
      list.push_back(o.choice.substr(start, comma - start));
    list.push_back(o.choice.substr(start));
    return engine::StructuredOutputArgs{"choice", list.dump()};
  }
  return std::nullopt;
}

std::vector<Request> read_requests(const Options& o, const SamplingParams& base) {
  std::vector<Request> requests;
  if (!o.prompt.empty()) requests.push_back({Prompt::from_text(o.prompt), base, std::nullopt});
  if (!o.prompt_ids.empty()) requests.push_back({Prompt::from_ids(parse_prompt_ids(o.prompt_ids)), base, std::nullopt});
  if (!o.input.empty()) {
    std::ifstream in(o.input);
    DI_CHECK(in.good(), "--input {}: cannot open the file", o.input);
    std::string line;
    for (std::size_t no = 1; std::getline(in, line); ++no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      requests.push_back(parse_line(line, no, o.input, base, o.disable_any_whitespace));
    }
  }
  DI_CHECK(requests.size() > 0, "no prompt: give --prompt, --prompt-ids or a non-empty --input file");
  return requests;
}

int run_generate(const Options& o) {
  DI_CHECK(o.prompt.empty() + o.prompt_ids.empty() + o.input.empty() == 2,
           "give exactly one of --prompt, --prompt-ids and --input");
  SamplingParams base;
  base.max_tokens = o.max_tokens;
  base.temperature = o.temperature;
  base.top_p = o.top_p;
  base.top_k = o.top_k;
  base.seq_seed = o.seed;
  base.ignore_eos = o.ignore_eos;
  base.so_args = flag_constraint(o);
  if (base.so_args) base.so_args->disable_any_whitespace = o.disable_any_whitespace;
  const std::vector<Request> requests = read_requests(o, base);
  LLMOptions options = o.engine;
  if (!o.model.mode.empty()) options.mode = o.model.mode;
  LLM llm(o.model.model_dir, options);
  // Rejected lines take no part in the run; their error is printed at their place.
  std::vector<Prompt> prompts;
  std::vector<SamplingParams> params;
  for (const Request& r : requests) {
    if (r.error) continue;
    prompts.push_back(r.prompt);
    params.push_back(r.params);
  }
  const std::vector<RequestResult> results = prompts.empty() ? std::vector<RequestResult>{} : llm.generate(prompts, params);
  int rc = 0;
  std::size_t k = 0;
  for (const Request& r : requests) {
    const RequestResult res = r.error ? RequestResult{} : results[k++];
    if (r.error || res.error) rc = 1;
    if (o.json) {
      std::cout << to_json(res, r.error).dump() << "\n";
    } else if (r.error || res.error) {
      std::cerr << "deepinfer: error: " << (r.error ? *r.error : *res.error) << "\n";
    } else {
      const CompletionResult& c = res.outputs.at(0);
      std::cout << (c.text ? *c.text : nlohmann::json(c.token_ids).dump()) << "\n";
    }
  }
  std::cout.flush();
  return rc;
}

}  // namespace

void register_generate(CLI::App& app) {
  auto* sub = app.add_subcommand("generate", "Generate text for prompts (offline, through the engine)");
  auto opts = std::make_shared<Options>();
  opts->model.add_to(sub);
  sub->add_option("--prompt", opts->prompt, "Prompt text (needs the model's tokenizer.json)");
  sub->add_option("--prompt-ids", opts->prompt_ids, "Prompt token ids, comma separated");
  sub->add_option("--input", opts->input,
                  "JSONL file: one {\"prompt\": ...} or {\"prompt_ids\": [...]} per line, with optional sampling fields");
  sub->add_option("--max-tokens", opts->max_tokens, "Tokens to generate at most")->check(CLI::Range(0, 1 << 30));
  sub->add_option("--temperature", opts->temperature, "Sampling temperature (0: greedy)");
  sub->add_option("--top-p", opts->top_p, "Nucleus sampling mass in (0, 1]");
  sub->add_option("--top-k", opts->top_k, "Keep the k most likely tokens (-1: off)");
  sub->add_option("--seed", opts->seed, "Per-request seed (seq_seed): reproducible sampling");
  sub->add_flag("--ignore-eos", opts->ignore_eos, "Keep generating past EOS");
  sub->add_flag("--json", opts->json, "One JSON object per prompt: prompt_ids, token_ids, text, finish_reason");
  add_executor_flags(sub, opts->engine);
  sub->add_option("--max-model-len", opts->engine.max_model_len,
                  "Prompt + output tokens per sequence (0: min(max_position_embeddings, 8192))");
  sub->add_option("--max-num-seqs", opts->engine.max_num_seqs, "Sequences running at once")->capture_default_str();
  sub->add_option("--max-num-batched-tokens", opts->engine.max_num_batched_tokens, "Tokens per engine step")
      ->capture_default_str();
  sub->add_option("--json-schema", opts->json_schema, "Structured output: a JSON schema (a file, or the JSON itself)");
  sub->add_option("--regex", opts->regex, "Structured output: the text fully matches this regular expression");
  sub->add_option("--grammar", opts->grammar, "Structured output: an EBNF (GBNF) grammar file, root rule 'root'");
  sub->add_option("--choice", opts->choice, "Structured output: exactly one of these comma-separated strings");
  sub->add_flag("--disable-any-whitespace", opts->disable_any_whitespace,
                "Structured output: JSON with only the \", \" and \": \" separators, no other whitespace");
  set_handler(sub, [opts] { return run_generate(*opts); });
}

}  // namespace deepinfer::cli
