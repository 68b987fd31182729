// StreamdService in process (GrpcServer on 127.0.0.1 port 0 over a small synthetic engine), on
// session ids: Opened, GetSession and ListSessions show 32 lowercase hex digits; an incoming id
// that is malformed is INVALID_ARGUMENT naming its field (resume.session_id, session_id), one
// that is well-formed but names no session is NOT_FOUND; either case of digits is accepted.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/byte_buffer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/sessions/session_host.h"
#include "engine/tokenizer/chat_template.h"
#include "server/grpc_server.h"
#include "streamd/v1/streamd.grpc.pb.h"

namespace streamd::server {
namespace {

// Never handed out: 128 random bits make a clash with a live session impossible in practice.
constexpr char kUnknownId[] = "0123456789abcdef0123456789abcdef";

class StreamdServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyntheticModelSpec spec;
    spec.with_vocab = true;
    spec.vocab_size = 300;
    auto model = MakeSyntheticModel(spec);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
    ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
    auto chat = tokenizer::ChatTemplate::FromGguf((*model)->file(), **vocab);
    ASSERT_TRUE(chat.ok()) << chat.status().ToString();
    chat_ = std::make_unique<tokenizer::ChatTemplate>(*std::move(chat));
    EngineConfig config;
    config.pool_bytes = 16 << 20;
    config.max_chunk = 32;
    config.threads = 1;
    auto engine = Engine::Create(std::move(model).value(), std::move(vocab).value(), config);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    options_.listen_address = "127.0.0.1:0";
    options_.session_defaults.window = 32;
    options_.grace_period = std::chrono::seconds(1);
    StartServer();
  }
  // A server (and the engine host under it) with options_, in place of the running one.
  void StartServer() {
    server_.reset();
    host_.reset();
    auto host = MakeSessionHost({*engine_, *chat_}, HostOptionsOf(options_), {});
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    host_ = std::move(host).value();
    auto server = GrpcServer::Start(*host_, options_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    stub_ = v1::Streamd::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                                     grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_.reset();  // before the host and the engine it serves
    host_.reset();
    engine_.reset();
  }

  grpc::Status GetSession(const std::string& id, v1::SessionInfo* info) {
    grpc::ClientContext ctx;
    v1::GetSessionRequest request;
    request.set_session_id(id);
    return stub_->GetSession(&ctx, request, info);
  }
  grpc::Status CloseSession(const std::string& id) {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest request;
    request.set_session_id(id);
    v1::CloseSessionResponse response;
    return stub_->CloseSession(&ctx, request, &response);
  }

  std::unique_ptr<tokenizer::ChatTemplate> chat_;
  std::unique_ptr<Engine> engine_;
  ServerOptions options_;
  std::unique_ptr<api::EngineHost> host_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<v1::Streamd::Stub> stub_;
};

// One Session stream with a deadline.
class Stream {
 public:
  explicit Stream(v1::Streamd::Stub& stub) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    rw_ = stub.Session(&context_);
  }
  v1::ServerMessage Send(const v1::ClientMessage& m) {
    v1::ServerMessage reply;
    EXPECT_TRUE(rw_->Write(m));
    EXPECT_TRUE(rw_->Read(&reply)) << "the stream ended";
    return reply;
  }
  v1::ServerMessage Resume(const std::string& id) {
    v1::ClientMessage m;
    m.mutable_resume()->set_session_id(id);
    return Send(m);
  }
  v1::ServerMessage Open() {
    v1::ClientMessage m;
    m.mutable_open();
    return Send(m);
  }
  grpc::Status Close() {
    v1::ClientMessage m;
    m.mutable_close();
    EXPECT_TRUE(rw_->Write(m));
    v1::ServerMessage ignored;
    while (rw_->Read(&ignored)) {
    }
    return rw_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> rw_;
};

bool IsLowerHexId(const std::string& text) {
  return text.size() == 32 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST_F(StreamdServiceTest, IdsAreThirtyTwoLowercaseHexDigitsInEveryAnswer) {
  Stream a(*stub_), b(*stub_);
  const v1::ServerMessage opened_a = a.Open(), opened_b = b.Open();
  ASSERT_TRUE(opened_a.has_opened()) << opened_a.ShortDebugString();
  ASSERT_TRUE(opened_b.has_opened()) << opened_b.ShortDebugString();
  const std::string id = opened_a.opened().session_id();
  EXPECT_TRUE(IsLowerHexId(id)) << id;
  EXPECT_TRUE(IsLowerHexId(opened_b.opened().session_id())) << opened_b.opened().session_id();
  EXPECT_NE(id, opened_b.opened().session_id());

  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.session_id(), id);
  std::string upper = id;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(GetSession(upper, &info).ok()) << "upper-case digits are accepted";
  EXPECT_EQ(info.session_id(), id);  // and answered in lower case

  grpc::ClientContext ctx;
  v1::ListSessionsResponse list;
  ASSERT_TRUE(stub_->ListSessions(&ctx, {}, &list).ok());
  std::vector<std::string> listed;
  for (const v1::SessionInfo& s : list.sessions()) listed.push_back(s.session_id());
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_NE(std::find(listed.begin(), listed.end(), id), listed.end());
  EXPECT_TRUE(a.Close().ok());
  EXPECT_TRUE(b.Close().ok());
}

TEST_F(StreamdServiceTest, MalformedIdsAreInvalidArgumentAndUnknownOnesNotFound) {
  Stream s(*stub_);
  const std::vector<std::string> malformed = {
      "",
      "7",
      std::string(31, 'a'),
      std::string(33, 'a'),
      "0123456789abcdef0123456789abcdeg",
      "0123456789abcdef-0123456789abcde",
      std::string(32, '0'),               // the all-zero id names no session
      std::string(39, 'a') + "\xc3\xa9",  // echoed cut at 40 bytes, inside this character
  };
  for (const std::string& id : malformed) {
    SCOPED_TRACE("session_id \"" + id + "\"");
    const v1::ServerMessage reply = s.Resume(id);
    ASSERT_TRUE(reply.has_error()) << reply.ShortDebugString();
    EXPECT_EQ(reply.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    EXPECT_EQ(reply.error().field(), "resume.session_id") << reply.error().message();
    EXPECT_EQ(reply.error().message().rfind("resume.session_id", 0), 0u) << reply.error().message();

    v1::SessionInfo info;
    grpc::Status st = GetSession(id, &info);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_EQ(st.error_message().rfind("session_id", 0), 0u) << st.error_message();
    st = CloseSession(id);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_EQ(st.error_message().rfind("session_id", 0), 0u) << st.error_message();
  }

  const v1::ServerMessage unknown = s.Resume(kUnknownId);
  ASSERT_TRUE(unknown.has_error()) << unknown.ShortDebugString();
  EXPECT_EQ(unknown.error().code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(unknown.error().field(), "resume.session_id");
  EXPECT_NE(
      unknown.error().message().find(std::string("session ") + kUnknownId + " does not exist"),
      std::string::npos)
      << unknown.error().message();
  v1::SessionInfo info;
  grpc::Status st = GetSession(kUnknownId, &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message().rfind(std::string("session_id: session ") + kUnknownId, 0), 0u)
      << st.error_message();
  EXPECT_EQ(CloseSession(kUnknownId).error_code(), grpc::StatusCode::NOT_FOUND);

  // The stream is still usable after every error.
  const v1::ServerMessage opened = s.Open();
  ASSERT_TRUE(opened.has_opened()) << opened.ShortDebugString();
  EXPECT_TRUE(s.Close().ok());
  // A closed session's id is well-formed: NOT_FOUND.
  EXPECT_EQ(GetSession(opened.opened().session_id(), &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// Exports and imports hold a whole snapshot in memory while they stream, so only
// limits.max_transfers of them run at once; one more is refused at once with
// RESOURCE_EXHAUSTED naming the key, and the place comes back when a call ends.
TEST_F(StreamdServiceTest, SnapshotTransfersBeyondMaxTransfersAreRefused) {
  options_.limits.max_transfers = 1;
  StartServer();
  auto export_unknown = [&] {
    grpc::ClientContext ctx;
    v1::ExportSessionRequest request;
    request.set_session_id(kUnknownId);
    auto reader = stub_->ExportSession(&ctx, request);
    v1::SnapshotChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  };
  // Polls export_unknown until it answers `code` (the server sees calls a moment after the
  // client starts them, and lets go of them a moment after they end).
  auto export_until = [&](grpc::StatusCode code) {
    grpc::Status st;
    for (int i = 0; i < 500; ++i) {
      st = export_unknown();
      if (st.error_code() == code) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return st;
  };
  EXPECT_EQ(export_unknown().error_code(), grpc::StatusCode::NOT_FOUND);

  // An import that has sent one chunk and not finished holds the only place.
  grpc::ClientContext import_ctx;
  v1::ImportSessionResponse response;
  auto writer = stub_->ImportSession(&import_ctx, &response);
  v1::SnapshotChunk chunk;
  chunk.set_data(std::string(1000, 'x'));
  ASSERT_TRUE(writer->Write(chunk));
  // The import takes the place when the server starts its call, which may be after the client
  // has written. An export polled meanwhile could take the place first and have the import
  // refused (as happened under ASan): nothing else is started until the import holds it.
  std::atomic<int32_t>& transfers = server_->context().transfers;
  for (int i = 0; i < 1000 && transfers.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(transfers.load(), 1) << "the import never took its place";
  const grpc::Status refused = export_unknown();
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("sessions.max_transfers = 1"), std::string::npos)
      << refused.error_message();
  {
    grpc::ClientContext ctx;
    v1::ImportSessionResponse other;
    auto second = stub_->ImportSession(&ctx, &other);
    (void)second->Write(chunk);  // may fail once the server has refused the call
    (void)second->WritesDone();
    const grpc::Status st = second->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_EQ(st.error_message().rfind("import: ", 0), 0u) << st.error_message();
  }

  // The held import ends (its bytes are no snapshot); its place is free again.
  ASSERT_TRUE(writer->WritesDone());
  const grpc::Status done = writer->Finish();
  EXPECT_FALSE(done.ok());
  EXPECT_NE(done.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << done.error_message();
  EXPECT_EQ(export_until(grpc::StatusCode::NOT_FOUND).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Found by client_message_fuzz: the engine's refusal of a Generate on a session without any
// context ("session ... has no context to continue") reached the client without a field.
TEST_F(StreamdServiceTest, AGenerateWithoutContextIsAnErrorNamingGenerate) {
  Stream s(*stub_);
  ASSERT_TRUE(s.Open().has_opened());
  v1::ClientMessage generate;
  generate.mutable_generate()->set_max_tokens(2);
  generate.mutable_generate()->set_request_id("g");
  const v1::ServerMessage reply = s.Send(generate);
  ASSERT_TRUE(reply.has_error()) << reply.ShortDebugString();
  EXPECT_EQ(reply.error().code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_EQ(reply.error().field(), "generate") << reply.error().message();
  EXPECT_NE(reply.error().message().find("no context"), std::string::npos)
      << reply.error().message();
  EXPECT_EQ(reply.error().request_id(), "g");
  EXPECT_TRUE(s.Close().ok());
}

// A session id that is not UTF-8, sent as raw protobuf bytes (a proto3 `string` and `bytes`
// field have one wire type: a client can send either, whatever its copy of the .proto says).
// Every session_id is declared `bytes` because of what a client hears (streamd.proto, "Session
// ids"): INVALID_ARGUMENT naming the field, on a unary call and on a stream that stays open,
// while every other session serves on. (Declared `string`, the same bytes fail the parse of the
// whole message: a unary call answers UNIMPLEMENTED with no message, and a stream ends.)
std::string Field(int number, const std::string& payload) {  // length-delimited, < 128 bytes
  return std::string(1, static_cast<char>(number << 3 | 2)) +
         std::string(1, static_cast<char>(payload.size())) + payload;
}
grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}
std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST_F(StreamdServiceTest, ANonUtf8SessionIdIsInvalidArgumentAndOtherSessionsServeOn) {
  Stream live(*stub_);
  const v1::ServerMessage opened = live.Open();
  ASSERT_TRUE(opened.has_opened()) << opened.ShortDebugString();
  const std::string id = opened.opened().session_id();
  const std::string not_utf8 = "\xff\xfe" + std::string(30, 'a');  // 32 bytes

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                     grpc::InsecureChannelCredentials());
  for (const char* method :
       {"/streamd.v1.Streamd/GetSession", "/streamd.v1.Streamd/CloseSession"}) {
    SCOPED_TRACE(method);
    grpc::ClientContext ctx;
    grpc::ByteBuffer reply;
    const grpc::Status st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel.get(), grpc::internal::RpcMethod(method, grpc::internal::RpcMethod::NORMAL_RPC),
        &ctx, Buffer(Field(1, not_utf8)), &reply);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_EQ(st.error_message().rfind("session_id: ", 0), 0u) << st.error_message();
  }

  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> rw(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(),
          grpc::internal::RpcMethod("/streamd.v1.Streamd/Session",
                                    grpc::internal::RpcMethod::BIDI_STREAMING),
          &ctx));
  ASSERT_TRUE(rw->Write(Buffer(Field(2, Field(1, not_utf8)))));  // ClientMessage.resume
  grpc::ByteBuffer reply;
  ASSERT_TRUE(rw->Read(&reply)) << "the stream ended: " << rw->Finish().error_message();
  v1::ServerMessage error;
  ASSERT_TRUE(error.ParseFromString(Bytes(reply)));
  ASSERT_TRUE(error.has_error()) << error.ShortDebugString();
  EXPECT_EQ(error.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(error.error().field(), "resume.session_id") << error.error().message();
  // The stream stays open: it opens a session next.
  ASSERT_TRUE(rw->Write(Buffer(Field(1, ""))));  // ClientMessage.open, every field default
  ASSERT_TRUE(rw->Read(&reply));
  v1::ServerMessage next;
  ASSERT_TRUE(next.ParseFromString(Bytes(reply)));
  EXPECT_TRUE(next.has_opened()) << next.ShortDebugString();
  ASSERT_TRUE(rw->WritesDone());
  while (rw->Read(&reply)) {
  }
  EXPECT_TRUE(rw->Finish().ok());

  // The other session serves on.
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(id, &info).ok());
  EXPECT_EQ(info.session_id(), id);
  EXPECT_TRUE(live.Close().ok());
}

}  // namespace
}  // namespace streamd::server
