#include "engine/client/load_generator.h"

#include <algorithm>
#include <deque>

#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "engine/client/openai_protocol.h"

namespace servesim {

namespace asio = boost::asio;

namespace {

class LoadRun {
 public:
  LoadRun(const HttpEndpoint& endpoint, const LoadPlan& plan, const std::function<void(const LoadProgress&)>& progress)
      : endpoint_(endpoint), plan_(plan), progress_(progress), pool_(io_, resolve_endpoint(io_, endpoint), plan.keep_alive),
        arrival_timer_(io_), progress_timer_(io_) {
    result_.requests.resize(plan.requests.size());
  }

  LoadResult run() {
    result_.started_at = std::chrono::system_clock::now();
    start_ = BenchClock::now();
    const auto total = int64_t(plan_.requests.size());
    if (plan_.closed_loop) {
      for (int64_t c = 0; c < plan_.concurrency && next_ < total; ++c) send(next_++);
    } else {
      schedule_arrivals();
    }
    tick_progress();
    io_.run();
    result_.duration_s = last_end_s_;
    result_.connections_opened = pool_.opened;
    result_.connections_reused = pool_.reused;
    result_.resent = pool_.retried;
    report();
    return std::move(result_);
  }

 private:
  double now_s() const { return std::chrono::duration<double>(BenchClock::now() - start_).count(); }
  double since_start(BenchClock::time_point t) const { return std::chrono::duration<double>(t - start_).count(); }

  // Open loop: every request whose time has come is sent (or queued behind
  // --max-concurrency); the timer waits for the next one.
  void schedule_arrivals() {
    const auto total = int64_t(plan_.requests.size());
    while (next_ < total && plan_.requests[size_t(next_)].arrival_s <= now_s()) {
      if (plan_.max_concurrency > 0 && in_flight_ >= plan_.max_concurrency)
        waiting_.push_back(next_);
      else
        send(next_);
      ++next_;
    }
    if (next_ >= total) return;
    arrival_timer_.expires_at(start_ + std::chrono::duration_cast<BenchClock::duration>(
                                           std::chrono::duration<double>(plan_.requests[size_t(next_)].arrival_s)));
    arrival_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) schedule_arrivals();
    });
  }

  void send(int64_t index) {
    const PlannedRequest& p = plan_.requests[size_t(index)];
    RequestMeasurement& m = result_.requests[size_t(index)];
    m.sent = true;
    m.send_s = now_s();
    ++in_flight_;
    result_.max_in_flight = std::max(result_.max_in_flight, in_flight_);
    StreamCallbacks cb;
    cb.on_event = [this, index](std::string_view data, BenchClock::time_point t) {
      return on_event(index, data, t);
    };
    cb.on_done = [this, index](const StreamOutcome& o, BenchClock::time_point t) { on_done(index, o, t); };
    start_streamed_post(pool_, endpoint_, plan_.target, p.body, plan_.api_key, plan_.timeout_s, std::move(cb));
  }

  bool on_event(int64_t index, std::string_view data, BenchClock::time_point t) {
    RequestMeasurement& m = result_.requests[size_t(index)];
    StreamEvent ev = parse_stream_event(data);
    if (ev.done) return false;
    if (ev.error) {
      m.error = "the server's stream reported an error: " + *ev.error;
      return false;
    }
    if (ev.token_chunk) {
      m.chunk_s.push_back(since_start(t));
      m.text += ev.text;
    }
    if (ev.completion_tokens) m.usage_output_tokens = ev.completion_tokens;
    if (ev.prompt_tokens) m.usage_prompt_tokens = ev.prompt_tokens;
    return true;
  }

  void on_done(int64_t index, const StreamOutcome& o, BenchClock::time_point t) {
    RequestMeasurement& m = result_.requests[size_t(index)];
    m.end_s = since_start(t);
    m.http_status = o.http_status;
    if (m.error.empty()) m.error = o.error;
    if (m.error.empty() && m.chunk_s.empty())
      m.error = "the answer streamed no token chunk (was \"stream\": true honoured?)";
    last_end_s_ = std::max(last_end_s_, m.end_s);
    --in_flight_;
    ++done_;
    if (!m.ok()) ++errors_;
    const auto total = int64_t(plan_.requests.size());
    if (plan_.closed_loop) {
      if (next_ < total) send(next_++);
    } else if (!waiting_.empty()) {
      const int64_t next = waiting_.front();
      waiting_.pop_front();
      send(next);
    }
    if (done_ == total) {
      arrival_timer_.cancel();
      progress_timer_.cancel();
    }
  }

  void report() {
    if (!progress_) return;
    LoadProgress p;
    p.done = done_;
    p.total = int64_t(plan_.requests.size());
    p.errors = errors_;
    p.in_flight = in_flight_;
    p.elapsed_s = now_s();
    progress_(p);
  }

  void tick_progress() {
    if (done_ == int64_t(plan_.requests.size())) return;
    progress_timer_.expires_after(std::chrono::seconds(1));
    progress_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      report();
      tick_progress();
    });
  }

  asio::io_context io_;
  HttpEndpoint endpoint_;
  const LoadPlan& plan_;
  const std::function<void(const LoadProgress&)>& progress_;
  ConnectionPool pool_;
  asio::steady_timer arrival_timer_, progress_timer_;
  BenchClock::time_point start_;
  LoadResult result_;
  std::deque<int64_t> waiting_;  // open loop: arrived, waiting for a --max-concurrency slot
  int64_t next_ = 0, in_flight_ = 0, done_ = 0, errors_ = 0;
  double last_end_s_ = 0;
};

}  // namespace

LoadResult run_load(const HttpEndpoint& endpoint, const LoadPlan& plan,
                    const std::function<void(const LoadProgress&)>& progress) {
  LoadRun run(endpoint, plan, progress);
  return run.run();
}

}  // namespace servesim
