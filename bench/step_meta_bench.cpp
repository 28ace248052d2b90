// Host time to lay out one forward step's metadata (StepMetaBuilder: ids, positions, slots, ring rows,
// the per-token window / top-k / all-visible index lists, then the copy into the staging buffer) for a
// real geometry: the work the host does before a step's first kernel. No weights and no GPU needed.
// usage: step_meta_bench [--config tests/io/fixtures/v4_flash.release.json] [--num-layers 4] [--reps 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/model_config.h"
#include "model/deepseek_v4/dummy_weights.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/step_meta.h"
#include "ops/backend.h"

namespace {

using namespace deepinfer;
using model::v4::Segment;

struct Case {
  std::int64_t sequences, tokens_each, context;  // `tokens_each` new tokens after `context` old ones
};

// Bytes of every table of the step (what goes up in its one staged copy).
std::int64_t meta_bytes(const model::v4::StepMeta& m) {
  std::int64_t b = 0;
  for (const Tensor* t : {&m.ids, &m.positions, &m.slots, &m.ring_rows, &m.ring_table, &m.store_table, &m.window_list,
                          &m.logit_rows, &m.extra, &m.one_hot})
    b += static_cast<std::int64_t>(t->nbytes());
  for (const model::v4::RatioMeta& r : m.ratios)
    for (const Tensor* t : {&r.group_pos, &r.store_rows, &r.key_base, &r.num_keys, &r.offsets, &r.topk_list, &r.all_list})
      b += static_cast<std::int64_t>(t->nbytes());
  return b;
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  std::string config_path = "tests/io/fixtures/v4_flash.release.json";
  int layers = 4, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--config") config_path = value;
    else if (flag == "--num-layers") layers = std::stoi(value);
    else if (flag == "--reps") reps = std::stoi(value);
    else throw_error("step_meta_bench: unknown flag {}", flag);
  }
  const io::ModelConfig c = model::v4::dummy_model_config(io::load_model_config(config_path), layers);
  auto backend = ops::make_cpu_backend();
  model::v4::MetaStaging staging(*backend);
  std::printf("# step metadata on the host: %s, %d layers, median of %d builds\n\n", config_path.c_str(), layers, reps);
  std::printf("| step | rows | metadata (MB) | host time (ms) |\n| --- | ---: | ---: | ---: |\n");
  for (const Case k : {Case{1, 1024, 0}, Case{1, 8192, 0}, Case{1, 1, 1024}, Case{32, 1, 1024}, Case{256, 1, 1024}}) {
    auto arena = model::v4::StateArena::growable(c, DType::kBF16, *backend);
    std::vector<std::unique_ptr<model::v4::SequenceState>> seqs;
    std::vector<Segment> segments;
    std::vector<std::int32_t> ids, positions, logit_rows;
    for (std::int64_t s = 0; s < k.sequences; ++s) {
      seqs.push_back(model::v4::new_sequence_state(arena));
      arena->ensure_pages(seqs.back()->pages, k.context + k.tokens_each);
      segments.push_back({seqs.back().get(), s * k.tokens_each, k.tokens_each, k.context, 0});
      for (std::int64_t t = 0; t < k.tokens_each; ++t) {
        ids.push_back(static_cast<std::int32_t>((s * 7919 + t) % c.vocab_size));
        positions.push_back(static_cast<std::int32_t>(k.context + t));
      }
      logit_rows.push_back(static_cast<std::int32_t>((s + 1) * k.tokens_each - 1));
    }
    model::v4::StepRows rows;
    rows.segments = segments;
    rows.ids = ids;
    rows.positions = positions;
    rows.logit_rows = logit_rows;
    std::vector<double> times;
    std::int64_t bytes = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      model::v4::StepMetaBuilder builder(c, *arena, staging);
      builder.add(rows, builder.shape_of(rows, /*bucketed=*/true));
      const std::vector<model::v4::StepMeta> metas = builder.upload(staging);
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      bytes = meta_bytes(metas.front());
    }
    const std::int64_t n = k.sequences * k.tokens_each;
    std::printf("| %s | %lld | %.1f | %.2f |\n",
                k.tokens_each > 1 ? fmt::format("prefill {} tokens", k.tokens_each).c_str()
                                  : fmt::format("decode batch {}, context {}", k.sequences, k.context).c_str(),
                static_cast<long long>(n), static_cast<double>(bytes) / 1e6, median_ms(times));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "step_meta_bench: %s\n", e.what());
  return 1;
}
