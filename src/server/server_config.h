// ServerConfig: everything `deepinfer serve` sets for the HTTP side (the engine has its own).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace deepinfer::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (tests)
  std::string api_key;  // empty: no authentication
  // Names clients may use in "model"; the first is echoed in responses. Empty: the model path.
  std::vector<std::string> served_model_names;
  std::size_t max_body_bytes = 32u << 20;  // larger bodies get 413
  int http_threads = 256;                  // each open connection holds one while active
  int read_timeout_s = 30;                 // a client that stops sending its request
  int write_timeout_s = 30;                // a client that stops reading its response
  int keep_alive_timeout_s = 5;
  int keep_alive_max_count = 100;
  double sse_heartbeat_s = 5.0;  // idle streams get an SSE comment this often
  ChatDefaults chat_defaults;    // --default-chat-template-kwargs
};

}  // namespace deepinfer::server
