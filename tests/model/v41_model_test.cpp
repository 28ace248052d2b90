// The V4.1 forward pass on `make-tiny --arch v41` checkpoints (every CSA2 role, Engram, window
// shrunk to 16 so the ring wraps): logits do not depend on how a sequence is split into prefill
// chunks and decode steps nor on which sequences share the batch; bounded replay stays close to
// full replay and refuses a tail shorter than the window; the engine (paged runner, prefix cache)
// reproduces the model's own greedy continuation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "engine/engine.h"
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors_writer.h"
#include "io/tiny_checkpoint.h"
#include "model/deepseek_v4/loaded_model.h"
#include "model/deepseek_v4/paged_runner.h"
#include "model/deepseek_v41/model.h"
#include "model/engine_runs.h"
#include "ops/cpu/cpu_backend.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using v4::NumericMode;

ops::Backend& backend() {
  static ops::cpu::CpuBackend b;
  return b;
}

io::ModelConfig tiny_config(bool fp8) {
  io::TinyModelOptions o;
  o.arch = io::ModelArch::kDeepseekV41;
  o.vocab_size = 512;
  o.fp8 = fp8;
  o.draft = io::DraftKind::kNone;
  io::ModelConfig c = io::tiny_model_config(o);
  c.sliding_window = 16;
  return io::parse_model_config(io::model_config_to_json(c), "v41 test config");
}

// One checkpoint per flavour for the whole test binary, removed at exit.
const fs::path& checkpoint(bool fp8) {
  struct Dirs {
    std::map<bool, fs::path> dirs;
    Dirs() {
      for (bool q : {false, true}) {
        dirs[q] = fs::temp_directory_path() / ("deepinfer_v41_" + std::to_string(::getpid()) + (q ? "_fp8" : "_bf16"));
        io::write_random_checkpoint(tiny_config(q), dirs[q], 41);
      }
    }
    ~Dirs() {
      std::error_code ec;
      for (const auto& [q, d] : dirs) fs::remove_all(d, ec);
    }
  };
  static const Dirs d;
  return d.dirs.at(fp8);
}

struct Opened {
  v4::LoadedModel loaded;
  SequenceModel& model() { return *loaded.model; }
};

Opened open(bool fp8, NumericMode mode) { return {v4::open_model(checkpoint(fp8), mode, backend())}; }

std::vector<std::int32_t> prompt(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % 500);
  return ids;
}

// Logits of every position when the sequence is fed in chunks of the given sizes (the last one
// repeats until the sequence is used up).
std::vector<float> run_chunked(SequenceModel& m, const std::vector<std::int32_t>& ids, std::vector<std::size_t> sizes) {
  auto seq = m.new_sequence();
  std::vector<float> all;
  const std::int64_t vocab = m.config().vocab_size;
  std::size_t p = 0, k = 0;
  while (p < ids.size()) {
    const std::size_t n = std::min(sizes[std::min(k++, sizes.size() - 1)], ids.size() - p);
    Tensor logits = Tensor::empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
    const SequenceModel::Chunk c{seq.get(), std::span(ids).subspan(p, n), static_cast<std::int32_t>(n)};
    m.forward({&c, 1}, logits);
    all.insert(all.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    p += n;
  }
  return all;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class V41Split : public ::testing::TestWithParam<NumericMode> {};

TEST_P(V41Split, IncrementalPrefillAndDecodeGiveTheOneShotLogits) {
  // 70 tokens: the ring wraps 4 times, ratio-2 sources emit 35 entries (> top-k 8), the ratio-1
  // candidate source 70 (> 4 blocks of 8), so Reindex layers score inside a real candidate mask.
  const bool qat = GetParam() == NumericMode::kReferenceQat;
  Opened o = open(qat, GetParam());
  const auto ids = prompt(70, 3);
  const auto whole = run_chunked(o.model(), ids, {ids.size()});
  const float scale = max_abs(whole);
  ASSERT_GT(scale, 0.1f);
  // Odd chunk sizes split ratio-2 groups; single tokens are decode steps.
  const auto split = run_chunked(o.model(), ids, {7, 1, 1, 13, 1, 30, 1});
  EXPECT_LE(max_diff(whole, split), (qat ? 2e-2f : 1e-4f) * scale);
}

INSTANTIATE_TEST_SUITE_P(Modes, V41Split, ::testing::Values(NumericMode::kExact, NumericMode::kReferenceQat));

TEST(V41Model, BatchedSequencesGiveTheirSoloLogits) {
  Opened o = open(false, NumericMode::kExact);
  SequenceModel& m = o.model();
  const auto a = prompt(40, 5), b = prompt(23, 6);
  const std::int64_t vocab = m.config().vocab_size;
  auto solo = [&](const std::vector<std::int32_t>& ids) {
    auto seq = m.new_sequence();
    Tensor l = Tensor::empty(Shape{3, vocab}, DType::kF32);
    const SequenceModel::Chunk c{seq.get(), ids, 3};
    m.forward({&c, 1}, l);
    return std::vector<float>(l.data<float>(), l.data<float>() + l.numel());
  };
  const auto sa = solo(a), sb = solo(b);
  auto qa = m.new_sequence(), qb = m.new_sequence();
  Tensor l = Tensor::empty(Shape{6, vocab}, DType::kF32);
  const SequenceModel::Chunk both[] = {{qa.get(), a, 3}, {qb.get(), b, 3}};
  m.forward(both, l);
  const std::vector<float> got(l.data<float>(), l.data<float>() + l.numel());
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 3 * vocab), sa);
  EXPECT_EQ(std::vector<float>(got.begin() + 3 * vocab, got.end()), sb);
}

// Decode steps padded to batch / context buckets (what CUDA graphs replay: 3 sequences in bucket 4,
// page tables padded to a power of two) give the bits of unpadded steps: padding rows write nowhere
// and see nothing, Engram rows and candidate masks of the real rows are unchanged.
TEST(V41Model, DecodeStepsPaddedToBucketsGiveTheUnpaddedLogits) {
  for (const NumericMode mode : {NumericMode::kExact, NumericMode::kReferenceQat}) {
    Opened plain = open(mode == NumericMode::kReferenceQat, mode);
    Opened padded = open(mode == NumericMode::kReferenceQat, mode);
    dynamic_cast<v41::Model&>(padded.model()).set_bucketed(true);
    const std::int64_t vocab = plain.model().config().vocab_size;
    std::vector<std::vector<float>> out[2];
    for (int which = 0; which < 2; ++which) {
      SequenceModel& m = which == 0 ? plain.model() : padded.model();
      std::vector<std::vector<std::int32_t>> ids;
      std::vector<std::unique_ptr<v4::SequenceState>> seqs;
      for (int s = 0; s < 3; ++s) {  // prompts of 29, 40 and 51 tokens (odd: split ratio-2 groups)
        ids.push_back(prompt(29 + 11 * s + 6, 20 + static_cast<std::uint32_t>(s)));
        seqs.push_back(m.new_sequence());
        Tensor l = Tensor::empty(Shape{1, vocab}, DType::kF32);
        const SequenceModel::Chunk c{seqs.back().get(), std::span(ids.back()).first(ids.back().size() - 6), 1};
        m.forward({&c, 1}, l);
      }
      for (std::size_t step = 0; step < 6; ++step) {
        std::vector<SequenceModel::Chunk> batch;
        for (std::size_t s = 0; s < 3; ++s)
          batch.push_back({seqs[s].get(), std::span(ids[s]).subspan(ids[s].size() - 6 + step, 1), 1});
        Tensor l = Tensor::empty(Shape{3, vocab}, DType::kF32);
        m.forward(batch, l);
        out[which].emplace_back(l.data<float>(), l.data<float>() + l.numel());
      }
    }
    for (std::size_t step = 0; step < 6; ++step)
      ASSERT_EQ(out[0][step], out[1][step]) << v4::numeric_mode_name(mode) << " decode step " << step;
  }
}

TEST(V41Model, RejectsOutOfVocabularyTokens) {
  Opened o = open(false, NumericMode::kExact);
  auto seq = o.model().new_sequence();
  const std::vector<std::int32_t> ids = {1, 600};
  Tensor l = Tensor::empty(Shape{1, o.model().config().vocab_size}, DType::kF32);
  const SequenceModel::Chunk c{seq.get(), ids, 1};
  EXPECT_THROW(o.model().forward({&c, 1}, l), Error);
}

// Bounded replay against full replay on the same checkpoint.
TEST(V41Replay, CompactPrefillStaysCloseToFullReplayAndDecodesOn) {
  Opened full = open(false, NumericMode::kExact);
  const auto& c = full.model().config();
  auto weights = v4::checkpoint_weights(*full.loaded.checkpoint);
  auto hasher = std::make_shared<const engram::EngramHasher>(
      c, [&] { std::vector<std::int32_t> id(static_cast<std::size_t>(c.vocab_size)); std::iota(id.begin(), id.end(), 0); return id; }(),
      c.vocab_size);
  const v4::Numerics num = v4::Numerics::for_mode(NumericMode::kExact, c);
  auto compact = v41::Model::load(*weights, c, backend(), num, hasher, {true, 24, 0});
  const auto ids = prompt(105, 9);
  // Prefill 100 tokens in one chunk (only the last 24 replayed after the last KV source), then decode 5.
  const auto want = run_chunked(full.model(), ids, {100, 1});
  auto run_last = [&](SequenceModel& m) {
    auto seq = m.new_sequence();
    std::vector<float> out;
    const std::int64_t vocab = c.vocab_size;
    for (std::size_t p = 0; p < ids.size();) {
      const std::size_t n = p == 0 ? 100 : 1;
      Tensor l = Tensor::empty(Shape{1, vocab}, DType::kF32);
      const SequenceModel::Chunk ch{seq.get(), std::span(ids).subspan(p, n), 1};
      m.forward({&ch, 1}, l);
      out.insert(out.end(), l.data<float>(), l.data<float>() + vocab);
      p += n;
    }
    return out;
  };
  const auto got = run_last(*compact);
  const auto ref = run_last(full.model());
  const float scale = max_abs(ref);
  const float diff = max_diff(ref, got);
  EXPECT_GT(diff, 0.0f) << "the replayed tail's first rows see a truncated window: some change is expected";
  EXPECT_LE(diff, 0.25f * scale);
  // A chunk no longer than the tail runs every layer on every row: identical to full replay.
  auto seq = compact->new_sequence();
  Tensor l = Tensor::empty(Shape{20, c.vocab_size}, DType::kF32);
  const SequenceModel::Chunk ch{seq.get(), std::span(ids).subspan(0, 20), 20};
  compact->forward({&ch, 1}, l);
  const std::vector<float> short_got(l.data<float>(), l.data<float>() + l.numel());
  EXPECT_EQ(short_got, std::vector<float>(want.begin(), want.begin() + 20 * c.vocab_size));
  // Each late layer spreads the truncation by one window (15 rows here): with a tail longer than
  // 5 late layers × 15 rows, the last row and the ring (hence decoding) are exact again.
  auto exact_again = v41::Model::load(*weights, c, backend(), num, hasher, {true, 80, 0});
  const auto far = run_last(*exact_again);
  EXPECT_EQ(std::vector<float>(far.begin(), far.begin() + c.vocab_size),
            std::vector<float>(ref.begin(), ref.begin() + c.vocab_size));
  EXPECT_LE(max_diff(ref, far), 1e-5f * scale);
  // Logits of rows before the kept tail (prompt logprobs) do not exist.
  auto seq2 = compact->new_sequence();
  Tensor l2 = Tensor::empty(Shape{30, c.vocab_size}, DType::kF32);
  const SequenceModel::Chunk ch2{seq2.get(), std::span(ids).subspan(0, 60), 30};
  EXPECT_THROW(compact->forward({&ch2, 1}, l2), Error);
  // A tail that does not cover the window (+ drafts) is refused at load.
  EXPECT_THROW(v41::Model::load(*weights, c, backend(), num, hasher, {true, 15, 0}), Error);
  EXPECT_THROW(v41::Model::load(*weights, c, backend(), num, hasher, {true, 18, 3}), Error);
}

// ---- through the engine ---------------------------------------------------------------------

std::unique_ptr<engine::Engine> make_engine(bool prefix_caching, std::int32_t max_batched = 4096) {
  auto opened = v4::open_paged_runner(checkpoint(false), NumericMode::kExact);
  engine::EngineConfig config;
  config.scheduler.max_num_seqs = 8;
  config.scheduler.max_num_batched_tokens = max_batched;
  config.scheduler.max_model_len = 256;
  const std::int32_t multiple = opened.runner->cache_spec().page_size_multiple();
  config.cache.page_size = multiple;
  while (config.cache.page_size < 8) config.cache.page_size += multiple;
  config.cache.num_pages = 256;
  config.cache.admission_watermark = 0.0;
  config.cache.enable_prefix_caching = prefix_caching;
  return std::make_unique<engine::Engine>(config, std::move(opened.runner));
}

using test::greedy;
using test::run;

// The model's own greedy continuation: prefill, then one token at a time.
std::vector<std::int32_t> model_greedy(const std::vector<std::int32_t>& ids, int n) {
  Opened o = open(false, NumericMode::kExact);
  SequenceModel& m = o.model();
  auto seq = m.new_sequence();
  const std::int64_t vocab = m.config().vocab_size;
  std::vector<std::int32_t> out, next = ids;
  for (int i = 0; i < n; ++i) {
    Tensor l = Tensor::empty(Shape{1, vocab}, DType::kF32);
    const SequenceModel::Chunk c{seq.get(), next, 1};
    m.forward({&c, 1}, l);
    const float* v = l.data<float>();
    next = {static_cast<std::int32_t>(std::max_element(v, v + vocab) - v)};
    out.push_back(next[0]);
  }
  return out;
}

TEST(V41Engine, GreedyAloneAndBatchedWithChunkedPrefillEqualsTheModelsGreedy) {
  const auto a = prompt(45, 11), b = prompt(30, 12);
  const auto want_a = model_greedy(a, 12), want_b = model_greedy(b, 12);
  auto solo = make_engine(false);
  solo->add_request("a", a, greedy(12));
  EXPECT_EQ(run(*solo)["a"].tokens, want_a);
  auto batched = make_engine(false, 17);  // chunked prefill, decode steps mixed with prefill chunks
  batched->add_request("a", a, greedy(12));
  batched->add_request("b", b, greedy(12));
  auto out = run(*batched);
  EXPECT_EQ(out["a"].tokens, want_a);
  EXPECT_EQ(out["b"].tokens, want_b);
}

TEST(V41Engine, PrefixCacheHitGivesTheSameTokensAndLogprobsAsNoCache) {
  const auto first = prompt(41, 21);
  std::vector<std::int32_t> second = first;
  for (std::int32_t t : prompt(19, 22)) second.push_back(t);
  test::expect_prefix_reuse_equals_no_reuse([](bool caching) { return make_engine(caching); }, first, second, 6, 10,
                                            16);
}

TEST(V41Engine, CheckpointWithAVisionTowerServesTextAndRefusesImageInput) {
  io::ModelConfig c = tiny_config(false);
  c.vision = {true, 2, 64, 400};
  c = io::parse_model_config(io::model_config_to_json(c), "v41 vision config");
  const fs::path dir = fs::temp_directory_path() / ("deepinfer_v41_" + std::to_string(::getpid()) + "_vision");
  io::write_random_checkpoint(c, dir, 41);  // same seed: the text weights of checkpoint(false)
  // A vision tensor in its own shard, listed in the index like the release's.
  io::SafetensorsWriter vision;
  vision.add("vision.patch_embed.weight", Tensor::from_f32(Shape{4, 4}, std::vector<float>(16, 0.5f)));
  vision.write(dir / "model-vision.safetensors");
  auto index = nlohmann::json::parse(std::ifstream(dir / "model.safetensors.index.json"));
  index["weight_map"]["vision.patch_embed.weight"] = "model-vision.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();

  auto opened = v4::open_paged_runner(dir, NumericMode::kExact);
  engine::EngineConfig config;
  config.scheduler.max_model_len = 128;
  config.cache.page_size = opened.runner->cache_spec().page_size_multiple() * 8;
  config.cache.num_pages = 64;
  config.cache.admission_watermark = 0.0;
  engine::Engine e(config, std::move(opened.runner));
  const auto text = prompt(30, 31);
  e.add_request("text", text, greedy(5));
  std::vector<std::int32_t> image = text;
  image[7] = 400;
  try {
    e.add_request("image", image, greedy(5));
    ADD_FAILURE() << "a prompt with the image token was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("image input is not supported yet"), std::string::npos) << err.what();
  }
  EXPECT_EQ(run(e)["text"].tokens, model_greedy(text, 5));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::model
