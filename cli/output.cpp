#include "cli/output.h"

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include <fmt/format.h>

#include "cli/common_options.h"
#include "sim/report.h"

namespace servesim::cli {

bool stderr_is_terminal() { return isatty(fileno(stderr)) != 0; }

po::options_description output_options() {
  po::options_description o("Output", kHelpWidth);
  o.add_options()
      ("out", po::value<std::string>(), "write summary.json, requests.csv, iterations.csv here")
      ("json", "print summary.json to stdout instead of the table")
      ("quiet,q", "no progress on stderr");
  return o;
}

std::function<void(const RunProgress&)> progress_printer(const std::string& command, bool quiet) {
  if (quiet) return {};
  const bool terminal = stderr_is_terminal();
  return [command, terminal](const RunProgress& p) {
    std::fprintf(stderr, "%s%s: %lld/%lld requests done, %lld iterations, t=%.1f s%s", terminal ? "\r" : "",
                 command.c_str(), (long long)p.finished, (long long)p.total, (long long)p.iterations,
                 p.clock_s, terminal ? "" : "\n");
    std::fflush(stderr);
  };
}

void emit_results(const po::variables_map& vm, const RunRecords& records, const RunSummary& summary,
                  const nlohmann::json& summary_json, const std::string& title,
                  const SpeculativeStats* speculative, bool iterations_streamed) {
  nlohmann::json full = summary_json;
  if (speculative) full["speculative"] = speculative->to_json();
  if (vm.count("out")) {
    const std::string dir = vm["out"].as<std::string>();
    write_run_outputs(dir, records, full, !iterations_streamed);
    if (speculative) speculative->write_requests_csv(dir + "/speculative_requests.csv");
  }
  if (vm.count("json")) {
    std::cout << full.dump(2) << "\n";
    return;
  }
  std::cout << format_summary_table(summary, title);
  if (speculative)
    std::cout << fmt::format("  speculate  k = {}: {:.3f} tokens per step, draft acceptance {:.3f}, {} steps, "
                             "{} plain decodes\n",
                             speculative->num_speculative_tokens(), speculative->mean_accepted_tokens_per_step(),
                             speculative->draft_acceptance_rate(), speculative->steps(),
                             speculative->plain_decodes());
  if (vm.count("out"))
    std::cout << "  outputs    " << vm["out"].as<std::string>() << "/{summary.json,requests.csv,iterations.csv"
              << (speculative ? ",speculative_requests.csv" : "") << "}\n";
}

IterationsStream::IterationsStream(const std::string& out_dir, bool with_replica) : dir_(out_dir) {
  std::error_code ignored;
  created_dir_ = !std::filesystem::exists(out_dir, ignored);
  create_output_folder(out_dir);
  writer_ = std::make_unique<IterationsCsvWriter>(out_dir + "/iterations.csv", with_replica);
}

IterationsStream::~IterationsStream() {
  writer_.reset();  // an unfinished writer removes its file
  std::error_code ignored;
  if (!finished_ && created_dir_) std::filesystem::remove(dir_, ignored);  // only if empty
}

}  // namespace servesim::cli
