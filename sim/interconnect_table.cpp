// Reading a user's measured interconnect table: a JSON table or the stdout
// of nccl-tests' all_reduce_perf (formats: docs/parallelism.md).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sim/errors.h"
#include "sim/json_fields.h"
#include "sim/interconnect.h"

namespace servesim {
namespace {

double from_us(double us) { return us / 1e6; }  // one rounding: 5 us is exactly 5e-6 s
constexpr double kGiga = 1e9;                     // nccl-tests' GB/s are 1e9 bytes/s

const Interconnect& default_preset() {
  for (const Interconnect& ic : interconnect_presets())
    if (ic.name == kDefaultInterconnect) return ic;
  throw InputError(fmt::format("no interconnect preset '{}'", kDefaultInterconnect));
}

void sort_by_ranks(std::vector<CollectiveCurve>& table) {
  std::sort(table.begin(), table.end(),
            [](const CollectiveCurve& a, const CollectiveCurve& b) { return a.ranks < b.ranks; });
}

// Noise can make a larger message measure faster than a smaller one; a
// simulator must never find a larger message cheaper, so each time is raised
// to the largest time at any smaller size.
void make_monotone(CollectiveCurve& c) {
  for (size_t i = 1; i < c.seconds.size(); ++i) c.seconds[i] = std::max(c.seconds[i], c.seconds[i - 1]);
}

std::string default_p2p_note() {
  const Interconnect& d = default_preset();
  return fmt::format("p2p: the {} preset's ({} us, {} GB/s), the table giving none", d.name, d.p2p_latency_s * 1e6,
                     d.p2p_bandwidth / kGiga);
}

// ---- the JSON table --------------------------------------------------------

double number_field(const nlohmann::json& j, const char* key, const std::string& where, bool allow_zero) {
  if (!j.contains(key)) throw InputError(fmt::format("{}: missing field '{}'", where, key));
  const nlohmann::json& v = j[key];
  if (!v.is_number()) throw InputError(fmt::format("{}: field '{}' must be a number (got {})", where, key, v.dump()));
  const double x = v.get<double>();
  if (!std::isfinite(x) || !(allow_zero ? x >= 0 : x > 0))
    throw InputError(fmt::format("{}: field '{}' must be {} (got {})", where, key, allow_zero ? ">= 0" : "> 0", x));
  return x;
}

std::vector<CollectiveCurve> json_curves(const nlohmann::json& list, const std::string& where) {
  if (!list.is_array() || list.empty())
    throw InputError(fmt::format("{}: must be a non-empty list of {{\"ranks\", \"points\"}} or {{\"ranks\", "
                                 "\"latency_us\", \"bus_bandwidth_gbps\"}} entries",
                                 where));
  std::vector<CollectiveCurve> out;
  for (size_t e = 0; e < list.size(); ++e) {
    const nlohmann::json& j = list[e];
    std::string at = fmt::format("{}[{}]", where, e);
    if (!j.is_object()) throw InputError(fmt::format("{}: must be an object (got {})", at, j.dump()));
    const bool ok = j.contains("ranks") && j["ranks"].is_number_integer() && j["ranks"].get<int64_t>() >= 2 &&
                    j["ranks"].get<int64_t>() <= 1 << 20;
    if (!ok)
      throw InputError(fmt::format("{}: field 'ranks' must be an integer >= 2 (got {})", at,
                                   j.contains("ranks") ? j["ranks"].dump() : "nothing"));
    CollectiveCurve c;
    c.ranks = int(j["ranks"].get<int64_t>());
    at += fmt::format(" (ranks {})", c.ranks);
    for (const CollectiveCurve& o : out)
      if (o.ranks == c.ranks) throw InputError(fmt::format("{}: a second entry for {} ranks", at, c.ranks));
    const bool points = j.contains("points");
    if (points == (j.contains("latency_us") || j.contains("bus_bandwidth_gbps")))
      throw InputError(fmt::format("{}: give either 'points' or 'latency_us' and 'bus_bandwidth_gbps'{}", at,
                                   points ? ", not both" : ""));
    if (!points) {
      c.latency_s = from_us(number_field(j, "latency_us", at, true));
      c.bus_bandwidth = number_field(j, "bus_bandwidth_gbps", at, false) * kGiga;
    } else {
      const nlohmann::json& p = j["points"];
      if (!p.is_array() || p.empty())
        throw InputError(fmt::format("{}: field 'points' must be a non-empty list of {{\"bytes\", \"time_us\"}}", at));
      for (size_t i = 0; i < p.size(); ++i) {
        const std::string pat = fmt::format("{}: points[{}]", at, i);
        if (!p[i].is_object()) throw InputError(fmt::format("{}: must be an object (got {})", pat, p[i].dump()));
        const double b = number_field(p[i], "bytes", pat, false);
        const double t = number_field(p[i], "time_us", pat, false);
        if (!c.bytes.empty() && !(b > c.bytes.back()))
          throw InputError(fmt::format("{}: sizes must strictly increase (bytes {} after {})", pat, b, c.bytes.back()));
        c.bytes.push_back(b);
        c.seconds.push_back(from_us(t));
      }
      make_monotone(c);
    }
    out.push_back(std::move(c));
  }
  sort_by_ranks(out);
  return out;
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& fallback,
                         const std::string& file) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string())
    throw InputError(fmt::format("{}: field '{}' must be a string (got {})", file, key, j[key].dump()));
  return j[key].get<std::string>();
}

Interconnect parse_json_table(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", file, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", file));
  require_known_fields(j, {"name", "description", "source", "measured", "all_reduce", "all_gather", "p2p"}, file);
  if (!j.contains("all_reduce")) throw InputError(fmt::format("{}: missing field 'all_reduce'", file));
  Interconnect ic;
  ic.measured = true;
  ic.name = string_field(j, "name", file, file);
  ic.description = string_field(j, "description", "user interconnect table " + file, file);
  const std::string note = string_field(j, "source", "", file);
  ic.all_reduce = json_curves(j["all_reduce"], file + ": all_reduce");
  if (j.contains("all_gather")) ic.all_gather = json_curves(j["all_gather"], file + ": all_gather");
  std::string p2p;
  if (j.contains("p2p")) {
    if (!j["p2p"].is_object())
      throw InputError(fmt::format("{}: field 'p2p' must be an object {{\"latency_us\", \"bandwidth_gbps\"}}", file));
    ic.p2p_latency_s = from_us(number_field(j["p2p"], "latency_us", file + ": p2p", true));
    ic.p2p_bandwidth = number_field(j["p2p"], "bandwidth_gbps", file + ": p2p", false) * kGiga;
    p2p = "p2p from the file";
  } else {
    const Interconnect& d = default_preset();
    ic.p2p_latency_s = d.p2p_latency_s;
    ic.p2p_bandwidth = d.p2p_bandwidth;
    ic.p2p_given = false;
    p2p = default_p2p_note();
  }
  const char* gather = ic.all_gather.empty() ? "; all-gather of S bytes costed as the table's all-reduce of S/2" : "";
  ic.source = fmt::format("user file {}{}{}; {}{}", file, note.empty() ? "" : ": ", note, p2p, gather);
  return ic;
}

// ---- nccl-tests' all_reduce_perf stdout ------------------------------------

std::vector<std::string> split(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The words of a '#' line after its leading '#'s; false for other lines.
bool header_words(const std::vector<std::string>& words, std::vector<std::string>& out) {
  out.clear();
  if (words.empty() || words[0][0] != '#') return false;
  const std::string first = words[0].substr(std::min(words[0].find_first_not_of('#'), words[0].size()));
  if (!first.empty()) out.push_back(first);
  out.insert(out.end(), words.begin() + 1, words.end());
  return true;
}

bool parse_count(const std::string& s, unsigned long long& v) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoull(s.c_str(), &end, 10);
  return *end == '\0' && errno == 0;
}

bool parse_number(const std::string& s, double& v) {
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0' && std::isfinite(v);
}

bool looks_like_nccl_tests(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> h;
  for (std::string l; std::getline(in, l);)
    if (header_words(split(l), h) && h.size() >= 3 &&
        ((h[0] == "nThread" && h[2] == "nGpus") || (h[0] == "size" && h[1] == "count") ||
         (h[0] == "Using" && h[1] == "devices")))
      return true;
  return false;
}

struct Run {
  unsigned long long threads = 0, gpus = 0;
  int rank_lines = 0, first_row = 0;
  size_t time_column = 5;  // 0-based: size count type redop root time ...
  std::string device;
  std::vector<double> bytes, seconds;
};

// One run per rank count: a '# nThread' or '#  Rank' line after data rows
// starts the next (outputs concatenated with cat).
Interconnect parse_nccl_tests(const std::string& text, const std::string& file) {
  std::vector<Run> runs(1);
  std::istringstream in(text);
  std::vector<std::string> h;
  int n = 0;
  for (std::string l; std::getline(in, l);) {
    ++n;
    const std::vector<std::string> w = split(l);
    if (w.empty()) continue;
    if (header_words(w, h)) {
      if (h.empty()) continue;
      unsigned long long rank_id = 0;
      const bool rank_line = h.size() >= 2 && h[0] == "Rank" && parse_count(h[1], rank_id);
      if ((h[0] == "nThread" || rank_line) && !runs.back().bytes.empty()) runs.emplace_back();
      Run& r = runs.back();
      if (h.size() >= 4 && h[0] == "Collective" && h[2] == "starting:" && h[3].rfind("all_reduce_perf", 0) != 0)
        throw InputError(fmt::format("{}: line {}: this is the output of {}; expected all_reduce_perf", file, n, h[3]));
      if (h[0] == "nThread" && !(h.size() >= 4 && h[2] == "nGpus" && parse_count(h[1], r.threads) &&
                                 parse_count(h[3], r.gpus)))
        throw InputError(fmt::format("{}: line {}: expected '# nThread T nGpus G ...'", file, n));
      if (r.threads > 1024 || r.gpus > 1024)  // keeps nThread x nGpus within an int
        throw InputError(fmt::format("{}: line {}: implausible nThread {} nGpus {}", file, n, r.threads, r.gpus));
      if (rank_line) {
        ++r.rank_lines;
        const size_t close = l.find(']');
        if (r.device.empty() && close != std::string::npos)
          r.device = fmt::format("{}", fmt::join(split(l.substr(close + 1)), " "));
      }
      if (h[0] == "size") {
        const auto t =
            std::find_if(h.begin(), h.end(), [](const std::string& s) { return s == "time" || s == "cputime"; });
        if (t == h.end())
          throw InputError(fmt::format("{}: line {}: a column header without a 'time' column", file, n));
        r.time_column = size_t(t - h.begin());
      }
      continue;
    }
    unsigned long long size = 0;
    if (!parse_count(w[0], size)) continue;  // NCCL INFO/WARN lines and other chatter
    Run& r = runs.back();
    double us = 0;
    if (w.size() <= r.time_column || !parse_number(w[r.time_column], us))
      throw InputError(fmt::format("{}: line {}: a data row must read 'size count type redop root time algbw busbw "
                                   "#wrong ...' with the out-of-place time (us) in column {}; got '{}'",
                                   file, n, r.time_column + 1, fmt::join(w, " ")));
    if (!(us > 0))
      throw InputError(fmt::format("{}: line {}: the out-of-place time must be > 0 us (got {})", file, n, us));
    if (size == 0) continue;  // a zero-byte all-reduce costs nothing
    if (!r.bytes.empty() && !(double(size) > r.bytes.back()))
      throw InputError(fmt::format("{}: line {}: sizes must strictly increase within a run (size {} after {}); give "
                                   "one data type and one reduction op per run",
                                   file, n, size, r.bytes.back()));
    if (r.bytes.empty()) r.first_row = n;
    r.bytes.push_back(double(size));
    r.seconds.push_back(from_us(us));
  }
  Interconnect ic = default_preset();  // for its p2p figures
  ic.p2p_given = false;
  ic.custom_all_reduce.clear();
  ic.all_gather.clear();
  ic.all_reduce.clear();
  ic.measured = true;
  ic.name = std::filesystem::path(file).stem().string();
  std::string devices;
  for (const Run& r : runs) {
    if (r.bytes.empty())
      throw InputError(fmt::format("{}: a run with no data rows (size count type ... time ...)", file));
    // Rank lines list every rank (MPI gathers them); nThread x nGpus is one
    // process's share and covers the case of no (or truncated) Rank lines.
    const long long ranks = std::max<long long>(r.rank_lines, (long long)(r.threads * r.gpus));
    if (ranks < 2)
      throw InputError(fmt::format("{}: line {}: {}", file, r.first_row,
                                   ranks == 0 ? "cannot tell how many ranks ran: no '#  Rank N ...' lines and no "
                                                "'# nThread T nGpus G' line before the data rows"
                                              : "a run on 1 rank; an all-reduce table needs 2 or more"));
    for (const CollectiveCurve& c : ic.all_reduce)
      if (c.ranks == ranks)
        throw InputError(fmt::format("{}: line {}: a second run on {} ranks", file, r.first_row, ranks));
    CollectiveCurve c;
    c.ranks = int(ranks);
    c.bytes = r.bytes;
    c.seconds = r.seconds;
    make_monotone(c);
    ic.all_reduce.push_back(std::move(c));
    devices += fmt::format("{}{} ranks{}{}", devices.empty() ? "" : "; ", ranks, r.device.empty() ? "" : " of ",
                           r.device);
  }
  sort_by_ranks(ic.all_reduce);
  ic.description = fmt::format("nccl-tests all_reduce_perf output ({})", devices);
  ic.source = fmt::format("measured: nccl-tests all_reduce_perf stdout in {}, out-of-place times; {}; all-gather of S "
                          "bytes costed as the all-reduce of S/2",
                          file, default_p2p_note());
  return ic;
}

}  // namespace

Interconnect parse_interconnect(const std::string& text, const std::string& source_name) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_json_table(text, source_name);
  if (looks_like_nccl_tests(text)) return parse_nccl_tests(text, source_name);
  throw InputError(fmt::format(
      "{}: not an interconnect table: expected a JSON object with an \"all_reduce\" list, or the stdout of "
      "nccl-tests' all_reduce_perf ('# nThread T nGpus G ...' and '#  Rank N ...' header lines, then rows 'size "
      "count type redop root time algbw busbw #wrong ...')",
      source_name));
}

Interconnect load_interconnect(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!std::filesystem::is_regular_file(path) || !in)
    throw InputError(fmt::format("{}: cannot read the interconnect table (no such file?)", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_interconnect(text.str(), path);
}

}  // namespace servesim
