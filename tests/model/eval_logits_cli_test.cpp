// `deepinfer eval-logits` end to end: the .npy it writes holds exactly the in-process logits (any
// --chunk), and bad input (ids outside the vocabulary, empty or malformed ids, unknown mode, a
// config that disagrees with the tensors) exits 1 with a message naming the problem; --load-format
// dummy runs a config's geometry with random weights, cut to --num-layers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "golden/npy_reader.h"
#include "io/checkpoint.h"
#include "io/tiny_checkpoint.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/tiny_v4.h"
#include "ops/cpu/cpu_backend.h"

namespace deepinfer::model::v4 {
namespace {

namespace fs = std::filesystem;

// Per-process paths: ctest may run the tests of this file in parallel processes.
fs::path scratch_path(const std::string& name) {
  return fs::temp_directory_path() / ("deepinfer_eval_logits_" + std::to_string(::getpid()) + "_" + name);
}

struct CliResult {
  int status;
  std::string output;
};

CliResult run_cli(const std::string& args) {
  const fs::path log = scratch_path("cli.log");
  const std::string cmd = std::string(DEEPINFER_BINARY_DIR) + "/src/cli/deepinfer " + args + " >" + log.string() + " 2>&1";
  const int raw = std::system(cmd.c_str());
  std::stringstream out;
  out << std::ifstream(log).rdbuf();
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, out.str()};
}

class EvalLogitsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(scratch_path("model"));
    fs::remove_all(*dir_);
    test::TinySpec spec;
    const io::ModelConfig config = test::tiny_config(spec);
    test::write_checkpoint(*dir_, config, test::random_weights(config, 11));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path* dir_;
};
fs::path* EvalLogitsCli::dir_ = nullptr;

TEST_F(EvalLogitsCli, WritesTheInProcessLogitsOfEveryPosition) {
  const std::vector<std::int32_t> ids = {0, 5, 17, 33, 2, 9, 9, 40, 71, 3, 8};
  std::string list;
  for (auto id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  ops::cpu::CpuBackend backend;
  auto loaded = open_model(*dir_, NumericMode::kExact, backend);
  auto seq = loaded.model->new_sequence();
  const std::int64_t vocab = loaded.model->config().vocab_size;
  Tensor want = Tensor::empty(Shape{static_cast<std::int64_t>(ids.size()), vocab}, DType::kF32);
  const Model::Chunk c{seq.get(), ids, static_cast<std::int32_t>(ids.size())};
  loaded.model->forward({&c, 1}, want);
  for (const char* chunk : {"512", "4"}) {
    const fs::path out = scratch_path("logits.npy");
    const CliResult r = run_cli("eval-logits --model " + dir_->string() + " --ids " + list + " --chunk " + chunk +
                          " --output " + out.string());
    ASSERT_EQ(r.status, 0) << r.output;
    const golden::NpyArray got = golden::read_npy_f32(out);
    ASSERT_EQ(got.shape, (std::vector<std::int64_t>{static_cast<std::int64_t>(ids.size()), vocab}));
    for (std::size_t i = 0; i < got.data.size(); ++i) ASSERT_EQ(got.data[i], want.data<float>()[i]) << "chunk " << chunk;
  }
}

TEST_F(EvalLogitsCli, BadInputExitsWithAClearError) {
  const std::string base = "eval-logits --model " + dir_->string() + " --output /dev/null ";
  CliResult r = run_cli(base + "--ids 1,96");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("token id 96"), std::string::npos) << r.output;
  r = run_cli(base + "--ids ''");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("empty"), std::string::npos) << r.output;
  r = run_cli(base + "--ids 1,,2");
  EXPECT_EQ(r.status, 1);
  r = run_cli(base + "--ids 1 --mode fast");
  EXPECT_NE(r.status, 0);
  r = run_cli("eval-logits --model /nonexistent/model --ids 1 --output /dev/null");
  EXPECT_EQ(r.status, 1);

  // A config that disagrees with the tensors: claim a wider hidden size.
  const fs::path bad = scratch_path("bad_model");
  fs::remove_all(bad);
  fs::create_directories(bad);
  fs::copy_file(*dir_ / "model.safetensors", bad / "model.safetensors");
  test::TinySpec spec;
  spec.q_lora = 48;
  std::ofstream(bad / "config.json") << io::model_config_to_json(test::tiny_config(spec));
  r = run_cli("eval-logits --model " + bad.string() + " --ids 1 --output /dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("wq_a.weight"), std::string::npos) << r.output;
  fs::remove_all(bad);
}

TEST_F(EvalLogitsCli, DummyLoadFormatRunsAConfigsGeometryCutToNLayers) {
  const fs::path config = scratch_path("dummy_config.json");
  std::ofstream(config) << io::model_config_to_json(io::tiny_model_config({}));
  const fs::path a = scratch_path("dummy_a.npy"), b = scratch_path("dummy_b.npy"), c = scratch_path("dummy_c.npy");
  const std::string base = "eval-logits --load-format dummy --model " + config.string() + " --num-layers 3 --ids 1,2,3,4 ";
  CliResult r = run_cli(base + "--seed 5 --output " + a.string());
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(run_cli(base + "--seed 5 --output " + b.string()).status, 0);
  ASSERT_EQ(run_cli(base + "--seed 6 --output " + c.string()).status, 0);
  const golden::NpyArray la = golden::read_npy_f32(a), lb = golden::read_npy_f32(b), lc = golden::read_npy_f32(c);
  ASSERT_EQ(la.shape, (std::vector<std::int64_t>{4, io::tiny_model_config({}).vocab_size}));
  for (float x : la.data) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(la.data, lb.data);
  EXPECT_NE(la.data, lc.data);
  r = run_cli("eval-logits --model " + dir_->string() + " --num-layers 2 --ids 1 --output /dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("--load-format dummy"), std::string::npos) << r.output;
  r = run_cli("eval-logits --load-format dummy --model " + config.string() + " --num-layers 99 --ids 1 --output /dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("99 layers"), std::string::npos) << r.output;
  for (const fs::path& p : {config, a, b, c}) fs::remove(p);
}

TEST_F(EvalLogitsCli, DummyLoadFormatRunsAV41Config) {
  io::TinyModelOptions options;
  options.arch = io::ModelArch::kDeepseekV41;
  const io::ModelConfig tiny = io::tiny_model_config(options);
  const fs::path config = scratch_path("dummy_v41_config.json"), out = scratch_path("dummy_v41.npy");
  std::ofstream(config) << io::model_config_to_json(tiny);
  const CliResult r = run_cli("eval-logits --load-format dummy --model " + config.string() + " --ids 1,2,3 --output " +
                              out.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const golden::NpyArray logits = golden::read_npy_f32(out);
  ASSERT_EQ(logits.shape, (std::vector<std::int64_t>{3, tiny.vocab_size}));
  for (float x : logits.data) ASSERT_TRUE(std::isfinite(x));
  for (const fs::path& p : {config, out}) fs::remove(p);
}

}  // namespace
}  // namespace deepinfer::model::v4
