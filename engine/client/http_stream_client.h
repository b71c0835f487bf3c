// Streamed HTTP/1.1 POSTs, many at once on one io_context (Boost.Beast):
// `servesim bench`'s transport. Connections are kept alive and reused by
// later requests (as vLLM's aiohttp client does) unless the server says
// "Connection: close"; a connection's setup, when one is needed, is part of
// TTFT, as in vLLM's benchmark, whose timer also starts before the POST.
// Plain http:// only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace servesim {

using BenchClock = std::chrono::steady_clock;

// http://HOST[:PORT][/PATH]; PATH is kept as a prefix of the routes (a
// trailing "/v1" is dropped, so ".../v1" and "..." name the same server).
struct HttpEndpoint {
  std::string host, port = "80", base_path;  // base_path: "" or "/prefix" (no trailing '/')
  std::string url() const;                   // http://host:port/prefix
};
// InputError naming --base-url: another scheme (https is not supported), no
// host, a bad port, a query or fragment.
HttpEndpoint parse_base_url(const std::string& url);

struct StreamOutcome {
  int http_status = 0;  // 0: no HTTP answer came
  std::string error;    // empty: the answer ended as HTTP says it should
};

struct StreamCallbacks {
  // Each server-sent event's data, with the time the bytes holding it were
  // read. Return false to stop reading (an error event).
  std::function<bool(std::string_view data, BenchClock::time_point t)> on_event;
  // Exactly once, with the time the answer ended or failed.
  std::function<void(const StreamOutcome&, BenchClock::time_point t)> on_done;
};

// The connections to one server: idle keep-alive ones are handed to the
// next request. One idle longer than kMaxIdle is closed instead (uvicorn,
// which serves vLLM and SGLang, closes idle connections after 5 s); one the
// server closed anyway fails before its answer starts and the request is
// sent again once, on a new connection.
class ConnectionPool {
 public:
  static constexpr std::chrono::seconds kMaxIdle{2};
  ConnectionPool(boost::asio::io_context& io, boost::asio::ip::tcp::resolver::results_type addresses,
                 bool keep_alive);
  boost::asio::io_context& io() { return io_; }
  const boost::asio::ip::tcp::resolver::results_type& addresses() const { return addresses_; }
  bool keep_alive() const { return keep_alive_; }
  // An idle connection, or nullptr (connect a new one).
  std::unique_ptr<boost::beast::tcp_stream> take();
  void give(std::unique_ptr<boost::beast::tcp_stream> stream);
  int64_t opened = 0, reused = 0, retried = 0;  // connections connected, requests on a reused one, resends

 private:
  struct Idle {
    std::unique_ptr<boost::beast::tcp_stream> stream;
    std::chrono::steady_clock::time_point since;
  };
  boost::asio::io_context& io_;
  boost::asio::ip::tcp::resolver::results_type addresses_;
  bool keep_alive_;
  std::vector<Idle> idle_;  // most recently used last
};

// Starts a POST of `body` (JSON) to `target` and returns at once; the
// pool's io_context runs it. `timeout_s` bounds the whole exchange (connect
// to last byte). An Authorization: Bearer header is sent when `api_key` is
// not empty. The pool must outlive the exchange (run its io_context to the end).
void start_streamed_post(ConnectionPool& pool, const HttpEndpoint& endpoint, const std::string& target,
                         std::string body, const std::string& api_key, double timeout_s, StreamCallbacks callbacks);

struct HttpAnswer {
  int status = 0;     // 0: no answer (error says why)
  std::string body;   // up to 1 MiB
  std::string error;
};

// Resolves the endpoint's host (throws std::runtime_error naming it when it
// cannot be resolved).
boost::asio::ip::tcp::resolver::results_type resolve_endpoint(boost::asio::io_context& io,
                                                              const HttpEndpoint& endpoint);

// A plain GET on its own io_context, for the checks before a run (GET
// /v1/models): blocks at most `timeout_s`.
HttpAnswer http_get(const HttpEndpoint& endpoint, const std::string& target, const std::string& api_key,
                    double timeout_s);

}  // namespace servesim
