#include "server/proto_convert.h"

#include <gtest/gtest.h>

#include "server/grpc_status.h"

namespace streamd::server {
namespace {

constexpr ModelLimits kModel{49152, 8192};

TEST(ProtoConvertTest, OpenAppliesDefaultsAndOverrides) {
  SessionOptions defaults;
  v1::Open open;
  auto o = ToSessionOptions(open, defaults, EngineConfig{}, kModel);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->mode, defaults.mode);
  EXPECT_EQ(o->window, defaults.window);
  open.set_cache_mode(v1::CACHE_MODE_SINK);
  open.set_sinks(8);
  open.set_window(64);
  open.mutable_sampling()->set_temperature(0.0f);
  o = ToSessionOptions(open, defaults, EngineConfig{}, kModel);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->sinks, 8);
  EXPECT_EQ(o->window, 64);
  EXPECT_EQ(o->sampling.temperature, 0.0f);
  EXPECT_EQ(o->sampling.top_k, defaults.sampling.top_k);
}

TEST(ProtoConvertTest, OpenRejectsLimitsNamingTheField) {
  EngineConfig engine;  // max_sinks 64, max_window 8192
  v1::Open open;
  open.set_cache_mode(v1::CACHE_MODE_SINK);
  open.set_sinks(65);
  auto o = ToSessionOptions(open, SessionOptions{}, engine, kModel);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(FieldOf(o.status()), "open.sinks");
  EXPECT_NE(o.status().message().find("[0, 64]"), std::string::npos);
  open.set_sinks(4);
  open.set_window(8190);  // context 8192 - 4 sinks = 8188
  o = ToSessionOptions(open, SessionOptions{}, engine, kModel);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("[1, 8188]"), std::string::npos) << o.status().message();
  open.set_window(100);
  open.mutable_sampling()->set_top_p(1.5f);
  o = ToSessionOptions(open, SessionOptions{}, engine, kModel);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(FieldOf(o.status()), "open.sampling.top_p");
  open.clear_sampling();
  open.set_cache_mode(static_cast<v1::CacheMode>(9));
  EXPECT_EQ(FieldOf(ToSessionOptions(open, SessionOptions{}, engine, kModel).status()),
            "open.cache_mode");
  v1::Open dense;
  dense.set_cache_mode(v1::CACHE_MODE_DENSE);
  dense.set_sinks(4);
  EXPECT_EQ(FieldOf(ToSessionOptions(dense, SessionOptions{}, engine, kModel).status()),
            "open.sinks");
}

TEST(ProtoConvertTest, GenerateChecksEveryField) {
  ServerLimits limits;
  v1::Generate g;
  auto o = ToGenerateOptions(g, SamplingParams{}, limits, kModel.vocab_size);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->max_tokens, limits.default_max_tokens);
  EXPECT_FALSE(o->sampling.has_value());
  g.set_max_tokens(0);
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.max_tokens");
  g.set_max_tokens(limits.max_tokens + 1);
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.max_tokens");
  g.set_max_tokens(5);
  g.add_stop("");
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.stop[0]");
  g.clear_stop();
  g.add_stop("\xff");
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.stop[0]");
  g.clear_stop();
  g.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.sampling.temperature");
  g.mutable_sampling()->set_temperature(0.5f);
  g.mutable_sampling()->set_top_k(11);
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.sampling.top_k");
  g.clear_sampling();
  g.set_request_id(std::string(limits.max_request_id_bytes + 1, 'x'));
  EXPECT_EQ(FieldOf(ToGenerateOptions(g, SamplingParams{}, limits, 10).status()),
            "generate.request_id");
}

TEST(ProtoConvertTest, AppendChecksTextAndTokens) {
  ServerLimits limits;
  limits.max_append_bytes = 8;
  limits.max_append_tokens = 3;
  v1::Append a;
  EXPECT_EQ(FieldOf(ValidateAppend(a, limits, 100)), "append");
  a.set_text("hello");
  EXPECT_TRUE(ValidateAppend(a, limits, 100).ok());
  a.add_tokens(1);
  EXPECT_EQ(FieldOf(ValidateAppend(a, limits, 100)), "append");  // both
  a.clear_text();
  a.add_tokens(100);
  const Status oov = ValidateAppend(a, limits, 100);
  EXPECT_EQ(FieldOf(oov), "append.tokens[1]");
  EXPECT_NE(oov.message().find("[0, 100)"), std::string::npos);
  a.clear_tokens();
  for (int i = 0; i < 4; ++i) a.add_tokens(1);
  EXPECT_EQ(FieldOf(ValidateAppend(a, limits, 100)), "append.tokens");
  a.clear_tokens();
  a.set_text("abcdefghi");
  EXPECT_EQ(FieldOf(ValidateAppend(a, limits, 100)), "append.text");
  a.set_text("ab\xc3");
  const Status utf8 = ValidateAppend(a, limits, 100);
  EXPECT_EQ(FieldOf(utf8), "append.text");
  EXPECT_NE(utf8.message().find("offset 2"), std::string::npos);
  a.set_text("ok");
  a.set_role(static_cast<v1::ChatRole>(7));
  EXPECT_EQ(FieldOf(ValidateAppend(a, limits, 100)), "append.role");
}

TEST(ProtoConvertTest, EngineValuesToProto) {
  EXPECT_EQ(ToProto(FinishReason::kEndOfGeneration), v1::FINISH_REASON_END_OF_GENERATION);
  EXPECT_EQ(ToProto(CacheMode::kWindow), v1::CACHE_MODE_WINDOW);
  const v1::SamplingParams p = ToProto(SamplingParams{});
  EXPECT_TRUE(p.has_seed() && p.has_temperature() && p.has_penalty_last_n());
}

}  // namespace
}  // namespace streamd::server
