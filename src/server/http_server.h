// The HTTP front of `deepinfer serve`: cpp-httplib on its own thread pool, routing to the
// OpenAI endpoints, API-key checks, body limits, timeouts and OpenAI-format errors. It only talks
// to the engine through a GenerationBackend, whose loop runs on a thread of its own.
#pragma once

#include <atomic>
#include <memory>

#include "server/generation_backend.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace deepinfer::server {

class HttpServer {
 public:
  // served_model_names defaults to the backend's model path.
  HttpServer(ServerConfig config, GenerationBackend& backend);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket and returns its port (an ephemeral one when config.port is 0).
  // Throws deepinfer::Error if the address cannot be bound.
  int bind();
  // Accepts and serves connections until stop(); call bind() first.
  void serve();
  // Stops accepting, ends open streams and makes serve() return. Safe from any thread.
  void stop();

  const ServerConfig& config() const { return config_; }
  ServerMetrics& metrics() { return metrics_; }

 private:
  struct Impl;
  void install_routes();

  ServerConfig config_;
  GenerationBackend& backend_;
  ServerMetrics metrics_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Impl> impl_;
};

// True when `authorization` is "Bearer <api_key>" (compared in constant time).
bool api_key_matches(const std::string& authorization, const std::string& api_key);

}  // namespace deepinfer::server
