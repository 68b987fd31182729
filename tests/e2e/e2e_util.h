// Helpers of the end-to-end tests: a raw Session stream with a deadline, message builders, and
// reading one generation off a stream.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::e2e {

// The test server's settings (DaemonProcess::Start overrides) that the tests rely on.
inline const std::vector<std::string> kSharedServerFlags = {
    "--engine.kv_pool=256MiB", "--engine.max_chunk=64", "--sessions.default_window=128"};

// One Session stream; every read gives up at the deadline.
class RawStream {
 public:
  // With `api_key`, the stream carries `authorization: Bearer <api_key>`; with `affinity`,
  // `x-streamd-session: <affinity>` (the session it will resume, for a proxy to route by).
  explicit RawStream(const std::shared_ptr<grpc::Channel>& channel,
                     std::chrono::seconds deadline = std::chrono::seconds(180),
                     const std::string& api_key = "", const std::string& affinity = "");
  bool Write(const v1::ClientMessage& m) { return rw_->Write(m); }
  std::optional<v1::ServerMessage> Read();
  void WritesDone() { rw_->WritesDone(); }
  grpc::Status Finish();  // reads to the end first
  void Cancel() { context_.TryCancel(); }

  // Open and wait for Opened (nullopt + test failure on an Error).
  std::optional<v1::Opened> Open(const v1::Open& open = {});
  // Append and wait for the CacheState; returns the Error instead when one comes.
  std::optional<v1::Error> Append(const v1::Append& append, v1::CacheState* state = nullptr);
  // The next message, which must be an Error.
  v1::Error ExpectError();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<v1::Streamd::Stub> stub_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> rw_;
};

// A Session stream that writes raw bytes: what a client of another protocol, or with a broken
// encoder, sends (the generated stub can only write well-formed messages).
class BytesStream {
 public:
  explicit BytesStream(const std::shared_ptr<grpc::Channel>& channel,
                       std::chrono::seconds deadline = std::chrono::seconds(60));
  bool Write(const std::string& bytes);
  bool Write(const v1::ClientMessage& m) { return Write(m.SerializeAsString()); }
  std::optional<v1::ServerMessage> Read();  // nullopt at the end, or on bytes that do not parse
  grpc::Status Finish();                    // reads to the end first

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> rw_;
};

// Bytes that no ClientMessage parses to: field 1 (open) says 127 bytes follow, none do.
inline const std::string kUnparsableMessage("\x0a\x7f", 2);

struct Generation {
  std::vector<int32_t> ids;
  std::string text;
  v1::GenerationDone done;
  bool ended = false;    // a GenerationDone arrived
  v1::CacheState cache;  // the CacheState that follows the GenerationDone
};

// Reads TokenDeltas until the GenerationDone (and the CacheState after it); checks that the
// indices are consecutive. `on_first_delta` runs once, after the first delta.
Generation ReadGeneration(RawStream& s, const std::function<void()>& on_first_delta = {});

v1::ClientMessage OpenMsg(int32_t window = 0);
v1::ClientMessage TextMsg(const std::string& text, v1::ChatRole role = v1::CHAT_ROLE_UNSPECIFIED);
v1::ClientMessage TokensMsg(const std::vector<int32_t>& ids);
v1::ClientMessage GenerateMsg(int32_t max_tokens, bool greedy = true,
                              const std::string& request_id = "");
v1::ClientMessage CancelMsg();
v1::ClientMessage CloseMsg();
v1::ClientMessage ResumeMsg(const std::string& id);

// True for what the server hands out as a session id: 32 lowercase hex digits.
bool IsSessionId(std::string_view text);

}  // namespace streamd::e2e
