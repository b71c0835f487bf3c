// `servesim bench`: a load generator that measures any OpenAI-compatible
// server (vLLM, SGLang, TGI, servesim serve) under the workloads `simulate`
// predicts: the same workload flags draw the same requests. Writes the same
// summary.json and requests.csv as run and simulate, plus vllm_result.json
// in the shape of vLLM's `bench serve --save-result` (docs/bench.md).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/output.h"
#include "engine/client/bench_prompts.h"
#include "engine/client/bench_results.h"
#include "engine/client/load_generator.h"
#include "engine/client/openai_protocol.h"
#include "engine/client/server_metrics.h"
#include "sim/config_json.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "sim/units.h"

namespace servesim::cli {

namespace {

bool given(const po::variables_map& vm, const char* flag) { return vm.count(flag) > 0 && !vm[flag].defaulted(); }

// Every stream holds a socket: let the run use as many as the hard limit allows.
void raise_open_file_limit() {
  rlimit l{};
  if (getrlimit(RLIMIT_NOFILE, &l) == 0 && l.rlim_cur < l.rlim_max) {
    l.rlim_cur = l.rlim_max;
    setrlimit(RLIMIT_NOFILE, &l);
  }
}

// The model the server serves: --model, else the first of GET /v1/models.
// Also the check that the server is up. Empty: an error was printed.
std::optional<std::string> check_server(const HttpEndpoint& endpoint, const po::variables_map& vm,
                                        const std::string& api_key) {
  const HttpAnswer a = http_get(endpoint, "/v1/models", api_key, 10.0);
  if (a.status == 0) {
    std::fprintf(stderr, "servesim bench: cannot reach the server at %s: %s (is it running?)\n",
                 endpoint.url().c_str(), a.error.c_str());
    return std::nullopt;
  }
  if (vm.count("model")) return vm["model"].as<std::string>();
  if (a.status == 200) {
    const auto j = nlohmann::json::parse(a.body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
        j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
      return j["data"][0]["id"].get<std::string>();
  }
  std::fprintf(stderr,
               "servesim bench: GET %s/v1/models answered HTTP %d without a model list; give --model\n",
               endpoint.url().c_str(), a.status);
  return std::nullopt;
}

constexpr size_t kMaxGetBodyBytes = size_t(1) << 20;  // what http_get keeps of a body

// The server's /metrics as samples; nullopt (and why, once, on stderr) where
// it has none or answers something that is not the Prometheus text format.
std::optional<std::vector<PromSample>> scrape_metrics(const HttpEndpoint& endpoint, const std::string& api_key,
                                                      bool quiet) {
  const HttpAnswer a = http_get(endpoint, "/metrics", api_key, 10.0);
  std::string why;
  if (a.status != 200) {
    why = a.status == 0 ? a.error : fmt::format("HTTP {}", a.status);
  } else if (!a.error.empty()) {
    why = "the answer was cut off: " + a.error;
  } else if (a.body.size() >= kMaxGetBodyBytes) {
    why = "an answer of 1 MiB or more (http_get keeps only the first 1 MiB)";
  } else {
    try {
      return parse_prometheus_text(a.body);
    } catch (const std::invalid_argument& e) {
      why = fmt::format("not the Prometheus text format ({})", e.what());
    }
  }
  if (!quiet)
    std::fprintf(stderr, "bench: no server metrics from %s/metrics: %s; summary.json's server_metrics is null\n",
                 endpoint.url().c_str(), why.c_str());
  return std::nullopt;
}

std::string ms(double s) { return fmt::format("{:.2f}", s * 1e3); }

std::string bench_table(const RunSummary& s, const nlohmann::json& vllm, const std::string& title) {
  std::string t = title + "\n";
  t += fmt::format("  requests   {} sent, {} completed, {} failed\n", s.submitted, s.completed, s.rejected);
  for (const auto& [reason, count] : s.rejections) t += fmt::format("             {} failed: {:.300}\n", count, reason);
  t += fmt::format("  duration   {:.2f} s; {:.3f} req/s, {:.1f} output tok/s, {:.1f} total tok/s\n",
                   vllm["duration"].get<double>(), vllm["request_throughput"].get<double>(),
                   vllm["output_throughput"].get<double>(), vllm["total_token_throughput"].get<double>());
  t += fmt::format("  tokens     {} prompt, {} output\n", s.prompt_tokens, s.output_tokens);
  t += fmt::format("  {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}   (ms)\n", "", "mean", "p50", "p90", "p95", "p99");
  auto row = [&](const char* name, const Distribution& d) {
    t += fmt::format("  {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", name, ms(d.mean), ms(d.p50), ms(d.p90),
                     ms(d.p95), ms(d.p99));
  };
  row("TTFT", s.ttft_s);
  row("TPOT", s.tpot_s);
  row("ITL", s.itl_s);
  row("E2E", s.e2e_s);
  return t;
}

}  // namespace

int bench_command(int argc, const char* const* argv) {
  po::options_description general(
      "servesim bench: measure TTFT, TPOT, ITL and E2E of any OpenAI-compatible server under a workload "
      "(docs/bench.md)\n\nGeneral",
      kHelpWidth);
  general.add_options()
      ("help,h", "show this help")
      ("base-url", po::value<std::string>(),
       "the server: http://HOST[:PORT][/PATH] (required; https is not supported; a trailing /v1 is optional). "
       "OPENAI_API_KEY, when set, is sent as a Bearer token")
      ("model", po::value<std::string>(), "model name sent in each request (default: the first of GET /v1/models)")
      ("endpoint", po::value<std::string>()->default_value("completions"),
       "completions (POST /v1/completions, prompts as token ids) | chat (POST /v1/chat/completions, prompts as "
       "text)")
      ("ignore-eos", po::bool_switch(), "ask the server to ignore EOS so outputs have --output-len tokens "
                                        "(vLLM, SGLang, servesim serve; not TGI)")
      ("max-concurrency", po::value<int64_t>(),
       "open loop: at most N requests in flight; later arrivals wait for a free slot and are timed from "
       "when they are sent (vLLM's --max-concurrency)")
      ("timeout", po::value<std::string>()->default_value("600s"),
       "per request, connect to last byte (e.g. 30s, 500ms); a request past it fails")
      ("vocab-size", po::value<int64_t>()->default_value(32000),
       "completions: prompt token ids are drawn from [3, N) (the server's vocabulary must hold them)")
      ("chat-text", po::value<std::string>()->default_value("words"),
       "chat: prompt text with one unit per prompt token: words (a common English word each, ~1 token in "
       "GPT/Llama/Qwen vocabularies) | letters (a letter each: 1 token for servesim serve's byte-level "
       "tokenizer); requests.csv reports the server's usage.prompt_tokens")
      ("no-keep-alive", po::bool_switch(),
       "a new connection for every request (default: idle HTTP/1.1 connections are reused, as vLLM's client does)")
      ("no-server-metrics", po::bool_switch(),
       "do not scrape the server's Prometheus /metrics before and after the run (default: scrape it where the "
       "server has one and keep the change of its vLLM counters and tokens-per-step histogram in summary.json's "
       "server_metrics, for validate --measured)")
      ("out", po::value<std::string>(), "write summary.json, requests.csv and vllm_result.json here")
      ("json", "print summary.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  po::options_description all(kHelpWidth);
  all.add(general).add(workload_options()).add(slo_options());

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all
              << "\nNot supported by bench: --session-turns / --think-time (a next turn quotes the previous "
                 "answer's tokens).\nExit status: 0 success (at least one request completed), 2 bad input, 1 "
                 "the server is unreachable or every request failed.\n";
    return 0;
  }
  if (!vm.count("base-url")) throw InputError("--base-url is required (e.g. --base-url http://127.0.0.1:8000)");
  const HttpEndpoint endpoint = parse_base_url(vm["base-url"].as<std::string>());
  const OpenAiEndpoint route = parse_openai_endpoint(vm["endpoint"].as<std::string>());
  if (given(vm, "session-turns"))
    throw InputError("--session-turns: bench does not support multi-turn sessions (a turn's prompt quotes the "
                     "previous answer's tokens, which the OpenAI API does not return)");
  const WorkloadSpec spec = workload_from(vm);
  const SloTargets slo = slo_from(vm);
  const double timeout_s = parse_duration_s(vm["timeout"].as<std::string>(), "--timeout");
  if (!(timeout_s > 0)) throw InputError("--timeout must be > 0");
  const int64_t vocab = vm["vocab-size"].as<int64_t>();
  if (vocab < 4) throw InputError(fmt::format("--vocab-size must be >= 4 (got {})", vocab));
  if (route == OpenAiEndpoint::Chat && given(vm, "vocab-size"))
    throw InputError("--vocab-size applies to --endpoint completions (chat prompts are text; see --chat-text)");
  const ChatText chat_text = parse_chat_text(vm["chat-text"].as<std::string>());
  if (route == OpenAiEndpoint::Completions && given(vm, "chat-text"))
    throw InputError("--chat-text applies to --endpoint chat (completions prompts are token ids)");
  int64_t max_concurrency = 0;
  if (vm.count("max-concurrency")) {
    max_concurrency = vm["max-concurrency"].as<int64_t>();
    if (max_concurrency < 1) throw InputError(fmt::format("--max-concurrency must be >= 1 (got {})", max_concurrency));
    if (spec.arrival == ArrivalProcess::Closed)
      throw InputError("--max-concurrency does not apply to --arrival closed: --concurrency sets the requests in flight");
  }
  const bool quiet = vm.count("quiet") > 0;
  const Workload workload = make_workload(spec);
  const char* key_env = std::getenv("OPENAI_API_KEY");
  const std::string api_key = key_env ? key_env : "";
  const std::optional<std::string> model = check_server(endpoint, vm, api_key);
  if (!model) return 1;
  if (vm.count("out")) create_output_folder(vm["out"].as<std::string>());  // a bad --out fails before the run

  SamplingRequest sampling;
  sampling.model = *model;
  sampling.ignore_eos = vm["ignore-eos"].as<bool>();
  LoadPlan plan;
  plan.closed_loop = workload.closed_loop;
  plan.concurrency = workload.concurrency;
  plan.max_concurrency = max_concurrency;
  plan.timeout_s = timeout_s;
  plan.target = endpoint_route(route);
  plan.api_key = api_key;
  plan.keep_alive = !vm["no-keep-alive"].as<bool>();
  plan.requests.reserve(workload.requests.size());
  for (const Request& r : workload.requests) {
    PlannedRequest p;
    p.id = r.id;
    p.arrival_s = r.arrival_s;
    p.prompt_tokens = r.prompt_tokens;
    p.output_tokens = r.output_tokens;
    sampling.max_tokens = r.output_tokens;
    const std::vector<int32_t> ids = bench_prompt_ids(r, spec.seed, vocab);
    p.body = route == OpenAiEndpoint::Completions ? completions_body(sampling, ids)
                                                  : chat_body(sampling, bench_prompt_text(ids, chat_text));
    plan.requests.push_back(std::move(p));
  }

  raise_open_file_limit();
  const bool terminal = stderr_is_terminal();
  std::function<void(const LoadProgress&)> progress;
  if (!quiet)
    progress = [terminal](const LoadProgress& p) {
      std::fprintf(stderr, "%sbench: %lld/%lld requests done, %lld failed, %lld in flight, t=%.1f s%s",
                   terminal ? "\r" : "", (long long)p.done, (long long)p.total, (long long)p.errors,
                   (long long)p.in_flight, p.elapsed_s, terminal ? "" : "\n");
      std::fflush(stderr);
    };
  if (!quiet)
    std::fprintf(stderr, "bench: %zu requests to %s%s, model %s\n", plan.requests.size(), endpoint.url().c_str(),
                 plan.target.c_str(), model->c_str());
  const bool scrape = !vm["no-server-metrics"].as<bool>();
  const std::optional<std::vector<PromSample>> metrics_before =
      scrape ? scrape_metrics(endpoint, api_key, quiet) : std::nullopt;
  const LoadResult result = run_load(endpoint, plan, progress);
  if (!quiet && terminal) std::fprintf(stderr, "\n");
  std::optional<std::vector<PromSample>> metrics_after;
  if (metrics_before) metrics_after = scrape_metrics(endpoint, api_key, quiet);

  RunRecords records = bench_records(plan, result);
  const RunSummary summary = summarize_run(records, slo);
  nlohmann::json config = {{"command", "bench"},
                           {"base_url", endpoint.url()},
                           {"endpoint", to_string(route)},
                           {"route", plan.target},
                           {"model", *model},
                           {"ignore_eos", sampling.ignore_eos},
                           {"max_concurrency", max_concurrency > 0 ? nlohmann::json(max_concurrency) : nullptr},
                           {"timeout_s", timeout_s},
                           {"seed", spec.seed},
                           {"workload", workload_to_json(spec)}};
  if (route == OpenAiEndpoint::Completions)
    config["vocab_size"] = vocab;
  else
    config["chat_text"] = vm["chat-text"].as<std::string>();
  nlohmann::json summary_json = summary_to_json(summary, slo, config);
  // What only the server sees: a client cannot measure it.
  for (const char* key : {"queueing_s", "iterations", "mean_batch", "kv_cache", "prefix_cache", "preemptions"})
    summary_json[key] = nullptr;
  summary_json["requests"]["failed"] = summary.rejected;
  summary_json["connections"] = {{"keep_alive", plan.keep_alive},
                                 {"opened", result.connections_opened},
                                 {"reused", result.connections_reused},
                                 {"resent_after_stale", result.resent}};
  summary_json["measured_by"] = "client (servesim bench): TTFT, TPOT, ITL and E2E as vLLM's bench serve defines them";
  summary_json["server_metrics"] =
      metrics_after ? server_metrics_json(server_metrics_delta(*metrics_before, *metrics_after), endpoint.url() + "/metrics")
                    : nlohmann::json(nullptr);

  VllmResultMeta meta;
  meta.backend = route == OpenAiEndpoint::Completions ? "openai" : "openai-chat";
  meta.model_id = *model;
  meta.tokenizer_id = *model;
  meta.max_concurrency = plan.closed_loop ? plan.concurrency : max_concurrency;
  if (spec.arrival == ArrivalProcess::Poisson || spec.arrival == ArrivalProcess::Gamma ||
      spec.arrival == ArrivalProcess::Constant)
    meta.request_rate = spec.rate;
  if (spec.arrival == ArrivalProcess::Gamma) meta.burstiness = 1.0 / (spec.cv * spec.cv);
  nlohmann::json vllm = vllm_result_json(plan, result, meta);
  // vLLM's goodput key: requests meeting every --slo-* per second (null without SLOs).
  vllm["request_goodput"] = summary.goodput_requests_per_s ? nlohmann::json(*summary.goodput_requests_per_s) : nullptr;

  if (vm.count("out")) {
    const std::string dir = vm["out"].as<std::string>();
    write_run_outputs(dir, records, summary_json, /*with_iterations=*/false);
    const std::string path = dir + "/vllm_result.json";
    std::ofstream f(path);
    f << vllm.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!f) throw InputError(fmt::format("--out: cannot write {}", path));
  }
  if (vm.count("json")) {
    std::cout << summary_json.dump(2) << "\n";
  } else {
    std::cout << bench_table(summary, vllm,
                             fmt::format("servesim bench: {}{} ({}), model {}, {} requests ({})", endpoint.url(),
                                         plan.target, to_string(route), *model, plan.requests.size(),
                                         to_string(spec.arrival)));
    if (vm.count("out"))
      std::cout << "  outputs    " << vm["out"].as<std::string>() << "/{summary.json,requests.csv,vllm_result.json}\n";
  }
  if (summary.completed == 0) {
    std::fprintf(stderr, "servesim bench: every request failed (first error: %s)\n",
                 result.requests.empty() ? "none sent" : result.requests.front().error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace servesim::cli
