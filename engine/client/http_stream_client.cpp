#include "engine/client/http_stream_client.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "engine/client/openai_protocol.h"
#include "engine/client/sse_parser.h"
#include "sim/errors.h"

namespace servesim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string HttpEndpoint::url() const {
  if (host.find(':') != std::string::npos) return fmt::format("http://[{}]:{}{}", host, port, base_path);  // IPv6
  return fmt::format("http://{}:{}{}", host, port, base_path);
}

HttpEndpoint parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    throw InputError(fmt::format("--base-url {}: https is not supported; give an http:// URL (a TLS proxy in "
                                 "front of bench, or the server's plain port)",
                                 url));
  if (url.rfind(scheme, 0) != 0)
    throw InputError(fmt::format("--base-url '{}': expected http://HOST[:PORT][/PATH]", url));
  std::string rest = url.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string::npos)
    throw InputError(fmt::format("--base-url {}: a query or fragment is not allowed", url));
  HttpEndpoint e;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) e.base_path = rest.substr(slash);
  while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
  if (e.base_path.size() >= 3 && e.base_path.compare(e.base_path.size() - 3, 3, "/v1") == 0)
    e.base_path.resize(e.base_path.size() - 3);
  if (authority.find('@') != std::string::npos)
    throw InputError(fmt::format("--base-url {}: credentials in the URL are not supported (set OPENAI_API_KEY)", url));
  std::string host = authority;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) throw InputError(fmt::format("--base-url {}: unclosed '['", url));
    host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') throw InputError(fmt::format("--base-url {}: expected ':PORT' after ']'", url));
      e.port = after.substr(1);
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    e.port = authority.substr(colon + 1);
  }
  if (host.empty()) throw InputError(fmt::format("--base-url {}: no host", url));
  int port = 0;
  const auto [ptr, ec] = std::from_chars(e.port.data(), e.port.data() + e.port.size(), port);
  if (e.port.empty() || ec != std::errc() || ptr != e.port.data() + e.port.size() || port < 1 || port > 65535)
    throw InputError(fmt::format("--base-url {}: port '{}' is not in 1..65535", url, e.port));
  e.host = host;
  return e;
}

tcp::resolver::results_type resolve_endpoint(asio::io_context& io, const HttpEndpoint& endpoint) {
  tcp::resolver resolver(io);
  beast::error_code ec;
  auto results = resolver.resolve(endpoint.host, endpoint.port, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot resolve host '{}': {}", endpoint.host, ec.message()));
  return results;
}

ConnectionPool::ConnectionPool(asio::io_context& io, tcp::resolver::results_type addresses, bool keep_alive)
    : io_(io), addresses_(std::move(addresses)), keep_alive_(keep_alive) {}

namespace {

// An idle connection the server has closed reads as EOF (or holds bytes no
// request asked for): peek without blocking before reusing it.
bool still_usable(tcp::socket& socket) {
  if (!socket.is_open()) return false;
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

std::unique_ptr<beast::tcp_stream> ConnectionPool::take() {
  const auto now = std::chrono::steady_clock::now();
  while (!idle_.empty()) {
    Idle i = std::move(idle_.back());
    idle_.pop_back();
    if (now - i.since <= kMaxIdle && still_usable(i.stream->socket())) {
      ++reused;
      return std::move(i.stream);
    }
    beast::error_code ignored;
    i.stream->socket().close(ignored);
  }
  return nullptr;
}

void ConnectionPool::give(std::unique_ptr<beast::tcp_stream> stream) {
  stream->expires_never();
  idle_.push_back({std::move(stream), std::chrono::steady_clock::now()});
}

namespace {

constexpr size_t kMaxErrorBody = size_t(1) << 20;

// One request/response. Streaming mode (on_event set): a 200 answer's body
// goes through the SSE parser; any other status collects the body for its
// error message. Collect mode: the body is kept.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(ConnectionPool& pool, http::request<http::string_body> request, double timeout_s,
           StreamCallbacks callbacks)
      : pool_(pool), request_(std::move(request)),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_s))),
        timeout_s_(timeout_s), callbacks_(std::move(callbacks)) {}

  void start() {
    stream_ = pool_.take();
    reused_ = stream_ != nullptr;
    if (reused_) {
      stream_->expires_at(deadline_);
      return send();
    }
    connect();
  }

  std::string body;  // collect mode, or a non-200 answer's body
  int status = 0;

 private:
  void connect() {
    stream_ = std::make_unique<beast::tcp_stream>(pool_.io());
    ++pool_.opened;
    // One deadline for the whole exchange: tcp_stream's timer covers every
    // operation started until it is set again.
    stream_->expires_at(deadline_);
    stream_->async_connect(pool_.addresses(), [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return self->fail(ec, "cannot connect to the server");
      // A request's header and body may go as two small writes: Nagle's
      // rule would hold the second until the server's delayed ACK.
      beast::error_code ignored;
      self->stream_->socket().set_option(tcp::no_delay(true), ignored);
      self->send();
    });
  }

  void send() {
    http::async_write(*stream_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_write(ec);
    });
  }

  // A reused connection the server had closed fails before any byte of the
  // answer: the request is sent again once on a new connection.
  bool resend_if_stale(beast::error_code ec) {
    if (!reused_ || ec == beast::error::timeout || buffer_.size() > 0) return false;
    reused_ = false;
    ++pool_.retried;
    close();
    buffer_.clear();
    connect();
    return true;
  }

  void on_write(beast::error_code ec) {
    if (ec) {
      if (resend_if_stale(ec)) return;
      return fail(ec, "sending the request failed");
    }
    parser_.emplace();
    // A long stream is not an error (an error body is capped below). Not
    // boost::none: Boost 1.74 compares the body length with the empty
    // optional and reports the limit exceeded.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    http::async_read_header(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      if (resend_if_stale(ec)) return;
      return fail(ec, "no HTTP answer");
    }
    status = int(parser_->get().result_int());
    streaming_ = callbacks_.on_event && status == 200;
    if (parser_->is_done()) return finish();
    read_more();
  }

  void read_more() {
    auto& b = parser_->get().body();
    b.data = chunk_.data();
    b.size = chunk_.size();
    http::async_read_some(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_read(ec);
    });
  }

  void on_read(beast::error_code ec) {
    const auto now = BenchClock::now();
    if (ec == http::error::need_buffer) ec = {};
    const size_t got = chunk_.size() - parser_->get().body().size;
    if (draining_) {
      if (ec) return close();
      if (parser_->is_done()) return release();
      return read_more();
    }
    if (got > 0) {
      const std::string_view bytes(chunk_.data(), got);
      if (streaming_) {
        events_.clear();
        if (!sse_.feed(bytes, events_)) return fail_with("the event stream has a line over 16 MiB");
        for (const std::string& data : events_) {
          ++events_seen_;
          if (!callbacks_.on_event(data, now)) return report_then_drain(now);
        }
      } else if (body.size() < kMaxErrorBody) {
        body.append(bytes.substr(0, kMaxErrorBody - body.size()));
      }
    }
    if (ec) {
      if (ec == http::error::partial_message || ec == asio::error::eof || ec == http::error::end_of_stream)
        return fail_with(fmt::format("the connection closed mid-answer ({} events received)", events_seen_));
      return fail(ec, "reading the answer failed");
    }
    if (parser_->is_done()) return finish();
    read_more();
  }

  void fail(beast::error_code ec, const char* what) {
    if (ec == beast::error::timeout)
      return fail_with(fmt::format("timed out after {} s (--timeout)", timeout_s_));
    fail_with(fmt::format("{}: {}", what, ec.message()));
  }

  void fail_with(std::string error) {
    StreamOutcome o;
    o.http_status = status;
    o.error = std::move(error);
    close();
    done(o);
  }

  void finish() {
    StreamOutcome o;
    o.http_status = status;
    if (status != 200) o.error = fmt::format("HTTP {}: {}", status, error_message_of_body(body));
    release();
    done(o);
  }

  void done(const StreamOutcome& o) {
    if (finished_) return;
    finished_ = true;
    if (callbacks_.on_done) callbacks_.on_done(o, BenchClock::now());
  }

  // The caller has its answer ([DONE] or an error event): report it now,
  // then read the rest of the body (the chunked terminator) for up to a
  // second, so the server sees its response taken to the end rather than a
  // client that went away mid-stream (which a server may count as an
  // abort), and the connection can serve the next request.
  void report_then_drain(BenchClock::time_point now) {
    if (!finished_) {
      finished_ = true;
      StreamOutcome o;
      o.http_status = status;
      if (callbacks_.on_done) callbacks_.on_done(o, now);
    }
    if (parser_->is_done()) return release();
    draining_ = true;
    stream_->expires_after(std::chrono::seconds(1));
    read_more();
  }

  // The answer was read to its end: the connection goes back to the pool
  // when both sides keep it alive, else it is closed.
  void release() {
    if (stream_ && pool_.keep_alive() && parser_ && parser_->is_done() && parser_->get().keep_alive() &&
        buffer_.size() == 0) {
      pool_.give(std::move(stream_));
      return;
    }
    close();
  }

  void close() {
    if (!stream_) return;
    beast::error_code ignored;
    stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_->close();
  }

  ConnectionPool& pool_;
  std::unique_ptr<beast::tcp_stream> stream_;
  http::request<http::string_body> request_;
  std::chrono::steady_clock::time_point deadline_;
  double timeout_s_;
  StreamCallbacks callbacks_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 16384> chunk_{};
  SseParser sse_;
  std::vector<std::string> events_;
  int64_t events_seen_ = 0;
  bool reused_ = false, streaming_ = false, finished_ = false, draining_ = false;
};

http::request<http::string_body> make_request(http::verb verb, const HttpEndpoint& endpoint, const std::string& target,
                                              std::string body, const std::string& api_key, bool keep_alive) {
  http::request<http::string_body> req{verb, endpoint.base_path + target, 11};
  const std::string host = endpoint.host.find(':') != std::string::npos ? "[" + endpoint.host + "]" : endpoint.host;
  req.set(http::field::host, endpoint.port == "80" ? host : host + ":" + endpoint.port);
  req.set(http::field::user_agent, "servesim-bench");
  req.keep_alive(keep_alive);
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    req.body() = std::move(body);
    req.prepare_payload();
  }
  return req;
}

}  // namespace

void start_streamed_post(ConnectionPool& pool, const HttpEndpoint& endpoint, const std::string& target,
                         std::string body, const std::string& api_key, double timeout_s, StreamCallbacks callbacks) {
  std::make_shared<Exchange>(pool,
                             make_request(http::verb::post, endpoint, target, std::move(body), api_key,
                                          pool.keep_alive()),
                             timeout_s, std::move(callbacks))
      ->start();
}

HttpAnswer http_get(const HttpEndpoint& endpoint, const std::string& target, const std::string& api_key,
                    double timeout_s) {
  asio::io_context io;
  HttpAnswer answer;
  tcp::resolver::results_type addresses;
  try {
    addresses = resolve_endpoint(io, endpoint);
  } catch (const std::runtime_error& e) {
    answer.error = e.what();
    return answer;
  }
  ConnectionPool pool(io, addresses, /*keep_alive=*/false);
  StreamCallbacks callbacks;
  callbacks.on_done = [&](const StreamOutcome& o, BenchClock::time_point) {
    answer.status = o.http_status;
    if (o.http_status == 0 || o.error.rfind("HTTP ", 0) != 0) answer.error = o.error;
  };
  auto exchange = std::make_shared<Exchange>(
      pool, make_request(http::verb::get, endpoint, target, {}, api_key, false), timeout_s, std::move(callbacks));
  exchange->start();
  io.run();
  answer.body = std::move(exchange->body);
  return answer;
}

}  // namespace servesim
