// Sampling on the model runner's device: packs one step's SampleRows and per-row lists (bias,
// bans, penalty history) on the host, uploads them in one staged (asynchronous) copy, queues
// Backend::sample_tokens on the runner's logits and reads back only token ids (+ logprobs when a
// row asked) through a pinned read-back that waits for that step alone. Two frames alternate, so
// step N+1 can be packed, uploaded and sampled while step N's results are still on their way
// (and step N+1 can take its input ids from step N's device output).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "ops/backend.h"
#include "ops/graph.h"
#include "ops/sampling.h"

namespace deepinfer::engine {

class DeviceSampler {
 public:
  // `raw_bans`: ids set to -inf in every row's raw logits (the engine's unsampleable ids).
  DeviceSampler(ops::Backend& backend, std::int32_t vocab_size, std::int32_t max_logprobs,
                std::span<const std::int32_t> raw_bans);
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  ops::Backend& backend() { return backend_; }

  // Starts packing a step of `rows` logits rows in the next frame (all rows default to greedy
  // with no lists). At most two steps may be begun and not yet read.
  void begin(std::int32_t rows);
  ops::SampleRow& row(std::int32_t r) { return packing().rows[static_cast<std::size_t>(r)]; }
  // Appends entries and returns their [begin, end) range.
  std::pair<std::int32_t, std::int32_t> add(std::span<const ops::SampleEntry> entries);
  // Row r waits for the token sampled in row `source` of the previous step (launching ahead): its
  // seen / count lists, where not empty, end with a reserved entry for that token
  // (Backend::add_sampled_to_history, run at upload()).
  void set_source(std::int32_t r, std::int32_t source);
  std::pair<std::int32_t, std::int32_t> raw_bans() const { return {0, num_raw_bans_}; }
  // Uploads the packed rows and entries (an asynchronous staged copy on the device stream); with
  // rows waiting for a previous step's tokens, `previous` is that step's output() (device).
  void upload(const Tensor* previous = nullptr);
  // Queues the sampling of `logits` (f32 [rows, vocab] on the device) and the read-back of its
  // results. `masks`: the rows' structured-output bitmasks [rows, words], or empty.
  void queue(const Tensor& logits, std::span<const std::uint32_t> masks);
  // The device results of the last queued step, i32 [rows, sample_out_words] (the token in
  // column 0): what a step launched ahead takes its input ids from. Valid until the next queue().
  const Tensor& output() const;
  // Waits for the oldest queued step's read-back (only that step, not work queued after it);
  // result() then reads it.
  void read();
  SampleResult result(std::int32_t r, bool with_logprobs) const;

 private:
  // One step's host rows and entries, device copies, results and their read-back.
  struct Frame {
    std::int32_t num_rows = 0;
    std::vector<ops::SampleRow> rows;
    std::vector<ops::SampleEntry> entries;  // starts with the raw bans
    std::vector<std::int32_t> sources;      // per row: previous step's row it waits for, or -1
    bool any_source = false;
    std::unique_ptr<ops::StagingBuffer> staging;  // rows + entries, sized by capacity
    std::int64_t row_capacity = 0, entry_capacity = 0;
    Tensor out_dev;  // [row_capacity, width]
    Tensor out_view;  // [num_rows, width]
    std::unique_ptr<ops::HostReadback> readback;
    const std::int32_t* out = nullptr;  // the read-back results (after read())
  };
  Frame& packing() { return frames_[static_cast<std::size_t>(packing_)]; }
  void reserve(Frame& f);

  ops::Backend& backend_;
  std::int32_t vocab_ = 0;
  std::int32_t max_top_ = 0;
  std::int32_t width_ = 0;
  std::int32_t num_raw_bans_ = 0;
  std::vector<ops::SampleEntry> raw_ban_entries_;
  Frame frames_[2];
  int packing_ = 1;             // the frame begin() filled last
  int read_ = -1;               // the frame read() read last
  std::deque<int> queued_;      // frames queued and not read yet, oldest first
  Tensor masks_dev_;            // structured-output masks (uploaded when their tasks finish)
};

}  // namespace deepinfer::engine
