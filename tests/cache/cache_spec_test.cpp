// CacheSpec / CacheLayout: validation, page-size rule, sizing from memory, row addressing.
#include "cache/cache_spec.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace deepinfer::cache {
namespace {

// The shape of V4-Flash's global cache (MODEL_SPEC A5): CSA layers (ratio 4) with compressed KV
// and indexer keys, HCA layers (ratio 128), window rings and compressor state per sequence.
CacheSpec v4_like_spec() {
  CacheSpec spec;
  spec.model_identity = "v4-like";
  spec.paged.push_back({"layer.2.compressed_kv", 2, 4, 584});
  spec.paged.push_back({"layer.2.index_keys", 2, 4, 68});
  spec.paged.push_back({"layer.3.compressed_kv", 3, 128, 584});
  spec.fixed.push_back({"layer.2.window", 2, 128 * 584});
  spec.fixed.push_back({"layer.2.compressor", 2, 2 * 8 * 1024 * 4});
  return spec;
}

TEST(CacheLayout, PageSizeMustBeAMultipleOfEveryRatio) {
  const CacheSpec spec = v4_like_spec();
  EXPECT_EQ(spec.page_size_multiple(), 128);
  CacheConfig config;
  config.num_pages = 10;
  config.page_size = 64;
  EXPECT_THROW(CacheLayout::make(spec, config, 4), Error);
  config.page_size = 256;
  const CacheLayout layout = CacheLayout::make(spec, config, 4);
  EXPECT_EQ(layout.rows_per_page(0), 64);
  EXPECT_EQ(layout.rows_per_page(2), 2);
  EXPECT_EQ(layout.page_bytes(), 64 * 584 + 64 * 68 + 2 * 584);
}

TEST(CacheLayout, SizesPagesFromTheMemoryBudget) {
  const CacheSpec spec = v4_like_spec();
  CacheConfig config;
  config.page_size = 128;
  config.num_snapshot_slots = 2;
  const std::int64_t fixed = spec.fixed_state_bytes() * (4 + 2);
  const std::int64_t page = 32 * 584 + 32 * 68 + 584;
  config.memory_bytes = fixed + 10 * page + page / 2;
  const CacheLayout layout = CacheLayout::make(spec, config, 4);
  EXPECT_EQ(layout.num_pages, 10);
  EXPECT_EQ(layout.num_state_slots, 4);
  EXPECT_EQ(layout.num_snapshot_slots, 2);
  EXPECT_LE(layout.total_bytes(), config.memory_bytes);
  config.memory_bytes = fixed;
  EXPECT_THROW(CacheLayout::make(spec, config, 4), Error);
}

TEST(CacheLayout, RowIndexFollowsThePageTable) {
  CacheConfig config;
  config.num_pages = 8;
  config.page_size = 128;
  const CacheLayout layout = CacheLayout::make(v4_like_spec(), config, 2);
  const std::vector<std::int32_t> table = {5, 2, 7};
  // Token-ratio-4 store: row 40 covers tokens 160..163, in the second page (id 2), row 8 there.
  EXPECT_EQ(layout.row_index(0, table, 40), 2 * 32 + 8);
  // HCA store: row 2 covers tokens 256..383, the third page (id 7), its only row.
  EXPECT_EQ(layout.row_index(2, table, 2), 7);
  EXPECT_EQ(layout.pages_for_tokens(0), 0);
  EXPECT_EQ(layout.pages_for_tokens(129), 2);
}

TEST(CacheSpec, RejectsBadStoresNamingThem) {
  CacheSpec spec = v4_like_spec();
  spec.paged[1].tokens_per_row = 0;
  try {
    spec.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer.2.index_keys"), std::string::npos) << e.what();
  }
  spec = v4_like_spec();
  spec.model_identity.clear();
  EXPECT_THROW(spec.validate(), Error);
  CacheConfig config;
  EXPECT_THROW(config.validate(), Error);  // neither pages nor memory
  config.num_pages = 4;
  config.admission_watermark = 1.5;
  EXPECT_THROW(config.validate(), Error);
}

}  // namespace
}  // namespace deepinfer::cache
