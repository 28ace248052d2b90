// grammar_bench: our side of tools/bench_grammar.py. For every constraint of a manifest, times
// compile (single-threaded, no cache, `--repeat` runs) and, replaying given token sequences, the
// per-token fill_next_token_bitmask time. Prints one JSON line per constraint.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
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

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer;
  std::string manifest;
  std::string sequences;
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key == "--tokenizer") tokenizer = argv[i + 1];
    else if (key == "--manifest") manifest = argv[i + 1];
    else if (key == "--sequences") sequences = argv[i + 1];
    else if (key == "--repeat") repeat = std::stoi(argv[i + 1]);
  }
  if (tokenizer.empty() || manifest.empty()) {
    std::cerr << "usage: grammar_bench --tokenizer tokenizer.json --manifest manifest.json "
                 "[--sequences {name: [[token ids]]}.json] [--repeat N]\n";
    return 2;
  }
  try {
    auto vocab = Vocabulary::load_hf_tokenizer_json(tokenizer, 129280);
    auto entries = nlohmann::json::parse(read_file(manifest));
    nlohmann::json seqs = sequences.empty() ? nlohmann::json::object() : nlohmann::json::parse(read_file(sequences));
    std::filesystem::path base = std::filesystem::path(manifest).parent_path();
    std::vector<std::uint32_t> mask(vocab->bitmask_words());
    for (const auto& entry : entries) {
      std::string name = entry.value("name", "");
      ConstraintSpec spec{parse_constraint_kind(entry.at("kind").get<std::string>()), entry.value("text", "")};
      if (entry.contains("file")) spec.text = read_file((base / entry["file"].get<std::string>()).string());
      nlohmann::json out = {{"name", name}};
      try {
        std::vector<double> compile_ms;
        std::shared_ptr<const CompiledGrammar> cg;
        for (int r = 0; r < repeat; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          cg = compile_grammar(grammar_from_constraint(spec), vocab, nullptr);
          compile_ms.push_back(ms_since(t0));
        }
        out["compile_ms"] = compile_ms;
        out["states"] = cg->automaton.num_states();
        std::vector<double> mask_us;
        int rejected = 0;
        for (const auto& seq : seqs.value(name, nlohmann::json::array())) {
          Matcher m(cg);
          for (const auto& tok : seq) {
            auto t0 = std::chrono::steady_clock::now();
            m.fill_next_token_bitmask(mask);
            mask_us.push_back(ms_since(t0) * 1000.0);
            if (!m.accept_token(tok.get<int>())) {
              ++rejected;
              break;
            }
          }
        }
        out["mask_us"] = mask_us;
        out["rejected"] = rejected;
      } catch (const Error& e) {
        out["error"] = e.what();
      }
      std::cout << out.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::cerr << "grammar_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
