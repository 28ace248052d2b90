// The V4 forward pass on tiny random models: logits do not depend on how a sequence is split
// into prefill chunks and decode steps, nor on which other sequences share the batch; quantised
// weights run exactly like their dequantised twins in exact mode; bad input is rejected.
#include <gtest/gtest.h>

#include <cmath>

#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/step_meta.h"
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

std::vector<std::int32_t> ints(const Tensor& t) {
  return {t.data<std::int32_t>(), t.data<std::int32_t>() + t.numel()};
}

// The step metadata's addressing (step_meta.h) on a prefill chunk and a decode token of two
// sequences: window 8, ratios 4 (CSA) and 8 (HCA), pages of 256 tokens.
TEST(StepMeta, RowsListsAndPageTablesAddressEachSequencesOwnState) {
  const io::ModelConfig config = test::tiny_config(test::TinySpec{});
  auto arena = StateArena::growable(config, DType::kF32, backend());
  ASSERT_EQ(arena->page_tokens(), 256);
  auto a = new_sequence_state(arena), b = new_sequence_state(arena);
  a->num_tokens = 6;
  b->num_tokens = 300;
  arena->ensure_pages(a->pages, 11);
  arena->ensure_pages(b->pages, 301);
  const std::vector<Segment> segs = {{a.get(), 0, 5, 6, 0}, {b.get(), 5, 1, 300, 0}};
  const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5, 6}, pos = {6, 7, 8, 9, 10, 300}, logit_rows = {4, 5};
  MetaStaging staging(backend());
  StepMetaBuilder builder(config, *arena, staging);
  const StepRows rows{segs, ids, pos, logit_rows, {}};
  const StepShape shape = builder.shape_of(rows, false);
  EXPECT_EQ(shape.rows, 6);
  EXPECT_EQ(shape.max_pages, 2);
  builder.add(rows, shape);
  const StepMeta m = builder.upload(staging).front();
  const std::int32_t sa = a->slot, sb = b->slot;
  EXPECT_EQ(ints(m.slots), (std::vector<std::int32_t>{sa, sa, sa, sa, sa, sb}));
  EXPECT_EQ(ints(m.ring_rows), (std::vector<std::int32_t>{sa * 8 + 6, sa * 8 + 7, sa * 8, sa * 8 + 1, sa * 8 + 2, sb * 8 + 4}));
  EXPECT_EQ(ints(m.ring_table), (std::vector<std::int32_t>{sa, sb}));
  EXPECT_EQ(ints(m.store_table), (std::vector<std::int32_t>{a->pages[0], 0, b->pages[0], b->pages[1]}));
  // Window lists: ring rows of segment i at i·8 + p mod 8, this step's K=V rows from S·W = 16.
  const auto w = ints(m.window_list);
  EXPECT_EQ(std::vector<std::int32_t>(w.begin(), w.begin() + 8), (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 16, -1}));
  EXPECT_EQ(std::vector<std::int32_t>(w.begin() + 32, w.begin() + 40),
            (std::vector<std::int32_t>{3, 4, 5, 16, 17, 18, 19, 20}));
  EXPECT_EQ(std::vector<std::int32_t>(w.begin() + 40, w.end()), (std::vector<std::int32_t>{13, 14, 15, 8, 9, 10, 11, 21}));
  // Ratio 4: 64 store rows per page, 128 per segment; compressed rows start at S·W + T = 22.
  const RatioMeta& r4 = m.ratio(4);
  EXPECT_EQ(ints(r4.store_rows), (std::vector<std::int32_t>{-1, 1, -1, -1, -1, -1}));  // position 7 ends group 1
  EXPECT_EQ(ints(r4.group_pos)[1], 4);
  EXPECT_EQ(ints(r4.key_base), (std::vector<std::int32_t>{0, 0, 0, 0, 0, 128}));
  EXPECT_EQ(ints(r4.num_keys), (std::vector<std::int32_t>{1, 2, 2, 2, 2, 75}));
  EXPECT_EQ(ints(r4.offsets), (std::vector<std::int32_t>{22, 22, 22, 22, 22, 150}));
  EXPECT_EQ(r4.topk_width, 3);
  // Ratio 8 (HCA): every visible entry, segment 1's from 22 + 64.
  const RatioMeta& r8 = m.ratio(8);
  const auto all = ints(r8.all_list);
  const std::int64_t width = 8 + r8.entries;
  ASSERT_EQ(r8.entries, 37);
  for (std::int64_t e = 0; e < 37; ++e) EXPECT_EQ(all[static_cast<std::size_t>(5 * width + 8 + e)], 86 + e);
  EXPECT_EQ(all[static_cast<std::size_t>(4 * width + 8)], 22);      // position 10 sees entry 0
  EXPECT_EQ(all[static_cast<std::size_t>(4 * width + 9)], -1);
  EXPECT_EQ(ints(m.logit_rows), logit_rows);
}

// Three decode tokens padded to bucket 4, pages to a power of two: the padding row writes nowhere
// and sees nothing.
TEST(StepMeta, BucketedDecodePadsRowsThatWriteNowhere) {
  const io::ModelConfig config = test::tiny_config(test::TinySpec{});
  auto arena = StateArena::growable(config, DType::kF32, backend());
  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<Segment> segs;
  std::vector<std::int32_t> ids, pos;
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(new_sequence_state(arena));
    seqs.back()->num_tokens = 519 + s;  // 3 pages
    arena->ensure_pages(seqs.back()->pages, 520 + s);
    segs.push_back({seqs.back().get(), s, 1, 519 + s, 0});
    ids.push_back(s);
    pos.push_back(519 + s);
  }
  MetaStaging staging(backend());
  StepMetaBuilder builder(config, *arena, staging);
  const StepRows rows{segs, ids, pos, {}, {}};
  const StepShape shape = builder.shape_of(rows, true);
  EXPECT_EQ(shape.rows, 4);
  EXPECT_EQ(shape.segments, 4);
  EXPECT_EQ(shape.max_pages, 4);
  builder.add(rows, shape);
  const StepMeta m = builder.upload(staging).front();
  EXPECT_EQ(ints(m.slots)[3], -1);
  EXPECT_EQ(ints(m.ring_rows)[3], -1);
  for (const RatioMeta& r : m.ratios) {
    EXPECT_EQ(r.entries, 4 * 256 / r.ratio);
    EXPECT_EQ(ints(r.store_rows)[3], -1);
    EXPECT_EQ(ints(r.num_keys)[3], 0);
  }
  const auto w = ints(m.window_list);
  EXPECT_EQ(std::vector<std::int32_t>(w.begin() + 24, w.end()), std::vector<std::int32_t>(8, -1));
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
