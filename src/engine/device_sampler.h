// Sampling on the model runner's device: packs one step's SampleRows and per-row lists (bias,
// bans, penalty history) on the host, uploads them in one copy, queues Backend::sample_tokens on
// the runner's logits and reads back only token ids (+ logprobs when a row asked).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "ops/backend.h"
#include "ops/sampling.h"

namespace deepinfer::engine {

class DeviceSampler {
 public:
  // `raw_bans`: ids set to -inf in every row's raw logits (the engine's unsampleable ids).
  DeviceSampler(ops::Backend& backend, std::int32_t vocab_size, std::int32_t max_logprobs,
                std::span<const std::int32_t> raw_bans);

  ops::Backend& backend() { return backend_; }

  // Starts packing a step of `rows` logits rows (all rows default to greedy with no lists).
  void begin(std::int32_t rows);
  ops::SampleRow& row(std::int32_t r) { return rows_[static_cast<std::size_t>(r)]; }
  // Appends entries and returns their [begin, end) range.
  std::pair<std::int32_t, std::int32_t> add(std::span<const ops::SampleEntry> entries);
  std::pair<std::int32_t, std::int32_t> raw_bans() const { return {0, num_raw_bans_}; }
  // Uploads the packed rows and entries (before the forward is queued: the copy waits for the
  // device stream, which is idle then).
  void upload();
  // Queues the sampling of `logits` (f32 [rows, vocab] on the device). `masks`: the rows'
  // structured-output bitmasks [rows, words], or empty when no row has one.
  void queue(const Tensor& logits, std::span<const std::uint32_t> masks);
  // Copies the results back (waits for the device).
  void read();
  SampleResult result(std::int32_t r, bool with_logprobs) const;

 private:
  ops::Backend& backend_;
  std::int32_t vocab_ = 0;
  std::int32_t max_top_ = 0;
  std::int32_t num_raw_bans_ = 0;
  std::int32_t num_rows_ = 0;
  std::vector<ops::SampleRow> rows_;
  std::vector<ops::SampleEntry> entries_;  // starts with the raw bans
  std::vector<std::int32_t> out_;          // [rows, sample_out_words(max_top_)]
  // Device buffers, grown on demand.
  Tensor rows_dev_, entries_dev_, masks_dev_, out_dev_;
};

}  // namespace deepinfer::engine
