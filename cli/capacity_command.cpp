// `servesim capacity`: the highest arrival rate a deployment serves within
// its SLOs (engine/capacity.h); with --target-rate, the replicas, GPUs and
// cost that rate needs; with --search, that capacity over a grid and its
// Pareto front (cli/capacity_search.h).
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/capacity_merge.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/simulation_flags.h"
#include "cli/sweep_output.h"
#include "engine/capacity_search.h"
#include "sim/errors.h"

namespace servesim::cli {
namespace {

po::options_description capacity_options() {
  po::options_description o("Capacity", kHelpWidth);
  o.add_options()
      ("slo-attainment", po::value<double>()->default_value(0.99, "0.99"),
       "fraction of requests that must meet every SLO (a rejected request meets none), in (0, 1]")
      ("tolerance", po::value<double>()->default_value(0.01, "0.01"),
       "bisection stops when the bracket [lo, hi] has (hi - lo) / lo at most this")
      ("seeds", po::value<int32_t>()->default_value(3),
       "workload seeds --seed .. --seed + N - 1, each searched on its own; the answer is their median "
       "and the spread their range")
      ("jobs", po::value<int32_t>(), "threads (default: every core); the answer does not depend on it")
      ("target-rate", po::value<double>(),
       "req/s the fleet must serve: replicas = ceil(target / max rate), GPUs = replicas x TP x PP (load "
       "split evenly between replicas; with --num-replicas R, in groups of R behind the router)")
      ("gpu-hour-price", po::value<double>(),
       "with --target-rate: price of one GPU-hour (any currency): cost per hour and per million output tokens")
      ("search", "search a grid (the --search-* lists) instead of one configuration")
      ("search-tensor-parallel-size", po::value<std::string>(), "with --search: TP degrees, e.g. 1,2,4,8")
      ("search-quantization", po::value<std::string>(), "with --search: e.g. none,fp8,w4a16")
      ("search-max-num-seqs", po::value<std::string>(), "with --search: e.g. 64,128,256")
      ("search-max-num-batched-tokens", po::value<std::string>(), "with --search: e.g. 2048,8192")
      ("shard", po::value<std::string>(),
       "with --search: I/N, search only the points whose grid index is I mod N (0 <= I < N), for a cluster; "
       "join the shards' --out folders with `servesim capacity merge DIR...` (docs/cluster.md)")
      ("out", po::value<std::string>(), "write capacity.json (and search.csv with --search) here")
      ("json", "print capacity.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  return o;
}

std::string slo_text(const SloTargets& slo, double attainment) {
  std::string s;
  auto add = [&](const char* name, const std::optional<double>& v) {
    if (v) s += fmt::format("{}{} <= {:g} ms", s.empty() ? "" : ", ", name, *v * 1e3);
  };
  add("TTFT", slo.ttft_s);
  add("TPOT", slo.tpot_s);
  add("E2E", slo.e2e_s);
  return fmt::format("{} for {:g}% of requests", s, attainment * 100);
}

// The fleet a target rate needs, and its cost: the searched unit (a group
// of `group` replicas behind the router, each of p's GPUs) repeated.
nlohmann::json fleet_json(const CapacityResult& c, const ParallelConfig& p, int32_t group, double target,
                          std::optional<double> price) {
  const auto groups = int64_t(std::ceil(target / c.max_request_rate - 1e-9));
  const int64_t replicas = groups * group;
  const int64_t gpus = replicas * p.world_size();
  const RunSummary& s = c.seeds[c.median_seed].at_max.summary;
  // Output tokens per request at capacity: what the target rate asks per second.
  const double tokens_per_request = s.completed > 0 ? double(s.output_tokens) / double(s.completed) : 0.0;
  nlohmann::json j = {{"target_rate", target},
                      {"replicas", replicas},
                      {"gpus_per_replica", p.world_size()},
                      {"gpus", gpus},
                      {"output_tokens_per_s", target * tokens_per_request},
                      {"assumes", group == 1 ? "requests split evenly between replicas (no router modelled)"
                                             : "requests split evenly between groups of replicas_per_group "
                                               "replicas, each group behind the router as simulated"}};
  if (group > 1) j["replicas_per_group"] = group;
  if (price) {
    const double per_hour = double(gpus) * *price;
    j["gpu_hour_price"] = *price;
    j["cost_per_hour"] = per_hour;
    j["cost_per_million_output_tokens"] =
        tokens_per_request > 0 ? per_hour / (target * tokens_per_request * 3600.0) * 1e6 : 0.0;
  }
  return j;
}

void print_capacity(const CapacityResult& c, const CapacityOptions& o, const nlohmann::json* fleet) {
  const RunSummary& s = c.seeds[c.median_seed].at_max.summary;
  std::cout << fmt::format("  max rate   {:.4g} req/s (seeds {:.4g} .. {:.4g}; {} seeds, tolerance {:g}%)\n",
                           c.max_request_rate, c.min_rate, c.max_rate, c.seeds.size(), o.tolerance * 100);
  std::cout << fmt::format("  at it      TTFT p50 {:.1f} ms, p90 {:.1f} ms; TPOT p50 {:.2f} ms, p90 {:.2f} ms; "
                           "{:.0f} output tok/s\n",
                           s.ttft_s.p50 * 1e3, s.ttft_s.p90 * 1e3, s.tpot_s.p50 * 1e3, s.tpot_s.p90 * 1e3,
                           s.output_tokens_per_s);
  std::cout << fmt::format("  limit      {} ({}): {}\n", c.limiting_slo, c.bound_by, c.explanation);
  if (fleet) {
    const nlohmann::json& f = *fleet;
    std::cout << fmt::format("  fleet      {:g} req/s: {} replicas x {} GPUs = {} GPUs", f["target_rate"].get<double>(),
                             f["replicas"].get<int64_t>(), f["gpus_per_replica"].get<int>(), f["gpus"].get<int64_t>());
    if (f.contains("replicas_per_group"))
      std::cout << fmt::format(" ({} groups of {})", f["replicas"].get<int64_t>() / f["replicas_per_group"].get<int>(),
                               f["replicas_per_group"].get<int>());
    if (f.contains("cost_per_hour"))
      std::cout << fmt::format("; {:.2f} per hour, {:.4f} per million output tokens",
                               f["cost_per_hour"].get<double>(), f["cost_per_million_output_tokens"].get<double>());
    std::cout << "\n";
  }
}


}  // namespace

int capacity_command(int argc, const char* const* argv) {
  if (argc >= 2 && std::strcmp(argv[1], "merge") == 0) return capacity_merge_command(argc - 1, argv + 1);
  po::options_description general = simulation_model_options(
      "servesim capacity: the highest request rate a deployment serves within its SLOs\n\nGeneral");
  general.add_options()("help,h", "show this help");
  po::options_description all(kHelpWidth);
  all.add(general).add(capacity_options());
  add_simulation_options(all);
  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all
              << "\nThe search starts at --rate and doubles or halves it to bracket the answer, then bisects.\n"
                 "Exit status: 0 success, 2 bad input (the message says which), 1 runtime failure.\n";
    return 0;
  }
  CapacityOptions options;
  options.attainment = vm["slo-attainment"].as<double>();
  options.tolerance = vm["tolerance"].as<double>();
  options.seeds = vm["seeds"].as<int32_t>();
  options.jobs = vm.count("jobs") ? vm["jobs"].as<int32_t>() : int32_t(std::max(1u, std::thread::hardware_concurrency()));
  options.validate();
  const bool search = vm.count("search") > 0;
  for (const char* flag : {"search-tensor-parallel-size", "search-quantization", "search-max-num-seqs",
                           "search-max-num-batched-tokens", "shard"})
    if (vm.count(flag) && !search) throw InputError(fmt::format("--{} applies with --search", flag));
  if (vm.count("gpu-hour-price") && !vm.count("target-rate"))
    throw InputError("--gpu-hour-price applies with --target-rate");
  std::optional<double> target, price;
  if (vm.count("target-rate")) {
    target = vm["target-rate"].as<double>();
    if (!(*target > 0) || !std::isfinite(*target))
      throw InputError(fmt::format("--target-rate must be > 0 (got {})", *target));
    if (search) throw InputError("--target-rate applies to one configuration, not to --search");
  }
  if (vm.count("gpu-hour-price")) {
    price = vm["gpu-hour-price"].as<double>();
    if (!(*price >= 0) || !std::isfinite(*price))
      throw InputError(fmt::format("--gpu-hour-price must be >= 0 (got {})", *price));
  }
  const bool quiet = vm.count("quiet") > 0;
  const bool terminal = stderr_is_terminal();

  SimulationFlags flags = simulation_from(vm);
  warn_of_unsteady_calibration(flags, "capacity");
  const SimulationSetup& setup = flags.setup;
  const std::string title = fmt::format(
      "servesim capacity: {} on {} x {} ({}), {} scheduler; SLOs {}", setup.model.name, setup.parallel.world_size(),
      flags.profile ? flags.profile_path : setup.hardware.name, describe_layout(setup.parallel),
      to_string(setup.scheduler.policy), setup.slo.any() ? slo_text(setup.slo, options.attainment) : "none");
  std::optional<std::filesystem::path> out_dir;
  if (vm.count("out")) {
    out_dir = vm["out"].as<std::string>();
    std::filesystem::create_directories(*out_dir);
  }

  if (search) {
    SearchAxes axes;
    auto list_or = [&](const char* flag, auto fallback, auto parse) {
      return vm.count(flag) ? parse(vm[flag].as<std::string>(), std::string("--") + flag) : fallback;
    };
    axes.tensor_parallel_size = list_or("search-tensor-parallel-size",
                                        std::vector<int32_t>{setup.parallel.tensor_parallel_size}, parse_int_list);
    axes.quantization = list_or("search-quantization",
                                std::vector<std::string>{to_string(setup.model.quantization.weights)}, parse_name_list);
    axes.max_num_seqs = list_or("search-max-num-seqs", std::vector<int32_t>{setup.scheduler.max_num_seqs}, parse_int_list);
    // 0: the scheduler's default budget for each point.
    axes.max_num_batched_tokens = list_or("search-max-num-batched-tokens",
                                          std::vector<int32_t>{setup.scheduler.max_num_batched_tokens.value_or(0)},
                                          parse_int_list);
    for (const std::string& q : axes.quantization) parse_weight_quantization(q);  // a bad name fails now
    std::optional<SweepShard> shard;
    if (vm.count("shard")) shard = parse_shard(vm["shard"].as<std::string>(), "--shard");
    const size_t grid_size = search_grid(setup, axes).size();
    if (shard && shard->index >= grid_size)
      throw InputError(fmt::format("--shard {}/{}: the grid has only {} points, none of them this shard's",
                                   shard->index, shard->count, grid_size));
    nlohmann::json rows = search_capacity(
        setup, axes, options,
        [&](int done, int total) {
          if (!quiet)
            std::fprintf(stderr, "%scapacity: %d/%d points%s", terminal ? "\r" : "", done, total,
                         terminal ? "" : "\n");
        },
        shard ? std::function<bool(size_t)>([&](size_t i) { return shard->holds(i); }) : nullptr);
    if (!quiet && terminal) std::fprintf(stderr, "\n");
    std::ostringstream csv;
    write_search_csv(csv, rows);
    nlohmann::json j = {{"search", rows}, {"attainment_target", options.attainment}};
    if (shard)
      j["shard"] = {{"index", shard->index},
                    {"count", shard->count},
                    {"grid_points", grid_size},
                    {"command", search_identity(argc, argv)},
                    {"meaning", "one shard of a capacity search: `servesim capacity merge DIR...` joins every "
                                "shard's folder into the search.csv and capacity.json of the whole grid; the "
                                "fronts here are among this shard's points"}};
    if (out_dir) {
      write_file(*out_dir / "search.csv", csv.str());
      write_file(*out_dir / "capacity.json", j.dump(2) + "\n");
      if (!quiet)
        std::fprintf(stderr, "capacity: draw the front with /usr/bin/python3 scripts/plot_pareto.py %s %s\n",
                     (*out_dir / "search.csv").c_str(), (*out_dir / "pareto.png").c_str());
    }
    if (vm.count("json")) {
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << title << "\n" << csv.str();
    }
    return 0;
  }

  options.progress = [&](int done, int total) {
    if (!quiet)
      std::fprintf(stderr, "%scapacity: %d/%d seeds searched%s", terminal ? "\r" : "", done, total,
                   done == total || !terminal ? "\n" : "");
  };
  const CapacityResult result = find_capacity(setup, flags.costs, options);
  for (const std::string& w : result.warnings) std::fprintf(stderr, "capacity: warning: %s\n", w.c_str());
  nlohmann::json j = capacity_to_json(result, options);
  j["config"] = setup_to_json(setup, resolve_scheduler_config(setup), flags.costs);
  std::optional<nlohmann::json> fleet;
  if (target) {
    fleet = fleet_json(result, setup.parallel, setup.num_replicas, *target, price);
    j["fleet"] = *fleet;
  }
  if (out_dir) write_file(*out_dir / "capacity.json", j.dump(2) + "\n");
  if (vm.count("json")) {
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << title << "\n";
    print_capacity(result, options, fleet ? &*fleet : nullptr);
  }
  return 0;
}

}  // namespace servesim::cli
