// `deepinfer generate` end to end on an HF golden fixture: greedy --json output equals HF's greedy
// continuation; a JSONL file with bad lines reports each bad line's error in its place while the
// good lines still run; argument errors exit 1 with a message.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <unistd.h>

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/v4/swa_hash";

fs::path scratch_path(const std::string& name) {
  return fs::temp_directory_path() / ("deepinfer_generate_" + std::to_string(::getpid()) + "_" + name);
}

struct CliResult {
  int status;
  std::string out, err;
};

CliResult run_cli(const std::string& args) {
  const fs::path out = scratch_path("out.log"), err = scratch_path("err.log");
  const std::string cmd = std::string(DEEPINFER_BINARY_DIR) + "/src/cli/deepinfer generate " + args + " >" +
                          out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  std::stringstream o, e;
  o << std::ifstream(out).rdbuf();
  e << std::ifstream(err).rdbuf();
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, o.str(), e.str()};
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

struct Meta {
  std::vector<std::int32_t> prompt, greedy;
};

Meta meta() {
  const auto j = nlohmann::json::parse(std::ifstream(kFixture / "meta.json"));
  return {j.at("prompt_ids").get<std::vector<std::int32_t>>(), j.at("greedy_ids").get<std::vector<std::int32_t>>()};
}

std::string join_ids(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

TEST(GenerateCli, GreedyJsonOutputEqualsHfContinuation) {
  const Meta m = meta();
  const CliResult r = run_cli("--model " + (kFixture / "model").string() + " --mode exact --prompt-ids " +
                              join_ids(m.prompt) + " --temperature 0 --max-tokens 40 --ignore-eos --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_EQ(lines[0].at("prompt_ids").get<std::vector<std::int32_t>>(), m.prompt);
  EXPECT_EQ(lines[0].at("token_ids").get<std::vector<std::int32_t>>(), m.greedy);
  EXPECT_TRUE(lines[0].at("text").is_null());  // the fixture has no tokenizer
  EXPECT_EQ(lines[0].at("finish_reason"), "length");
}

TEST(GenerateCli, BadInputLinesReportTheirErrorInPlaceAndOthersStillRun) {
  const Meta m = meta();
  const fs::path input = scratch_path("input.jsonl");
  {
    std::ofstream f(input);
    nlohmann::json good{{"prompt_ids", m.prompt}, {"temperature", 0}, {"max_tokens", 40}, {"ignore_eos", true}};
    f << good.dump() << "\n";
    f << R"({"prompt_ids": [1, 2, 3], "bogus_field": 1})" << "\n";
    f << R"({"prompt_ids": [1, 2, 3], "max_tokens": -4})" << "\n";
    f << R"({"prompt_ids": [1, 2, 99999]})" << "\n";
    f << R"({"prompt_ids": [5, 6], "top_p": 1.5})" << "\n";
    f << "not json\n";
    f << R"({"prompt_ids": [5, 6, 7], "max_tokens": 3, "seed": 11, "temperature": 0.7})" << "\n";
  }
  const CliResult r = run_cli("--model " + (kFixture / "model").string() + " --mode exact --json --input " +
                              input.string());
  EXPECT_EQ(r.status, 1) << "a rejected line makes the exit status 1";
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 7u) << r.out << r.err;
  EXPECT_EQ(lines[0].at("token_ids").get<std::vector<std::int32_t>>(), m.greedy);
  for (std::size_t i : {1u, 2u, 3u, 4u, 5u}) EXPECT_TRUE(lines[i].contains("error")) << lines[i].dump();
  EXPECT_NE(lines[1]["error"].get<std::string>().find("bogus_field"), std::string::npos);
  EXPECT_NE(lines[2]["error"].get<std::string>().find("max_tokens"), std::string::npos);
  EXPECT_NE(lines[3]["error"].get<std::string>().find("99999"), std::string::npos);
  EXPECT_NE(lines[4]["error"].get<std::string>().find("top_p"), std::string::npos);
  EXPECT_NE(lines[5]["error"].get<std::string>().find("line 6"), std::string::npos);
  EXPECT_EQ(lines[6].at("token_ids").size(), 3u);
  EXPECT_EQ(lines[6].at("finish_reason"), "length");
  fs::remove(input);
}

TEST(GenerateCli, TextPromptWithoutTokenizerAndConflictingPromptsAreErrors) {
  const std::string model = "--model " + (kFixture / "model").string();
  CliResult r = run_cli(model + " --prompt hello --json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("tokenizer"), std::string::npos) << r.out << r.err;
  r = run_cli(model + " --prompt hello --prompt-ids 1,2");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("exactly one of"), std::string::npos) << r.err;
  r = run_cli(model + " --prompt-ids 1,x,3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--prompt-ids"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace deepinfer
