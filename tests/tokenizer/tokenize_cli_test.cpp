// End to end: `deepinfer tokenize` / `deepinfer detokenize` as a user runs them, on the real
// DeepSeek tokenizer (ids checked against HF's fixture) and on a tiny one for the error paths.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/test_tokenizers.h"

namespace deepinfer::tokenizer {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code;
  std::vector<std::string> out_lines;
  std::string err;
};

class TokenizeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunResult run(const std::string& args, const std::string& input) {
    std::ofstream(dir_ / "in.jsonl", std::ios::binary) << input;
    const std::string command = std::string(DEEPINFER_BINARY_DIR) + "/src/cli/deepinfer " + args + " < " +
                                (dir_ / "in.jsonl").string() + " > " + (dir_ / "out.jsonl").string() + " 2> " +
                                (dir_ / "err.txt").string();
    const int status = std::system(command.c_str());
    RunResult result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, {}, {}};
    std::ifstream out(dir_ / "out.jsonl");
    for (std::string line; std::getline(out, line);) result.out_lines.push_back(line);
    std::stringstream err;
    err << std::ifstream(dir_ / "err.txt").rdbuf();
    result.err = err.str();
    return result;
  }

  std::string tiny_dir() {
    const nlohmann::json added = nlohmann::json::array(
        {{{"id", 257}, {"content", "<s>"}, {"special", true}, {"normalized", false}}});
    std::ofstream(dir_ / "tokenizer.json")
        << testing::tiny_tokenizer_json({"a b"}, {{"type", "ByteLevel"}, {"add_prefix_space", false}}, added);
    std::ofstream(dir_ / "tokenizer_config.json") << R"({"bos_token": "<s>", "add_bos_token": true})";
    return dir_.string();
  }

  fs::path dir_;
};

TEST_F(TokenizeCli, TokenizeMatchesHfIdsAndDetokenizeRestoresTheText) {
  DEEPINFER_REQUIRE_DEEPSEEK_TOKENIZER();
  const auto cases = testing::read_fixture("deepseek_encode.jsonl.gz");
  std::string input;
  std::vector<const nlohmann::json*> picked;
  for (std::size_t i = 0; i < cases.size(); i += 37) {
    if (cases[i].contains("hex")) continue;
    picked.push_back(&cases[i]);
    input += nlohmann::json(cases[i]["text"]).dump() + "\n";
  }
  const std::string tokenizer = testing::deepseek_tokenizer_dir()->string();
  for (const bool special : {false, true}) {
    const auto result = run("tokenize --tokenizer " + tokenizer + (special ? " --add-special-tokens" : ""), input);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    ASSERT_EQ(result.out_lines.size(), picked.size());
    for (std::size_t i = 0; i < picked.size(); ++i)
      ASSERT_EQ(nlohmann::json::parse(result.out_lines[i]), (*picked[i])[special ? "ids_special" : "ids"]) << i;
  }
  const auto ids = run("tokenize --tokenizer " + tokenizer + "/tokenizer.json", input);
  std::string ids_input;
  for (const auto& line : ids.out_lines) ids_input += line + "\n";
  const auto text = run("detokenize --tokenizer " + tokenizer, ids_input);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  ASSERT_EQ(text.out_lines.size(), picked.size());
  for (std::size_t i = 0; i < picked.size(); ++i)
    EXPECT_EQ(nlohmann::json::parse(text.out_lines[i]), (*picked[i])["text"]) << i;
}

TEST_F(TokenizeCli, BadLinesAreReportedByNumberAndTheRestIsProcessed) {
  const std::string tok = tiny_dir();
  const auto result = run("tokenize --add-special-tokens --tokenizer " + tok,
                          "\"ab\"\nnot json\n[1]\n\"a<s>\"\n\n\"\\ud800\"\n\"b\"\n");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out_lines,
            (std::vector<std::string>{"[257,256]", "null", "null", "[257,97,257]", "null", "null", "[257,98]"}));
  EXPECT_NE(result.err.find("line 2: not JSON"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("line 3: expected a JSON string, got array"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("line 5: not JSON"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("line 6: not JSON"), std::string::npos) << result.err;  // lone surrogate
  EXPECT_NE(result.err.find("4 of 7 lines failed"), std::string::npos) << result.err;
  const auto split = run("tokenize --split-special-tokens --tokenizer " + tok, "\"a<s>\"\n");
  EXPECT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(split.out_lines, (std::vector<std::string>{"[97,60,115,62]"}));
}

TEST_F(TokenizeCli, DetokenizeRejectsBadIdsPerLine) {
  const std::string tok = tiny_dir();
  const auto result = run("detokenize --tokenizer " + tok,
                          "[257,97,98]\n[1e3]\n[-1]\n[258]\n\"ab\"\n[]\n[228,184]\n");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.out_lines, (std::vector<std::string>{"\"<s>ab\"", "null", "null", "null", "null", "\"\"",
                                                        "\"\xEF\xBF\xBD\""}));
  EXPECT_NE(result.err.find("line 2: element 0: expected an integer token id"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("line 3: element 0: token id -1 is not in the vocabulary"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("line 4: element 0: token id 258"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("line 5: expected a JSON array"), std::string::npos) << result.err;
  const auto skipping = run("detokenize --skip-special-tokens --tokenizer " + tok, "[257,97]\n");
  EXPECT_EQ(skipping.exit_code, 0);
  EXPECT_EQ(skipping.out_lines, (std::vector<std::string>{"\"a\""}));
}

TEST_F(TokenizeCli, UnloadableTokenizerFailsWithAClearMessage) {
  const auto result = run("tokenize --tokenizer " + (dir_ / "nowhere").string(), "\"a\"\n");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("deepinfer: error: tokenizer path"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("does not exist"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace deepinfer::tokenizer
