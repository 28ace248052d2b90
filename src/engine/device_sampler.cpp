// Packing, upload and read-back of device sampling.
#include "engine/device_sampler.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace deepinfer::engine {
namespace {

// A device buffer of at least `rows` rows of `width` i32 (grown by doubling), viewed as [rows, width].
Tensor rows_view(ops::Backend& backend, Tensor& buffer, std::int64_t rows, std::int64_t width) {
  if (!buffer.defined() || buffer.numel() == 0 || buffer.dim(0) < rows) {
    const std::int64_t have = buffer.defined() && buffer.ndim() == 2 ? buffer.dim(0) : 0;
    buffer = backend.empty(Shape{std::max<std::int64_t>({rows, 2 * have, 16}), width}, DType::kI32);
  }
  return buffer.narrow(0, 0, rows);
}

void upload_words(ops::Backend& backend, const void* host, Tensor& device) {
  if (device.numel() == 0) return;
  const Tensor src = Tensor::view_of(const_cast<void*>(host), device.shape(), DType::kI32, nullptr);
  backend.copy(src, device);
}

}  // namespace

DeviceSampler::DeviceSampler(ops::Backend& backend, std::int32_t vocab_size, std::int32_t max_logprobs,
                             std::span<const std::int32_t> raw_bans)
    : backend_(backend), vocab_(vocab_size), max_top_(max_logprobs) {
  std::vector<std::int32_t> ids(raw_bans.begin(), raw_bans.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // the op wants distinct raw bans
  for (std::int32_t id : ids) {
    DI_CHECK(id >= 0 && id < vocab_size, "device sampler: banned id {} outside the vocabulary [0, {})", id, vocab_size);
    entries_.push_back({id, 0.0f});
  }
  num_raw_bans_ = static_cast<std::int32_t>(entries_.size());
}

void DeviceSampler::begin(std::int32_t rows) {
  num_rows_ = rows;
  rows_.assign(static_cast<std::size_t>(rows), ops::SampleRow{});
  entries_.resize(static_cast<std::size_t>(num_raw_bans_));
}

std::pair<std::int32_t, std::int32_t> DeviceSampler::add(std::span<const ops::SampleEntry> entries) {
  const auto begin = static_cast<std::int32_t>(entries_.size());
  entries_.insert(entries_.end(), entries.begin(), entries.end());
  return {begin, static_cast<std::int32_t>(entries_.size())};
}

void DeviceSampler::upload() {
  Tensor rows = rows_view(backend_, rows_dev_, num_rows_, ops::kSampleRowWords);
  upload_words(backend_, rows_.data(), rows);
  Tensor entries = rows_view(backend_, entries_dev_, static_cast<std::int64_t>(entries_.size()), 2);
  upload_words(backend_, entries_.data(), entries);
}

void DeviceSampler::queue(const Tensor& logits, std::span<const std::uint32_t> masks) {
  DI_CHECK(logits.ndim() == 2 && logits.dim(0) == num_rows_ && logits.dim(1) == vocab_,
           "device sampler: logits {} for {} rows of vocab {}", logits.shape(), num_rows_, vocab_);
  const std::int64_t words = (vocab_ + 31) / 32;
  Tensor mask_view;
  if (masks.empty()) {
    mask_view = rows_view(backend_, masks_dev_, 1, words).narrow(0, 0, 0);
  } else {
    DI_CHECK(static_cast<std::int64_t>(masks.size()) == num_rows_ * words, "device sampler: {} mask words for {} rows",
             masks.size(), num_rows_);
    mask_view = rows_view(backend_, masks_dev_, num_rows_, words);
    upload_words(backend_, masks.data(), mask_view);
  }
  const Tensor rows = rows_dev_.narrow(0, 0, num_rows_);
  const Tensor entries = entries_dev_.narrow(0, 0, static_cast<std::int64_t>(entries_.size()));
  Tensor out = rows_view(backend_, out_dev_, num_rows_, ops::sample_out_words(max_top_));
  backend_.sample_tokens(logits, rows, entries, mask_view, out);
}

void DeviceSampler::read() {
  const auto width = static_cast<std::size_t>(ops::sample_out_words(max_top_));
  out_.resize(static_cast<std::size_t>(num_rows_) * width);
  if (num_rows_ == 0) return;
  Tensor host = Tensor::view_of(out_.data(), Shape{num_rows_, static_cast<std::int64_t>(width)}, DType::kI32, nullptr);
  backend_.copy(out_dev_.narrow(0, 0, num_rows_), host);
}

SampleResult DeviceSampler::result(std::int32_t r, bool with_logprobs) const {
  const auto width = static_cast<std::size_t>(ops::sample_out_words(max_top_));
  const std::int32_t* o = out_.data() + static_cast<std::size_t>(r) * width;
  SampleResult res;
  res.token = o[ops::kSampleOutToken];
  if (!with_logprobs) return res;
  const auto as_float = [](std::int32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  };
  res.rank = o[ops::kSampleOutRank];
  res.logprob = as_float(o[ops::kSampleOutLogprob]);
  const std::int32_t n = rows_[static_cast<std::size_t>(r)].num_top_logprobs;
  for (std::int32_t i = 0; i < n && o[ops::kSampleOutFixed + i] >= 0; ++i) {
    res.top.push_back({o[ops::kSampleOutFixed + i], as_float(o[ops::kSampleOutFixed + max_top_ + i])});
  }
  return res;
}

}  // namespace deepinfer::engine
