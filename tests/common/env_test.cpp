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

// parse() of the current g_vars throws a deepinfer::Error whose message names `variable`.
void expect_error_naming(const std::string& variable) {
  try {
    parse(&fake_lookup);
    FAIL() << "expected an error naming " << variable;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
  }
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
  // The wgmma switches default on, so turning them off is what parsing must show.
  g_vars = {{"DEEPINFER_CUDA_GRAPHS", "0"}, {"DEEPINFER_FP8_WGMMA", "0"}, {"DEEPINFER_MOE_FP4_WGMMA", "false"}};
  const Flags f = parse(&fake_lookup);
  EXPECT_FALSE(f.cuda_graphs);
  EXPECT_FALSE(f.fp8_wgmma);
  EXPECT_FALSE(f.moe_fp4_wgmma);
  g_vars = {{"DEEPINFER_FP8_WGMMA", "1"}};
  EXPECT_TRUE(parse(&fake_lookup).fp8_wgmma);
  g_vars = {{"DEEPINFER_MOE_FP4_WGMMA", "2"}};
  expect_error_naming("DEEPINFER_MOE_FP4_WGMMA");
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
  expect_error_naming("DEEPINFER_YOCO_PREFILL_KEEP_TOKENS");
  g_vars = {{"DEEPINFER_BATCH_INVARIANT", "maybe"}};
  EXPECT_THROW(parse(&fake_lookup), Error);
  g_vars = {{"DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE", "loose"}};
  EXPECT_THROW(parse(&fake_lookup), Error);
}

}  // namespace
}  // namespace deepinfer::env
