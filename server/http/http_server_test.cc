// HttpServer over a scripted HttpSessions (no model, no engine): routing, the answers' shapes
// on the wire, lasting sessions' bookkeeping, draining, body limits, and a client that leaves
// mid-stream. The real adapter and model are covered end to end by tests/http.
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/http/answer.h"
#include "tests/support/scripted_http_sessions.h"

namespace streamd::http {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using scripted::Journal;
using scripted::ScriptedSessions;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions o;
    o.address = "127.0.0.1:0";
    o.max_body_bytes = 4096;
    o.read_timeout = 2s;
    o.on_answered = [this](std::string_view route, int status) {
      std::lock_guard<std::mutex> lock(journal_.mu);
      journal_.answered.emplace_back(std::string(route), status);
      journal_.cv.notify_all();
    };
    auto s = HttpServer::Start(o, sessions_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(s).value();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  httplib::Result Chat(const std::string& body, const httplib::Headers& headers = {}) {
    return client_->Post("/v1/chat/completions", headers, body, "application/json");
  }
  // A connection of the test's own that has sent `bytes`, so that the test can pipeline requests
  // or close the connection whenever it likes (httplib's client can do neither): the socket, or
  // -1 (the failure added to the test) when it could not connect or send. Its reads time out
  // after 10 s, so that a server that never answers fails the test instead of hanging it.
  int SendRaw(const std::string& bytes) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const timeval timeout{10, 0};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      ADD_FAILURE() << "cannot send a request to port " << server_->port();
      if (fd >= 0) close(fd);
      return -1;
    }
    return fd;
  }
  // The POST of `body` to `path`, on a connection of its own (SendRaw).
  int PostRaw(const std::string& path, const std::string& body) {
    return SendRaw("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  // Waits until `pred` holds on the journal.
  template <typename Pred>
  bool Eventually(Pred pred) {
    return scripted::Eventually(journal_, pred);
  }

  Journal journal_;
  ScriptedSessions sessions_{journal_};
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

const char kHi[] = R"({"messages": [{"role": "user", "content": "Hi"}]})";

TEST_F(HttpServerTest, ModelsAndUnknownRoutes) {
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "scripted");
  EXPECT_EQ(client_->Get("/v1/models/scripted")->status, 200);
  auto other = client_->Get("/v1/models/gpt-4");
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body)["error"]["param"], "model");
  auto none = client_->Get("/v2/anything");
  EXPECT_EQ(none->status, 404);
  EXPECT_EQ(json::parse(none->body)["error"]["type"], "invalid_request_error");
}

TEST_F(HttpServerTest, StatelessCompletionClosesItsSession) {
  auto r = Chat(kHi);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello \"you\"\n!");  // tail text included
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_FALSE(r->has_header("x-streamd-session"));
  EXPECT_TRUE(Eventually([](Journal& journal) { return journal.closed == 1; }));
}

TEST_F(HttpServerTest, StreamIsServerSentEvents) {
  auto r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true,
                   "max_tokens": 3, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  std::vector<json> chunks;
  std::string text;
  size_t at = 0;
  while (at < r->body.size()) {
    const size_t end = r->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos) << r->body;
    const std::string event = r->body.substr(at, end - at);
    at = end + 2;
    ASSERT_EQ(event.rfind("data: ", 0), 0u) << event;
    if (event == "data: [DONE]") {
      EXPECT_EQ(at, r->body.size());
      break;
    }
    chunks.push_back(json::parse(event.substr(6)));
  }
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  for (const json& c : chunks) {
    if (!c["choices"].empty()) text += c["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, "Hello \"you\"\n!");
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 3);
}

TEST_F(HttpServerTest, LastingSessionGetsOnlyNewMessages) {
  auto first = Chat(kHi, {{"x-streamd-session", "new"}});
  ASSERT_EQ(first->status, 200) << first->body;
  const std::string id = first->get_header_value("x-streamd-session");
  ASSERT_EQ(id.size(), 32u);
  const std::string answer = json::parse(first->body)["choices"][0]["message"]["content"];
  EXPECT_TRUE(
      Eventually([](Journal& journal) { return journal.detached == 1 && journal.closed == 0; }));
  const json history = {{"messages",
                         {{{"role", "user"}, {"content", "Hi"}},
                          {{"role", "assistant"}, {"content", answer}},
                          {{"role", "user"}, {"content", "More"}}}}};
  auto second = Chat(history.dump(), {{"x-streamd-session", id}});
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(json::parse(second->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 12);
  {
    std::lock_guard<std::mutex> lock(journal_.mu);
    ASSERT_EQ(journal_.appended.size(), 2u);  // "Hi", then only "More"
    EXPECT_EQ(journal_.appended[1].second, "More");
  }
  // The old history again: the session has moved on.
  auto stale = Chat(kHi, {{"x-streamd-session", id}});
  EXPECT_EQ(stale->status, 409);
  EXPECT_EQ(json::parse(stale->body)["error"]["param"], "messages");
  auto missing = Chat(kHi, {{"x-streamd-session", std::string(32, 'a')}});
  EXPECT_EQ(missing->status, 404);
}

TEST_F(HttpServerTest, KeysAreCheckedBeforeTheBody) {
  sessions_.keys_required = true;
  auto none = Chat(kHi);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  auto wrong = Chat(kHi, {{"Authorization", "Bearer nope"}});
  EXPECT_EQ(wrong->status, 401);
  auto ok = Chat(kHi, {{"Authorization", "Bearer k"}});
  EXPECT_EQ(ok->status, 200);
  // A refused caller is not made to upload its body first (nor is it read).
  auto big = Chat(std::string(4000, ' ') + kHi);
  EXPECT_EQ(big->status, 401);
  std::lock_guard<std::mutex> lock(journal_.mu);
  EXPECT_EQ(journal_.appended.size(), 1u);  // only the authenticated request ran
}

TEST_F(HttpServerTest, DrainingIs503WithRetryAfter) {
  sessions_.draining = true;
  auto r = Chat(kHi);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(client_->Get("/v1/models")->status, 200);  // reads still work
}

TEST_F(HttpServerTest, DrainCancelsWhatOutlivesTheGracePeriod) {
  journal_.endless = true;
  std::string body;
  int status = 0;
  std::thread client([&] {
    auto r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true})");
    if (r) {
      status = r->status;
      body = r->body;
    }
  });
  ASSERT_TRUE(Eventually([](Journal& journal) { return !journal.appended.empty(); }));
  sessions_.draining = true;
  EXPECT_FALSE(server_->Drain(200ms));  // an endless answer cannot finish in time
  client.join();
  ASSERT_EQ(status, 200);
  // The stream ends with an error event, then [DONE]; the session is closed.
  EXPECT_NE(body.find("data: {\"error\""), std::string::npos) << body;
  ASSERT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  EXPECT_TRUE(Eventually([](Journal& journal) { return journal.closed == 1; }));
  EXPECT_TRUE(server_->Drain(0ms));  // nothing left
}

TEST_F(HttpServerTest, BodiesOverTheLimitAre413) {
  auto r = Chat(std::string(5000, ' ') + kHi);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "request_too_large");
  auto bad = Chat("{\"messages\": 1}");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "messages");
}

TEST_F(HttpServerTest, ClientLeavingMidStreamCancelsAndClosesTheSession) {
  journal_.endless = true;
  const int fd = PostRaw("/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true})");
  ASSERT_GE(fd, 0);
  std::string got;
  char buf[4096];
  while (got.find("\"content\":\"lo\"") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);  // the client is gone; the endless generation must not go on
  EXPECT_TRUE(
      Eventually([](Journal& journal) { return journal.cancelled >= 1 && journal.closed == 1; }));
}

TEST(HttpRouteLabel, NamesTheRoutesAndOnlyThem) {
  EXPECT_EQ(HttpRouteLabel("/v1/models"), "/v1/models");
  EXPECT_EQ(HttpRouteLabel("/v1/models/smollm2"), "/v1/models/{model}");
  EXPECT_EQ(HttpRouteLabel("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(HttpRouteLabel("/v1/responses"), "/v1/responses");
  EXPECT_EQ(HttpRouteLabel("/v1/models/"), "other");
  EXPECT_EQ(HttpRouteLabel("/v1/responses/x"), "other");
  EXPECT_EQ(HttpRouteLabel("/anything/the/client/likes"), "other");
}

TEST_F(HttpServerTest, EveryAnswerIsCountedByRouteAndStatus) {
  EXPECT_EQ(client_->Get("/v1/models")->status, 200);
  EXPECT_EQ(client_->Get("/v1/models/other-model")->status, 404);
  EXPECT_EQ(client_->Get("/v1/nothing-here")->status, 404);
  EXPECT_EQ(Chat(kHi)->status, 200);
  EXPECT_EQ(Chat("{\"messages\": 1}")->status, 400);
  EXPECT_EQ(Chat(std::string(5000, ' ') + kHi)->status, 413);  // refused before routing
  sessions_.keys_required = true;
  EXPECT_EQ(Chat(kHi)->status, 401);
  std::vector<std::pair<std::string, int>> want = {
      {"/v1/models", 200},           {"/v1/models/{model}", 404},   {"other", 404},
      {"/v1/chat/completions", 200}, {"/v1/chat/completions", 400}, {"/v1/chat/completions", 413},
      {"/v1/chat/completions", 401}};
  // The count comes after the answer was written: the client may have it first.
  EXPECT_TRUE(Eventually([&](Journal& j) { return j.answered.size() >= want.size(); }));
  // In any order: each is counted after its answer went out, maybe after the next one's.
  std::lock_guard<std::mutex> lock(journal_.mu);
  std::vector<std::pair<std::string, int>> got = journal_.answered;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

TEST_F(HttpServerTest, ClientLeavingBeforeAWholeAnswerCancelsAndClosesTheSession) {
  journal_.endless = true;
  // Not streamed: nothing is written to the client until the generation ends, so only a look at
  // the connection can tell that the client left.
  const int fd = PostRaw("/v1/chat/completions", kHi);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(Eventually([](Journal& journal) { return !journal.appended.empty(); }));
  // Generating (well past the first look at the client), nobody cancelled it yet.
  std::this_thread::sleep_for(2 * Answer::kClientCheck);
  {
    std::lock_guard<std::mutex> lock(journal_.mu);
    EXPECT_EQ(journal_.cancelled, 0);
    EXPECT_EQ(journal_.closed, 0);
  }
  close(fd);  // the client is gone; the endless generation must not go on
  EXPECT_TRUE(
      Eventually([](Journal& journal) { return journal.cancelled >= 1 && journal.closed == 1; }));
}

TEST_F(HttpServerTest, ClientLeavingBeforeAWholeResponseCancelsIt) {
  journal_.endless = true;
  const int fd = PostRaw("/v1/responses", R"({"input": "Hi"})");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(Eventually([](Journal& journal) { return !journal.appended.empty(); }));
  close(fd);
  // A lasting session: cancelled, then detached (not closed), resumable by its response id.
  EXPECT_TRUE(
      Eventually([](Journal& journal) { return journal.cancelled >= 1 && journal.detached == 1; }));
}

// The server reads a connection's requests itself (SocketAwareServer): requests sent back to
// back on one kept-alive connection are each answered, in order, and "Connection: close" ends it.
TEST_F(HttpServerTest, PipelinedRequestsOnOneConnectionAreEachAnswered) {
  const std::string get = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string last = "GET /v1/nothing-here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const int fd = SendRaw(get + get + last);
  ASSERT_GE(fd, 0);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_EQ(n, 0) << "the server did not close the connection after \"Connection: close\"";
  std::vector<std::string> statuses;
  for (size_t at = got.find("HTTP/1.1 "); at != std::string::npos;
       at = got.find("HTTP/1.1 ", at + 1)) {
    statuses.push_back(got.substr(at + 9, 3));
  }
  EXPECT_EQ(statuses, (std::vector<std::string>{"200", "200", "404"})) << got;
}

}  // namespace
}  // namespace streamd::http
