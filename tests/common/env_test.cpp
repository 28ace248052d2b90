// DEEPINFER_* parsing: defaults, valid values, and errors that name the variable.
#include "common/env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/error.h"

namespace deepinfer::env {
namespace {

std::map<std::string, std::string> g_vars;
std::optional<std::string> fake_lookup(const char* name) {
  const auto it = g_vars.find(name);
  if (it == g_vars.end()) return std::nullopt;
  return it->second;
}

TEST(Env, DefaultsMatchTheSeed) {
  g_vars.clear();
  const Flags f = parse(&fake_lookup);
  EXPECT_EQ(f.use_nextn_decode, 5);
  EXPECT_EQ(f.yoco_prefill_keep_tokens, 140);
  EXPECT_FALSE(f.batch_invariant);
  EXPECT_TRUE(f.cuda_graphs);
  EXPECT_TRUE(f.fp8_wgmma);  // the wgmma decode GEMMs: measured faster on the H200 (2026-11-30)
  EXPECT_TRUE(f.moe_fp4_wgmma);
}

TEST(Env, ParsesTheCudaKernelSwitches) {
  g_vars = {{"DEEPINFER_CUDA_GRAPHS", "0"}, {"DEEPINFER_FP8_WGMMA", "1"}, {"DEEPINFER_MOE_FP4_WGMMA", "true"}};
  const Flags f = parse(&fake_lookup);
  EXPECT_FALSE(f.cuda_graphs);
  EXPECT_TRUE(f.fp8_wgmma);
  EXPECT_TRUE(f.moe_fp4_wgmma);
  g_vars = {{"DEEPINFER_MOE_FP4_WGMMA", "2"}};
  try {
    parse(&fake_lookup);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DEEPINFER_MOE_FP4_WGMMA"), std::string::npos);
  }
}

TEST(Env, ParsesValues) {
  g_vars = {{"DEEPINFER_BATCH_INVARIANT", "1"}, {"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "compact"},
            {"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "256"}};
  const Flags f = parse(&fake_lookup);
  EXPECT_TRUE(f.batch_invariant);
  EXPECT_EQ(f.yoco_prefill_truncation_mode, "compact");
  EXPECT_EQ(f.yoco_prefill_keep_tokens, 256);
}

TEST(Env, BadValuesNameTheVariable) {
  g_vars = {{"DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "12x"}};
  try {
    parse(&fake_lookup);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS"), std::string::npos);
  }
  g_vars = {{"DEEPINFER_BATCH_INVARIANT", "maybe"}};
  EXPECT_THROW(parse(&fake_lookup), Error);
  g_vars = {{"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "loose"}};
  EXPECT_THROW(parse(&fake_lookup), Error);
}

}  // namespace
}  // namespace deepinfer::env
