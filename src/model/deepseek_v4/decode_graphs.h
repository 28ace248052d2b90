// The CUDA-graph cache of bucketed decode steps, shared by the V4 and V4.1 models: one graph per
// (rows, pages) bucket, replayed while every address it captured is unchanged, captured after the
// bucket's eager warm-up step. Bounded (least recently used graph evicted), a failed capture turns
// graphs off for its bucket only, and graphs that hold memory the backend has since replaced (a
// grown scratch buffer, coalesced workspaces) are dropped, so they do not pin it.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "ops/backend.h"
#include "ops/graph.h"
#include "ops/workspace.h"

namespace deepinfer::model::v4 {

struct Step;

struct DecodeBucket {
  std::int64_t rows = 0;   // padded rows (= segments) of the step
  std::int64_t pages = 0;  // page-table columns per segment
  auto operator<=>(const DecodeBucket&) const = default;
};

// Where a step's captured pointers lead, taken before the lookup and again after the warm-up step.
struct DecodeAddresses {
  // Per-bucket inputs and state (metadata buffer, state arena and its generation, ...): a graph
  // whose addresses differ is recaptured when its bucket comes back.
  std::vector<const void*> step;
  // Memory every bucket's graph uses (backend scratch, workspace bases): when it differs from a
  // graph's, that graph can never replay again and only keeps old memory alive, so it is dropped.
  std::vector<const void*> shared;
};

class DecodeGraphs {
 public:
  // Makes a graph from a step's body (ops::capture_graph on the model's backend; tests pass fakes).
  using Capture = std::function<ops::Graph(const std::function<void()>& body)>;
  static constexpr std::size_t kDefaultCapacity = 64;  // 9 batch x 7 page buckets

  explicit DecodeGraphs(Capture capture, std::size_t capacity = kDefaultCapacity);
  // Captures on `backend` (ops::capture_graph).
  static DecodeGraphs on(ops::Backend& backend);

  struct Step {
    DecodeBucket bucket;
    std::function<DecodeAddresses()> addresses;
    // The step's device work (embedding and layers): run eagerly, or recorded by a capture.
    std::function<void()> body;
    // Adds what the captured graph must keep alive (Workspace::retain of the model's workspaces).
    std::function<void(ops::Graph&)> keep_alive;
  };
  enum class Ran { kReplayed, kCaptured, kEager };
  // Replays the bucket's graph when its addresses match; otherwise runs the body eagerly (the
  // bucket's warm-up, sizing every buffer) and captures it, evicting the least recently used
  // graph when full. A capture error logs a warning and leaves that bucket eager from then on.
  Ran run(const Step& step);

  // Drops every graph and forgets failed buckets.
  void clear();
  // At most `capacity` graphs (>= 1); evicts least recently used ones beyond it.
  void set_capacity(std::size_t capacity);
  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return graphs_.size(); }
  bool cached(const DecodeBucket& bucket) const { return graphs_.count(bucket) > 0; }
  bool failed(const DecodeBucket& bucket) const { return failed_.count(bucket) > 0; }
  std::int64_t replays() const { return replays_; }
  std::int64_t captures() const { return captures_; }
  std::int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    ops::Graph graph;
    DecodeAddresses addresses;
    std::uint64_t last_use = 0;
  };

  Capture capture_;
  std::size_t capacity_;
  std::map<DecodeBucket, Entry> graphs_;
  std::set<DecodeBucket> failed_;
  std::uint64_t clock_ = 0;
  std::int64_t replays_ = 0, captures_ = 0, evictions_ = 0;

  void drop_stale(const std::vector<const void*>& shared);
  void evict_to(std::size_t size);
};

// Whether every segment of `step` is one token (what bucketing pads and graphs replay).
bool is_decode(const Step& step);
// The addresses a V4 / V4.1 decode step's graph reads and writes: step = the metadata buffer, the
// state arena and its generation (bumped when a growable pool moves), then `more`; shared = the
// backend's captured memory, the stream buffer `stream` (the step workspace's first block) and
// the layer workspace's first block (probed with a reset: call it between layers only).
DecodeAddresses decode_addresses(ops::Backend& backend, const Step& step, const void* stream,
                                 ops::Workspace& layer_ws, std::vector<const void*> more);

}  // namespace deepinfer::model::v4
