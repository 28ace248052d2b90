// Packing, staged upload and asynchronous read-back of device sampling.
#include "engine/device_sampler.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace deepinfer::engine {
namespace {

// Copies `bytes` into a staging slice (an empty vector's data() may be null: memcpy must not see it).
void put(Tensor slice, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(slice.raw_data(), src, bytes);
}

void upload_words(ops::Backend& backend, const void* host, Tensor& device) {
  if (device.numel() == 0) return;
  const Tensor src = Tensor::view_of(const_cast<void*>(host), device.shape(), DType::kI32, nullptr);
  backend.copy(src, device);
}

}  // namespace

DeviceSampler::DeviceSampler(ops::Backend& backend, std::int32_t vocab_size, std::int32_t max_logprobs,
                             std::span<const std::int32_t> raw_bans)
    : backend_(backend), vocab_(vocab_size), max_top_(max_logprobs), width_(ops::sample_out_words(max_logprobs)) {
  std::vector<std::int32_t> ids(raw_bans.begin(), raw_bans.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // the op wants distinct raw bans
  for (std::int32_t id : ids) {
    DI_CHECK(id >= 0 && id < vocab_size, "device sampler: banned id {} outside the vocabulary [0, {})", id, vocab_size);
    raw_ban_entries_.push_back({id, 0.0f});
  }
  num_raw_bans_ = static_cast<std::int32_t>(raw_ban_entries_.size());
}

DeviceSampler::~DeviceSampler() {
  // Queued copies land in the frames' pinned buffers: finish them before those go.
  try {
    while (!queued_.empty()) read();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a device error has no one to go to at destruction
  }
}

void DeviceSampler::begin(std::int32_t rows) {
  DI_CHECK(queued_.size() < 2, "device sampler: a third step begun before the first was read");
  packing_ = 1 - packing_;
  DI_CHECK(std::find(queued_.begin(), queued_.end(), packing_) == queued_.end(),
           "device sampler: the frame of an unread step was begun again");
  Frame& f = packing();
  f.num_rows = rows;
  f.rows.assign(static_cast<std::size_t>(rows), ops::SampleRow{});
  f.entries = raw_ban_entries_;
  f.sources.assign(static_cast<std::size_t>(rows), -1);
  f.any_source = false;
  f.out = nullptr;
}

void DeviceSampler::set_source(std::int32_t r, std::int32_t source) {
  Frame& f = packing();
  f.sources[static_cast<std::size_t>(r)] = source;
  f.any_source = true;
}

std::pair<std::int32_t, std::int32_t> DeviceSampler::add(std::span<const ops::SampleEntry> entries) {
  Frame& f = packing();
  const auto begin = static_cast<std::int32_t>(f.entries.size());
  f.entries.insert(f.entries.end(), entries.begin(), entries.end());
  return {begin, static_cast<std::int32_t>(f.entries.size())};
}

void DeviceSampler::reserve(Frame& f) {
  const auto entries = static_cast<std::int64_t>(f.entries.size());
  if (f.staging && f.row_capacity >= f.num_rows && f.entry_capacity >= entries) return;
  // Grown by doubling: a new staging buffer or read-back allocates (pinned) memory, which may
  // wait for the device, so it must stay rare.
  f.row_capacity = std::max<std::int64_t>({f.num_rows, 2 * f.row_capacity, 16});
  f.entry_capacity = std::max<std::int64_t>({entries, 2 * f.entry_capacity, 256});
  ops::StagingLayout layout;
  layout.add("rows", Shape{f.row_capacity, ops::kSampleRowWords}, DType::kI32);
  layout.add("entries", Shape{f.entry_capacity, 2}, DType::kI32);
  layout.add("sources", Shape{f.row_capacity}, DType::kI32);
  f.staging.reset();
  f.staging = std::make_unique<ops::StagingBuffer>(backend_, std::move(layout), 1);
  f.out_dev = backend_.empty(Shape{f.row_capacity, width_}, DType::kI32);
  f.readback = backend_.make_readback(static_cast<std::size_t>(f.row_capacity * width_) * sizeof(std::int32_t));
}

void DeviceSampler::upload(const Tensor* previous) {
  Frame& f = packing();
  reserve(f);
  put(f.staging->host("rows"), f.rows.data(), f.rows.size() * sizeof(ops::SampleRow));
  put(f.staging->host("entries"), f.entries.data(), f.entries.size() * sizeof(ops::SampleEntry));
  put(f.staging->host("sources"), f.sources.data(), f.sources.size() * sizeof(std::int32_t));
  f.staging->upload();
  if (!f.any_source) return;
  DI_CHECK(previous != nullptr, "device sampler: rows wait for a previous step's tokens, but none was given");
  Tensor dev_rows = f.staging->device("rows").narrow(0, 0, f.num_rows);
  Tensor dev_entries = f.staging->device("entries").narrow(0, 0, static_cast<std::int64_t>(f.entries.size()));
  const Tensor dev_sources = f.staging->device("sources").narrow(0, 0, f.num_rows);
  backend_.add_sampled_to_history(dev_rows, dev_entries, dev_sources, *previous);
}

void DeviceSampler::queue(const Tensor& logits, std::span<const std::uint32_t> masks) {
  Frame& f = packing();
  DI_CHECK(f.staging != nullptr, "device sampler: queue() before upload()");
  DI_CHECK(logits.ndim() == 2 && logits.dim(0) == f.num_rows && logits.dim(1) == vocab_,
           "device sampler: logits {} for {} rows of vocab {}", logits.shape(), f.num_rows, vocab_);
  const std::int64_t words = (vocab_ + 31) / 32;
  const auto mask_rows = [&](std::int64_t rows) {
    if (!masks_dev_.defined() || masks_dev_.dim(0) < rows) {
      const std::int64_t have = masks_dev_.defined() ? masks_dev_.dim(0) : 0;
      masks_dev_ = backend_.empty(Shape{std::max<std::int64_t>({rows, 2 * have, 1}), words}, DType::kI32);
    }
    return masks_dev_.narrow(0, 0, rows);
  };
  Tensor mask_view;
  if (masks.empty()) {
    mask_view = mask_rows(1).narrow(0, 0, 0);
  } else {
    DI_CHECK(static_cast<std::int64_t>(masks.size()) == f.num_rows * words, "device sampler: {} mask words for {} rows",
             masks.size(), f.num_rows);
    mask_view = mask_rows(f.num_rows);
    upload_words(backend_, masks.data(), mask_view);
  }
  const Tensor rows = f.staging->device("rows").narrow(0, 0, f.num_rows);
  const Tensor entries = f.staging->device("entries").narrow(0, 0, static_cast<std::int64_t>(f.entries.size()));
  f.out_view = f.out_dev.narrow(0, 0, f.num_rows);
  backend_.sample_tokens(logits, rows, entries, mask_view, f.out_view);
  if (f.num_rows > 0) f.readback->enqueue(f.out_view);
  queued_.push_back(packing_);
}

const Tensor& DeviceSampler::output() const {
  DI_CHECK(!queued_.empty(), "device sampler: no queued step to take ids from");
  return frames_[static_cast<std::size_t>(queued_.back())].out_view;
}

void DeviceSampler::read() {
  DI_CHECK(!queued_.empty(), "device sampler: read() without a queued step");
  read_ = queued_.front();
  queued_.pop_front();
  Frame& f = frames_[static_cast<std::size_t>(read_)];
  f.out = f.num_rows > 0 ? static_cast<const std::int32_t*>(f.readback->wait()) : nullptr;
}

SampleResult DeviceSampler::result(std::int32_t r, bool with_logprobs) const {
  DI_CHECK(read_ >= 0, "device sampler: result() before read()");
  const Frame& f = frames_[static_cast<std::size_t>(read_)];
  DI_CHECK(f.out != nullptr && r >= 0 && r < f.num_rows, "device sampler: row {} of {} read rows", r, f.num_rows);
  const std::int32_t* o = f.out + static_cast<std::size_t>(r) * static_cast<std::size_t>(width_);
  SampleResult res;
  res.token = o[ops::kSampleOutToken];
  if (!with_logprobs) return res;
  const auto as_float = [](std::int32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  };
  res.rank = o[ops::kSampleOutRank];
  res.logprob = as_float(o[ops::kSampleOutLogprob]);
  const std::int32_t n = f.rows[static_cast<std::size_t>(r)].num_top_logprobs;
  for (std::int32_t i = 0; i < n && o[ops::kSampleOutFixed + i] >= 0; ++i) {
    res.top.push_back({o[ops::kSampleOutFixed + i], as_float(o[ops::kSampleOutFixed + max_top_ + i])});
  }
  return res;
}

}  // namespace deepinfer::engine
