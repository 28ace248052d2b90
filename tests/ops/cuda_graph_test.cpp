// CUDA graphs on the CUDA backend (runs on a GPU machine; skips elsewhere): a decode-like op
// sequence captured once and replayed over new staged inputs gives the eager results bit for bit;
// calls that cannot be captured fail with a deepinfer::Error naming them and leave the backend
// usable; memory a graph replays stays valid across scratch and workspace growth; replay vs eager
// launch cost is printed for docs/PERFORMANCE_CUDA.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/graph.h"
#include "ops/parity_util.h"
#include "ops/workspace.h"

namespace deepinfer::ops {
namespace {

using test::gpu;
using test::to_gpu;
using test::to_host;

std::vector<std::uint8_t> bytes_of(const Tensor& device) {
  const Tensor h = to_host(device);
  const auto* p = static_cast<const std::uint8_t*>(h.raw_data());
  return {p, p + h.nbytes()};
}

void write_i32(StagingBuffer& staging, const char* name, const std::vector<std::int32_t>& v) {
  Tensor t = staging.host(name);
  ASSERT_EQ(static_cast<std::size_t>(t.numel()), v.size()) << name;
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(std::int32_t));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A decode-like step over a bucket of T tokens: embedding into an mHC stream, hc_pre, RMSNorm,
// bf16 and FP8 projections, RoPE, Hadamard, fake quant, gathers and a paged scatter, hc_post,
// SwiGLU, the head collapse, logits, the token mask and argmax. Inputs come from staging.
struct DecodeStep {
  static constexpr std::int64_t kT = 8, kN = 4, kD = 256, kH = 4, kHd = 64, kKv = 128, kV = 1000;
  static constexpr std::int64_t kPages = 4, kPageRows = 16, kWords = (kV + 31) / 32;
  Backend& be = gpu();
  StagingBuffer staging{be, [] {
                          StagingLayout l;
                          l.add("ids", Shape{kT}, DType::kI32);
                          l.add("positions", Shape{kT}, DType::kI32);
                          l.add("gather", Shape{kT}, DType::kI32);
                          l.add("slots", Shape{kT}, DType::kI32);
                          l.add("pages", Shape{kPages}, DType::kI32);
                          l.add("mask", Shape{kT, kWords}, DType::kI32);
                          return l;
                        }()};
  Tensor table = to_gpu(test::random_tensor(Shape{kV, kD}, 1, 1.0f, DType::kBF16));
  HcWeights hc{to_gpu(test::random_tensor(Shape{(2 + kN) * kN, kN * kD}, 2, 0.02f)),
               to_gpu(test::random_tensor(Shape{(2 + kN) * kN}, 3, 0.5f)),
               to_gpu(test::random_tensor(Shape{3}, 4, 0.5f))};
  HcWeights head{to_gpu(test::random_tensor(Shape{kN, kN * kD}, 5, 0.02f)),
                 to_gpu(test::random_tensor(Shape{kN}, 6, 0.5f)), to_gpu(test::random_tensor(Shape{1}, 7, 0.5f))};
  Tensor norm_w = to_gpu(test::random_tensor(Shape{kD}, 8, 1.0f, DType::kBF16));
  LinearWeight wq{WeightFormat::kBF16, to_gpu(test::random_tensor(Shape{kH * kHd, kD}, 9, 0.05f, DType::kBF16)),
                  Tensor(), 0};
  LinearWeight wkv = to_gpu(test::quantize_fp8_block(test::random_tensor(Shape{2 * kKv, kD}, 10, 0.05f), 128));
  LinearWeight wo{WeightFormat::kBF16, to_gpu(test::random_tensor(Shape{kD, kH * kHd}, 11, 0.05f, DType::kBF16)),
                  Tensor(), 0};
  LinearWeight wv{WeightFormat::kBF16, to_gpu(test::random_tensor(Shape{kV, kD}, 12, 0.05f, DType::kBF16)),
                  Tensor(), 0};
  RopeTable rope{to_gpu(test::random_tensor(Shape{kHd / 2}, 13, 0.1f)), static_cast<int>(kHd)};
  HcOptions hc_opts;
  // Activations and outputs: allocated once, at fixed addresses.
  Tensor x = be.empty(Shape{kT, kN, kD}, DType::kBF16), y = be.empty(Shape{kT, kD}, DType::kBF16);
  Tensor post = be.empty(Shape{kT, kN}, DType::kF32), comb = be.empty(Shape{kT, kN, kN}, DType::kF32);
  Tensor h = be.empty(Shape{kT, kD}, DType::kBF16), q = be.empty(Shape{kT, kH, kHd}, DType::kBF16);
  Tensor kv = be.empty(Shape{kT, 2 * kKv}, DType::kBF16), g = be.empty(Shape{kT, 2 * kKv}, DType::kBF16);
  Tensor pool = be.empty(Shape{kPages * kPageRows, 2 * kKv}, DType::kBF16);
  Tensor f = be.empty(Shape{kT, kD}, DType::kBF16), act = be.empty(Shape{kT, kD}, DType::kBF16);
  Tensor xo = be.empty(Shape{kT, kN, kD}, DType::kBF16), fin = be.empty(Shape{kT, kD}, DType::kF32);
  Tensor logits = be.empty(Shape{kT, kV}, DType::kF32), next = be.empty(Shape{kT}, DType::kI32);

  void run() {
    be.embedding(staging.device("ids"), table, x);
    be.hc_pre(x, hc, hc_opts, y, post, comb);
    be.rms_norm(y, &norm_w, 1e-6f, h);
    Tensor q2 = q.reshape(Shape{kT, kH * kHd});
    be.linear(h, wq, {}, q2);
    be.rope(q, staging.device("positions"), rope, false);
    Tensor qrows = q.reshape(Shape{kT * kH, kHd});
    be.hadamard(qrows);
    be.fake_quant_fp8(q2, 0, kH * kHd, 128);
    be.linear(h, wkv, {128}, kv);
    be.gather_rows(kv, staging.device("gather"), g);
    be.fill(pool, 0.0f);
    be.scatter_rows(g, RowView{pool, staging.device("pages"), kPageRows, kPages * kPageRows},
                    staging.device("slots"));
    be.linear(q2, wo, {}, f);
    be.swiglu(f, y, 7.0f, act);
    be.hc_post(act, x, post, comb, xo);
    be.hc_head(xo, head, hc_opts, fin);
    be.linear(fin, wv, {}, logits);
    be.apply_token_mask(logits, staging.device("mask"));
    be.argmax(logits, next);
  }

  // Random inputs of one step (distinct scatter slots, a page permutation, random mask bits).
  void stage(std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::int32_t> ids(kT), pos(kT), gather(kT), slots(kPages * kPageRows), pages(kPages), mask(kT * kWords);
    for (auto& v : ids) v = static_cast<std::int32_t>(rng() % kV);
    for (auto& v : pos) v = static_cast<std::int32_t>(rng() % 100000);
    for (auto& v : gather) v = static_cast<std::int32_t>(rng() % kT);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(kT);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    for (auto& v : mask) v = static_cast<std::int32_t>(rng() | 1u);
    write_i32(staging, "ids", ids);
    write_i32(staging, "positions", pos);
    write_i32(staging, "gather", gather);
    write_i32(staging, "slots", slots);
    write_i32(staging, "pages", pages);
    write_i32(staging, "mask", mask);
    staging.upload();
  }

  std::vector<std::vector<std::uint8_t>> outputs() {
    be.synchronize();
    return {bytes_of(q), bytes_of(kv), bytes_of(pool), bytes_of(xo), bytes_of(fin), bytes_of(logits),
            bytes_of(next)};
  }
};

TEST(CudaGraph, ReplayOverNewStagedInputsMatchesEagerBitForBit) {
  DEEPINFER_REQUIRE_GPU();
  ASSERT_TRUE(supports_graphs(gpu()));
  DecodeStep step;
  step.stage(100);
  step.run();  // warm-up: scratch sized at these shapes
  const auto warm = step.outputs();
  Graph graph = capture_graph(gpu(), [&] { step.run(); });
  ASSERT_TRUE(graph.valid());
  EXPECT_GE(graph.num_nodes(), 18u);
  EXPECT_FALSE(is_capturing(gpu()));
  for (std::uint32_t seed : {100u, 200u, 300u, 400u}) {
    step.stage(seed);
    graph.replay();
    const auto replayed = step.outputs();
    step.stage(seed);
    step.run();
    const auto eager = step.outputs();
    ASSERT_EQ(replayed.size(), eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(replayed[i], eager[i]) << "output " << i << " seed " << seed;
    if (seed == 100u) {
      EXPECT_EQ(eager, warm);
    } else {
      EXPECT_NE(eager[6], warm[6]) << "new inputs should change the argmax ids";
    }
  }
}

TEST(CudaGraph, RoutedExpertsAndRoutingReplayBitForBit) {
  DEEPINFER_REQUIRE_GPU();
  constexpr std::int64_t kT = 8, kE = 8, kK = 2, kDim = 256, kInter = 128;
  Backend& be = gpu();
  std::vector<ExpertWeights> experts;
  for (int e = 0; e < kE; ++e) {
    auto w = [&](std::int64_t n, std::int64_t k, std::uint32_t s) {
      return to_gpu(test::quantize_fp8_block(test::random_tensor(Shape{n, k}, s, 0.05f), 128));
    };
    experts.push_back({w(kInter, kDim, 50 + 3 * e), w(kInter, kDim, 51 + 3 * e), w(kDim, kInter, 52 + 3 * e)});
  }
  StagingLayout layout;
  layout.add("logits", Shape{kT, kE}, DType::kF32);
  StagingBuffer staging(be, layout);
  Tensor x = to_gpu(test::random_tensor(Shape{kT, kDim}, 60, 1.0f, DType::kBF16));
  Tensor bias = to_gpu(test::random_tensor(Shape{kE}, 61, 0.1f));
  Tensor ids = be.empty(Shape{kT, kK}, DType::kI32), weights = be.empty(Shape{kT, kK}, DType::kF32);
  Tensor out = be.empty(Shape{kT, kDim}, DType::kF32);
  RouteOptions route;
  route.top_k = static_cast<int>(kK);
  MoeOptions moe;
  moe.act_quant_block = 128;
  moe.swiglu_limit = 10.0f;
  auto run = [&] {
    be.moe_route(staging.device("logits"), &bias, nullptr, nullptr, route, ids, weights);
    be.moe_experts(x, ids, weights, experts, moe, out);
  };
  auto stage = [&](std::uint32_t seed) {
    const Tensor l = test::random_tensor(Shape{kT, kE}, seed, 2.0f);
    std::memcpy(staging.host("logits").raw_data(), l.raw_data(), l.nbytes());
    staging.upload();
  };
  stage(1);
  run();  // warm-up: expert tables uploaded, scratch sized
  Graph graph = capture_graph(be, run);
  for (std::uint32_t seed : {2u, 3u, 4u}) {
    stage(seed);
    graph.replay();
    const auto r_ids = bytes_of(ids), r_out = bytes_of(out);
    stage(seed);
    run();
    EXPECT_EQ(r_ids, bytes_of(ids)) << seed;
    EXPECT_EQ(r_out, bytes_of(out)) << seed;
  }
}

// V4.1's mHC ops (hc_mix, hc_collapse), the Engram gate on strided key/value views, convert and
// both FP4 fake-quant flavours, fed by staged ids through embeddings.
TEST(CudaGraph, V41MixingGateAndFp4QuantReplayBitForBit) {
  DEEPINFER_REQUIRE_GPU();
  constexpr std::int64_t kT = 5, kN = 4, kD = 256, kV = 300;
  Backend& be = gpu();
  StagingLayout layout;
  layout.add("ids", Shape{kT}, DType::kI32);
  layout.add("kv_ids", Shape{kT}, DType::kI32);
  StagingBuffer staging(be, layout);
  const Tensor table = to_gpu(test::random_tensor(Shape{kV, kN * kD}, 21, 1.0f, DType::kBF16));
  const Tensor kv_table = to_gpu(test::random_tensor(Shape{kV, (kN + 1) * kD}, 22, 1.0f, DType::kBF16));
  const HcWeights w{to_gpu(test::random_tensor(Shape{(2 + kN) * kN, kN * kD}, 23, 0.02f)),
                    to_gpu(test::random_tensor(Shape{(2 + kN) * kN}, 24, 0.5f)),
                    to_gpu(test::random_tensor(Shape{3}, 25, 0.5f))};
  const Tensor omega = to_gpu(test::random_tensor(Shape{kN, kD}, 26, 1.0f));
  Tensor flat = be.empty(Shape{kT, kN * kD}, DType::kBF16), kv = be.empty(Shape{kT, (kN + 1) * kD}, DType::kBF16);
  const Tensor x = flat.reshape(Shape{kT, kN, kD});
  Tensor pre = be.empty(Shape{kT, kN}, DType::kF32), post = be.empty(Shape{kT, kN}, DType::kF32);
  Tensor comb = be.empty(Shape{kT, kN, kN}, DType::kF32), y = be.empty(Shape{kT, kD}, DType::kBF16);
  Tensor gated = be.empty(Shape{kT, kN, kD}, DType::kBF16);
  Tensor q1 = be.empty(Shape{kT, kD}, DType::kF32), q2 = be.empty(Shape{kT, kD}, DType::kF32);
  auto run = [&] {
    be.embedding(staging.device("ids"), table, flat);
    be.embedding(staging.device("kv_ids"), kv_table, kv);
    be.hc_mix(x, w, HcOptions{}, pre, post, comb);
    be.hc_collapse(x, pre, y);
    be.engram_gate(x, kv.narrow(1, 0, kN * kD), kv.narrow(1, kN * kD, kD), omega, 1e-6f, gated);
    be.convert(y, q1);
    be.fake_quant_fp4(q1, 32, Fp4ScaleKind::kUE8M0);
    be.scale(y, 0.5f, q2);
    be.fake_quant_fp4(q2, 32, Fp4ScaleKind::kE4M3);
  };
  auto stage = [&](std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::int32_t> ids(kT), kv_ids(kT);
    for (auto& v : ids) v = static_cast<std::int32_t>(rng() % kV);
    for (auto& v : kv_ids) v = static_cast<std::int32_t>(rng() % kV);
    write_i32(staging, "ids", ids);
    write_i32(staging, "kv_ids", kv_ids);
    staging.upload();
  };
  auto outputs = [&] {
    be.synchronize();
    return std::vector<std::vector<std::uint8_t>>{bytes_of(pre),   bytes_of(post), bytes_of(comb), bytes_of(y),
                                                  bytes_of(gated), bytes_of(q1),   bytes_of(q2)};
  };
  stage(7);
  run();
  Graph graph = capture_graph(be, run);
  EXPECT_GE(graph.num_nodes(), 9u);  // at least one kernel per op (hc_mix launches two: slice partials, finish)
  for (std::uint32_t seed : {8u, 9u}) {
    stage(seed);
    graph.replay();
    const auto replayed = outputs();
    stage(seed);
    run();
    const auto eager = outputs();
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(replayed[i], eager[i]) << "output " << i << " seed " << seed;
  }
}

TEST(CudaGraph, UncapturableCallsThrowNamingTheCallAndLeaveTheBackendUsable) {
  DEEPINFER_REQUIRE_GPU();
  Backend& be = gpu();
  Tensor host = test::random_tensor(Shape{4, 8}, 1);
  Tensor dev = to_gpu(host);
  Tensor dev2 = be.empty(Shape{4, 8}, DType::kF32);
  StagingLayout layout;
  layout.add("ids", Shape{4}, DType::kI32);
  StagingBuffer staging(be, layout);
  const std::vector<std::pair<std::string, std::function<void()>>> cases = {
      {"empty()", [&] { be.empty(Shape{16}, DType::kF32); }},
      {"copy()", [&] { be.copy(host, dev2); }},
      {"copy()", [&] {
         Tensor back = Tensor::empty(Shape{4, 8}, DType::kF32);
         be.copy(dev, back);
       }},
      {"empty()", [&] { be.upload(host); }},
      {"synchronize", [&] { be.synchronize(); }},
      {"StagingBuffer::upload", [&] { staging.upload(); }},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string msg = error_of([&] { (void)capture_graph(be, cases[i].second); });
    EXPECT_NE(msg.find(cases[i].first), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_NE(msg.find("capture"), std::string::npos) << "case " << i << ": " << msg;
    EXPECT_FALSE(is_capturing(be));
    // The stream is usable again and no CUDA error lingers.
    be.copy(dev, dev2);
    EXPECT_EQ(test::values(to_host(dev2)), test::values(host));
  }
  begin_capture(be);
  EXPECT_THROW(begin_capture(be), Error);
  be.fill(dev2, 2.0f);
  Graph one = end_capture(be);
  EXPECT_EQ(one.num_nodes(), 1u);
  one.replay();
  be.synchronize();
  EXPECT_EQ(test::values(to_host(dev2))[31], 2.0f);
  EXPECT_THROW(end_capture(be), Error);
}

TEST(CudaGraph, ScratchGrowthDuringCaptureIsAnErrorNamingTheOp) {
  DEEPINFER_REQUIRE_GPU();
  Backend& be = gpu();
  // A shape no earlier test ran: the GEMM's activation staging needs more scratch than exists.
  constexpr std::int64_t kM = 3000, kK = 4096, kN = 64;
  Tensor x = to_gpu(test::random_tensor(Shape{kM, kK}, 1, 1.0f, DType::kBF16));
  LinearWeight w{WeightFormat::kBF16, to_gpu(test::random_tensor(Shape{kN, kK}, 2, 0.05f, DType::kBF16)), Tensor(), 0};
  Tensor out = be.empty(Shape{kM, kN}, DType::kBF16);
  const std::string msg = error_of([&] { (void)capture_graph(be, [&] { be.linear(x, w, {}, out); }); });
  EXPECT_NE(msg.find("scratch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("capture"), std::string::npos) << msg;
  EXPECT_FALSE(is_capturing(be));
  be.linear(x, w, {}, out);  // eager: grows the scratch; then the same capture works
  be.synchronize();
  const auto eager = bytes_of(out);
  Graph graph = capture_graph(be, [&] { be.linear(x, w, {}, out); });
  be.fill(out, 0.0f);
  graph.replay();
  EXPECT_EQ(bytes_of(out), eager);
}

TEST(CudaGraph, DependentLaunchedWgmmaLinearsReplayBitForBit) {
  DEEPINFER_REQUIRE_GPU();
  // The FP8 decode GEMM on wgmma is launched as a programmatic dependent of its act quant: captured,
  // the dependency becomes a programmatic graph edge. Two chained linears (one split over K, one not)
  // replayed over new inputs give the eager bits.
  Backend& be = gpu();
  constexpr std::int64_t kM = 3, kD = 4096, kH = 1024;
  LinearWeight w1 = to_gpu(test::quantize_fp8_block(test::random_tensor(Shape{kH, kD}, 21, 0.05f), 128));
  LinearWeight w2 = to_gpu(test::quantize_fp8_block(test::random_tensor(Shape{kD, kH}, 22, 0.05f), 128));
  Tensor x = be.empty(Shape{kM, kD}, DType::kBF16);
  Tensor h = be.empty(Shape{kM, kH}, DType::kBF16);
  Tensor y = be.empty(Shape{kM, kD}, DType::kF32);
  auto run = [&] {
    be.linear(x, w1, LinearOptions{128}, h);
    be.linear(h, w2, LinearOptions{128}, y);
  };
  auto load = [&](std::uint64_t seed) {
    be.copy(to_gpu(test::random_tensor(Shape{kM, kD}, seed, 1.0f, DType::kBF16)), x);
  };
  load(30);
  run();  // eager first: scratch sized outside the capture
  be.synchronize();
  Graph graph = capture_graph(be, run);
  for (std::uint64_t seed : {31u, 32u, 33u}) {
    load(seed);
    run();
    be.synchronize();
    const auto eager = bytes_of(y);
    be.fill(y, 0.0f);
    load(seed);
    graph.replay();
    EXPECT_EQ(bytes_of(y), eager) << "seed " << seed;
  }
}

TEST(CudaGraph, SideLaneBranchesReplayBitForBitAndMatchOneLane) {
  DEEPINFER_REQUIRE_GPU();
  // Two chains of FP8 linears on x (each op with its own scratch temporaries): one on the side lane,
  // one on the main lane, joined before their sum. Eager on two lanes == eager on one lane (a backend
  // with side_lane_max_rows 0) == the captured graph's replays over new inputs, bit for bit.
  Backend& be = gpu();
  CudaBackendOptions one_lane_options;
  one_lane_options.side_lane_max_rows = 0;
  const std::unique_ptr<Backend> one_lane = make_cuda_backend(one_lane_options);
  constexpr std::int64_t kM = 5, kD = 2048, kH = 1024;
  auto weight = [](std::int64_t n, std::int64_t k, std::uint64_t seed) {
    return to_gpu(test::quantize_fp8_block(test::random_tensor(Shape{n, k}, seed, 0.05f), 128));
  };
  const LinearWeight wa = weight(kH, kD, 41), wb = weight(kD, kH, 42), wc = weight(kH, kD, 43), wd = weight(kD, kH, 44);
  Tensor x = be.empty(Shape{kM, kD}, DType::kBF16);
  Tensor ha = be.empty(Shape{kM, kH}, DType::kBF16), hc = be.empty(Shape{kM, kH}, DType::kBF16);
  Tensor ya = be.empty(Shape{kM, kD}, DType::kF32), yc = be.empty(Shape{kM, kD}, DType::kF32);
  Tensor out = be.empty(Shape{kM, kD}, DType::kF32);
  auto run = [&](Backend& b) {
    SideLane side(b, kM);
    b.linear(x, wa, LinearOptions{128}, ha);
    b.linear(ha, wb, LinearOptions{128}, ya);
    side.return_to_main();
    b.linear(x, wc, LinearOptions{128}, hc);
    b.linear(hc, wd, LinearOptions{128}, yc);
    side.join();
    b.add(ya, yc, out);
  };
  auto load = [&](std::uint64_t seed) {
    be.copy(to_gpu(test::random_tensor(Shape{kM, kD}, seed, 1.0f, DType::kBF16)), x);
  };
  load(40);
  run(be);  // eager first: both lanes' scratch sized outside the capture
  be.synchronize();
  Graph graph = capture_graph(be, [&] { run(be); });
  for (std::uint64_t seed : {45u, 46u, 47u}) {
    load(seed);
    be.synchronize();  // (the one-lane backend reads x on its own stream)
    run(*one_lane);
    one_lane->synchronize();
    const auto want = bytes_of(out);
    be.fill(out, 0.0f);
    run(be);
    be.synchronize();
    EXPECT_EQ(bytes_of(out), want) << "two lanes eager, seed " << seed;
    be.fill(out, 0.0f);
    graph.replay();
    EXPECT_EQ(bytes_of(out), want) << "graph replay, seed " << seed;
  }
  // An op that throws on the side lane: the scope still joins, so the next fork works.
  {
    SideLane side(be, kM);
    Tensor wrong = be.empty(Shape{kM, kH + 1}, DType::kF32);
    EXPECT_THROW(be.linear(x, wa, LinearOptions{128}, wrong), Error);
  }
  EXPECT_EQ(error_of([&] {
              SideLane side(be, kM);
              side.join();
            }),
            "");
}

TEST(CudaGraph, ReplaysStayValidAfterLaterScratchGrowth) {
  DEEPINFER_REQUIRE_GPU();
  Backend& be = gpu();
  constexpr std::int64_t kM = 8, kK = 1024, kN = 512;
  Tensor x = to_gpu(test::random_tensor(Shape{kM, kK}, 3, 1.0f, DType::kBF16));
  LinearWeight w = to_gpu(test::quantize_fp8_block(test::random_tensor(Shape{kN, kK}, 4, 0.05f), 128));
  Tensor out = be.empty(Shape{kM, kN}, DType::kBF16);
  be.linear(x, w, {128}, out);
  const auto eager = bytes_of(out);
  Graph graph = capture_graph(be, [&] { be.linear(x, w, {128}, out); });
  const void* captured_scratch = captured_memory(be);
  EXPECT_NE(captured_scratch, nullptr);
  // Grow the scratch well past anything so far (a large fp8 GEMM dequantises its weight there),
  // then fill fresh allocations with NaN: a freed old buffer would likely be handed out again.
  {
    constexpr std::int64_t kBigM = 4096, kBigK = 8192, kBigN = 64;  // cuBLASLt path: 64 MiB of staged activations
    Tensor bx = be.empty(Shape{kBigM, kBigK}, DType::kBF16);
    be.fill(bx, 0.5f);
    LinearWeight bw{WeightFormat::kBF16, to_gpu(test::random_tensor(Shape{kBigN, kBigK}, 5, 0.01f, DType::kBF16)),
                    Tensor(), 0};
    Tensor bo = be.empty(Shape{kBigM, kBigN}, DType::kBF16);
    be.linear(bx, bw, {}, bo);
    be.synchronize();
  }
  // The replaced scratch is what the graph holds: captured_memory tells graph caches it is stale.
  EXPECT_NE(captured_memory(be), captured_scratch);
  std::vector<Tensor> decoys;
  for (int i = 0; i < 8; ++i) {
    decoys.push_back(be.empty(Shape{std::int64_t{1} << 24}, DType::kF32));
    be.fill(decoys.back(), std::numeric_limits<float>::quiet_NaN());
  }
  be.fill(out, 0.0f);
  graph.replay();
  EXPECT_EQ(bytes_of(out), eager);
}

TEST(CudaGraph, WorkspacePassesReuseAddressesSoCapturedPassesReplay) {
  DEEPINFER_REQUIRE_GPU();
  Backend& be = gpu();
  Workspace ws(be);
  Tensor input = to_gpu(test::random_tensor(Shape{16, 512}, 9));
  Tensor out = be.empty(Shape{16, 512}, DType::kF32);
  std::vector<const void*> ptrs;
  auto pass = [&] {
    ws.reset();
    ptrs.clear();
    Tensor a = ws.alloc(Shape{16, 512}, DType::kF32), b = ws.alloc(Shape{16, 512}, DType::kBF16);
    Tensor c = ws.alloc(Shape{16, 512}, DType::kF32);
    ptrs = {a.raw_data(), b.raw_data(), c.raw_data()};
    be.rms_norm(input, nullptr, 1e-6f, a);
    be.convert(a, b);
    be.add(input, b, c);  // mixed dtypes: f32 + bf16
    be.scale(c, 0.5f, out);
  };
  pass();  // warm-up: the arena grows to its steady size
  pass();
  const auto warm_ptrs = ptrs;
  const auto eager = bytes_of(out);
  Graph graph = capture_graph(be, pass);
  EXPECT_EQ(ptrs, warm_ptrs);
  graph.keep_alive(ws.retain());
  be.fill(out, 0.0f);
  graph.replay();
  EXPECT_EQ(bytes_of(out), eager);
}

TEST(CudaGraph, DeviceFaultsInReplaysSurfaceAtSynchronize) {
  DEEPINFER_REQUIRE_GPU();
  Backend& be = gpu();
  StagingLayout layout;
  layout.add("ids", Shape{2}, DType::kI32);
  StagingBuffer staging(be, layout);
  Tensor table = to_gpu(test::random_tensor(Shape{10, 32}, 1));
  Tensor out = be.empty(Shape{2, 32}, DType::kF32);
  write_i32(staging, "ids", {1, 2});
  staging.upload();
  be.embedding(staging.device("ids"), table, out);
  Graph graph = capture_graph(be, [&] { be.embedding(staging.device("ids"), table, out); });
  write_i32(staging, "ids", {3, 12});
  staging.upload();
  graph.replay();
  const std::string msg = error_of([&] { be.synchronize(); });
  EXPECT_NE(msg.find("token id 12"), std::string::npos) << msg;
  write_i32(staging, "ids", {4, 5});
  staging.upload();
  graph.replay();
  be.synchronize();
  EXPECT_EQ(test::values(to_host(out))[0], test::values(to_host(table))[4 * 32]);
}

TEST(CudaGraph, StagingAlternatesPinnedHostSlotsAndKeepsTheDeviceAddress) {
  DEEPINFER_REQUIRE_GPU();
  StagingLayout layout;
  layout.add("a", Shape{3}, DType::kI32);
  layout.add("b", Shape{5}, DType::kF32, 512);
  StagingBuffer staging(gpu(), layout, 2);
  const void* dev_b = staging.device("b").raw_data();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(dev_b) % 512, 0u);
  std::vector<const void*> hosts;
  for (int step = 0; step < 6; ++step) {
    Tensor a = staging.host("a");
    hosts.push_back(a.raw_data());
    for (int i = 0; i < 3; ++i) a.data<std::int32_t>()[i] = step * 10 + i;
    for (int i = 0; i < 5; ++i) staging.host("b").data<float>()[i] = static_cast<float>(step) + 0.25f * i;
    staging.upload();
    EXPECT_EQ(staging.device("b").raw_data(), dev_b);
    const Tensor got_a = to_host(staging.device("a")), got_b = to_host(staging.device("b"));
    EXPECT_EQ(got_a.data<std::int32_t>()[2], step * 10 + 2);
    EXPECT_EQ(got_b.data<float>()[4], static_cast<float>(step) + 1.0f);
  }
  EXPECT_NE(hosts[0], hosts[1]);
  EXPECT_EQ(hosts[0], hosts[2]);
  EXPECT_EQ(hosts[1], hosts[5]);
}

// Host cost of issuing ~300 small ops eagerly vs one replay (numbers for docs/PERFORMANCE_CUDA.md).
TEST(CudaGraph, ReplayCostsOneLaunchInsteadOfOnePerOp) {
  DEEPINFER_REQUIRE_GPU();
  Backend& be = gpu();
  constexpr int kRounds = 100, kOps = 3 * kRounds, kSteps = 50;
  constexpr std::int64_t kT = 1, kH = 8, kD = 512;
  Tensor x = to_gpu(test::random_tensor(Shape{kT, kH, kD}, 1, 1.0f, DType::kBF16));
  Tensor y = be.empty(Shape{kT, kH, kD}, DType::kBF16);
  Tensor positions = to_gpu(test::i32_tensor(Shape{kT}, {7}));
  RopeTable rope{to_gpu(test::random_tensor(Shape{32}, 2, 0.1f)), 64};
  auto body = [&] {
    for (int r = 0; r < kRounds; ++r) {
      be.rms_norm(x, nullptr, 1e-6f, y);
      be.rope(y, positions, rope, false);
      be.add(x, y, x);
    }
  };
  using Clock = std::chrono::steady_clock;
  auto us = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  body();
  be.synchronize();
  std::vector<double> eager_issue, eager_wall, graph_issue, graph_wall;
  for (int s = 0; s < kSteps; ++s) {
    const auto t0 = Clock::now();
    body();
    const auto t1 = Clock::now();
    be.synchronize();
    const auto t2 = Clock::now();
    eager_issue.push_back(us(t0, t1));
    eager_wall.push_back(us(t0, t2));
  }
  Graph graph = capture_graph(be, body);
  graph.replay();
  be.synchronize();
  for (int s = 0; s < kSteps; ++s) {
    const auto t0 = Clock::now();
    graph.replay();
    const auto t1 = Clock::now();
    be.synchronize();
    const auto t2 = Clock::now();
    graph_issue.push_back(us(t0, t1));
    graph_wall.push_back(us(t0, t2));
  }
  const double ei = median(eager_issue), ew = median(eager_wall), gi = median(graph_issue), gw = median(graph_wall);
  std::printf("GRAPH_COST ops=%d eager_issue_us=%.1f eager_wall_us=%.1f graph_issue_us=%.1f graph_wall_us=%.1f "
              "issue_per_op_us=%.2f saved_per_step_us=%.1f nodes=%zu\n",
              kOps, ei, ew, gi, gw, ei / kOps, ew - gw, graph.num_nodes());
  EXPECT_EQ(graph.num_nodes(), static_cast<std::size_t>(kOps));
  EXPECT_LT(gi, ei);
}

}  // namespace
}  // namespace deepinfer::ops
