// `servesim serve`'s HTTP front (Boost.Beast): the OpenAI-compatible routes
// over the online engine, /health, /v1/models and Prometheus' /metrics.
// One io_context thread runs every connection; the engine thread hands
// each request's tokens over by posting to it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "engine/server/online_engine.h"
#include "engine/server/openai_request.h"
#include "engine/server/serving_metrics.h"

namespace servesim {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;               // 0: any free port (port() tells which)
  std::optional<std::string> api_key;  // Bearer token for /v1/*; none: open
  size_t max_body_bytes = 1 << 20;     // larger bodies get 413
  double idle_timeout_s = 60;          // a connection silent this long is closed
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& io, OnlineEngine& engine, ServingMetrics& metrics, ApiContext context,
             HttpServerOptions options);
  ~HttpServer();

  // Binds and starts accepting (throws InputError when the address cannot
  // be bound, naming it).
  void start();
  uint16_t port() const { return bound_port_; }
  // Stops taking connections; those open finish what they are doing.
  void stop_accepting();
  // Requests whose answer is not fully written yet.
  int64_t active_requests() const { return active_->load(); }

  struct Shared;  // what every connection reads (http_server.cpp)

 private:
  void accept();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<std::atomic<int64_t>> active_;
  uint16_t bound_port_ = 0;
};

// Constant-time comparison (an API key must not leak through timing).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace servesim
