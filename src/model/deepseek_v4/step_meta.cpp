// Host layout of a step's metadata (see step_meta.h for the addressing of the attention sources)
// and its single upload.
#include "model/deepseek_v4/step_meta.h"

#include <algorithm>
#include <bit>

#include "common/error.h"

namespace deepinfer::model::v4 {
namespace {

// Which index lists the layers of `c` read for ratio r: top-k filled (CSA, V4.1 index sources) and
// every visible entry (V4 HCA).
struct ListUse {
  bool topk = false;
  bool all = false;
};
ListUse list_use(const io::ModelConfig& c, int ratio) {
  ListUse u;
  for (const io::LayerSpec& l : c.layers) {
    if (l.compress_ratio != ratio) continue;
    if (l.has_indexer) u.topk = true;
    else if (c.arch == io::ModelArch::kDeepseekV4) u.all = true;
  }
  return u;
}

bool any_window_only(const io::ModelConfig& c) {
  return std::any_of(c.layers.begin(), c.layers.end(), [](const io::LayerSpec& l) { return l.compress_ratio == 0; });
}

}  // namespace

std::int64_t batch_bucket(std::int64_t n) {
  if (n <= 256) return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(n, 1))));
  return (n + 255) / 256 * 256;
}

const RatioMeta& StepMeta::ratio(int r) const {
  for (const RatioMeta& m : ratios)
    if (m.ratio == r) return m;
  throw_error("step metadata: no rows of compression ratio {}", r);
}

ops::RowView StepMeta::ring_view(const Tensor& ring_pool, std::int64_t window) const {
  return ops::RowView{ring_pool, ring_table, window, segments * window};
}

ops::RowView StepMeta::store_view(const RowPool& store) const {
  return ops::RowView{store.pool, store_table, store.page_rows, segments * max_pages * store.page_rows};
}

StepMetaBuilder::StepMetaBuilder(const io::ModelConfig& config, const StateArena& arena, MetaStaging& staging)
    : config_(config), arena_(arena), host_(staging.take_host_buffer()) {}

StepShape StepMetaBuilder::shape_of(const StepRows& step, bool bucketed) const {
  StepShape shape;
  shape.rows = static_cast<std::int64_t>(step.ids.size());
  shape.segments = static_cast<std::int64_t>(step.segments.size());
  std::int64_t max_pos = 0;  // one past the last position of the step
  for (const Segment& s : step.segments) max_pos = std::max(max_pos, s.start_pos + s.count);
  const std::int64_t page_tokens = arena_.page_tokens();
  if (page_tokens > 0) shape.max_pages = (max_pos + page_tokens - 1) / page_tokens;
  const bool decode = std::all_of(step.segments.begin(), step.segments.end(), [](const Segment& s) { return s.count == 1; });
  if (bucketed && decode) {
    shape.rows = shape.segments = batch_bucket(shape.rows);
    if (shape.max_pages > 0) shape.max_pages = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(shape.max_pages)));
    max_pos = shape.max_pages * page_tokens;
  }
  for (const RowPool& store : arena_.stores()) {
    if (std::any_of(shape.entries.begin(), shape.entries.end(), [&](const auto& e) { return e.first == store.ratio; }))
      continue;
    shape.entries.push_back({store.ratio, max_pos / store.ratio});
  }
  return shape;
}

std::size_t StepMetaBuilder::put(Pending& p, View view, std::int32_t fill) {
  view.offset = host_.size();
  host_.resize(host_.size() + static_cast<std::size_t>(view.shape.numel()), fill);
  p.views.push_back(view);
  return view.offset;
}

void StepMetaBuilder::window_lists(const StepRows& step, const StepMeta& m, std::int32_t* out,
                                   std::int64_t width) const {
  const std::int64_t window = config_.sliding_window;
  for (std::size_t i = 0; i < step.segments.size(); ++i) {
    const Segment& seg = step.segments[i];
    for (std::int64_t r = 0; r < seg.count; ++r) {
      const std::int64_t p = seg.start_pos + r;
      std::int32_t* row = out + (seg.offset + r) * width;
      std::int64_t j = 0;
      for (std::int64_t pos = std::max({std::int64_t{0}, p - window + 1, seg.window_floor}); pos <= p; ++pos, ++j)
        row[j] = static_cast<std::int32_t>(pos < seg.start_pos ? static_cast<std::int64_t>(i) * window + pos % window
                                                               : m.segments * window + seg.offset + (pos - seg.start_pos));
    }
  }
}

void StepMetaBuilder::add_ratio(const StepRows& step, Pending& p, int ratio, std::int64_t entries) {
  StepMeta& m = p.meta;
  const std::int64_t t_rows = m.rows, window = config_.sliding_window;
  const int ri = static_cast<int>(m.ratios.size());
  RatioMeta rm;
  rm.ratio = ratio;
  rm.entries = entries;
  rm.page_rows = arena_.page_tokens() / ratio;
  rm.topk_width = std::min<std::int64_t>(config_.index_topk, entries);
  m.ratios.push_back(rm);
  const std::int64_t seg_rows = m.max_pages * rm.page_rows;   // store rows per segment
  const std::int64_t compressed_base = m.segments * window + t_rows;  // first virtual compressed row
  const std::size_t gp = put(p, {ri, nullptr, &RatioMeta::group_pos, 0, Shape{t_rows}}, 0);
  const std::size_t sr = put(p, {ri, nullptr, &RatioMeta::store_rows, 0, Shape{t_rows}}, -1);
  const std::size_t kb = put(p, {ri, nullptr, &RatioMeta::key_base, 0, Shape{t_rows}}, 0);
  const std::size_t nk = put(p, {ri, nullptr, &RatioMeta::num_keys, 0, Shape{t_rows}}, 0);
  const std::size_t of = put(p, {ri, nullptr, &RatioMeta::offsets, 0, Shape{t_rows}}, 0);
  for (std::size_t i = 0; i < step.segments.size(); ++i) {
    const Segment& seg = step.segments[i];
    DI_CHECK(static_cast<std::int64_t>(seg.state->pages.size()) * arena_.page_tokens() >= seg.start_pos + seg.count,
             "forward: a sequence needs pages for {} tokens, its {} pages of {} tokens hold {}",
             seg.start_pos + seg.count, seg.state->pages.size(), arena_.page_tokens(),
             static_cast<std::int64_t>(seg.state->pages.size()) * arena_.page_tokens());
    const std::int64_t seg_base = static_cast<std::int64_t>(i) * seg_rows;
    for (std::int64_t r = 0; r < seg.count; ++r) {
      const auto t = static_cast<std::size_t>(seg.offset + r);
      const std::int64_t p_abs = seg.start_pos + r;
      if ((p_abs + 1) % ratio == 0) {
        host_[gp + t] = static_cast<std::int32_t>(p_abs + 1 - ratio);
        host_[sr + t] = static_cast<std::int32_t>(seg_base + (p_abs + 1) / ratio - 1);
      }
      host_[kb + t] = static_cast<std::int32_t>(seg_base);
      host_[nk + t] = static_cast<std::int32_t>(std::min(entries, (p_abs + 1) / ratio));
      host_[of + t] = static_cast<std::int32_t>(compressed_base + seg_base);
    }
  }
  const ListUse use = list_use(config_, ratio);
  if (use.topk) {
    const std::int64_t width = window + rm.topk_width;
    const std::size_t list = put(p, {ri, nullptr, &RatioMeta::topk_list, 0, Shape{t_rows, width}}, -1);
    window_lists(step, m, host_.data() + list, width);
  }
  if (use.all) {
    const std::int64_t width = window + entries;
    const std::size_t list_off = put(p, {ri, nullptr, &RatioMeta::all_list, 0, Shape{t_rows, width}}, -1);
    std::int32_t* list = host_.data() + list_off;  // after put(): it may move the buffer
    window_lists(step, m, list, width);
    for (std::size_t i = 0; i < step.segments.size(); ++i) {
      const Segment& seg = step.segments[i];
      for (std::int64_t r = 0; r < seg.count; ++r) {
        const std::int64_t visible = std::min(entries, (seg.start_pos + r + 1) / ratio);
        std::int32_t* row = list + (seg.offset + r) * width + window;
        const std::int64_t base = compressed_base + static_cast<std::int64_t>(i) * seg_rows;
        for (std::int64_t e = 0; e < visible; ++e) row[e] = static_cast<std::int32_t>(base + e);
      }
    }
  }
}

void StepMetaBuilder::add(const StepRows& step, const StepShape& shape) {
  DI_CHECK(shape.rows >= static_cast<std::int64_t>(step.ids.size()) &&
               shape.segments >= static_cast<std::int64_t>(step.segments.size()),
           "step metadata: {} rows / {} segments do not fit the shape {} / {}", step.ids.size(), step.segments.size(),
           shape.rows, shape.segments);
  Pending p;
  StepMeta& m = p.meta;
  m.rows = shape.rows;
  m.segments = shape.segments;
  m.max_pages = shape.max_pages;
  const std::int64_t t_rows = m.rows, window = config_.sliding_window;
  const std::size_t ids = put(p, {-1, &StepMeta::ids, nullptr, 0, Shape{t_rows}}, 0);
  const std::size_t pos = put(p, {-1, &StepMeta::positions, nullptr, 0, Shape{t_rows}}, 0);
  std::copy(step.ids.begin(), step.ids.end(), host_.begin() + static_cast<std::ptrdiff_t>(ids));
  std::copy(step.positions.begin(), step.positions.end(), host_.begin() + static_cast<std::ptrdiff_t>(pos));
  const std::size_t slots_off = put(p, {-1, &StepMeta::slots, nullptr, 0, Shape{t_rows}}, -1);
  const std::size_t ring_off = put(p, {-1, &StepMeta::ring_rows, nullptr, 0, Shape{t_rows}}, -1);
  const std::size_t ring_table_off = put(p, {-1, &StepMeta::ring_table, nullptr, 0, Shape{m.segments}}, 0);
  const std::size_t store_table_off =
      put(p, {-1, &StepMeta::store_table, nullptr, 0, Shape{m.segments * m.max_pages}}, 0);
  for (std::size_t i = 0; i < step.segments.size(); ++i) {
    const Segment& seg = step.segments[i];
    const std::int32_t slot = seg.state->slot;
    host_[ring_table_off + i] = slot;
    const std::int64_t needed = std::min(m.max_pages, static_cast<std::int64_t>(seg.state->pages.size()));
    for (std::int64_t g = 0; g < needed; ++g)
      host_[store_table_off + i * static_cast<std::size_t>(m.max_pages) + static_cast<std::size_t>(g)] =
          seg.state->pages[static_cast<std::size_t>(g)];
    for (std::int64_t r = 0; r < seg.count; ++r) {
      const std::int64_t p_abs = seg.start_pos + r;
      host_[slots_off + static_cast<std::size_t>(seg.offset + r)] = slot;
      if (r >= seg.count - window)
        host_[ring_off + static_cast<std::size_t>(seg.offset + r)] = static_cast<std::int32_t>(slot * window + p_abs % window);
    }
  }
  if (any_window_only(config_)) {
    const std::size_t list = put(p, {-1, &StepMeta::window_list, nullptr, 0, Shape{t_rows, window}}, -1);
    window_lists(step, m, host_.data() + list, window);
  }

  for (const auto& [ratio, entries] : shape.entries) add_ratio(step, p, ratio, entries);
  // Last, so every field a captured decode step reads keeps its offset whatever the logit count.
  const std::size_t logit =
      put(p, {-1, &StepMeta::logit_rows, nullptr, 0, Shape{static_cast<std::int64_t>(step.logit_rows.size())}}, 0);
  std::copy(step.logit_rows.begin(), step.logit_rows.end(), host_.begin() + static_cast<std::ptrdiff_t>(logit));
  // Room for a logit row per row: a bucket's metadata has one size whatever its logit count, so it
  // stays in one staging buffer (one device address, one graph).
  host_.resize(host_.size() + static_cast<std::size_t>(m.rows) - step.logit_rows.size(), 0);
  const std::size_t extra = put(p, {-1, &StepMeta::extra, nullptr, 0, Shape{static_cast<std::int64_t>(step.extra.size())}}, 0);
  std::copy(step.extra.begin(), step.extra.end(), host_.begin() + static_cast<std::ptrdiff_t>(extra));
  if (step.one_hot > 0) {
    const std::size_t one_hot =
        put(p, {-1, &StepMeta::one_hot, nullptr, 0, Shape{m.rows, step.one_hot}, DType::kF32}, 0);  // 0 = +0.0f
    for (std::int64_t t = 0; t < m.rows; ++t)
      host_[one_hot + static_cast<std::size_t>(t * step.one_hot)] = std::bit_cast<std::int32_t>(1.0f);
  }
  pending_.push_back(std::move(p));
}

Tensor MetaStaging::upload(std::span<const std::int32_t> host) {
  const std::size_t capacity = std::max<std::size_t>(std::bit_ceil(host.size()), 16384);
  std::unique_ptr<ops::StagingBuffer>& buffer = by_capacity_[capacity];
  if (buffer == nullptr) {
    ops::StagingLayout layout;
    layout.add("meta", Shape{static_cast<std::int64_t>(capacity)}, DType::kI32);
    buffer = std::make_unique<ops::StagingBuffer>(backend_, std::move(layout));
  }
  Tensor slot = buffer->host("meta");
  std::copy(host.begin(), host.end(), slot.data<std::int32_t>());
  buffer->upload();  // the step's only host -> device copy before the logits (async, pinned)
  return buffer->device("meta").narrow(0, 0, static_cast<std::int64_t>(host.size()));
}

std::vector<StepMeta> StepMetaBuilder::upload(MetaStaging& staging) {
  const Tensor device = staging.upload(host_);
  std::vector<StepMeta> out;
  for (Pending& p : pending_) {
    for (const View& v : p.views) {
      Tensor t = device.narrow(0, static_cast<std::int64_t>(v.offset), v.shape.numel()).reshape(v.shape);
      if (v.dtype != DType::kI32) t = Tensor::view_of(t.raw_data(), v.shape, v.dtype, nullptr, t.device());
      if (v.ratio >= 0) p.meta.ratios[static_cast<std::size_t>(v.ratio)].*(v.ratio_field) = t;
      else p.meta.*(v.step_field) = t;
    }
    out.push_back(std::move(p.meta));
  }
  pending_.clear();
  staging.give_back_host_buffer(std::move(host_));
  host_.clear();
  return out;
}

}  // namespace deepinfer::model::v4
