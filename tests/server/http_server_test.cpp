// The HTTP layer on loopback with the fake backend: routing, API keys, OpenAI error bodies for
// statuses httplib sets itself (404, 413), SSE over chunked encoding, and a client that hangs
// up mid-stream getting its request aborted.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "server/fake_backend.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

using nlohmann::json;
using testing::FakeBackend;
using testing::FakeBackendOptions;

class HttpServerTest : public ::testing::Test {
 protected:
  void start(FakeBackendOptions options = {}, const std::string& api_key = "", int timeout_s = 30) {
    backend_ = std::make_unique<FakeBackend>(options);
    ServerConfig config;
    config.port = 0;
    config.read_timeout_s = timeout_s;
    config.write_timeout_s = timeout_s;
    config.keep_alive_timeout_s = std::min(5, timeout_s);
    config.api_key = api_key;
    config.max_body_bytes = 4096;
    config.http_threads = 8;
    config.served_model_names = {"fake"};
    server_ = std::make_unique<HttpServer>(config, *backend_);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(10, 0);
    for (int i = 0; i < 500; ++i) {  // serve() runs once /health answers
      if (auto r = client_->Get("/health"); r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "server did not come up";
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body, "application/json");
  }

  // Polls `condition` for up to 10 s.
  static bool eventually(const std::function<bool()>& condition) {
    for (int i = 0; i < 1000; ++i) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpServerTest, CompletionOverHttp) {
  start();
  const auto r = post("/v1/completions", R"({"model":"fake","prompt":"hi","max_tokens":3,"seed":5})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const auto j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().size(), 3u);
}

TEST_F(HttpServerTest, ErrorsAreOpenAiJsonWithTheRightStatus) {
  start();
  auto r = post("/v1/completions", "{not json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_json");
  r = post("/v1/completions", R"({"prompt":"x","temperature":-1})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "temperature");
  r = client_->Get("/v1/nothing");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
  r = post("/v1/completions", R"({"prompt":"x","model":"other"})");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  r = post("/v1/completions", R"({"prompt":")" + std::string(5000, 'x') + R"("})");
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "body_too_large");
}

TEST_F(HttpServerTest, ApiKeyGuardsTheApiButNotProbes) {
  start({}, "sekret");
  auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  r = client_->Get("/v1/models", {{"Authorization", "Bearer wrong!"}});
  EXPECT_EQ(r->status, 401);
  r = client_->Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "fake");
  EXPECT_EQ(client_->Get("/health")->status, 200);
  EXPECT_EQ(client_->Get("/metrics")->status, 200);
}

TEST_F(HttpServerTest, StreamsServerSentEvents) {
  start();
  const auto r = post("/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"q"}],"stream":true,"max_tokens":5,"seed":1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  SseParser parser;
  const auto events = parser.feed(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(HttpServerTest, MetricsCountRequestsAndTokens) {
  start();
  ASSERT_EQ(post("/v1/completions", R"({"prompt":"hi","max_tokens":4})")->status, 200);
  const auto r = client_->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  EXPECT_NE(r->body.find("deepinfer:generation_tokens_total{model_name=\"fake\"} 4"), std::string::npos) << r->body;
  // httplib logs a request after its response is on the wire, so the count may lag a moment.
  EXPECT_TRUE(eventually([&] {
    return client_->Get("/metrics")->body.find(
               "deepinfer:http_requests_total{handler=\"/v1/completions\",status=\"200\"} 1") != std::string::npos;
  }));
}

// A raw loopback connection to the server (-1 on failure).
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

TEST_F(HttpServerTest, StalledClientIsDisconnectedAfterTheReadTimeout) {
  start({}, "", 1);
  const int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  const std::string partial = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"pro";
  ASSERT_EQ(::send(fd, partial.data(), partial.size(), 0), static_cast<ssize_t>(partial.size()));
  // The rest of the body never comes: the server gives up after the read timeout (replying 400),
  // keeps the connection for at most the keep-alive timeout, and closes it.
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  const auto start_time = std::chrono::steady_clock::now();
  char buffer[512];
  ssize_t n = 0;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
  }
  EXPECT_EQ(n, 0) << "the connection should be closed by the server, not time out on our side";
  EXPECT_LT(std::chrono::steady_clock::now() - start_time, std::chrono::seconds(5));
  ::close(fd);
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(HttpServerTest, ClientHangingUpMidStreamAbortsTheRequest) {
  FakeBackendOptions options;
  options.step_interval = std::chrono::milliseconds(5);
  start(options);
  const int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt":"x","stream":true,"max_tokens":200})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  char buffer[512];
  ASSERT_GT(::recv(fd, buffer, sizeof(buffer), 0), 0);  // the stream has started
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return backend_->aborted_ids().size() == 1; }));
  EXPECT_TRUE(eventually([&] { return backend_->num_unfinished() == 0; }));
}

}  // namespace
}  // namespace deepinfer::server
