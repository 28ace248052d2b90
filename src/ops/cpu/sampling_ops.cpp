// The reference sampling op on host tensors (Backend::sample_tokens' default): the engine Sampler's
// semantics written plainly, one row at a time with full sorts, so that it can check both the
// optimised host Sampler and the CUDA kernels. Also the host defaults of the ops around it (ids
// from earlier samples, the read-back of samples).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/backend.h"
#include "ops/sampling.h"
#include "ops/sampling_math.h"

namespace deepinfer::ops {
namespace {

namespace sm = sampling;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Higher value first, lower id on ties (the ranking of top-k, top-p and the top logprobs).
bool ranks_before(const std::vector<float>& x, std::int32_t a, std::int32_t b) {
  const float va = x[static_cast<std::size_t>(a)], vb = x[static_cast<std::size_t>(b)];
  return va > vb || (va == vb && a < b);
}

std::int32_t argmax_of(const std::vector<float>& x) {
  std::int32_t best = -1;
  float best_value = kNegInf;
  for (std::size_t v = 0; v < x.size(); ++v) {
    if (x[v] > best_value) {
      best_value = x[v];
      best = static_cast<std::int32_t>(v);
    }
  }
  return best;
}

// Finite candidates after top-k, min-p and top-p, ascending ids.
std::vector<std::int32_t> filter_candidates(const std::vector<float>& s, const SampleRow& row) {
  std::vector<std::int32_t> cand;
  float max_value = kNegInf;
  for (std::size_t v = 0; v < s.size(); ++v) {
    if (sm::is_finite(s[v])) {
      cand.push_back(static_cast<std::int32_t>(v));
      max_value = std::max(max_value, s[v]);
    }
  }
  if (cand.empty()) return cand;
  const auto by_rank = [&](std::int32_t a, std::int32_t b) { return ranks_before(s, a, b); };
  if (row.top_k > 0 && static_cast<std::size_t>(row.top_k) < cand.size()) {
    std::sort(cand.begin(), cand.end(), by_rank);
    cand.resize(static_cast<std::size_t>(row.top_k));
    std::sort(cand.begin(), cand.end());
  }
  if (row.min_p > 0.0f) {
    const double threshold = sm::min_p_threshold(max_value, row.min_p);
    std::erase_if(cand, [&](std::int32_t v) { return static_cast<double>(s[static_cast<std::size_t>(v)]) < threshold; });
  }
  if (row.top_p < 1.0f && cand.size() > 1) {
    std::uint64_t total = 0;
    for (std::int32_t v : cand) total += sm::nucleus_mass(s[static_cast<std::size_t>(v)], max_value);
    std::sort(cand.begin(), cand.end(), by_rank);
    std::uint64_t cum = 0;
    std::size_t keep = cand.size();
    for (std::size_t i = 0; i < cand.size(); ++i) {
      cum += sm::nucleus_mass(s[static_cast<std::size_t>(cand[i])], max_value);
      if (sm::nucleus_reached(cum, total, row.top_p)) {
        keep = i + 1;
        break;
      }
    }
    cand.resize(keep);
    std::sort(cand.begin(), cand.end());
  }
  return cand;
}

std::int32_t gumbel_argmax(const std::vector<float>& s, const std::vector<std::int32_t>& cand, const SampleRow& row) {
  const std::uint64_t seed = (static_cast<std::uint64_t>(row.seed_hi) << 32) | row.seed_lo;
  std::int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (std::int32_t v : cand) {
    const auto id = static_cast<std::uint32_t>(v);
    const std::uint32_t bits = sm::token_noise_block(seed, row.position, id >> 2).v[id & 3u];
    const double score = sm::dadd(static_cast<double>(s[static_cast<std::size_t>(v)]), sm::gumbel_from_bits(bits));
    if (score > best_score || (score == best_score && v < best)) {
      best_score = score;
      best = v;
    }
  }
  return best;
}

void apply_processors(std::vector<float>& x, const SampleRow& row, const SampleEntry* entries,
                      const std::uint32_t* mask) {
  const auto at = [&](std::int32_t id) -> float& { return x[static_cast<std::size_t>(id)]; };
  if (mask != nullptr) {
    for (std::size_t v = 0; v < x.size(); ++v)
      if (((mask[v >> 5] >> (v & 31)) & 1u) == 0) x[v] = kNegInf;
  }
  for (std::int32_t i = row.bias_begin; i < row.bias_end; ++i) at(entries[i].id) = sm::fadd(at(entries[i].id), entries[i].value);
  for (std::int32_t i = row.ban_begin; i < row.ban_end; ++i) at(entries[i].id) = kNegInf;
  for (std::int32_t i = row.seen_begin; i < row.seen_end; ++i) {
    float& v = at(entries[i].id);
    v = v > 0.0f ? sm::fdiv(v, row.repetition_penalty) : sm::fmul(v, row.repetition_penalty);
  }
  for (std::int32_t i = row.count_begin; i < row.count_end; ++i) {
    float& v = at(entries[i].id);
    v = sm::fsub(v, sm::fadd(sm::fmul(row.frequency_penalty, entries[i].value), row.presence_penalty));
  }
}

void fill_logprobs(const std::vector<float>& raw, const SampleRow& row, std::int32_t token, std::int32_t* out,
                   std::int32_t max_top) {
  float max_value = kNegInf;
  for (float v : raw) max_value = std::max(max_value, v);
  double total = 0.0;
  for (std::size_t c = 0; c < raw.size(); c += sm::kLseChunk) {
    double part = 0.0;
    for (std::size_t v = c; v < std::min(raw.size(), c + sm::kLseChunk); ++v)
      part = sm::dadd(part, sm::exp(sm::dsub(static_cast<double>(raw[v]), static_cast<double>(max_value))));
    total = sm::dadd(total, part);
  }
  const double lse = sm::dadd(static_cast<double>(max_value), sm::log(total));
  const auto logprob_bits = [&](std::int32_t v) {
    const float lp = static_cast<float>(sm::dsub(static_cast<double>(raw[static_cast<std::size_t>(v)]), lse));
    return static_cast<std::int32_t>(sm::bits_of(lp));
  };
  const float chosen = raw[static_cast<std::size_t>(token)];
  std::int32_t rank = 1;
  for (float v : raw) rank += v > chosen ? 1 : 0;
  out[kSampleOutRank] = rank;
  out[kSampleOutLogprob] = logprob_bits(token);
  std::vector<std::int32_t> ids(raw.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::erase_if(ids, [&](std::int32_t v) { return std::isnan(raw[static_cast<std::size_t>(v)]); });
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(row.num_top_logprobs), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](std::int32_t a, std::int32_t b) { return ranks_before(raw, a, b); });
  for (std::int32_t i = 0; i < max_top; ++i) {
    const bool has = static_cast<std::size_t>(i) < n;
    out[kSampleOutFixed + i] = has ? ids[static_cast<std::size_t>(i)] : -1;
    out[kSampleOutFixed + max_top + i] = has ? logprob_bits(ids[static_cast<std::size_t>(i)]) : 0;
  }
}

void sample_row(const float* logits, std::int64_t vocab, const SampleRow& row, const SampleEntry* entries,
                const std::uint32_t* mask, std::int32_t* out, std::int32_t max_top) {
  std::vector<float> raw(logits, logits + vocab);
  for (std::int32_t i = row.raw_ban_begin; i < row.raw_ban_end; ++i) raw[static_cast<std::size_t>(entries[i].id)] = kNegInf;
  std::vector<float> x = raw;
  apply_processors(x, row, entries, mask);
  std::int32_t token = -1;
  if (row.temperature == 0.0f) {
    token = argmax_of(x);
  } else {
    for (float& v : x) v = sm::fdiv(v, row.temperature);
    std::vector<std::int32_t> cand;
    const bool filtered = (row.top_k > 0 && row.top_k < vocab) || row.min_p > 0.0f || row.top_p < 1.0f;
    if (filtered) {
      cand = filter_candidates(x, row);
    } else {
      for (std::size_t v = 0; v < x.size(); ++v)
        if (sm::is_finite(x[v])) cand.push_back(static_cast<std::int32_t>(v));
    }
    token = gumbel_argmax(x, cand, row);
  }
  if (token < 0) token = std::max(argmax_of(raw), 0);  // every logit masked or NaN
  std::fill(out, out + sample_out_words(max_top), 0);
  for (std::int32_t i = 0; i < max_top; ++i) out[kSampleOutFixed + i] = -1;
  out[kSampleOutToken] = token;
  if (row.num_top_logprobs >= 0) fill_logprobs(raw, row, token, out, max_top);
}

// A host backend's "device" is host memory: the copy happens at enqueue.
class CopyingReadback final : public HostReadback {
 public:
  CopyingReadback(Backend& backend, std::size_t bytes) : backend_(backend), buffer_((bytes + 3) / 4) {}
  void enqueue(const Tensor& src) override {
    DI_CHECK(src.is_contiguous() && src.nbytes() <= buffer_.size() * 4, "readback: {} bytes into a buffer of {}",
             src.nbytes(), buffer_.size() * 4);
    Tensor dst = Tensor::view_of(buffer_.data(), src.shape(), src.dtype(), nullptr);
    backend_.copy(src, dst);
  }
  const void* wait() override { return buffer_.data(); }

 private:
  Backend& backend_;
  std::vector<std::int32_t> buffer_;
};

}  // namespace

std::unique_ptr<HostReadback> Backend::make_readback(std::size_t bytes) {
  return std::make_unique<CopyingReadback>(*this, bytes);
}

void Backend::resolve_sampled_ids(Tensor& ids, const Tensor& sampled) {
  DI_CHECK(ids.dtype() == DType::kI32 && ids.ndim() == 1 && ids.is_contiguous(), "resolve_sampled_ids: ids {} must be i32 [T]",
           ids.shape());
  DI_CHECK(sampled.dtype() == DType::kI32 && sampled.ndim() == 2 && sampled.dim(1) >= 1 && sampled.is_contiguous(),
           "resolve_sampled_ids: sampled {} must be i32 [R, W]", sampled.shape());
  DI_CHECK(ids.device().is_cpu() && sampled.device().is_cpu(), "resolve_sampled_ids: the {} backend needs host tensors",
           name());
  std::int32_t* id = ids.data<std::int32_t>();
  const std::int32_t* s = sampled.data<std::int32_t>();
  for (std::int64_t t = 0; t < ids.numel(); ++t) {
    if (id[t] >= 0) continue;
    const std::int64_t row = -1 - static_cast<std::int64_t>(id[t]);
    id[t] = row < sampled.dim(0) ? s[row * sampled.dim(1)] : 0;
  }
}

void Backend::check_add_sampled_to_history(const Tensor& rows, const Tensor& entries, const Tensor& sources,
                                           const Tensor& sampled) {
  DI_CHECK(rows.dtype() == DType::kI32 && rows.ndim() == 2 && rows.dim(1) == kSampleRowWords && rows.is_contiguous(),
           "add_sampled_to_history: rows {} must be i32 [T, {}]", rows.shape(), kSampleRowWords);
  DI_CHECK(entries.dtype() == DType::kI32 && entries.ndim() == 2 && entries.dim(1) == 2 && entries.is_contiguous(),
           "add_sampled_to_history: entries {} must be i32 [N, 2]", entries.shape());
  DI_CHECK(sources.dtype() == DType::kI32 && sources.shape() == Shape({rows.dim(0)}) && sources.is_contiguous(),
           "add_sampled_to_history: sources {} must be i32 [{}]", sources.shape(), rows.dim(0));
  DI_CHECK(sampled.dtype() == DType::kI32 && sampled.ndim() == 2 && sampled.dim(1) >= 1 && sampled.is_contiguous(),
           "add_sampled_to_history: sampled {} must be i32 [R, W]", sampled.shape());
}

void Backend::add_sampled_to_history(Tensor& rows, Tensor& entries, const Tensor& sources, const Tensor& sampled) {
  check_add_sampled_to_history(rows, entries, sources, sampled);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&rows, &entries, &sources, &sampled}) {
    DI_CHECK(t->device().is_cpu(), "add_sampled_to_history: the {} backend needs host tensors", name());
  }
  auto* row = static_cast<SampleRow*>(rows.raw_data());
  auto* e = static_cast<SampleEntry*>(entries.raw_data());
  const std::int32_t* src = sources.data<std::int32_t>();
  for (std::int64_t t = 0; t < rows.dim(0); ++t) {
    if (src[t] < 0) continue;
    DI_CHECK(src[t] < sampled.dim(0), "add_sampled_to_history: row {} waits for sampled row {} of {}", t, src[t],
             sampled.dim(0));
    sm::add_to_history(row[t], e, static_cast<std::int32_t>(entries.dim(0)),
                       sampled.data<std::int32_t>()[src[t] * sampled.dim(1)]);
  }
}

std::int64_t Backend::check_sample_tokens(const Tensor& logits, const Tensor& rows, const Tensor& entries,
                                          const Tensor& masks, const Tensor& out) {
  DI_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2 && (logits.dim(0) <= 1 || logits.stride(1) == 1),
           "sample_tokens: logits {} must be f32 [T, V]", logits.shape());
  const std::int64_t t_rows = logits.dim(0), vocab = logits.dim(1), words = (vocab + 31) / 32;
  DI_CHECK(vocab >= 1 && vocab < (std::int64_t{1} << 30), "sample_tokens: vocab {} out of range", vocab);
  DI_CHECK(rows.dtype() == DType::kI32 && rows.shape() == Shape({t_rows, kSampleRowWords}) && rows.is_contiguous(),
           "sample_tokens: rows {} must be i32 [{}, {}]", rows.shape(), t_rows, kSampleRowWords);
  DI_CHECK(entries.dtype() == DType::kI32 && entries.ndim() == 2 && entries.dim(1) == 2 && entries.is_contiguous(),
           "sample_tokens: entries {} must be i32 [N, 2]", entries.shape());
  DI_CHECK(masks.dtype() == DType::kI32 && masks.ndim() == 2 && masks.dim(1) == words && masks.is_contiguous(),
           "sample_tokens: masks {} must be i32 [M, {}]", masks.shape(), words);
  DI_CHECK(out.dtype() == DType::kI32 && out.ndim() == 2 && out.dim(0) == t_rows && out.dim(1) >= kSampleOutFixed &&
               (out.dim(1) - kSampleOutFixed) % 2 == 0 && out.is_contiguous(),
           "sample_tokens: out {} must be i32 [{}, 3 + 2 * max_top]", out.shape(), t_rows);
  return (out.dim(1) - kSampleOutFixed) / 2;
}

void Backend::sample_tokens(const Tensor& logits, const Tensor& rows, const Tensor& entries, const Tensor& masks,
                            Tensor& out) {
  const auto max_top = static_cast<std::int32_t>(check_sample_tokens(logits, rows, entries, masks, out));
  const std::int64_t t_rows = logits.dim(0), vocab = logits.dim(1), words = (vocab + 31) / 32;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&logits, &rows, &entries, &masks, &out}) {
    DI_CHECK(t->device().is_cpu(), "sample_tokens: the {} backend needs host tensors", name());
  }
  const auto* row_data = static_cast<const SampleRow*>(rows.raw_data());
  const auto* entry_data = static_cast<const SampleEntry*>(entries.raw_data());
  const auto* mask_data = static_cast<const std::uint32_t*>(masks.raw_data());
  const std::int64_t num_entries = entries.dim(0);
  for (std::int64_t t = 0; t < t_rows; ++t) {
    const SampleRow& row = row_data[t];
    DI_CHECK(row.num_top_logprobs <= max_top, "sample_tokens: row {} asks for {} top logprobs, out holds {}", t,
             row.num_top_logprobs, max_top);
    DI_CHECK(row.mask_row < masks.dim(0), "sample_tokens: row {} mask_row {} of {} masks", t, row.mask_row, masks.dim(0));
    for (auto [begin, end] : {std::pair{row.raw_ban_begin, row.raw_ban_end}, std::pair{row.bias_begin, row.bias_end},
                              std::pair{row.ban_begin, row.ban_end}, std::pair{row.seen_begin, row.seen_end},
                              std::pair{row.count_begin, row.count_end}}) {
      DI_CHECK(begin >= 0 && begin <= end && end <= num_entries, "sample_tokens: row {} entry range [{}, {}) of {}", t,
               begin, end, num_entries);
      for (std::int32_t i = begin; i < end; ++i) {
        DI_CHECK(entry_data[i].id >= 0 && entry_data[i].id < vocab, "sample_tokens: entry {} has token id {} (vocab {})",
                 i, entry_data[i].id, vocab);
      }
    }
    sample_row(logits.data<float>() + t * logits.stride(0), vocab, row, entry_data,
               row.mask_row >= 0 ? mask_data + row.mask_row * words : nullptr, out.data<std::int32_t>() + t * out.dim(1),
               max_top);
  }
}

}  // namespace deepinfer::ops
