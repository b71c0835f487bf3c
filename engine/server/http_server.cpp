#include "engine/server/http_server.h"

#include <array>
#include <chrono>
#include <deque>
#include <utility>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/server/completion_stream.h"
#include "sim/errors.h"

namespace servesim {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is looked at, whatever matches.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= unsigned(x ^ y);
  }
  return diff == 0;
}

struct HttpServer::Shared {
  Shared(OnlineEngine& e, ServingMetrics& m, ApiContext c, HttpServerOptions o)
      : engine(e), metrics(m), context(std::move(c)), options(std::move(o)) {}
  OnlineEngine& engine;
  ServingMetrics& metrics;
  ApiContext context;
  HttpServerOptions options;
  std::atomic<int64_t> next_completion{0};
};

namespace {

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One connection: reads requests one after another (keep-alive) and answers
// each, streaming completions as server-sent events in chunked encoding.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpServer::Shared> shared, std::shared_ptr<std::atomic<int64_t>> active)
      : stream_(std::move(socket)), shared_(std::move(shared)), active_(std::move(active)) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
  }

 private:
  using Request = http::request<http::string_body>;

  void read() {
    parser_.emplace();
    parser_->body_limit(shared_->options.max_body_bytes);
    parser_->header_limit(16 * 1024);
    stream_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(shared_->options.idle_timeout_s)));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::eof) {
      return close();
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return send_error(ApiError(413, fmt::format("the request body is larger than the limit of {} bytes",
                                                  shared_->options.max_body_bytes)));
    }
    if (ec) {
      keep_alive_ = false;
      return send_error(ApiError(400, fmt::format("malformed HTTP request: {}", ec.message())));
    }
    Request request = parser_->release();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    handle(std::move(request));
  }

  void handle(Request&& request) {
    std::string target(request.target());
    if (const size_t q = target.find('?'); q != std::string::npos) target.resize(q);
    const http::verb method = request.method();
    auto only = [&](http::verb allowed) {
      if (method == allowed) return true;
      send_error(ApiError(405, fmt::format("{} is not allowed on {}", std::string(request.method_string()), target)));
      return false;
    };
    if (target == "/health") {
      if (only(http::verb::get)) send_text(http::status::ok, "", "text/plain");
      return;
    }
    if (target == "/metrics") {
      if (only(http::verb::get))
        send_text(http::status::ok, shared_->metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
      return;
    }
    const bool v1 = target == "/v1/models" || target == "/v1/completions" || target == "/v1/chat/completions";
    if (!v1) return send_error(ApiError(404, fmt::format("no route {} (routes: /v1/completions, "
                                                         "/v1/chat/completions, /v1/models, /health, /metrics)",
                                                         target), "", "NotFoundError"));
    if (shared_->options.api_key) {
      const std::string expected = "Bearer " + *shared_->options.api_key;
      const std::string given(request[http::field::authorization]);
      if (!constant_time_equal(given, expected))
        return send_error(ApiError(401, "missing or wrong API key (Authorization: Bearer <key>)", "",
                                   "AuthenticationError"));
    }
    if (target == "/v1/models") {
      if (!only(http::verb::get)) return;
      nlohmann::json model = {{"id", shared_->context.model_name}, {"object", "model"}, {"created", unix_time()},
                              {"owned_by", "servesim"}, {"root", shared_->context.model_name},
                              {"max_model_len", shared_->context.max_model_len}};
      return send_text(http::status::ok, nlohmann::json{{"object", "list"}, {"data", {model}}}.dump(),
                       "application/json");
    }
    if (!only(http::verb::post)) return;
    const ApiEndpoint endpoint =
        target == "/v1/completions" ? ApiEndpoint::Completions : ApiEndpoint::ChatCompletions;
    try {
      start_completion(parse_completion_request(request.body(), endpoint, shared_->context));
    } catch (const ApiError& e) {
      send_error(e);
    } catch (const InputError& e) {
      send_error(ApiError(400, e.what()));
    }
  }

  void start_completion(CompletionRequest&& request) {
    const int64_t n = shared_->next_completion++;
    const bool chat = request.endpoint == ApiEndpoint::ChatCompletions;
    completion_.emplace(request, *shared_->context.tokenizer, fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", n),
                        unix_time());
    streaming_ = request.stream;
    chat_ = chat;
    include_usage_ = request.include_usage;
    headers_sent_ = false;
    OnlineRequest online;
    online.max_tokens = request.max_tokens;
    online.input.prompt = std::move(request.prompt_ids);
    online.input.sampling.temperature = request.temperature;
    online.input.sampling.top_p = request.top_p;
    if (request.seed) {
      online.input.seeded = true;
      online.input.sampling.seed = *request.seed;
    }
    online.input.stop_at_eos = !request.ignore_eos;
    online.input.min_tokens = request.min_tokens;
    online.input.stop_token_ids = request.stop_token_ids;
    // The engine's events come on its thread: hand them to this connection's.
    std::weak_ptr<Session> weak = shared_from_this();
    auto executor = stream_.get_executor();
    auto sink = [weak, executor](EngineEvent&& e) {
      net::post(executor, [weak, e = std::move(e)]() mutable {
        if (auto self = weak.lock()) self->on_event(std::move(e));
      });
    };
    // The session stays alive while its request is in the engine.
    self_while_running_ = shared_from_this();
    switch (shared_->engine.submit(std::move(online), sink, &request_id_)) {
      case OnlineEngine::Admission::Accepted:
        ++*active_;
        in_engine_ = true;
        watch_disconnect();
        return;
      case OnlineEngine::Admission::QueueFull:
        self_while_running_.reset();
        return send_error(ApiError(503, "the server is overloaded: too many requests waiting (--max-waiting)"), 1);
      case OnlineEngine::Admission::Draining:
        self_while_running_.reset();
        keep_alive_ = false;
        return send_error(ApiError(503, "the server is shutting down"), 5);
    }
  }

  // A client that goes away while its request runs aborts it: the socket
  // turns readable with nothing to read.
  void watch_disconnect() {
    const int64_t id = request_id_;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), id](beast::error_code ec) {
      // A watch left from an earlier request of this connection says nothing.
      if (ec || !self->in_engine_ || self->request_id_ != id) return;
      beast::error_code ignored;
      if (self->stream_.socket().available(ignored) == 0) {
        self->client_gone();
      }
      // Otherwise the client sent more (a pipelined request): read it later.
    });
  }

  void client_gone() {
    if (in_engine_) shared_->engine.abort(request_id_);
    keep_alive_ = false;
    gone_ = true;
  }

  void on_event(EngineEvent&& e) {
    if (!in_engine_) return;
    if (e.finished && e.finish_reason == "rejected") {
      end_request();
      return send_error(ApiError(400, e.error));
    }
    CompletionStream& c = *completion_;
    std::string text = c.add_tokens(e.tokens);
    usage_.prompt_tokens = e.prompt_tokens;
    usage_.cached_tokens = e.cached_tokens;
    usage_.completion_tokens = c.completion_tokens();
    if (c.stopped() && !e.finished) {
      // A stop string ended the output: the engine drops the request.
      shared_->engine.abort(request_id_, "stop");
    }
    if (!e.finished) {
      if (streaming_) {
        if (!headers_sent_) send_stream_headers();
        if (!text.empty()) queue_chunk(c.delta_event(text, std::nullopt));
      }
      return;
    }
    const std::string reason = c.stopped() || e.finish_reason == "stop" ? "stop" : e.finish_reason;
    if (!c.stopped()) text += c.flush();
    end_request();
    if (gone_) return close();
    if (!streaming_) {
      return send_text(http::status::ok, c.full_response(reason, usage_), "application/json");
    }
    if (!headers_sent_) send_stream_headers();
    // The last tokens' text and the finish reason in one chunk, as vLLM
    // sends them (a chunk of its own would count as one more token gap).
    queue_chunk(c.delta_event(text, reason));
    if (include_usage_) queue_chunk(c.usage_event(usage_));
    queue_chunk(CompletionStream::done_event());
    queue_last_chunk();
  }

  void end_request() {
    if (!in_engine_) return;
    in_engine_ = false;
    --*active_;
    self_while_running_.reset();
  }

  // --- streamed responses: a header, chunks, the last chunk, one write at a time.
  struct Pending {
    enum Kind { Header, Chunk, Last } kind;
    std::string data;
  };

  void send_stream_headers() {
    headers_sent_ = true;
    stream_response_.emplace(http::status::ok, version_);
    stream_response_->set(http::field::content_type, "text/event-stream");
    stream_response_->set(http::field::cache_control, "no-cache");
    stream_response_->keep_alive(keep_alive_);
    stream_response_->chunked(true);
    serializer_.emplace(*stream_response_);
    writes_.push_back(Pending{Pending::Header, {}});
    if (chat_) {
      writes_.push_back(Pending{Pending::Chunk, completion_->role_event()});
    } else if (!completion_->prompt_text().empty()) {  // echo
      writes_.push_back(Pending{Pending::Chunk, completion_->delta_event(completion_->prompt_text(), std::nullopt)});
    }
    write_next();
  }
  void queue_chunk(std::string data) {
    writes_.push_back(Pending{Pending::Chunk, std::move(data)});
    if (writes_.size() == 1) write_next();
  }
  void queue_last_chunk() {
    writes_.push_back(Pending{Pending::Last, {}});
    if (writes_.size() == 1) write_next();
  }

  void write_next() {
    if (writes_.empty() || writing_) return;
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(60));  // a client that stops reading is dropped
    auto done = [self = shared_from_this()](beast::error_code ec, size_t) { self->on_written(ec); };
    Pending& p = writes_.front();
    switch (p.kind) {
      case Pending::Header: http::async_write_header(stream_, *serializer_, done); break;
      case Pending::Chunk: net::async_write(stream_, http::make_chunk(net::buffer(p.data)), done); break;
      case Pending::Last: net::async_write(stream_, http::make_chunk_last(), done); break;
    }
  }

  void on_written(beast::error_code ec) {
    writing_ = false;
    if (ec) {
      writes_.clear();
      client_gone();
      if (!in_engine_) close();
      return;
    }
    const bool last = writes_.front().kind == Pending::Last;
    writes_.pop_front();
    if (last) return after_response();
    write_next();
  }

  // --- whole responses
  void send_error(const ApiError& e, int retry_after_s = 0) {
    http::response<http::string_body> res{http::int_to_status(unsigned(e.status())), version_};
    res.set(http::field::content_type, "application/json");
    if (retry_after_s > 0) res.set(http::field::retry_after, std::to_string(retry_after_s));
    res.body() = e.body();
    send(std::move(res));
  }
  void send_text(http::status status, std::string body, const char* content_type) {
    http::response<http::string_body> res{status, version_};
    res.set(http::field::content_type, content_type);
    res.body() = std::move(body);
    send(std::move(res));
  }
  void send(http::response<http::string_body>&& res) {
    res.set(http::field::server, "servesim");
    res.keep_alive(keep_alive_);
    res.prepare_payload();
    auto message = std::make_shared<http::response<http::string_body>>(std::move(res));
    stream_.expires_after(std::chrono::seconds(60));
    http::async_write(stream_, *message, [self = shared_from_this(), message](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->after_response();
    });
  }

  void after_response() {
    if (!keep_alive_ || gone_) return close();
    read();
  }

  // Closing right after an error response would reset the connection while
  // the client's unread bytes (the rest of a rejected request) are still
  // queued, and a reset can discard the response before the client reads it.
  // So, as nginx's lingering close does: shut the sending side, read and drop
  // what the client still sends for a bounded time, then close.
  void close() {
    end_request();
    if (closing_) return;
    closing_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (!stream_.socket().is_open()) return;
    stream_.expires_after(std::chrono::seconds(2));
    linger();
  }
  void linger() {
    stream_.async_read_some(net::buffer(linger_buffer_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->lingered_bytes_ += n;
      if (ec || self->lingered_bytes_ > kMaxLingerBytes) {
        beast::error_code ignored;
        self->stream_.socket().close(ignored);
        return;
      }
      self->linger();
    });
  }
  static constexpr size_t kMaxLingerBytes = 1 << 20;

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpServer::Shared> shared_;
  std::shared_ptr<std::atomic<int64_t>> active_;
  std::shared_ptr<Session> self_while_running_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool closing_ = false;
  std::array<char, 4096> linger_buffer_;
  size_t lingered_bytes_ = 0;

  std::optional<CompletionStream> completion_;
  CompletionUsage usage_;
  int64_t request_id_ = -1;
  bool streaming_ = false, headers_sent_ = false, in_engine_ = false, gone_ = false;
  bool chat_ = false, include_usage_ = false;
  std::optional<http::response<http::empty_body>> stream_response_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::deque<Pending> writes_;
  bool writing_ = false;
};

}  // namespace

HttpServer::HttpServer(net::io_context& io, OnlineEngine& engine, ServingMetrics& metrics, ApiContext context,
                       HttpServerOptions options)
    : io_(io), acceptor_(net::make_strand(io)),
      shared_(std::make_shared<Shared>(engine, metrics, std::move(context), std::move(options))),
      active_(std::make_shared<std::atomic<int64_t>>(0)) {}

HttpServer::~HttpServer() = default;

void HttpServer::start() {
  beast::error_code ec;
  const auto address = net::ip::make_address(shared_->options.host, ec);
  if (ec) throw InputError(fmt::format("--host: '{}' is not an IP address", shared_->options.host));
  const tcp::endpoint endpoint(address, shared_->options.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw InputError(fmt::format("cannot listen on {}:{}: {}", shared_->options.host, shared_->options.port,
                                 ec.message()));
  bound_port_ = acceptor_.local_endpoint().port();
  accept();
}

void HttpServer::stop_accepting() {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
  });
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      // Streamed chunks are small writes: without TCP_NODELAY, Nagle's rule
      // holds each one until the client's (delayed) ACK of the previous one,
      // up to 40 ms of latency no real server adds.
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), shared_, active_)->start();
    }
    accept();
  });
}

}  // namespace servesim
