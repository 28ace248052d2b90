// The V4 forward pass on tiny random models: logits do not depend on how a sequence is split
// into prefill chunks and decode steps, nor on which other sequences share the batch; quantised
// weights run exactly like their dequantised twins in exact mode; bad input is rejected.
#include <gtest/gtest.h>

#include <cmath>

#include "model/deepseek_v4/model.h"
#include "model/tiny_v4.h"
#include "ops/cpu/cpu_backend.h"

namespace deepinfer::model::v4 {
namespace {

ops::Backend& backend() {
  static ops::cpu::CpuBackend b;
  return b;
}

std::vector<std::int32_t> prompt(int n, int vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
  return ids;
}

std::vector<float> to_vector(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

// Logits of every position when the sequence is fed in chunks of `chunk` tokens.
std::vector<float> run_chunked(Model& model, const std::vector<std::int32_t>& ids, std::size_t chunk) {
  auto seq = model.new_sequence();
  std::vector<float> all;
  const std::int64_t vocab = model.config().vocab_size;
  for (std::size_t p = 0; p < ids.size(); p += chunk) {
    const std::size_t n = std::min(chunk, ids.size() - p);
    Tensor logits = Tensor::empty(Shape{static_cast<std::int64_t>(n), vocab}, DType::kF32);
    const Model::Chunk c{seq.get(), std::span(ids).subspan(p, n), static_cast<std::int32_t>(n)};
    model.forward({&c, 1}, logits);
    const auto v = to_vector(logits);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

std::unique_ptr<Model> tiny_model(const test::TinySpec& spec, NumericMode mode) {
  const io::ModelConfig config = test::tiny_config(spec);
  return Model::load(test::random_weights(config, spec.seed), config, backend(), mode);
}

class ChunkInvariance : public ::testing::TestWithParam<NumericMode> {};

TEST_P(ChunkInvariance, LogitsDoNotDependOnHowTheSequenceIsSplit) {
  // 41 tokens: 5 windows of 8, 10 CSA groups of 4, 5 HCA groups of 8; top-k 3 < visible entries.
  test::TinySpec spec;
  spec.quantized = GetParam() == NumericMode::kReferenceQat;
  auto model = tiny_model(spec, GetParam());
  const auto ids = prompt(41, spec.vocab, 7);
  const auto whole = run_chunked(*model, ids, ids.size());
  float max_abs = 0;
  for (float v : whole) max_abs = std::max(max_abs, std::fabs(v));
  ASSERT_GT(max_abs, 0.5f) << "logits are flat; the test would prove little";
  for (std::size_t chunk : {1, 3, 16, 17}) {
    const auto got = run_chunked(*model, ids, chunk);
    ASSERT_EQ(got.size(), whole.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], whole[i]) << "chunk " << chunk << ", position " << i / static_cast<std::size_t>(spec.vocab);
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, ChunkInvariance,
                         ::testing::Values(NumericMode::kExact, NumericMode::kReferenceQat),
                         [](const auto& param_info) { return param_info.param == NumericMode::kExact ? "Exact" : "ReferenceQat"; });

TEST(V4Model, SequencesInOneBatchMatchTheSequencesAlone) {
  test::TinySpec spec;
  auto model = tiny_model(spec, NumericMode::kExact);
  const auto a = prompt(19, spec.vocab, 1), b = prompt(11, spec.vocab, 2);
  const auto a_alone = run_chunked(*model, a, a.size());
  const auto b_alone = run_chunked(*model, b, 5);

  auto sa = model->new_sequence(), sb = model->new_sequence();
  const std::int64_t vocab = spec.vocab;
  // b's first 5 tokens alone, then a (whole) and b's next 6 together in one batch.
  Tensor l0 = Tensor::empty(Shape{5, vocab}, DType::kF32);
  const Model::Chunk first{sb.get(), std::span(b).first(5), 5};
  model->forward({&first, 1}, l0);
  const Model::Chunk batch[2] = {{sa.get(), a, 19}, {sb.get(), std::span(b).subspan(5), 6}};
  Tensor l1 = Tensor::empty(Shape{25, vocab}, DType::kF32);
  model->forward(batch, l1);
  const auto got = to_vector(l1);
  for (std::size_t i = 0; i < a_alone.size(); ++i) ASSERT_EQ(got[i], a_alone[i]);
  for (std::size_t i = 0; i < 6 * static_cast<std::size_t>(vocab); ++i)
    ASSERT_EQ(got[a_alone.size() + i], b_alone[5 * static_cast<std::size_t>(vocab) + i]);
}

// Nine sequences decode together: the model's state arena grows its slots (4 -> 16) and pages
// (8 -> 16) mid-run, and decode steps padded to batch / context buckets (CUDA graph shapes) give
// the bits of unpadded steps and of each sequence alone.
TEST(V4Model, BatchedDecodeWithPaddedBucketsAndArenaGrowthMatchesSequencesAlone) {
  test::TinySpec spec;
  const io::ModelConfig config = test::tiny_config(spec);
  const test::MapWeights w = test::random_weights(config, spec.seed);
  auto plain = Model::load(w, config, backend(), NumericMode::kExact);
  auto padded = Model::load(w, config, backend(), NumericMode::kExact);
  padded->set_bucketed(true);
  constexpr int kSeqs = 9, kPrompt = 6, kDecode = 5;
  std::vector<std::vector<std::int32_t>> ids;
  std::vector<std::vector<float>> alone;
  for (int s = 0; s < kSeqs; ++s) {
    ids.push_back(prompt(kPrompt + kDecode, spec.vocab, 100 + static_cast<std::uint32_t>(s)));
    alone.push_back(run_chunked(*plain, ids.back(), 1));
  }
  const std::int64_t vocab = spec.vocab;
  for (Model* m : {plain.get(), padded.get()}) {
    std::vector<std::unique_ptr<SequenceState>> seqs;
    for (int s = 0; s < kSeqs; ++s) {
      seqs.push_back(m->new_sequence());
      Tensor l = Tensor::empty(Shape{kPrompt, vocab}, DType::kF32);
      const Model::Chunk c{seqs.back().get(), std::span(ids[static_cast<std::size_t>(s)]).first(kPrompt), kPrompt};
      m->forward({&c, 1}, l);
    }
    for (int step = 0; step < kDecode; ++step) {
      std::vector<Model::Chunk> batch;
      for (int s = step % 2; s < kSeqs; ++s)  // 9 or 8 sequences: buckets 16 and 8
        batch.push_back({seqs[static_cast<std::size_t>(s)].get(),
                         std::span(ids[static_cast<std::size_t>(s)]).subspan(kPrompt + step, 1), 1});
      // Sequences skipped this step catch up alone first.
      if (step % 2 == 1) {
        Tensor l = Tensor::empty(Shape{1, vocab}, DType::kF32);
        const Model::Chunk c{seqs[0].get(), std::span(ids[0]).subspan(kPrompt + step, 1), 1};
        m->forward({&c, 1}, l);
        for (std::int64_t v = 0; v < vocab; ++v)
          ASSERT_EQ(l.data<float>()[v], alone[0][static_cast<std::size_t>((kPrompt + step) * vocab + v)]);
      }
      Tensor l = Tensor::empty(Shape{static_cast<std::int64_t>(batch.size()), vocab}, DType::kF32);
      m->forward(batch, l);
      for (std::size_t b = 0; b < batch.size(); ++b) {
        const std::size_t s = b + static_cast<std::size_t>(step % 2);
        for (std::int64_t v = 0; v < vocab; ++v)
          ASSERT_EQ(l.data<float>()[static_cast<std::int64_t>(b) * vocab + v],
                    alone[s][static_cast<std::size_t>((kPrompt + step) * vocab + v)])
              << "sequence " << s << ", decode step " << step << (m == padded.get() ? " (bucketed)" : "");
      }
    }
  }
}

TEST(V4Model, QuantisedWeightsInExactModeEqualTheirDequantisedTwin) {
  test::TinySpec spec;
  spec.quantized = true;
  const io::ModelConfig config = test::tiny_config(spec);
  const test::MapWeights q = test::random_weights(config, 3);
  auto quant = Model::load(q, config, backend(), NumericMode::kExact);
  auto twin = Model::load(test::dequantized_twin(q, config), config, backend(), NumericMode::kExact);
  const auto ids = prompt(23, spec.vocab, 4);
  const auto a = run_chunked(*quant, ids, 23), b = run_chunked(*twin, ids, 23);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]);
}

// Every QAT step on its own perturbs exact mode by quantisation noise only. Discrete choices
// (expert top-k, indexer top-k) are disabled so a perturbation cannot flip a selection and jump.
TEST(V4Model, EachReferenceQatStepPerturbsExactModeSlightly) {
  test::TinySpec spec;
  spec.quantized = true;
  spec.experts_per_tok = spec.experts;
  spec.num_hash_layers = 0;
  spec.index_topk = 64;
  const io::ModelConfig config = test::tiny_config(spec);
  const test::MapWeights w = test::random_weights(config, 5);
  const auto ids = prompt(30, spec.vocab, 6);
  const Numerics exact = Numerics::for_mode(NumericMode::kExact, config);
  const auto base = run_chunked(*Model::load(w, config, backend(), exact), ids, 30);
  float max_abs = 0;
  for (float v : base) max_abs = std::max(max_abs, std::fabs(v));
  auto relative_change = [&](const Numerics& n) {
    const auto got = run_chunked(*Model::load(w, config, backend(), n), ids, 30);
    float diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::fabs(got[i] - base[i]));
    return diff / max_abs;
  };
  const Numerics qat = Numerics::for_mode(NumericMode::kReferenceQat, config);
  Numerics one = exact;
  one.act = qat.act;
  EXPECT_GT(relative_change(one), 1e-4f);
  EXPECT_LT(relative_change(one), 0.05f);
  one = exact;
  one.linear_act_block = qat.linear_act_block;
  EXPECT_GT(relative_change(one), 1e-3f);
  EXPECT_LT(relative_change(one), 0.2f);
  one = exact;
  one.kv_quant_block = qat.kv_quant_block;
  EXPECT_GT(relative_change(one), 1e-3f);
  EXPECT_LT(relative_change(one), 0.1f);
  one = exact;
  one.round_probs_bf16 = true;
  EXPECT_GT(relative_change(one), 1e-5f);
  EXPECT_LT(relative_change(one), 0.01f);
  // With every entry selected, the rotated FP4 keys and queries only reorder the selection.
  one = exact;
  one.indexer_rotate_fp4 = true;
  EXPECT_LT(relative_change(one), 1e-5f);
  EXPECT_LT(relative_change(qat), 0.3f);
}

TEST(V4Model, RejectsBadTokensEmptyChunksAndWrongLogitShapes) {
  test::TinySpec spec;
  auto model = tiny_model(spec, NumericMode::kExact);
  auto seq = model->new_sequence();
  Tensor logits = Tensor::empty(Shape{1, spec.vocab}, DType::kF32);
  const std::vector<std::int32_t> bad = {3, spec.vocab};
  const Model::Chunk c1{seq.get(), bad, 1};
  EXPECT_THROW(model->forward({&c1, 1}, logits), Error);
  const Model::Chunk c2{seq.get(), {}, 0};
  EXPECT_THROW(model->forward({&c2, 1}, logits), Error);
  const std::vector<std::int32_t> good = {1, 2};
  const Model::Chunk c3{seq.get(), good, 2};
  EXPECT_THROW(model->forward({&c3, 1}, logits), Error);
  EXPECT_EQ(seq->num_tokens, 0);
}

TEST(V4Model, ConfigThatDisagreesWithATensorNamesIt) {
  test::TinySpec spec;
  const io::ModelConfig config = test::tiny_config(spec);
  test::MapWeights w = test::random_weights(config, 8);
  w.tensors["layers.1.attn.wkv.weight"] = Tensor::zeros(Shape{32, spec.hidden}, DType::kBF16);
  try {
    Model::load(w, config, backend(), NumericMode::kExact);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.attn.wkv.weight"), std::string::npos) << e.what();
  }
  w.tensors.erase("layers.2.attn.compressor.ape");
  EXPECT_THROW(Model::load(w, config, backend(), NumericMode::kExact), Error);
}

}  // namespace
}  // namespace deepinfer::model::v4
