// `servesim serve`: the built-in decoder behind an OpenAI-compatible HTTP
// server -- the same scheduler as run and simulate, requests arriving from
// connections -- with vLLM's Prometheus metrics at /metrics.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/engine_options.h"
#include "engine/decoder_run.h"
#include "engine/server/http_server.h"
#include "engine/server/online_engine.h"
#include "engine/server/serving_metrics.h"
#include "engine/text/tokenizer.h"
#include "sim/errors.h"
#include "validate/iteration_log.h"

namespace servesim::cli {

namespace {

po::options_description server_options() {
  po::options_description o("Server", kHelpWidth);
  o.add_options()
      ("host", po::value<std::string>()->default_value("127.0.0.1"),
       "address to listen on (loopback by default; give --api-key when binding elsewhere)")
      ("port", po::value<int>()->default_value(8000), "TCP port (0: any free port, printed at start)")
      ("served-model-name", po::value<std::string>(), "the model name clients send (default: --model)")
      ("api-key", po::value<std::string>(), "require 'Authorization: Bearer KEY' on /v1/* (compared in constant time)")
      ("tokenizer", po::value<std::string>(),
       "a Hugging Face tokenizer.json (byte-level BPE); default: the one in --weights, else byte-level")
      ("max-waiting", po::value<int64_t>()->default_value(1024),
       "requests waiting to be scheduled at most; beyond it 503 with Retry-After")
      ("max-body-bytes", po::value<int64_t>()->default_value(1 << 20), "largest request body (413 beyond)")
      ("shutdown-grace", po::value<double>()->default_value(30.0, "30"),
       "on SIGTERM/SIGINT: seconds to finish requests in flight before aborting them")
      ("iteration-log", po::value<std::string>(),
       "write every iteration the engine executes (its sequences' query and cached tokens, the measured seconds) "
       "to this file, one JSON line each, flushed per line; `servesim validate --measured RUN --iteration-log "
       "FILE` then costs each with a prediction's cost model (docs/validation.md)");
  return o;
}

std::unique_ptr<Tokenizer> tokenizer_for(const po::variables_map& vm, const EngineSetup& setup) {
  if (vm.count("tokenizer")) return load_tokenizer_json(vm["tokenizer"].as<std::string>(), setup.model.vocab_size);
  if (setup.weights_dir) {
    const std::filesystem::path file = std::filesystem::path(*setup.weights_dir) / "tokenizer.json";
    if (std::filesystem::exists(file)) return load_tokenizer_json(file.string(), setup.model.vocab_size);
  }
  return make_byte_tokenizer(setup.model.vocab_size);
}

}  // namespace

int serve_command(int argc, const char* const* argv) {
  po::options_description general(
      "servesim serve: the built-in decoder behind an OpenAI-compatible HTTP API (POST /v1/completions, "
      "/v1/chat/completions; GET /v1/models, /health, /metrics)\n\nGeneral", kHelpWidth);
  general.add_options()("help,h", "show this help");
  add_engine_options(general);
  add_speculative_engine_options(general);
  po::options_description hidden;  // read by engine_setup_from, not used by a server
  hidden.add(workload_options(engine_workload_defaults())).add(slo_options());
  po::options_description visible(kHelpWidth);
  visible.add(general).add(server_options()).add(scheduler_options());
  po::options_description all;
  all.add(visible).add(hidden);
  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << visible
              << "\nServes until SIGTERM or SIGINT, then finishes what is in flight within --shutdown-grace "
                 "and exits 0.\nExit status: 0 success, 2 bad input (the message says which), 1 runtime failure.\n";
    return 0;
  }

  const EngineSetup setup = engine_setup_from(vm);
  HttpServerOptions http;
  http.host = vm["host"].as<std::string>();
  boost::system::error_code bad_host;
  boost::asio::ip::make_address(http.host, bad_host);
  if (bad_host) throw InputError(fmt::format("--host: '{}' is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)", http.host));
  const int port = vm["port"].as<int>();
  if (port < 0 || port > 65535) throw InputError(fmt::format("--port must be in 0 .. 65535 (got {})", port));
  http.port = uint16_t(port);
  if (vm.count("api-key")) {
    http.api_key = vm["api-key"].as<std::string>();
    if (http.api_key->empty()) throw InputError("--api-key is empty");
  }
  const int64_t max_body = vm["max-body-bytes"].as<int64_t>();
  if (max_body < 1024) throw InputError(fmt::format("--max-body-bytes must be >= 1024 (got {})", max_body));
  http.max_body_bytes = size_t(max_body);
  OnlineEngineOptions engine_options;
  engine_options.max_waiting = vm["max-waiting"].as<int64_t>();
  if (engine_options.max_waiting < 1)
    throw InputError(fmt::format("--max-waiting must be >= 1 (got {})", engine_options.max_waiting));
  // Checked here, opened (and truncated) once the model has loaded, so that a
  // bad flag or weights file leaves an earlier log as it was.
  if (vm.count("iteration-log")) check_writable(vm["iteration-log"].as<std::string>());
  const double grace = vm["shutdown-grace"].as<double>();
  if (!(grace >= 0)) throw InputError(fmt::format("--shutdown-grace must be >= 0 (got {})", grace));
  const std::string model_name =
      vm.count("served-model-name") ? vm["served-model-name"].as<std::string>() : setup.model.name;
  if (model_name.empty()) throw InputError("--served-model-name must not be empty: clients send it as \"model\"");
  const std::unique_ptr<Tokenizer> tokenizer = tokenizer_for(vm, setup);

  ServedDecoder decoder = build_served_decoder(setup);
  std::fprintf(stderr, "serve: %s; tokenizer %s\n", decoder.ready_line.c_str(), tokenizer->name().c_str());
  std::unique_ptr<IterationLogWriter> iteration_log;
  if (vm.count("iteration-log")) {
    iteration_log = std::make_unique<IterationLogWriter>(vm["iteration-log"].as<std::string>());
    engine_options.on_iteration = [log = iteration_log.get()](const IterationPlan& plan, const IterationResult& result,
                                                              double start_s) { log->write(plan, result, start_s); };
  }
  Scheduler scheduler(decoder.scheduler);
  ServingMetrics metrics(model_name);
  OnlineEngine engine(scheduler, *decoder.executor, metrics, engine_options);

  ApiContext context;
  context.model_name = model_name;
  context.tokenizer = tokenizer.get();
  context.vocab_size = setup.model.vocab_size;
  context.max_model_len = decoder.scheduler.max_model_len;

  boost::asio::io_context io(1);
  HttpServer server(io, engine, metrics, context, http);
  server.start();
  if (http.host != "127.0.0.1" && http.host != "::1" && !http.api_key)
    std::fprintf(stderr, "serve: warning: listening on %s without --api-key: anyone who reaches it can use it\n",
                 http.host.c_str());

  // Once the engine has drained: let the last answers go out (for up to
  // 5 s), then stop the io loop. The timer and the poll live here, past
  // io.run(), so no handler has to own them.
  boost::asio::steady_timer drain_timer(io);
  std::chrono::steady_clock::time_point drain_deadline;
  std::function<void()> stop_once_answered = [&] {
    if (server.active_requests() == 0 || std::chrono::steady_clock::now() > drain_deadline) return io.stop();
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([&](const boost::system::error_code&) { stop_once_answered(); });
  };
  std::thread engine_thread([&] {
    try {
      engine.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "serve: engine failed: %s\n", e.what());
      std::_Exit(1);
    }
    boost::asio::post(io, [&] {
      drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      stop_once_answered();
    });
  });

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    std::fprintf(stderr, "serve: %s: no new requests; finishing those in flight (up to %.0f s)\n",
                 signal == SIGTERM ? "SIGTERM" : "SIGINT", grace);
    server.stop_accepting();
    engine.drain(grace);
  });
  std::fprintf(stderr, "serve: listening on http://%s:%u (model '%s')\n", http.host.c_str(), unsigned(server.port()),
               model_name.c_str());
  std::fflush(stderr);
  io.run();
  engine_thread.join();
  const OnlineEngine::State state = engine.state();
  std::fprintf(stderr, "serve: stopped after %lld requests\n", static_cast<long long>(state.completed));
  return 0;
}

}  // namespace servesim::cli
