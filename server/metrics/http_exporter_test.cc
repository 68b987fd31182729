// The /metrics endpoint over real HTTP on port 0, with cpp-httplib's client.
#include "server/metrics/http_exporter.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>

namespace streamd::metrics {
namespace {

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  MetricsHttpServerTest() {
    registry_.AddCounter("demo_requests_total", "Requests.", {"code"}).WithLabels({"OK"}).Inc(3);
    registry_.AddHistogram("demo_latency_seconds", "Latency.", {0.1, 1}).Get().Observe(0.5);
  }

  Registry registry_;
};

TEST_F(MetricsHttpServerTest, ServesMetricsOnAFreePort) {
  MetricsHttpServer server(registry_);
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  ASSERT_TRUE(server.running());
  ASSERT_GT(server.port(), 0);

  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res) << "GET /metrics failed: " << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, registry_.Serialize());
  EXPECT_NE(res->body.find("demo_requests_total{code=\"OK\"} 3\n"), std::string::npos);
  EXPECT_NE(res->body.find("demo_latency_seconds_bucket{le=\"+Inf\"} 1\n"), std::string::npos);

  // Every scrape sees the values of its time.
  registry_.AddGauge("demo_late", "Added after start.").Get().Set(7);
  const httplib::Result again = client.Get("/metrics");
  ASSERT_TRUE(again);
  EXPECT_NE(again->body.find("\ndemo_late 7\n"), std::string::npos);

  const httplib::Result head = client.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  server.Stop();
  EXPECT_FALSE(server.running());
  EXPECT_EQ(server.port(), 0);
}

TEST_F(MetricsHttpServerTest, AnswersNotFoundElsewhere) {
  MetricsHttpServer server(registry_);
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  httplib::Client client("127.0.0.1", server.port());
  for (const char* path : {"/", "/metricsx", "/metrics/", "/favicon.ico"}) {
    const httplib::Result res = client.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->body.find("demo_requests_total"), std::string::npos) << path;
  }
  const httplib::Result post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);
}

TEST_F(MetricsHttpServerTest, ReportsAnAddressInUse) {
  MetricsHttpServer first(registry_);
  std::string error;
  ASSERT_TRUE(first.Start("127.0.0.1", 0, &error)) << error;
  const int port = first.port();

  MetricsHttpServer second(registry_);
  EXPECT_FALSE(second.Start("127.0.0.1", port, &error));
  EXPECT_NE(error.find("cannot bind the metrics endpoint to 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << error;
  EXPECT_FALSE(second.running());

  EXPECT_FALSE(first.Start("127.0.0.1", 0, &error));  // already running
  EXPECT_NE(error.find("already running"), std::string::npos) << error;
}

TEST_F(MetricsHttpServerTest, RejectsInvalidAddresses) {
  MetricsHttpServer server(registry_);
  std::string error;
  EXPECT_FALSE(server.Start("127.0.0.1", -1, &error));
  EXPECT_NE(error.find("127.0.0.1:-1"), std::string::npos) << error;
  EXPECT_FALSE(server.Start("127.0.0.1", 65536, &error));
  EXPECT_FALSE(server.Start("", 0, &error));
  EXPECT_FALSE(server.Start("256.1.1.1", 0, &error));
  EXPECT_NE(error.find("cannot bind the metrics endpoint to 256.1.1.1:0"), std::string::npos)
      << error;
  EXPECT_FALSE(server.running());
}

TEST_F(MetricsHttpServerTest, StopsCleanlyAndStartsAgain) {
  MetricsHttpServer server(registry_);
  server.Stop();  // never started: no-op
  std::string error;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  {
    // A keep-alive connection still open when Stop() is called.
    httplib::Client client("127.0.0.1", server.port());
    client.set_keep_alive(true);
    ASSERT_TRUE(client.Get("/metrics"));
    server.Stop();
    server.Stop();  // idempotent
    EXPECT_FALSE(server.running());
  }
  // Stopped immediately after starting (the listening loop may not have begun yet).
  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  server.Stop();

  ASSERT_TRUE(server.Start("127.0.0.1", 0, &error)) << error;
  httplib::Client client("127.0.0.1", server.port());
  const httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const int port = server.port();
  server.Stop();
  httplib::Client late("127.0.0.1", port);
  late.set_connection_timeout(1);
  EXPECT_FALSE(late.Get("/metrics")) << "still serving after Stop()";
}

}  // namespace
}  // namespace streamd::metrics
