#include "sim/report.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>

#include <fmt/compile.h>
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
  // Closes the file: InputError when what was written did not reach it.
  void close() {
    if (std::fclose(file_.release()) != 0) throw InputError(fmt::format("{}: write failed", path_));
  }
  ~CsvWriter() = default;

 private:
  std::string path_;
  FilePtr file_;
  fmt::memory_buffer buffer_;
};

// Cells appended straight into the buffer, their formats compiled (no
// format-string parsing, no temporary strings): iterations.csv of a long run
// has millions of rows. A double is written in its shortest exact form, as
// fmt's "{}" writes it.
void put(fmt::memory_buffer& b, int64_t v) {
  const fmt::format_int digits(v);
  b.append(digits.data(), digits.data() + digits.size());
}
void put(fmt::memory_buffer& b, double v) { fmt::format_to(fmt::appender(b), FMT_COMPILE("{}"), v); }
void put(fmt::memory_buffer& b, std::string_view text) { b.append(text.data(), text.data() + text.size()); }
// `v` and a comma; an empty cell for an undefined time (v < 0: e.g. TTFT of
// a rejected request).
void time_cell(fmt::memory_buffer& b, double v) {
  if (v >= 0) put(b, v);
  b.push_back(',');
}
template <typename T>
void cell(fmt::memory_buffer& b, T v) {
  put(b, v);
  b.push_back(',');
}

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
  fmt::memory_buffer& b = out.buffer();
  put(b, "id,status,arrival_s,prompt_tokens,output_tokens,first_scheduled_s,first_token_s,"
         "last_token_s,finish_s,ttft_s,tpot_s,e2e_s,queueing_s,tokens_emitted,emissions,"
         "preemptions,cached_tokens,rejection_reason");
  put(b, records.replicas.empty() ? "\n" : ",replica\n");
  for (const RequestRecord& r : records.requests) {
    if (!r.submitted()) continue;
    const bool done = r.completed();
    cell(b, r.id);
    cell(b, std::string_view(r.rejected() ? "rejected" : done ? "completed" : "unfinished"));
    cell(b, r.arrival_s);
    cell(b, int64_t(r.prompt_tokens));
    cell(b, int64_t(r.output_tokens));
    time_cell(b, r.first_scheduled_s);
    time_cell(b, r.first_token_s);
    time_cell(b, r.last_token_s);
    time_cell(b, r.finish_s);
    time_cell(b, done ? r.first_token_s - r.arrival_s : -1);
    time_cell(b, request_tpot_s(r));
    time_cell(b, done ? r.finish_s - r.arrival_s : -1);
    time_cell(b, r.first_scheduled_s >= 0 ? r.first_scheduled_s - r.arrival_s : -1);
    cell(b, int64_t(r.tokens_emitted));
    cell(b, int64_t(r.emissions));
    cell(b, int64_t(r.preemptions));
    cell(b, int64_t(r.cached_tokens));
    if (r.rejected()) {
      b.push_back('"');
      put(b, records.rejection_reasons[size_t(r.rejection)]);
      b.push_back('"');
    }
    if (!records.replicas.empty()) {
      b.push_back(',');
      put(b, int64_t(r.replica));
    }
    b.push_back('\n');
    out.flush_if_large();
  }
  out.flush();
  out.close();
}

namespace {

constexpr std::string_view kIterationsHeader =
    "index,kind,start_s,duration_s,prefill_tokens,decode_tokens,prefill_sequences,"
    "decode_sequences,sampled_sequences,prefix_hit_tokens,kv_blocks_used,waiting";

void iterations_header(fmt::memory_buffer& b, bool with_replica) {
  put(b, kIterationsHeader);
  put(b, with_replica ? ",replica\n" : "\n");
}

void iteration_row(fmt::memory_buffer& b, const IterationRecord& it, bool with_replica) {
  const char* kind = it.prefill_sequences == 0 ? "decode" : it.decode_sequences == 0 ? "prefill" : "mixed";
  cell(b, it.index);
  cell(b, std::string_view(kind));
  cell(b, it.start_s);
  cell(b, it.duration_s);
  cell(b, int64_t(it.prefill_tokens));
  cell(b, int64_t(it.decode_tokens));
  cell(b, int64_t(it.prefill_sequences));
  cell(b, int64_t(it.decode_sequences));
  cell(b, int64_t(it.sampled_sequences));
  cell(b, int64_t(it.prefix_hit_tokens));
  cell(b, it.kv_blocks_used);
  put(b, int64_t(it.waiting));
  if (with_replica) {
    b.push_back(',');
    put(b, int64_t(it.replica));
  }
  b.push_back('\n');
}

}  // namespace

void write_iterations_csv(const std::string& path, const RunRecords& records) {
  IterationsCsvWriter out(path, !records.replicas.empty());
  for (const IterationRecord& it : records.iterations) out.add(it);
  out.finish();
}

struct IterationsCsvWriter::File {
  explicit File(const std::string& p) : path(p), csv(p) {}
  std::string path;
  CsvWriter csv;
  bool finished = false;
};

IterationsCsvWriter::IterationsCsvWriter(const std::string& path, bool with_replica)
    : file_(std::make_unique<File>(path)), with_replica_(with_replica) {
  iterations_header(file_->csv.buffer(), with_replica_);
}

IterationsCsvWriter::~IterationsCsvWriter() {
  if (file_->finished) return;
  const std::string path = file_->path;
  file_.reset();  // closes it
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

void IterationsCsvWriter::add(const IterationRecord& record) {
  iteration_row(file_->csv.buffer(), record, with_replica_);
  file_->csv.flush_if_large();
}

void IterationsCsvWriter::finish() {
  file_->csv.flush();
  file_->csv.close();
  file_->finished = true;
}

void create_output_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(fmt::format("--out: cannot create folder '{}': {}", dir, ec.message()));
}

void write_run_outputs(const std::string& dir, const RunRecords& records, const nlohmann::json& summary_json,
                       bool with_iterations) {
  namespace fs = std::filesystem;
  create_output_folder(dir);
  {
    const std::string path = (fs::path(dir) / "summary.json").string();
    FilePtr f = open_for_writing(path);
    const std::string text = summary_json.dump(2) + "\n";
    if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size())
      throw InputError(fmt::format("{}: write failed", path));
  }
  write_requests_csv((fs::path(dir) / "requests.csv").string(), records);
  if (with_iterations) write_iterations_csv((fs::path(dir) / "iterations.csv").string(), records);
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
                     s.slo_met, s.submitted);  // a rejected request missed them (slo_attainment's rule)
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
    if (d.count == 0) {  // no samples (every request rejected; no request of 2+ tokens for TPOT)
      t += fmt::format("  {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", name, "-", "-", "-", "-", "-");
      return;
    }
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
