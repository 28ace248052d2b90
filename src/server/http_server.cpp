// cpp-httplib wiring: routes, authentication, error bodies, limits, SSE streaming with
// heartbeats and client-gone detection.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <csignal>
#include <filesystem>

#include "common/logging.h"
#include "server/api_error.h"
#include "server/endpoints.h"
#include "server/sse.h"

namespace deepinfer::server {
namespace {

constexpr auto kStreamPoll = std::chrono::milliseconds(100);

// Endpoints anyone may call: probes and monitoring, as in vLLM.
bool is_public_path(const std::string& path) {
  return path == "/health" || path == "/ping" || path == "/metrics" || path == "/version";
}

// The metrics label of a path: the route it hit, so unknown paths cannot explode cardinality.
std::string handler_label(const std::string& path) {
  for (const char* known : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/ping", "/metrics",
                            "/version", "/tokenize", "/detokenize"})
    if (path == known) return known;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{model}";
  return "other";
}

void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  send_json(res, e.status(), dump_json(e.to_json()));
  if (e.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
}

// Streams an EventStream as the chunked body: waits in short polls so a stopping server ends the
// stream promptly; an SSE comment goes out when nothing else did for a while, which keeps
// proxies from timing out and reveals a client that went away (the write fails).
void send_stream(httplib::Response& res, std::shared_ptr<EventStream> stream, const std::atomic<bool>& stopping,
                 double heartbeat_s) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const auto heartbeat = std::chrono::duration<double>(heartbeat_s);
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, &stopping, heartbeat](std::size_t, httplib::DataSink& sink) {
        std::string out;
        bool done = false;
        const auto idle_since = std::chrono::steady_clock::now();
        while (out.empty() && !done) {
          if (stopping.load()) {
            stream->cancel();
            return false;
          }
          done = stream->next(out, kStreamPoll);
          if (out.empty() && std::chrono::steady_clock::now() - idle_since >= heartbeat) out = sse_comment("keep-alive");
        }
        if (!sink.write(out.data(), out.size())) {
          stream->cancel();  // the client is gone: free its sequences now
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [stream](bool success) {
        if (!success) stream->cancel();
      });
}

// The port and numeric address of a socket's local (peer = false) or remote end.
bool socket_end(int fd, bool peer, std::string& addr, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    port = ntohs(in->sin_port);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    port = ntohs(in6->sin6_port);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
  } else {
    return false;
  }
  addr = text;
  return true;
}

// The descriptor of the connection `req` came on: httplib 0.11 does not expose it, so it is found
// among the process's sockets by its two ends (the handler's thread holds it open meanwhile).
int connection_fd(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    std::string addr;
    int port = -1;
    if (!socket_end(fd, false, addr, port) || port != req.local_port) continue;
    if (socket_end(fd, true, addr, port) && port == req.remote_port && addr == req.remote_addr) return fd;
  }
  return -1;
}

// For a non-streamed request: whether its client has closed the connection (checked at most
// every 100 ms). A peer's FIN shows as POLLRDHUP even with a pipelined request still unread.
std::function<bool()> client_gone_probe(const httplib::Request& req) {
  struct Probe {
    const httplib::Request* req;
    int fd = -2;  // -2: not looked up yet; -1: not found
    std::chrono::steady_clock::time_point next_check = std::chrono::steady_clock::now() + kStreamPoll;
  };
  return [probe = std::make_shared<Probe>(Probe{&req})] {
    const auto now = std::chrono::steady_clock::now();
    if (now < probe->next_check) return false;
    probe->next_check = now + kStreamPoll;
    if (probe->fd == -2) probe->fd = connection_fd(*probe->req);
    if (probe->fd < 0) return false;
    pollfd p{probe->fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
}

EndpointContext with_client(const EndpointContext& ctx, const httplib::Request& req) {
  EndpointContext c = ctx;
  c.client_gone = client_gone_probe(req);
  return c;
}

}  // namespace

bool api_key_matches(const std::string& authorization, const std::string& api_key) {
  const std::string expected = "Bearer " + api_key;
  if (authorization.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(authorization[i] ^ expected[i]);
  return diff == 0;
}

struct HttpServer::Impl {
  explicit Impl(EndpointContext context) : ctx(context) {}
  httplib::Server http;
  EndpointContext ctx;
};

HttpServer::HttpServer(ServerConfig config, GenerationBackend& backend)
    : config_(std::move(config)),
      backend_(backend),
      metrics_(config_.served_model_names.empty() ? backend.model_info().model_path : config_.served_model_names[0]) {
  if (config_.served_model_names.empty()) config_.served_model_names.push_back(backend.model_info().model_path);
  impl_ = std::make_unique<Impl>(EndpointContext{backend_, metrics_, config_, stopping_, nullptr});
  auto& http = impl_->http;
  const auto threads = static_cast<std::size_t>(std::max(config_.http_threads, 2));
  // httplib's API takes ownership of a raw TaskQueue pointer.
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(config_.max_body_bytes);
  http.set_read_timeout(config_.read_timeout_s, 0);
  http.set_write_timeout(config_.write_timeout_s, 0);
  http.set_keep_alive_timeout(config_.keep_alive_timeout_s);
  http.set_keep_alive_max_count(static_cast<std::size_t>(config_.keep_alive_max_count));
  http.set_tcp_nodelay(true);  // token-sized SSE writes must not wait for Nagle
  install_routes();
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::install_routes() {
  auto& http = impl_->http;
  const EndpointContext& ctx = impl_->ctx;
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (config_.api_key.empty() || is_public_path(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    if (api_key_matches(req.get_header_value("Authorization"), config_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.", "",
                             "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Wraps an endpoint: errors become OpenAI bodies, streams become chunked SSE.
  auto route = [this](std::function<Reply(const httplib::Request&)> endpoint) {
    return [this, endpoint = std::move(endpoint)](const httplib::Request& req, httplib::Response& res) {
      try {
        Reply reply = endpoint(req);
        if (reply.stream) send_stream(res, std::move(reply.stream), stopping_, config_.sse_heartbeat_s);
        else {
          res.status = reply.status;
          res.set_content(reply.body, reply.content_type);
        }
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        log::error("server: {} {} failed: {}", req.method, req.path, e.what());
        send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
      }
    };
  };
  http.Post("/v1/completions",
            route([&ctx](const auto& req) { return handle_completions(with_client(ctx, req), req.body); }));
  http.Post("/v1/chat/completions",
            route([&ctx](const auto& req) { return handle_chat_completions(with_client(ctx, req), req.body); }));
  http.Post("/tokenize", route([&ctx](const auto& req) { return handle_tokenize(ctx, req.body); }));
  http.Post("/detokenize", route([&ctx](const auto& req) { return handle_detokenize(ctx, req.body); }));
  http.Get("/v1/models", route([&ctx](const auto&) { return handle_models(ctx); }));
  http.Get(R"(/v1/models/(.+))", route([&ctx](const auto& req) { return handle_model(ctx, req.matches[1].str()); }));
  http.Get("/metrics", route([this](const auto&) {
    return Reply{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(backend_.stats()), nullptr};
  }));
  http.Get("/health", route([this](const auto&) {
    if (!backend_.healthy()) throw ApiError(503, "The engine is not running.", "", "engine_dead");
    return Reply{200, "application/json", "{}", nullptr};
  }));
  http.Get("/ping", route([](const auto&) { return Reply{200, "application/json", "{}", nullptr}; }));
  http.Get("/version", route([](const auto&) {
    return Reply{200, "application/json", dump_json({{"version", DEEPINFER_VERSION}}), nullptr};
  }));
  // Statuses httplib sets itself (404 no route, 405, 413 body too large, 400 bad HTTP) get an
  // OpenAI body too; replies that already have one are left alone.
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = fmt::format("HTTP {}", res.status);
    std::string code;
    if (res.status == 404) message = fmt::format("Route {} {} not found.", req.method, req.path), code = "not_found";
    if (res.status == 413) message = "Request body too large.", code = "body_too_large";
    send_json(res, res.status, dump_json(error_body(res.status, message, "", code)));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.observe_http(handler_label(req.path), res.status);
    log::debug("server: {} {} -> {}", req.method, req.path, res.status);
  });
}

int HttpServer::bind() {
  // A client that disconnects must not kill the process with SIGPIPE when we write to it.
  std::signal(SIGPIPE, SIG_IGN);
  auto& http = impl_->http;
  if (config_.port == 0) {
    const int port = http.bind_to_any_port(config_.host);
    DI_CHECK(port > 0, "server: cannot bind {} on any port", config_.host);
    config_.port = port;
    return port;
  }
  DI_CHECK(http.bind_to_port(config_.host, config_.port), "server: cannot bind {}:{} (in use or not an address of this host)",
           config_.host, config_.port);
  return config_.port;
}

void HttpServer::serve() {
  log::info("server: listening on http://{}:{}", config_.host, config_.port);
  impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  stopping_.store(true);
  if (impl_) impl_->http.stop();
}

}  // namespace deepinfer::server
