#include "tests/e2e/e2e_util.h"

#include <gtest/gtest.h>

#include "proto/streamd/v1/session_affinity.h"

namespace streamd::e2e {

RawStream::RawStream(const std::shared_ptr<grpc::Channel>& channel, std::chrono::seconds deadline,
                     const std::string& api_key, const std::string& affinity)
    : stub_(v1::Streamd::NewStub(channel)) {
  context_.set_deadline(std::chrono::system_clock::now() + deadline);
  if (!api_key.empty()) context_.AddMetadata("authorization", "Bearer " + api_key);
  if (!affinity.empty()) context_.AddMetadata(v1::kSessionAffinityHeader, affinity);
  rw_ = stub_->Session(&context_);
}

BytesStream::BytesStream(const std::shared_ptr<grpc::Channel>& channel,
                         std::chrono::seconds deadline) {
  context_.set_deadline(std::chrono::system_clock::now() + deadline);
  const grpc::internal::RpcMethod method("/streamd.v1.Streamd/Session",
                                         grpc::internal::RpcMethod::BIDI_STREAMING);
  rw_.reset(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
      channel.get(), method, &context_));
}

bool BytesStream::Write(const std::string& bytes) {
  const grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  return rw_->Write(buffer);
}

std::optional<v1::ServerMessage> BytesStream::Read() {
  grpc::ByteBuffer buffer;
  if (!rw_->Read(&buffer)) return std::nullopt;
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return std::nullopt;
  std::string bytes;
  for (const grpc::Slice& slice : slices) bytes.append(slice.begin(), slice.end());
  v1::ServerMessage m;
  if (!m.ParseFromString(bytes)) return std::nullopt;
  return m;
}

grpc::Status BytesStream::Finish() {
  while (Read()) {
  }
  return rw_->Finish();
}

std::optional<v1::ServerMessage> RawStream::Read() {
  v1::ServerMessage m;
  if (!rw_->Read(&m)) return std::nullopt;
  return m;
}

grpc::Status RawStream::Finish() {
  while (Read()) {
  }
  return rw_->Finish();
}

std::optional<v1::Opened> RawStream::Open(const v1::Open& open) {
  v1::ClientMessage m;
  *m.mutable_open() = open;
  EXPECT_TRUE(Write(m));
  auto reply = Read();
  if (!reply || !reply->has_opened()) {
    ADD_FAILURE() << "expected Opened, got "
                  << (reply ? reply->ShortDebugString() : std::string("end of stream"));
    return std::nullopt;
  }
  return reply->opened();
}

std::optional<v1::Error> RawStream::Append(const v1::Append& append, v1::CacheState* state) {
  v1::ClientMessage m;
  *m.mutable_append() = append;
  EXPECT_TRUE(Write(m));
  while (auto reply = Read()) {
    if (reply->has_error()) return reply->error();
    if (reply->has_cache_state()) {
      if (state != nullptr) *state = reply->cache_state();
      return std::nullopt;
    }
  }
  ADD_FAILURE() << "the stream ended before the append's CacheState";
  return std::nullopt;
}

v1::Error RawStream::ExpectError() {
  auto reply = Read();
  if (!reply || !reply->has_error()) {
    ADD_FAILURE() << "expected Error, got "
                  << (reply ? reply->ShortDebugString() : std::string("end of stream"));
    return {};
  }
  return reply->error();
}

Generation ReadGeneration(RawStream& s, const std::function<void()>& on_first_delta) {
  Generation g;
  bool first = true;
  while (auto m = s.Read()) {
    if (m->has_token_delta()) {
      const v1::TokenDelta& d = m->token_delta();
      EXPECT_EQ(d.index(), static_cast<int64_t>(g.ids.size())) << "token indices skip";
      g.ids.insert(g.ids.end(), d.token_ids().begin(), d.token_ids().end());
      g.text += d.text();
      if (first && on_first_delta) on_first_delta();
      first = false;
    } else if (m->has_generation_done()) {
      g.done = m->generation_done();
      g.text += g.done.tail_text();
      g.ended = true;
      auto state = s.Read();
      EXPECT_TRUE(state && state->has_cache_state()) << "no CacheState after GenerationDone";
      if (state && state->has_cache_state()) g.cache = state->cache_state();
      return g;
    } else if (m->has_error()) {
      ADD_FAILURE() << "error during generation: " << m->error().ShortDebugString();
    }
  }
  ADD_FAILURE() << "the stream ended before GenerationDone";
  return g;
}

v1::ClientMessage OpenMsg(int32_t window) {
  v1::ClientMessage m;
  m.mutable_open();
  if (window > 0) m.mutable_open()->set_window(window);
  return m;
}

v1::ClientMessage TextMsg(const std::string& text, v1::ChatRole role) {
  v1::ClientMessage m;
  m.mutable_append()->set_text(text);
  m.mutable_append()->set_role(role);
  return m;
}

v1::ClientMessage TokensMsg(const std::vector<int32_t>& ids) {
  v1::ClientMessage m;
  for (int32_t id : ids) m.mutable_append()->add_tokens(id);
  return m;
}

v1::ClientMessage GenerateMsg(int32_t max_tokens, bool greedy, const std::string& request_id) {
  v1::ClientMessage m;
  m.mutable_generate()->set_max_tokens(max_tokens);
  if (greedy) m.mutable_generate()->mutable_sampling()->set_temperature(0.0f);
  m.mutable_generate()->set_request_id(request_id);
  return m;
}

v1::ClientMessage CancelMsg() {
  v1::ClientMessage m;
  m.mutable_cancel();
  return m;
}

v1::ClientMessage CloseMsg() {
  v1::ClientMessage m;
  m.mutable_close();
  return m;
}

v1::ClientMessage ResumeMsg(const std::string& id) {
  v1::ClientMessage m;
  m.mutable_resume()->set_session_id(id);
  return m;
}

bool IsSessionId(std::string_view text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace streamd::e2e
