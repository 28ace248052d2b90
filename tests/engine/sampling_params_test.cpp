// SamplingParams: every bad field gives an error naming the field and value; JSON parsing
// rejects unknown fields and wrong types and round-trips.
#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace deepinfer::engine {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplingParams, DefaultsAreValid) { EXPECT_NO_THROW(SamplingParams().validate(100)); }

TEST(SamplingParams, EachBadFieldIsNamedWithItsValue) {
  struct Bad {
    std::function<void(SamplingParams&)> set;
    std::string needle;
  };
  const std::vector<Bad> cases = {
      {[](SamplingParams& p) { p.n = 0; }, "n 0"},
      {[](SamplingParams& p) { p.temperature = -0.5f; }, "temperature -0.5"},
      {[](SamplingParams& p) { p.temperature = NAN; }, "temperature nan"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p 0"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p 1.01"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k -2"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p 1.5"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty 0"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty 2.5"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty -3"},
      {[](SamplingParams& p) { p.logit_bias = {{100, 1.0f}}; }, "logit_bias token id 100"},
      {[](SamplingParams& p) { p.logit_bias = {{3, 101.0f}}; }, "logit_bias[3] 101"},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids entry -1"},
      {[](SamplingParams& p) { p.stop = {"ok", ""}; }, "stop[1]"},
      {[](SamplingParams& p) { p.max_tokens = -1; }, "max_tokens -1"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens 0"},
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens -1"},
      {[](SamplingParams& p) { p.max_tokens = 3; p.min_tokens = 4; }, "min_tokens 4 exceeds max_tokens 3"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs 21"},
      {[](SamplingParams& p) { p.so_args = StructuredOutputArgs{"yaml", "x"}; }, "schema_type 'yaml'"},
      {[](SamplingParams& p) { p.so_args = StructuredOutputArgs{"regex", ""}; }, "so_args.schema is empty"},
  };
  for (const Bad& b : cases) {
    SamplingParams p;
    b.set(p);
    const std::string err = error_of([&] { p.validate(100, 20); });
    EXPECT_NE(err.find(b.needle), std::string::npos) << "wanted '" << b.needle << "' in '" << err << "'";
  }
}

TEST(SamplingParams, FromJsonReadsEveryField) {
  const auto j = nlohmann::json::parse(R"({
    "n": 2, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "repetition_penalty": 1.1, "presence_penalty": 0.2, "frequency_penalty": -0.2,
    "logit_bias": {"17": -5.5}, "stop_token_ids": [1, 2], "stop": "END",
    "include_stop_str_in_output": true, "max_tokens": 64, "min_tokens": 3, "ignore_eos": true,
    "skip_special_tokens": false, "logprobs": 5, "seed": -1,
    "so_args": {"schema_type": "json", "schema": {"type": "object"}, "start_after": "</think>",
                "disable_any_whitespace": true}
  })");
  const SamplingParams p = SamplingParams::from_json(j);
  EXPECT_EQ(p.n, 2);
  EXPECT_FLOAT_EQ(p.temperature, 0.7f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.logit_bias, (std::vector<std::pair<std::int32_t, float>>{{17, -5.5f}}));
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(p.max_tokens, 64);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.seq_seed, ~std::uint64_t{0});
  ASSERT_TRUE(p.so_args.has_value());
  EXPECT_EQ(p.so_args->schema_type, "json");
  EXPECT_EQ(nlohmann::json::parse(p.so_args->schema), nlohmann::json({{"type", "object"}}));
  EXPECT_EQ(p.so_args->start_after, "</think>");
  EXPECT_TRUE(p.so_args->disable_any_whitespace);
  EXPECT_NO_THROW(p.validate(100));
  const SamplingParams back = SamplingParams::from_json(p.to_json());
  EXPECT_EQ(back.to_json(), p.to_json());
}

TEST(SamplingParams, FromJsonRejectsUnknownFieldsAndWrongTypes) {
  auto err = [](const char* text) { return error_of([&] { SamplingParams::from_json(nlohmann::json::parse(text)); }); };
  EXPECT_NE(err(R"({"temprature": 1.0})").find("unknown field 'temprature'"), std::string::npos);
  EXPECT_NE(err(R"({"top_logprobs": null})").find("unknown field 'top_logprobs'"), std::string::npos);
  EXPECT_NE(err(R"({"max_tokens": "ten"})").find("max_tokens must be an integer"), std::string::npos);
  EXPECT_NE(err(R"({"max_tokens": 1.5})").find("max_tokens must be an integer"), std::string::npos);
  EXPECT_NE(err(R"({"top_p": "high"})").find("top_p must be a number"), std::string::npos);
  EXPECT_NE(err(R"({"stop": [1]})").find("stop must be a string or a list of strings"), std::string::npos);
  EXPECT_NE(err(R"({"logit_bias": {"abc": 1}})").find("logit_bias key 'abc'"), std::string::npos);
  EXPECT_NE(err(R"({"so_args": {"schema_type": "regex", "pattern": "a"}})").find("so_args.pattern"), std::string::npos);
  EXPECT_NE(err(R"({"so_args": {"schema_type": "regex", "schema": "a", "start_after": 1}})").find("start_after"),
            std::string::npos);
  EXPECT_NE(err(R"({"n": 99999999999})").find("outside the int32 range"), std::string::npos);
  EXPECT_NE(err(R"([1, 2])").find("expected a JSON object"), std::string::npos);
  EXPECT_NO_THROW(SamplingParams::from_json(nlohmann::json::parse(R"({"max_tokens": null})")));
  EXPECT_TRUE(SamplingParams::is_field("seed"));
  EXPECT_FALSE(SamplingParams::is_field("prompt"));
}

}  // namespace
}  // namespace deepinfer::engine
