// Validation and sizing of the cache geometry.
#include "cache/cache_spec.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace deepinfer::cache {

void CacheSpec::validate() const {
  DI_CHECK(!model_identity.empty(), "cache spec: model_identity is empty (it keys the prefix cache)");
  for (std::size_t i = 0; i < paged.size(); ++i) {
    const PagedStoreSpec& s = paged[i];
    DI_CHECK(s.tokens_per_row >= 1, "cache spec: paged store {} '{}': tokens_per_row {} must be >= 1", i,
             s.name, s.tokens_per_row);
    DI_CHECK(s.bytes_per_row >= 1, "cache spec: paged store {} '{}': bytes_per_row {} must be >= 1", i,
             s.name, s.bytes_per_row);
  }
  for (std::size_t i = 0; i < fixed.size(); ++i) {
    DI_CHECK(fixed[i].bytes >= 1, "cache spec: fixed state {} '{}': bytes {} must be >= 1", i,
             fixed[i].name, fixed[i].bytes);
  }
  DI_CHECK(max_rollback_tokens >= 0, "cache spec: max_rollback_tokens {} must be >= 0", max_rollback_tokens);
}

std::int32_t CacheSpec::page_size_multiple() const {
  std::int64_t m = 1;
  for (const PagedStoreSpec& s : paged) {
    m = std::lcm(m, static_cast<std::int64_t>(s.tokens_per_row));
    DI_CHECK(m <= (1 << 20), "cache spec: the compression ratios have an lcm above 2^20 tokens");
  }
  return static_cast<std::int32_t>(m);
}

std::int64_t CacheSpec::fixed_state_bytes() const {
  std::int64_t total = 0;
  for (const FixedStateSpec& f : fixed) total += f.bytes;
  return total;
}

void CacheConfig::validate() const {
  DI_CHECK(page_size >= 1, "cache config: page_size {} must be >= 1", page_size);
  DI_CHECK(num_pages >= 0, "cache config: num_pages {} must be >= 0", num_pages);
  DI_CHECK(memory_bytes >= 0, "cache config: memory_bytes {} must be >= 0", memory_bytes);
  DI_CHECK(num_pages > 0 || memory_bytes > 0, "cache config: set num_pages or memory_bytes");
  DI_CHECK(num_snapshot_slots >= -1, "cache config: num_snapshot_slots {} must be >= -1", num_snapshot_slots);
  DI_CHECK(admission_watermark >= 0.0 && admission_watermark < 1.0,
           "cache config: admission_watermark {} must be in [0, 1)", admission_watermark);
}

CacheLayout CacheLayout::make(const CacheSpec& spec, const CacheConfig& config, std::int32_t max_num_seqs) {
  spec.validate();
  config.validate();
  DI_CHECK(max_num_seqs >= 1, "cache layout: max_num_seqs {} must be >= 1", max_num_seqs);
  const std::int32_t multiple = spec.page_size_multiple();
  DI_CHECK(config.page_size % multiple == 0,
           "cache config: page_size {} is not a multiple of {} (the lcm of the model's compression ratios)",
           config.page_size, multiple);
  CacheLayout layout;
  layout.spec = spec;
  layout.page_size = config.page_size;
  layout.num_state_slots = max_num_seqs;
  if (config.num_snapshot_slots >= 0) {
    layout.num_snapshot_slots = config.num_snapshot_slots;
  } else {
    layout.num_snapshot_slots = spec.has_fixed_state() ? max_num_seqs : 0;
  }
  if (config.num_pages > 0) {
    layout.num_pages = config.num_pages;
  } else {
    const std::int64_t fixed = spec.fixed_state_bytes() * (layout.num_state_slots + layout.num_snapshot_slots);
    const std::int64_t per_page = std::max<std::int64_t>(layout.page_bytes(), 1);
    const std::int64_t pages = (config.memory_bytes - fixed) / per_page;
    DI_CHECK(pages >= 1,
             "cache config: memory_bytes {} holds no page ({} B of fixed state for {} slots, {} B per page)",
             config.memory_bytes, fixed, layout.num_state_slots + layout.num_snapshot_slots, per_page);
    DI_CHECK(pages < (std::int64_t{1} << 31), "cache config: {} pages exceed the int32 page id range", pages);
    layout.num_pages = static_cast<std::int32_t>(pages);
  }
  return layout;
}

std::int64_t CacheLayout::page_bytes() const {
  std::int64_t total = 0;
  for (std::size_t s = 0; s < spec.paged.size(); ++s) total += rows_per_page(s) * spec.paged[s].bytes_per_row;
  return total;
}

std::int64_t CacheLayout::total_bytes() const {
  return page_bytes() * num_pages + spec.fixed_state_bytes() * (num_state_slots + num_snapshot_slots);
}

std::int64_t CacheLayout::row_index(std::size_t store, std::span<const std::int32_t> page_table,
                                    std::int64_t row) const {
  const std::int64_t per_page = rows_per_page(store);
  const std::int64_t page = page_table[static_cast<std::size_t>(row / per_page)];
  return page * per_page + row % per_page;
}

}  // namespace deepinfer::cache
