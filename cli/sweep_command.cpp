// `servesim sweep`: run `servesim simulate` over a grid of settings, one
// child process per point (the same binary), up to --jobs at once; write one
// CSV row per point with its summary metrics, rank the points by an
// objective under constraints and name the best. The grid, metrics and
// ranking are cli/sweep_grid.h; the children, cli/process_pool.h; what is
// written, cli/sweep_output.h.
//
// Points run as subprocesses rather than in-process calls so that every
// simulate flag is sweepable without sweep knowing simulate's internals, and
// a point that fails (bad value, weights that do not fit) cannot take the
// sweep down with it.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/output.h"
#include "cli/process_pool.h"
#include "cli/sweep_grid.h"
#include "cli/sweep_output.h"
#include "sim/errors.h"

namespace servesim::cli {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------------ the points

std::string first_line(const std::string& text) {
  size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return {};
  const size_t end = text.find_first_of("\r\n", start);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

void run_point(const Executable& exe, Point& p) {
  ProcessResult r;
  try {
    r = run_process(exe, p.args);
  } catch (const std::exception& e) {
    p.exit_code = 1;
    p.error = e.what();
    return;
  }
  if (r.signal != 0 || r.exit_code != 0) {
    p.exit_code = r.signal != 0 ? 1 : r.exit_code;
    p.error = first_line(r.err);
    // Drop simulate's own prefix: the sweep's messages say where it came from.
    for (const char* prefix : {"servesim simulate: error: ", "servesim simulate: "})
      if (p.error.rfind(prefix, 0) == 0) {
        p.error.erase(0, std::strlen(prefix));
        break;
      }
    if (p.error.empty())
      p.error = r.signal != 0 ? fmt::format("simulate was killed by signal {}", r.signal)
                              : fmt::format("simulate exited with status {}", r.exit_code);
    return;
  }
  try {
    p.outcome.summary = nlohmann::json::parse(r.out);
    p.outcome.ok = p.outcome.summary.is_object();
  } catch (const nlohmann::json::exception&) {
  }
  if (!p.outcome.ok) {
    p.exit_code = 1;
    p.error = "simulate exited 0 but printed no summary JSON";
  }
}

// "sweep: 12/40 points done" on stderr: one overwritten line on a terminal,
// a line per point otherwise; nothing with --quiet. Thread-safe.
class Progress {
 public:
  Progress(size_t total, bool quiet) : total_(total), quiet_(quiet), terminal_(stderr_is_terminal()) {}
  ~Progress() {
    if (!quiet_ && terminal_ && done_ > 0) std::fputs("\n", stderr);
  }
  void point_done() {
    if (quiet_) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    std::fprintf(stderr, "%ssweep: %zu/%zu points done%s", terminal_ ? "\r" : "", ++done_, total_,
                 terminal_ ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::mutex mutex_;
  size_t done_ = 0;
  const size_t total_;
  const bool quiet_, terminal_;
};

// ------------------------------------------------------------ flags

constexpr const char* kUsage =
    "servesim sweep: run `servesim simulate` over a grid of settings and rank the points\n"
    "\n"
    "usage: servesim sweep --grid FLAG=V1,V2,... [--grid ...] [sweep flags] -- [simulate flags]\n"
    "\n"
    "Every point runs `servesim simulate --quiet --json [simulate flags] --FLAG=VALUE ...` as a child\n"
    "process, up to --jobs at once. The grid is the Cartesian product of the --grid axes (the first\n"
    "axis outermost); any simulate flag can be an axis. The flags after `--` are given to every point\n"
    "unchanged and may not name an axis. Outputs, in --out:\n"
    "  sweep.csv   one row per point in grid order: the axis values, status (ok | infeasible | error),\n"
    "              rank (1 = best; empty where infeasible or failed), the metrics of the point's\n"
    "              summary.json (requests_*, output_tokens_per_s, requests_per_s,\n"
    "              goodput_requests_per_s, {ttft,tpot,itl,e2e,queueing}_{mean,p50,p90,p95,p99}_s,\n"
    "              preemptions, speculative_mean_accepted_tokens_per_step, ...; empty where the\n"
    "              summary has none), and error (the first line simulate wrote on failure)\n"
    "  sweep.json  the grid, the simulate flags, objective, constraints, every point's arguments and\n"
    "              full summary, and the ranking\n"
    "A point that fails is an error row, not the end of the sweep; but the first point runs alone\n"
    "first, and if simulate refuses it as bad input (exit 2) the sweep stops with simulate's message.\n"
    "The same command gives byte-identical outputs whatever --jobs is.\n"
    "\n"
    "examples:\n"
    "  servesim sweep --grid rate=2,4,8,16 --grid max-num-seqs=8,32,128 --out runs/capacity \\\n"
    "      --objective max-goodput -- --num-requests 500 --slo-ttft 500ms --slo-tpot 30ms\n"
    "  servesim sweep --grid num-speculative-tokens=1..8 --grid max-num-seqs=1,8,32,128 \\\n"
    "      --objective min-tpot-p50 --constraint ttft_p90_s<=1s --out runs/k \\\n"
    "      -- --rate 4 --draft-model llama-3.2-1b --acceptance-rate 0.8\n"
    "\n"
    "Sweep flags";

struct SweepOptions {
  std::vector<GridAxis> axes;
  Objective objective;
  std::vector<Constraint> constraints;
  std::vector<std::string> base;  // simulate's flags, after `--`
  size_t jobs = 1;
  std::string out_dir;
  bool keep_points = false, json = false, quiet = false;
  std::optional<SweepShard> shard;  // --shard I/N: only those points
};

// Parses sweep's own flags (before `--`); nullopt after printing --help.
std::optional<SweepOptions> parse_sweep_flags(int argc, const char* const* argv) {
  // Everything after the first "--" goes to simulate unchanged.
  SweepOptions s;
  int own_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      own_argc = i;
      s.base.assign(argv + i + 1, argv + argc);
      break;
    }

  po::options_description o(kUsage, kHelpWidth);
  o.add_options()
      ("help,h", "show this help")
      ("grid", po::value<std::vector<std::string>>(),
       "FLAG=V1,V2,...: an axis, a simulate flag without its dashes and its values (repeat for more "
       "axes). Values are separated by commas, or by semicolons where a value holds commas "
       "(acceptance-curve=0.9,0.8;0.7,0.5). LO..HI and LO..HI:STEP are integer ranges, HI included "
       "(num-speculative-tokens=0..8, max-num-seqs=16..128:16)")
      ("jobs,j", po::value<int>(), "points run at once (default: the number of cores)")
      ("objective", po::value<std::string>()->default_value("max-throughput"),
       ("what ranks the points: " + objectives_help()).c_str())
      ("constraint", po::value<std::vector<std::string>>(),
       "COLUMN<=VALUE (or <, >=, >) on a metric column of sweep.csv; a point breaking it is "
       "'infeasible' and not ranked (repeatable). Duration columns (*_s) take units as --slo-* do: "
       "tpot_p90_s<=50ms, ttft_p99_s<=1s; others plain numbers: requests_rejected<=0")
      ("out", po::value<std::string>()->default_value("runs/sweep"), "write sweep.csv and sweep.json here")
      ("keep-points", "also keep every point's own outputs (simulate --out) in OUT/points/INDEX")
      ("shard", po::value<std::string>(),
       "I/N: run only the points whose grid index is I mod N (0 <= I < N), for a cluster; OUT/sweep.json "
       "then holds them for `servesim sweep merge DIR...` (docs/cluster.md)")
      ("json", "print sweep.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");

  po::variables_map vm;
  try {
    const auto parsed = po::command_line_parser(own_argc, argv).options(o).style(kFlagStyle).allow_unregistered().run();
    po::store(parsed, vm);
    po::notify(vm);
    const auto unknown = po::collect_unrecognized(parsed.options, po::include_positional);
    if (!unknown.empty())
      throw InputError(fmt::format("'{}' is not a sweep flag; simulate's flags go after `--` (servesim sweep "
                                   "--grid rate=2,4 -- --num-requests 100)",
                                   unknown.front()));
  } catch (const po::error& e) {
    throw InputError(e.what());
  }
  if (vm.count("help")) {
    std::cout << o << "\nExit status: 0 success, also when some points failed (their status is 'error'); 2 bad\n"
                      "input (the message says which); 1 runtime failure, or every point failed.\n";
    return std::nullopt;
  }

  s.axes = parse_grid(vm.count("grid") ? vm["grid"].as<std::vector<std::string>>() : std::vector<std::string>{});
  s.objective = parse_objective(vm["objective"].as<std::string>());
  if (vm.count("constraint"))
    for (const std::string& text : vm["constraint"].as<std::vector<std::string>>())
      s.constraints.push_back(parse_constraint(text));
  s.jobs = std::max(1u, std::thread::hardware_concurrency());
  if (vm.count("jobs")) {
    const int j = vm["jobs"].as<int>();
    if (j < 1) throw InputError(fmt::format("--jobs must be >= 1 (got {})", j));
    s.jobs = size_t(j);
  }
  s.out_dir = vm["out"].as<std::string>();
  s.keep_points = vm.count("keep-points") > 0;
  s.json = vm.count("json") > 0;
  s.quiet = vm.count("quiet") > 0;
  if (vm.count("shard")) {
    s.shard = parse_shard(vm["shard"].as<std::string>(), "--shard");
    if (s.keep_points)
      throw InputError("--keep-points with --shard: a point's folder would be on the shard's machine, out of the "
                       "merged sweep's reach; drop one");
  }

  // The simulate flags may not set what sweep sets, nor an axis.
  for (const std::string& arg : s.base) {
    std::string flag = arg.rfind("--", 0) == 0 ? arg.substr(2, arg.find('=') - 2) : "";
    if (arg == "-q" || arg == "-h") flag = arg.substr(1);
    if (flag == "out" || flag == "json" || flag == "quiet" || flag == "q" || flag == "help" || flag == "h")
      throw InputError(fmt::format("{} after `--`: sweep sets --quiet and --json of every point itself; use "
                                   "sweep's --out (and --keep-points) before `--`",
                                   arg));
    for (const GridAxis& a : s.axes)
      if (flag == a.flag)
        throw InputError(fmt::format("--{} is both a --grid axis and a simulate flag after `--`; drop one", flag));
  }
  return s;
}

// The points in grid order, each with its simulate arguments.
std::vector<Point> make_points(const SweepOptions& s) {
  const auto grid = grid_points(s.axes);
  std::vector<Point> points(grid.size());
  const size_t index_width = fmt::format("{}", grid.size() - 1).size();
  for (size_t i = 0; i < grid.size(); ++i) {
    Point& p = points[i];
    p.values = grid[i];
    p.args = {"simulate", "--quiet", "--json"};
    if (s.keep_points) {
      const fs::path folder = fs::path(s.out_dir) / "points" / fmt::format("{:0{}}", i, index_width);
      p.args.push_back("--out=" + folder.string());
    }
    p.args.insert(p.args.end(), s.base.begin(), s.base.end());
    // --FLAG=VALUE in one word: a value like "-1" is then not read as a flag.
    for (size_t a = 0; a < s.axes.size(); ++a)
      p.args.push_back(fmt::format("--{}={}", s.axes[a].flag, p.values[a]));
  }
  return points;
}

// After the first point: what makes every point unusable is bad input.
void check_first_point(const SweepOptions& s, const Point& first) {
  if (!first.outcome.ok && first.exit_code == 2)
    throw InputError(fmt::format("simulate refused the first point ({}) as bad input: {}",
                                 point_label(s.axes, first.values), first.error));
  if (!first.outcome.ok) return;
  // Goodput columns exist only with an SLO, for every point or none.
  std::vector<std::pair<std::string, const MetricColumn*>> used = {
      {"--objective " + s.objective.name, s.objective.column}};
  for (const Constraint& c : s.constraints) used.push_back({"--constraint " + c.text, c.column});
  for (const auto& [what, column] : used)
    if (column->needs_slo && !metric_value(first.outcome.summary, *column))
      throw InputError(fmt::format("{} needs goodput: give an SLO in the simulate flags after `--` (--slo-ttft, "
                                   "--slo-tpot or --slo-e2e)",
                                   what));
}

}  // namespace

int sweep_command(int argc, const char* const* argv, const char* program) {
  if (argc >= 2 && std::strcmp(argv[1], "merge") == 0) return sweep_merge_command(argc - 1, argv + 1);
  const std::optional<SweepOptions> options = parse_sweep_flags(argc, argv);
  if (!options) return 0;  // --help
  const SweepOptions& s = *options;
  std::vector<Point> points = make_points(s);

  // The first point alone (of the shard's): bad input shared by every point
  // (a bad simulate flag, an unknown axis flag) then stops the sweep with
  // simulate's message instead of filling every row with it.
  const Executable exe = self_executable(program);
  std::vector<size_t> mine;
  for (size_t i = 0; i < points.size(); ++i)
    if (!s.shard || s.shard->holds(i)) mine.push_back(i);
  if (mine.empty())
    throw InputError(fmt::format("--shard {}/{}: the grid has only {} points, none of them this shard's",
                                 s.shard->index, s.shard->count, points.size()));
  if (!s.quiet)
    std::fprintf(stderr, "sweep: %zu points%s, %zu at once\n", mine.size(),
                 s.shard ? fmt::format(" (shard {}/{} of {})", s.shard->index, s.shard->count, points.size()).c_str()
                         : "",
                 std::min(s.jobs, mine.size()));
  {
    Progress progress(mine.size(), s.quiet);
    run_point(exe, points[mine[0]]);
    check_first_point(s, points[mine[0]]);
    progress.point_done();
    run_parallel(1, mine.size(), s.jobs, [&](size_t k) {
      run_point(exe, points[mine[k]]);
      progress.point_done();
    });
  }
  if (s.shard) return finish_shard(s.axes, s.base, s.objective, s.constraints, points, *s.shard, s.out_dir, s.json);
  return finish_sweep(s.axes, s.base, s.objective, s.constraints, points, s.out_dir, s.json);
}

}  // namespace servesim::cli
