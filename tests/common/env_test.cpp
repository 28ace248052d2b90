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
