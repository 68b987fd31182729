#include "server/proto_convert.h"

#include <gtest/gtest.h>

#include "server/api_convert.h"
#include "server/grpc_status.h"

namespace streamd::server {
namespace {

constexpr ModelLimits kModel{49152, 8192};

// What an Open leaves absent stays absent (the engine applies its defaults and checks sinks and
// window against its limits: engine/sessions/session_service_test.cc); the cache mode is the
// wire's to check.
TEST(ProtoConvertTest, OpenKeepsWhatIsSetAndChecksTheCacheMode) {
  v1::Open open;
  auto o = ToOpenOptions(open);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_FALSE(o->mode || o->sinks || o->window || o->sampling.any());
  open.set_cache_mode(v1::CACHE_MODE_SINK);
  open.set_sinks(8);
  open.set_window(64);
  open.mutable_sampling()->set_temperature(0.0f);
  o = ToOpenOptions(open);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->mode, api::CacheMode::kSink);
  EXPECT_EQ(o->sinks, 8);
  EXPECT_EQ(o->window, 64);
  EXPECT_EQ(o->sampling.temperature, 0.0f);
  EXPECT_FALSE(o->sampling.top_k.has_value());
  open.set_cache_mode(static_cast<v1::CacheMode>(9));
  EXPECT_EQ(FieldOf(ToOpenOptions(open).status()), "open.cache_mode");
}

TEST(ProtoConvertTest, GenerateChecksEveryField) {
  ServerLimits limits;
  v1::Generate g;
  auto o = ToGenerateRequest(g, api::Sampling{}, limits, kModel.vocab_size);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->max_tokens, limits.default_max_tokens);
  EXPECT_FALSE(o->sampling.any());
  g.set_max_tokens(0);
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
            "generate.max_tokens");
  g.set_max_tokens(limits.max_tokens + 1);
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
            "generate.max_tokens");
  g.set_max_tokens(5);
  g.add_stop("");
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
            "generate.stop[0]");
  g.clear_stop();
  g.add_stop("\xff");
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
            "generate.stop[0]");
  g.clear_stop();
  g.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
            "generate.sampling.temperature");
  g.mutable_sampling()->set_temperature(0.5f);
  g.mutable_sampling()->set_top_k(11);
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
            "generate.sampling.top_k");
  g.clear_sampling();
  g.set_request_id(std::string(limits.max_request_id_bytes + 1, 'x'));
  EXPECT_EQ(FieldOf(ToGenerateRequest(g, api::Sampling{}, limits, 10).status()),
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
  EXPECT_EQ(ToProto(api::FinishReason::kEndOfGeneration), v1::FINISH_REASON_END_OF_GENERATION);
  EXPECT_EQ(ToProto(api::CacheMode::kWindow), v1::CACHE_MODE_WINDOW);
  const v1::SamplingParams p = ToProto(api::Sampling{});
  EXPECT_TRUE(p.has_seed() && p.has_temperature() && p.has_penalty_last_n());
  api::SessionInfo info;
  info.id = "3f9c0e5ab2d14c7f8e61a0d9b4c2f713";
  info.cache.tokens_seen = 7;
  info.offloaded = true;
  const v1::SessionInfo wire = ToProto(info);
  EXPECT_EQ(wire.session_id(), info.id);
  EXPECT_EQ(wire.cache().tokens_seen(), 7);
  EXPECT_TRUE(wire.offloaded());
}

}  // namespace
}  // namespace streamd::server
