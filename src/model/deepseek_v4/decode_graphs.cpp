// The decode-step graph cache (decode_graphs.h): lookup by bucket and addresses, warm-up and
// capture, least-recently-used eviction, per-bucket capture failures, stale-memory purge.
#include "model/deepseek_v4/decode_graphs.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "common/logging.h"
#include "model/deepseek_v4/forward_context.h"

namespace deepinfer::model::v4 {

DecodeGraphs::DecodeGraphs(Capture capture, std::size_t capacity) : capture_(std::move(capture)), capacity_(1) {
  DI_CHECK(capture_ != nullptr, "DecodeGraphs: no capture function");
  set_capacity(capacity);
}

DecodeGraphs DecodeGraphs::on(ops::Backend& backend) {
  return DecodeGraphs([&backend](const std::function<void()>& body) { return ops::capture_graph(backend, body); });
}

DecodeGraphs::Ran DecodeGraphs::run(const Step& step) {
  DecodeAddresses now = step.addresses();
  drop_stale(now.shared);
  if (failed_.count(step.bucket) > 0) {
    step.body();
    return Ran::kEager;
  }
  auto it = graphs_.find(step.bucket);
  if (it != graphs_.end() && it->second.addresses.step == now.step) {
    it->second.last_use = ++clock_;
    it->second.graph.replay();
    ++replays_;
    return Ran::kReplayed;
  }
  // A graph whose addresses moved (a grown arena, a new metadata buffer) never replays again: free
  // what it holds before the warm-up allocates anew.
  if (it != graphs_.end()) graphs_.erase(it);
  step.body();  // the bucket's warm-up: eager, sizing every workspace and the backend scratch
  now = step.addresses();  // the warm-up may have grown or coalesced memory
  drop_stale(now.shared);
  try {
    ops::Graph graph = capture_(step.body);
    if (step.keep_alive) step.keep_alive(graph);
    evict_to(capacity_ - 1);
    graphs_[step.bucket] = Entry{std::move(graph), std::move(now), ++clock_};
    ++captures_;
    return Ran::kCaptured;
  } catch (const Error& e) {
    // The step itself is done (the warm-up ran it); only this bucket stays eager.
    log::warn("decode steps of {} rows, {} pages run without a CUDA graph: {}", step.bucket.rows, step.bucket.pages,
              e.what());
    failed_.insert(step.bucket);
    return Ran::kEager;
  }
}

void DecodeGraphs::clear() {
  graphs_.clear();
  failed_.clear();
}

void DecodeGraphs::set_capacity(std::size_t capacity) {
  DI_CHECK(capacity >= 1, "DecodeGraphs: capacity {} must be at least 1", capacity);
  capacity_ = capacity;
  evict_to(capacity_);
}

void DecodeGraphs::drop_stale(const std::vector<const void*>& shared) {
  std::erase_if(graphs_, [&](const auto& kv) { return kv.second.addresses.shared != shared; });
}

void DecodeGraphs::evict_to(std::size_t size) {
  while (graphs_.size() > size) {
    const auto oldest = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    graphs_.erase(oldest);
    ++evictions_;
  }
}

bool is_decode(const Step& step) {
  return std::all_of(step.segments.begin(), step.segments.end(), [](const Segment& s) { return s.count == 1; });
}

DecodeAddresses decode_addresses(ops::Backend& backend, const Step& step, const void* stream,
                                 ops::Workspace& layer_ws, std::vector<const void*> more) {
  // Bump arenas: the same allocation sequence after a reset gets the same addresses, so the first
  // block's start stands for every layer temporary.
  layer_ws.reset();
  const void* layer_base = layer_ws.alloc(Shape{1}, DType::kU8).raw_data();
  layer_ws.reset();
  const StateArena& arena = *step.segments.front().state->arena;
  DecodeAddresses out;
  out.step = {step.meta->ids.raw_data(), &arena,
              reinterpret_cast<const void*>(static_cast<std::uintptr_t>(arena.generation()))};
  out.step.insert(out.step.end(), more.begin(), more.end());
  out.shared = {ops::captured_memory(backend), stream, layer_base};
  return out;
}

}  // namespace deepinfer::model::v4
