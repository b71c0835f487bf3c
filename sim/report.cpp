#include "sim/report.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

nlohmann::json distribution_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90},
          {"p95", d.p95},     {"p99", d.p99},   {"min", d.min}, {"max", d.max}};
}

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

FilePtr open_for_writing(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) throw InputError(fmt::format("{}: cannot open for writing", path));
  return f;
}

// Writes buffered text in large chunks: requests.csv can have a million rows.
class CsvWriter {
 public:
  explicit CsvWriter(const std::string& path) : path_(path), file_(open_for_writing(path)) {}
  fmt::memory_buffer& buffer() { return buffer_; }
  void flush_if_large() {
    if (buffer_.size() > (1 << 20)) flush();
  }
  void flush() {
    if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_.get()) != buffer_.size())
      throw InputError(fmt::format("{}: write failed", path_));
    buffer_.clear();
  }
  ~CsvWriter() = default;

 private:
  std::string path_;
  FilePtr file_;
  fmt::memory_buffer buffer_;
};

// Empty cell for an undefined time (e.g. TTFT of a rejected request).
std::string cell(double v) { return v < 0 ? std::string() : fmt::format("{}", v); }

std::string ms(double seconds) { return fmt::format("{:.2f}", seconds * 1e3); }

}  // namespace

nlohmann::json summary_to_json(const RunSummary& s, const SloTargets& slo,
                               const nlohmann::json& config) {
  nlohmann::json j;
  j["ttft_s"] = distribution_json(s.ttft_s);
  j["tpot_s"] = distribution_json(s.tpot_s);
  j["itl_s"] = distribution_json(s.itl_s);
  j["itl_s"]["exact"] = s.itl_exact;
  j["e2e_s"] = distribution_json(s.e2e_s);
  j["queueing_s"] = distribution_json(s.queueing_s);
  j["percentiles"] = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)";
  nlohmann::json reasons = nlohmann::json::object();
  for (const auto& [reason, count] : s.rejections) reasons[reason] = count;
  j["requests"] = {{"submitted", s.submitted},
                   {"completed", s.completed},
                   {"rejected", s.rejected},
                   {"rejection_reasons", reasons}};
  j["tokens"] = {{"prompt", s.prompt_tokens}, {"output", s.output_tokens}};
  j["throughput"] = {{"requests_per_s", s.requests_per_s},
                     {"output_tokens_per_s", s.output_tokens_per_s}};
  if (s.goodput_requests_per_s) {
    j["goodput_requests_per_s"] = *s.goodput_requests_per_s;
    nlohmann::json targets = nlohmann::json::object();
    if (slo.ttft_s) targets["ttft_s"] = *slo.ttft_s;
    if (slo.tpot_s) targets["tpot_s"] = *slo.tpot_s;
    if (slo.e2e_s) targets["e2e_s"] = *slo.e2e_s;
    j["slo"] = {{"targets", targets}, {"requests_met", s.slo_met}};
    // Requests meeting every SLO over those submitted (a rejected one meets none).
    j["slo_attainment"] = s.submitted > 0 ? double(s.slo_met) / double(s.submitted) : 0.0;
  }
  j["preemptions"] = s.preemptions;
  j["duration_s"] = s.duration_s;
  j["iterations"] = s.iterations;
  j["mean_batch"] = {{"tokens", s.mean_batch_tokens}, {"sequences", s.mean_batch_sequences}};
  j["kv_cache"] = {{"num_gpu_blocks", s.num_gpu_blocks},
                   {"peak_blocks_used", s.peak_kv_blocks},
                   {"peak_utilization", s.peak_kv_utilization}};
  const PrefixCacheCounts& pc = s.prefix_cache;
  j["prefix_cache"] = {{"queries_tokens", pc.queries_tokens},
                       {"hits_tokens", pc.hits_tokens},
                       {"hit_rate", s.prefix_cache_hit_rate ? nlohmann::json(*s.prefix_cache_hit_rate) : nullptr},
                       {"preempted_queries_tokens", pc.preempted_queries_tokens},
                       {"preempted_hits_tokens", pc.preempted_hits_tokens},
                       {"evicted_blocks", pc.evicted_blocks}};
  j["config"] = config;
  return j;
}

void write_requests_csv(const std::string& path, const RunRecords& records) {
  CsvWriter out(path);
  fmt::format_to(std::back_inserter(out.buffer()),
                 "id,status,arrival_s,prompt_tokens,output_tokens,first_scheduled_s,first_token_s,"
                 "last_token_s,finish_s,ttft_s,tpot_s,e2e_s,queueing_s,tokens_emitted,emissions,"
                 "preemptions,cached_tokens,rejection_reason{}\n", records.replicas.empty() ? "" : ",replica");
  for (const RequestRecord& r : records.requests) {
    if (!r.submitted()) continue;
    const char* status = r.rejected() ? "rejected" : r.completed() ? "completed" : "unfinished";
    const bool done = r.completed();
    fmt::format_to(std::back_inserter(out.buffer()), "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                   r.id, status, r.arrival_s, r.prompt_tokens, r.output_tokens,
                   cell(r.first_scheduled_s), cell(r.first_token_s), cell(r.last_token_s),
                   cell(r.finish_s), done ? cell(r.first_token_s - r.arrival_s) : "",
                   cell(request_tpot_s(r)), done ? cell(r.finish_s - r.arrival_s) : "",
                   r.first_scheduled_s >= 0 ? cell(r.first_scheduled_s - r.arrival_s) : "",
                   r.tokens_emitted, r.emissions, r.preemptions, r.cached_tokens,
                   r.rejected() ? "\"" + records.rejection_reasons[size_t(r.rejection)] + "\"" : "");
    if (!records.replicas.empty()) {
      // The row's newline is already out: put the replica before it.
      fmt::memory_buffer& b = out.buffer();
      b.resize(b.size() - 1);
      fmt::format_to(std::back_inserter(b), ",{}\n", r.replica);
    }
    out.flush_if_large();
  }
  out.flush();
}

void write_iterations_csv(const std::string& path, const RunRecords& records) {
  CsvWriter out(path);
  fmt::format_to(std::back_inserter(out.buffer()),
                 "index,kind,start_s,duration_s,prefill_tokens,decode_tokens,prefill_sequences,"
                 "decode_sequences,sampled_sequences,prefix_hit_tokens,kv_blocks_used,waiting{}\n",
                 records.replicas.empty() ? "" : ",replica");
  for (const IterationRecord& it : records.iterations) {
    const char* kind = it.prefill_sequences == 0 ? "decode" : it.decode_sequences == 0 ? "prefill" : "mixed";
    fmt::format_to(std::back_inserter(out.buffer()), "{},{},{},{},{},{},{},{},{},{},{},{}\n", it.index,
                   kind, it.start_s, it.duration_s, it.prefill_tokens, it.decode_tokens,
                   it.prefill_sequences, it.decode_sequences, it.sampled_sequences,
                   it.prefix_hit_tokens, it.kv_blocks_used, it.waiting);
    if (!records.replicas.empty()) {
      fmt::memory_buffer& b = out.buffer();
      b.resize(b.size() - 1);
      fmt::format_to(std::back_inserter(b), ",{}\n", it.replica);
    }
    out.flush_if_large();
  }
  out.flush();
}

void write_run_outputs(const std::string& dir, const RunRecords& records,
                       const nlohmann::json& summary_json) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(fmt::format("--out: cannot create folder '{}': {}", dir, ec.message()));
  {
    const std::string path = (fs::path(dir) / "summary.json").string();
    FilePtr f = open_for_writing(path);
    const std::string text = summary_json.dump(2) + "\n";
    if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size())
      throw InputError(fmt::format("{}: write failed", path));
  }
  write_requests_csv((fs::path(dir) / "requests.csv").string(), records);
  write_iterations_csv((fs::path(dir) / "iterations.csv").string(), records);
}

std::string format_summary_table(const RunSummary& s, const std::string& title) {
  std::string t = title + "\n";
  t += fmt::format("  requests   {} submitted, {} completed, {} rejected, {} preemptions\n",
                   s.submitted, s.completed, s.rejected, s.preemptions);
  for (const auto& [reason, count] : s.rejections)
    t += fmt::format("             {} rejected: {}\n", count, reason);
  t += fmt::format("  duration   {:.2f} s over {} iterations (mean batch {:.1f} seqs, {:.1f} tokens)\n",
                   s.duration_s, s.iterations, s.mean_batch_sequences, s.mean_batch_tokens);
  t += fmt::format("  throughput {:.3f} req/s, {:.1f} output tok/s", s.requests_per_s, s.output_tokens_per_s);
  if (s.goodput_requests_per_s)
    t += fmt::format(", goodput {:.3f} req/s ({} of {} met the SLOs)", *s.goodput_requests_per_s,
                     s.slo_met, s.completed);
  t += "\n";
  t += fmt::format("  KV cache   peak {} of {} blocks ({:.1f}%)\n", s.peak_kv_blocks, s.num_gpu_blocks,
                   s.peak_kv_utilization * 100);
  if (s.prefix_cache_hit_rate)
    t += fmt::format("  prefix     hit rate {:.1f}% ({} of {} prompt tokens cached), {} blocks evicted\n",
                     *s.prefix_cache_hit_rate * 100, s.prefix_cache.hits_tokens, s.prefix_cache.queries_tokens,
                     s.prefix_cache.evicted_blocks);
  t += fmt::format("  {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}   (ms)\n", "", "mean", "p50", "p90",
                   "p95", "p99");
  auto row = [&](const char* name, const Distribution& d) {
    t += fmt::format("  {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", name, ms(d.mean), ms(d.p50),
                     ms(d.p90), ms(d.p95), ms(d.p99));
  };
  row("TTFT", s.ttft_s);
  row("TPOT", s.tpot_s);
  row("ITL", s.itl_s);
  row("E2E", s.e2e_s);
  row("queueing", s.queueing_s);
  return t;
}

}  // namespace servesim
