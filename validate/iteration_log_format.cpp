#include "validate/iteration_log_format.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/errors.h"
#include "sim/input_file.h"

namespace servesim {
namespace {

// Longer than any model's context by far, and small enough that a line's
// token sums and a sequence's KV blocks stay in 32 bits.
constexpr int64_t kMaxSequenceTokens = int64_t(1) << 24;
constexpr int64_t kMaxIterationTokens = INT32_MAX;

// One sequence of a line: [request_id, query_tokens, cached_tokens, prefill,
// samples, emitted].
RecordedSequence parse_sequence(const nlohmann::json& j, const std::string& where) {
  if (!j.is_array() || j.size() != 6)
    throw InputError(fmt::format("{}: each of \"sequences\" must be [request_id, query_tokens, cached_tokens, "
                                 "prefill, samples, emitted]",
                                 where));
  for (const nlohmann::json& v : j)
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      throw InputError(fmt::format("{}: a sequence's fields must be integers of 64 bits (got {})", where, j.dump()));
  RecordedSequence s;
  s.request_id = j[0].get<int64_t>();
  const int64_t query = j[1].get<int64_t>(), cached = j[2].get<int64_t>();
  const int64_t prefill = j[3].get<int64_t>(), samples = j[4].get<int64_t>(), emitted = j[5].get<int64_t>();
  if (query < 1 || query > INT32_MAX) throw InputError(fmt::format("{}: query_tokens must be >= 1 (got {})", where, query));
  if (cached < 0 || cached > INT32_MAX)
    throw InputError(fmt::format("{}: cached_tokens must be >= 0 (got {})", where, cached));
  if (cached + query > kMaxSequenceTokens)
    throw InputError(fmt::format("{}: cached_tokens + query_tokens must be <= {} (got {})", where,
                                 kMaxSequenceTokens, cached + query));
  if ((prefill != 0 && prefill != 1) || (samples != 0 && samples != 1))
    throw InputError(fmt::format("{}: prefill and samples must be 0 or 1 (got {})", where, j.dump()));
  if (emitted < -1 || emitted > query)
    throw InputError(fmt::format("{}: emitted must be -1 .. query_tokens (got {})", where, emitted));
  s.num_query_tokens = int32_t(query);
  s.num_cached_tokens = int32_t(cached);
  s.is_prefill = prefill == 1;
  s.samples = samples == 1;
  s.emitted_tokens = int32_t(emitted);
  return s;
}

double finite_number(const nlohmann::json& line, const char* field, const std::string& where) {
  if (!line.contains(field) || !line[field].is_number())
    throw InputError(fmt::format("{}: \"{}\" must be a number", where, field));
  const double v = line[field].get<double>();
  if (!std::isfinite(v) || v < 0) throw InputError(fmt::format("{}: \"{}\" must be finite and >= 0 (got {})", where, field, v));
  return v;
}

}  // namespace

std::string iteration_log_line(int64_t index, double start_s, const RecordedIteration& iteration) {
  std::string line = fmt::format("{{\"index\":{},\"start_s\":{},\"measured_s\":{},\"sequences\":[", index, start_s,
                                 iteration.measured_s);
  for (size_t k = 0; k < iteration.sequences.size(); ++k) {
    const RecordedSequence& s = iteration.sequences[k];
    line += fmt::format("{}[{},{},{},{},{},{}]", k ? "," : "", s.request_id, s.num_query_tokens, s.num_cached_tokens,
                        int(s.is_prefill), int(s.samples), s.emitted_tokens);
  }
  return line + "]}";
}

IterationLogRead read_iteration_log(const std::string& path) {
  refuse_folder(path, "--iteration-log " + path, "an iteration log (JSON lines)");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("--iteration-log {}: cannot open", path));
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_iteration_log(text, path);
}

IterationLogRead parse_iteration_log(std::string_view text, const std::string& source) {
  IterationLogRead out;
  out.log.source = source;
  size_t begin = 0;
  for (int64_t number_of_line = 1; begin < text.size(); ++number_of_line) {
    const size_t end = text.find('\n', begin);
    // The writer ends every line with a newline: a last line without one
    // was cut off by a server stopped mid-write.
    const bool unfinished = end == std::string::npos;
    const std::string_view line_text(text.data() + begin, (unfinished ? text.size() : end) - begin);
    begin = unfinished ? text.size() : end + 1;
    const std::string where = fmt::format("--iteration-log {} line {}", source, number_of_line);
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(line_text);
    } catch (const nlohmann::json::exception& e) {  // not JSON, or a number out of range
      if (unfinished) {
        out.truncated_last_line = true;
        break;
      }
      throw InputError(fmt::format("{}: not a JSON object (each line is one iteration): {}", where, e.what()));
    }
    if (!line.is_object()) throw InputError(where + ": not a JSON object (each line is one iteration)");
    RecordedIteration it;
    const double start_s = finite_number(line, "start_s", where);
    it.measured_s = finite_number(line, "measured_s", where);
    if (!line.contains("sequences") || !line["sequences"].is_array() || line["sequences"].empty())
      throw InputError(where + ": \"sequences\" must be a non-empty array");
    int64_t tokens = 0;
    for (const nlohmann::json& s : line["sequences"]) {
      it.sequences.push_back(parse_sequence(s, where));
      const RecordedSequence& r = it.sequences.back();
      tokens += r.num_query_tokens;
      if (tokens > kMaxIterationTokens)
        throw InputError(fmt::format("{}: the sequences' query tokens sum past {}", where, kMaxIterationTokens));
      (r.is_prefill ? it.prefill_tokens : it.decode_tokens) += r.num_query_tokens;
      ++(r.is_prefill ? it.prefill_sequences : it.decode_sequences);
    }
    out.log.iterations.push_back(std::move(it));
    out.log.starts_s.push_back(start_s);
  }
  if (out.log.iterations.empty()) throw InputError(fmt::format("--iteration-log {}: no iterations", source));
  return out;
}

}  // namespace servesim
