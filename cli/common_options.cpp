#include "cli/common_options.h"

#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/sessions.h"
#include "sim/units.h"

namespace servesim::cli {

po::options_description workload_options(const WorkloadDefaults& defaults) {
  po::options_description o("Workload", kHelpWidth);
  o.add_options()
      ("arrival", po::value<std::string>()->default_value("poisson"),
       "arrival process: poisson | gamma | constant (open loop, at --rate) | closed (--concurrency "
       "requests in flight, a new one when one finishes)")
      ("rate", po::value<double>()->default_value(std::stod(defaults.rate), defaults.rate),
       "open-loop arrival rate, requests/s")
      ("cv", po::value<double>()->default_value(1.0, "1"),
       "gamma arrivals: coefficient of variation of the gaps (>1 is burstier than Poisson)")
      ("concurrency", po::value<int64_t>(), "closed loop: requests in flight")
      ("num-requests", po::value<int64_t>()->default_value(defaults.num_requests),
       "requests to generate (with --session-turns: every turn of every session)")
      ("prompt-len", po::value<std::string>()->default_value(defaults.prompt_len),
       "prompt tokens: N | fixed:N | uniform:LO:HI | normal:MEAN:STD[:LO:HI] | "
       "lognormal:MEAN:SIGMA[:LO:HI] (MEAN in tokens, SIGMA of ln length)")
      ("output-len", po::value<std::string>()->default_value(defaults.output_len),
       "output tokens, same syntax as --prompt-len")
      ("lengths-from-trace", po::value<std::string>(),
       "resample (prompt, output) pairs from this trace (format from --trace-format) instead of "
       "--prompt-len/--output-len")
      ("trace", po::value<std::string>(), "replay arrivals and lengths from this trace file")
      ("trace-format", po::value<std::string>()->default_value("azure"),
       "azure (TIMESTAMP,ContextTokens,GeneratedTokens) | csv (arrival_s,prompt_tokens,output_tokens) | "
       "mooncake (JSON lines: timestamp in ms, input_length, output_length, hash_ids of 512-token "
       "prompt blocks, which give the prompts' shared prefixes)")
      ("mooncake-block-tokens", po::value<int32_t>()->default_value(512),
       "Mooncake traces: tokens each hash id stands for; below 512 the trace's sharing is replayed at a "
       "smaller size, prompt and output lengths scaled by N/512 (rounded up)")
      ("rate-scale", po::value<double>()->default_value(1.0, "1"),
       "trace replay: multiply the arrival rate by this")
      ("max-requests", po::value<int64_t>(), "trace replay: keep the first N requests")
      ("trace-start", po::value<double>()->default_value(0.0, "0"),
       "trace replay: window start, seconds after the trace's first request")
      ("trace-duration", po::value<double>(), "trace replay: window length in seconds")
      ("shared-prefix-groups", po::value<int64_t>(),
       "synthetic prompts start with one of this many shared prefixes, drawn uniformly (needs "
       "--shared-prefix-len)")
      ("shared-prefix-len", po::value<int64_t>(),
       "tokens of each shared prefix; the prompt is the prefix plus its own --prompt-len tokens")
      ("session-turns", po::value<std::string>(),
       "multi-turn sessions: turns per session, same syntax as --prompt-len (e.g. 5, "
       "uniform:2:10). Sessions start by the open-loop arrivals at --rate; each turn's prompt is "
       "the previous prompt, its output and a new --prompt-len message, sent --think-time after "
       "the previous turn finished")
      ("think-time", po::value<std::string>()->default_value("0"),
       "sessions: pause between a turn's end and the next turn: D | fixed:D | uniform:LO:HI | "
       "exponential:MEAN (durations: 2s, 500ms, 1.5)")
      ("seed", po::value<std::string>()->default_value("0"),
       "seed of every random choice, an integer in [0, 2^64)");
  return o;
}

po::options_description scheduler_options() {
  po::options_description o("Scheduling and KV cache", kHelpWidth);
  o.add_options()
      ("scheduler", po::value<std::string>()->default_value("chunked"),
       "static | continuous | chunked")
      ("max-num-seqs", po::value<int32_t>()->default_value(256), "max running sequences")
      ("max-num-batched-tokens", po::value<int32_t>(),
       "token budget per iteration (default: 2048 for chunked, max(max-model-len, 2048) otherwise)")
      ("block-size", po::value<int32_t>()->default_value(16), "tokens per KV block")
      ("gpu-memory-utilization", po::value<double>()->default_value(0.9, "0.9"),
       "fraction of device memory for weights + KV cache")
      ("num-gpu-blocks", po::value<int64_t>(), "KV capacity in blocks (overrides the memory rule)")
      ("max-model-len", po::value<int64_t>(),
       "longest prompt + output accepted (default: the model's max_position_embeddings)")
      ("num-speculative-tokens", po::value<int32_t>()->default_value(0),
       "speculative decoding: draft tokens k each decode proposes and the target verifies in one "
       "pass (0 = off); needs --draft-model or --self-draft-layers")
      ("speculative-disable-by-batch-size", po::value<int32_t>()->default_value(0),
       "no speculation in an iteration while at least this many sequences run (0 = never)")
      ("enable-prefix-caching", po::bool_switch(),
       "automatic prefix caching, vLLM V1's (the default): full KV blocks are kept by content and "
       "reused by prompts that share their prefix (workloads with token identity: Mooncake traces, "
       "--shared-prefix-*, sessions)")
      ("no-enable-prefix-caching", po::bool_switch(), "turn automatic prefix caching off")
      ("scheduling-policy", po::value<std::string>()->default_value("fcfs"),
       "order of waiting requests: fcfs | lpm (longest prefix match first, SGLang's; FCFS while "
       "more than 128 wait)");
  return o;
}

po::options_description roofline_options() {
  po::options_description o("Roofline cost model", kHelpWidth);
  o.add_options()
      ("compute-efficiency", po::value<double>()->default_value(0.70, "0.70"),
       "fraction of peak bf16 FLOP/s that GEMMs reach")
      ("memory-efficiency", po::value<double>()->default_value(0.85, "0.85"),
       "fraction of peak bandwidth that memory-bound kernels reach")
      ("iteration-overhead", po::value<std::string>()->default_value("200us"),
       "fixed host-side cost per iteration (e.g. 200us, 0.5ms)")
      ("sequence-overhead", po::value<std::string>()->default_value("0us"),
       "host-side cost per sequence that samples a token in an iteration (sampler, detokenizing, stop checks; "
       "e.g. 50us); 0: not modelled");
  return o;
}

po::options_description quantization_options() {
  po::options_description o("Quantization (roofline; docs/quantization.md)", kHelpWidth);
  o.add_options()
      ("quantization", po::value<std::string>()->default_value("none"),
       "weights of the linear layers: none (the checkpoint's dtype), fp8 (W8A8 on FP8 tensor cores; Ada, "
       "Hopper and later), int8 (W8A8 on INT8 tensor cores), w8a16 (int8 weight-only), w4a16 (int4 "
       "weight-only, groups of 128, as GPTQ/AWQ); the embedding and the LM head stay in the checkpoint's "
       "dtype, and freed weight memory becomes KV blocks")
      ("kv-cache-dtype", po::value<std::string>()->default_value("auto"),
       "K and V as cached: auto (the model's dtype), fp8 (= fp8_e4m3, per-layer scales), fp8_e5m2, int8 "
       "(an fp32 scale per token and head)");
  return o;
}

po::options_description slo_options() {
  po::options_description o("Service-level objectives (goodput)", kHelpWidth);
  o.add_options()
      ("slo-ttft", po::value<std::string>(), "TTFT target, e.g. 500ms")
      ("slo-tpot", po::value<std::string>(), "TPOT target, e.g. 30ms")
      ("slo-e2e", po::value<std::string>(), "end-to-end latency target, e.g. 20s");
  return o;
}

po::options_description parallel_options() {
  po::options_description o("Parallelism (docs/parallelism.md)", kHelpWidth);
  o.add_options()
      ("tensor-parallel-size", po::value<int32_t>()->default_value(1),
       "GPUs sharing every layer (Megatron-style: heads, KV heads, MLP width and vocabulary split; two "
       "all-reduces per layer); must divide the attention heads")
      ("pipeline-parallel-size", po::value<int32_t>()->default_value(1),
       "pipeline stages of L / PP layers, with PP batches in flight (virtual engines); must divide the layers")
      ("interconnect", po::value<std::string>(),
       "the GPUs' interconnect: a preset (nvlink3, nvlink4, nvlink5, pcie4, ...) or a measured table: a JSON "
       "file or the output of nccl-tests' all_reduce_perf as it prints it (default: the --hardware preset's)")
      ("num-replicas", po::value<int32_t>()->default_value(1),
       "replicas of the TP group behind a router, in one simulation (each with its own scheduler and KV cache)")
      ("router", po::value<std::string>()->default_value("round-robin"),
       "with --num-replicas > 1: round-robin | least-requests | least-kv | prefix-affinity (the longest cached "
       "prefix unless that replica's load exceeds the least loaded's by 32 requests; SGLang's cache-aware "
       "policy) | random (seeded by --seed)")
      ("router-balance-abs-threshold", po::value<int64_t>()->default_value(32),
       "prefix-affinity: a replica is overloaded when its requests (waiting + running) exceed the least "
       "loaded's by more than this ...")
      ("router-balance-rel-threshold", po::value<double>()->default_value(1.0001, "1.0001"),
       "... and are more than this many times the least loaded's (SGLang's router's defaults: 32, 1.0001)");
  return o;
}

ParallelConfig parallel_from(const po::variables_map& vm) {
  ParallelConfig p;
  p.tensor_parallel_size = vm["tensor-parallel-size"].as<int32_t>();
  p.pipeline_parallel_size = vm["pipeline-parallel-size"].as<int32_t>();
  return p;  // the ranges and the model's shapes: ParallelConfig::validate_for
}

std::optional<Interconnect> interconnect_from(const po::variables_map& vm) {
  if (!vm.count("interconnect")) return std::nullopt;
  return resolve_interconnect(vm["interconnect"].as<std::string>());
}

uint64_t parse_seed(const std::string& text, const std::string& flag) {
  uint64_t seed = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, seed);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw InputError(fmt::format("{}: '{}' is not an integer in [0, 18446744073709551615]", flag, text));
  return seed;
}

namespace {

bool given(const po::variables_map& vm, const char* flag) {
  return vm.count(flag) > 0 && !vm[flag].defaulted();
}

// A flag the chosen workload would silently ignore is a mistake worth naming.
void reject_flags_that_do_not_apply(const po::variables_map& vm, ArrivalProcess arrival,
                                    bool lengths_from_trace) {
  auto reject_if = [&](const char* flag, bool does_not_apply, const char* why) {
    if (does_not_apply && given(vm, flag))
      throw InputError(fmt::format("--{} does not apply here: {}", flag, why));
  };
  const bool trace = arrival == ArrivalProcess::Trace;
  const bool closed = arrival == ArrivalProcess::Closed;
  const bool any_trace = trace || lengths_from_trace;
  reject_if("concurrency", !closed, "it sets the closed loop's clients (--arrival closed)");
  reject_if("rate", trace || closed, "the arrivals come from the trace or the closed loop");
  reject_if("cv", arrival != ArrivalProcess::Gamma, "it shapes --arrival gamma only");
  reject_if("num-requests", trace, "a trace replay has the trace's requests (see --max-requests)");
  reject_if("prompt-len", any_trace, "lengths come from the trace");
  reject_if("output-len", any_trace, "lengths come from the trace");
  for (const char* flag : {"trace-format", "rate-scale", "max-requests", "trace-start", "trace-duration",
                           "mooncake-block-tokens"})
    reject_if(flag, !any_trace, "no --trace or --lengths-from-trace is given");
  reject_if("rate-scale", lengths_from_trace, "arrivals are synthetic (--arrival)");
  for (const char* flag : {"shared-prefix-groups", "shared-prefix-len"})
    reject_if(flag, trace, "a trace replay's prompts come from the trace (--trace)");
  reject_if("session-turns", trace, "a trace replay's requests come from the trace (--trace)");
  reject_if("session-turns", closed,
            "a session's next turn follows its own previous turn; use an open-loop --arrival "
            "(poisson, gamma, constant)");
  reject_if("think-time", !given(vm, "session-turns"), "it spaces the turns of --session-turns");
  if (given(vm, "shared-prefix-groups") != given(vm, "shared-prefix-len"))
    throw InputError("--shared-prefix-groups and --shared-prefix-len go together: give both");
}

}  // namespace

WorkloadSpec workload_from(const po::variables_map& vm) {
  WorkloadSpec w;
  w.seed = parse_seed(vm["seed"].as<std::string>(), "--seed");
  const bool has_trace = vm.count("trace") > 0;
  if (has_trace) {
    if (!vm["arrival"].defaulted())
      throw InputError("--trace replays the trace's own arrivals; drop --arrival");
    w.arrival = ArrivalProcess::Trace;
  } else {
    w.arrival = parse_arrival_process(vm["arrival"].as<std::string>());
  }
  TraceFormat format = TraceFormat::Azure;
  try {
    format = parse_trace_format(vm["trace-format"].as<std::string>());
  } catch (const InputError& e) {
    throw InputError(std::string("--trace-format: ") + e.what());
  }
  auto trace_options = [&](const std::string& path) {
    TraceOptions t;
    t.path = path;
    t.format = format;
    t.rate_scale = vm["rate-scale"].as<double>();
    t.window_start_s = vm["trace-start"].as<double>();
    if (vm.count("trace-duration")) t.window_duration_s = vm["trace-duration"].as<double>();
    if (vm.count("max-requests")) t.max_requests = vm["max-requests"].as<int64_t>();
    t.mooncake_block_tokens = vm["mooncake-block-tokens"].as<int32_t>();
    if (!vm["mooncake-block-tokens"].defaulted() && t.format != TraceFormat::Mooncake)
      throw InputError("--mooncake-block-tokens applies to --trace-format mooncake only");
    if (!(t.rate_scale > 0) || !std::isfinite(t.rate_scale))
      throw InputError(fmt::format("--rate-scale must be > 0 (got {})", t.rate_scale));
    if (!(t.window_start_s >= 0) || !std::isfinite(t.window_start_s))
      throw InputError(fmt::format("--trace-start must be >= 0 (got {})", t.window_start_s));
    if (!(t.window_duration_s > 0))
      throw InputError(fmt::format("--trace-duration must be > 0 (got {})", t.window_duration_s));
    if (vm.count("max-requests") && t.max_requests < 1)
      throw InputError(fmt::format("--max-requests must be >= 1 (got {})", t.max_requests));
    return t;
  };
  if (has_trace) w.trace = trace_options(vm["trace"].as<std::string>());
  if (vm.count("lengths-from-trace")) {
    if (has_trace) throw InputError("--lengths-from-trace and --trace exclude each other");
    w.lengths_from_trace = trace_options(vm["lengths-from-trace"].as<std::string>());
  }
  w.rate = vm["rate"].as<double>();
  w.cv = vm["cv"].as<double>();
  if (vm.count("concurrency")) w.concurrency = vm["concurrency"].as<int64_t>();
  w.num_requests = vm["num-requests"].as<int64_t>();
  w.prompt_len = vm["prompt-len"].as<std::string>();
  w.output_len = vm["output-len"].as<std::string>();
  if (vm.count("shared-prefix-groups")) w.shared_prefix_groups = vm["shared-prefix-groups"].as<int64_t>();
  if (vm.count("shared-prefix-len")) w.shared_prefix_len = vm["shared-prefix-len"].as<int64_t>();
  if (vm.count("session-turns")) w.session_turns = vm["session-turns"].as<std::string>();
  w.think_time = vm["think-time"].as<std::string>();
  reject_flags_that_do_not_apply(vm, w.arrival, vm.count("lengths-from-trace") > 0);
  // Validate the distributions now so their errors name the flag.
  LengthDistribution::parse(w.prompt_len, "--prompt-len");
  LengthDistribution::parse(w.output_len, "--output-len");
  if (w.session_turns) LengthDistribution::parse(*w.session_turns, "--session-turns");
  ThinkTime::parse(w.think_time, "--think-time");
  return w;
}

SchedulerSettings scheduler_from(const po::variables_map& vm) {
  SchedulerSettings s;
  s.policy = parse_scheduler_policy(vm["scheduler"].as<std::string>());
  s.max_num_seqs = vm["max-num-seqs"].as<int32_t>();
  if (vm.count("max-num-batched-tokens")) s.max_num_batched_tokens = vm["max-num-batched-tokens"].as<int32_t>();
  s.block_size = vm["block-size"].as<int32_t>();
  s.gpu_memory_utilization = vm["gpu-memory-utilization"].as<double>();
  if (vm.count("num-gpu-blocks")) s.num_gpu_blocks = vm["num-gpu-blocks"].as<int64_t>();
  if (vm.count("max-model-len")) s.max_model_len = vm["max-model-len"].as<int64_t>();
  s.num_speculative_tokens = vm["num-speculative-tokens"].as<int32_t>();
  s.speculative_disable_by_batch_size = vm["speculative-disable-by-batch-size"].as<int32_t>();
  if (vm["enable-prefix-caching"].as<bool>() && vm["no-enable-prefix-caching"].as<bool>())
    throw InputError("--enable-prefix-caching and --no-enable-prefix-caching contradict each other");
  s.enable_prefix_caching = !vm["no-enable-prefix-caching"].as<bool>();
  s.waiting_order = parse_waiting_order(vm["scheduling-policy"].as<std::string>());
  if (!(s.gpu_memory_utilization > 0 && s.gpu_memory_utilization <= 1))
    throw InputError(fmt::format("--gpu-memory-utilization must be in (0, 1] (got {})",
                                 s.gpu_memory_utilization));
  return s;
}

RooflineOptions roofline_from(const po::variables_map& vm) {
  RooflineOptions r;
  r.compute_efficiency = vm["compute-efficiency"].as<double>();
  r.memory_efficiency = vm["memory-efficiency"].as<double>();
  r.iteration_overhead_s = parse_duration_s(vm["iteration-overhead"].as<std::string>(), "--iteration-overhead");
  r.sequence_overhead_s = parse_duration_s(vm["sequence-overhead"].as<std::string>(), "--sequence-overhead");
  r.validate();
  return r;
}

Quantization quantization_from(const po::variables_map& vm) {
  Quantization q;
  q.weights = parse_weight_quantization(vm["quantization"].as<std::string>());
  q.kv_cache = parse_kv_cache_dtype(vm["kv-cache-dtype"].as<std::string>());
  return q;
}

SloTargets slo_from(const po::variables_map& vm) {
  SloTargets s;
  if (vm.count("slo-ttft")) s.ttft_s = parse_duration_s(vm["slo-ttft"].as<std::string>(), "--slo-ttft");
  if (vm.count("slo-tpot")) s.tpot_s = parse_duration_s(vm["slo-tpot"].as<std::string>(), "--slo-tpot");
  if (vm.count("slo-e2e")) s.e2e_s = parse_duration_s(vm["slo-e2e"].as<std::string>(), "--slo-e2e");
  return s;
}

po::variables_map parse_or_throw(int argc, const char* const* argv,
                                 const po::options_description& options) {
  // Positional arguments are collected only to be named in the error.
  po::options_description with_stray(options);
  with_stray.add_options()("servesim-stray-argument", po::value<std::vector<std::string>>());
  po::positional_options_description stray;
  stray.add("servesim-stray-argument", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(with_stray).positional(stray).style(kFlagStyle).run(), vm);
    if (vm.count("servesim-stray-argument"))
      throw InputError(fmt::format("unexpected argument '{}': every setting is a --flag (see --help)",
                                   vm["servesim-stray-argument"].as<std::vector<std::string>>().front()));
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(e.what());
  }
  return vm;
}

}  // namespace servesim::cli
