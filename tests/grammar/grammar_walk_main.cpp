// grammar_walk: compiles one constraint against a tokenizer and generates text by random walks
// through the matcher (uniform over allowed tokens, mixed with a bias to short tokens so walks
// end), checking at every step that the mask is non-empty, that allowed tokens are accepted and
// that rollback restores the mask. Prints one JSON line per walk; tests/grammar/check_walks.py
// validates the texts independently (jsonschema, re.fullmatch, Python parsers).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/thread_pool.h"
#include "grammar/compiler.h"
#include "grammar/matcher.h"

using namespace deepinfer;
using namespace deepinfer::grammar;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool allowed(const std::vector<std::uint32_t>& mask, int id) { return (mask[id >> 5] >> (id & 31)) & 1; }

nlohmann::json walk(const std::shared_ptr<const CompiledGrammar>& cg, int seed, int max_tokens) {
  const Vocabulary& vocab = *cg->vocab;
  Matcher m(cg);
  std::mt19937_64 rng(static_cast<std::uint64_t>(seed) * 7919 + 17);
  std::vector<std::uint32_t> mask(vocab.bitmask_words());
  std::vector<std::uint32_t> again(vocab.bitmask_words());
  std::string text;
  std::vector<int> tokens;
  std::string error;
  for (int step = 0; step < max_tokens && !m.is_terminated(); ++step) {
    m.fill_next_token_bitmask(mask);
    std::vector<int> all;
    std::vector<int> short_ones;
    std::vector<int> closing;  // single bytes that tend to close strings and brackets
    std::vector<int> visible;  // not whitespace only: flexible JSON whitespace would swamp the walk
    int end_allowed = -1;
    for (int id = 0; id < vocab.size(); ++id) {
      if (!allowed(mask, id)) continue;
      if (vocab.is_end(id)) {
        end_allowed = id;
        continue;
      }
      if (vocab.is_excluded(id)) {
        error = fmt::format("excluded token {} allowed", id);
        break;
      }
      all.push_back(id);
      const std::string& bytes = vocab.token_bytes(id);
      if (bytes.find_first_not_of(" \t\n\r") != std::string::npos) visible.push_back(id);
      if (bytes.size() == 1) short_ones.push_back(id);
      if (bytes.size() == 1 && std::string_view("\"}])>;,.0123456789").find(bytes[0]) != std::string_view::npos) {
        closing.push_back(id);
      }
    }
    if (!error.empty()) break;
    if (all.empty() && end_allowed < 0) {
      error = "empty mask on a valid prefix";
      break;
    }
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    bool late = step > max_tokens / 2;
    int pick = -1;
    if (end_allowed >= 0 && (all.empty() || u < (late ? 0.8 : 0.2))) {
      pick = end_allowed;
    } else if (late && !closing.empty() && u < 0.9) {
      pick = closing[rng() % closing.size()];
    } else if (!short_ones.empty() && (u > (late ? 0.1 : 0.6))) {
      pick = short_ones[rng() % short_ones.size()];
    } else if (!visible.empty() && u > 0.15) {
      pick = visible[rng() % visible.size()];
    } else if (!all.empty()) {
      pick = all[rng() % all.size()];
    } else {
      pick = end_allowed;
    }
    if (!m.accept_token(pick)) {
      error = fmt::format("allowed token {} was rejected", pick);
      break;
    }
    if (step % 7 == 3) {  // rollback must restore the exact mask
      m.rollback(1);
      m.fill_next_token_bitmask(again);
      if (again != mask) {
        error = "mask differs after rollback";
        break;
      }
      m.accept_token(pick);
    }
    tokens.push_back(pick);
    if (!vocab.is_end(pick)) text += vocab.token_bytes(pick);
  }
  nlohmann::json out = {{"seed", seed}, {"finished", m.is_terminated()}, {"tokens", tokens}};
  out["text"] = nlohmann::json::binary_t(std::vector<std::uint8_t>(text.begin(), text.end()));
  out["text_hex"] = "";
  std::string hex;
  for (unsigned char c : text) hex += fmt::format("{:02x}", c);
  out["text_hex"] = hex;
  out.erase("text");
  if (!error.empty()) out["error"] = error;
  return out;
}

// One constraint: compile it, then print its walks; a compile error is printed, not fatal.
void run_entry(const nlohmann::json& entry, const std::filesystem::path& base,
               const std::shared_ptr<const Vocabulary>& vocab, ThreadPool* pool, int seeds, int max_tokens) {
  std::string name = entry.value("name", "");
  ConstraintSpec spec{parse_constraint_kind(entry.at("kind").get<std::string>()), entry.value("text", "")};
  if (entry.contains("file")) spec.text = read_file((base / entry["file"].get<std::string>()).string());
  try {
    auto t0 = std::chrono::steady_clock::now();
    auto cg = compile_grammar(grammar_from_constraint(spec), vocab, pool);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << nlohmann::json({{"name", name}, {"compile_ms", ms}, {"states", cg->automaton.num_states()}}).dump()
              << "\n";
    for (int seed = 0; seed < seeds; ++seed) {
      nlohmann::json w = walk(cg, seed, max_tokens);
      w["name"] = name;
      std::cout << w.dump() << "\n";
    }
  } catch (const Error& e) {
    std::cout << nlohmann::json({{"name", name}, {"compile_error", e.what()}}).dump() << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer;
  std::string manifest;
  std::string only;
  int seeds = 10;
  int max_tokens = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    std::string value = argv[i + 1];
    if (key == "--tokenizer") tokenizer = value;
    else if (key == "--manifest") manifest = value;
    else if (key == "--only") only = value;
    else if (key == "--seeds") seeds = std::stoi(value);
    else if (key == "--max-tokens") max_tokens = std::stoi(value);
  }
  if (tokenizer.empty() || manifest.empty()) {
    std::cerr << "usage: grammar_walk --tokenizer tokenizer.json --manifest manifest.json [--only NAME] "
                 "[--seeds N] [--max-tokens N]\n"
                 "manifest: [{\"name\", \"kind\": json|regex|ebnf|choice|json_object, \"text\" or \"file\"}]\n";
    return 2;
  }
  try {
    auto vocab = Vocabulary::load_hf_tokenizer_json(tokenizer, 0);
    ThreadPool pool(0);
    auto entries = nlohmann::json::parse(read_file(manifest));
    std::filesystem::path base = std::filesystem::path(manifest).parent_path();
    for (const auto& entry : entries) {
      if (only.empty() || entry.value("name", "") == only) run_entry(entry, base, vocab, &pool, seeds, max_tokens);
    }
  } catch (const std::exception& e) {
    std::cerr << "grammar_walk: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
