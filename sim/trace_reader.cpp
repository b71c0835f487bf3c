#include "sim/trace_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>

#include "sim/errors.h"
#include "sim/mooncake_trace.h"

namespace servesim {

namespace {

constexpr std::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr std::string_view kCsvHeader = "arrival_s,prompt_tokens,output_tokens";
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
constexpr int64_t kNsPerSecond = 1'000'000'000;

// One parsed data line. Azure times are kept as integer nanoseconds since
// 1970 (a double would lose sub-microsecond digits at that magnitude); plain
// CSV and Mooncake times are seconds as written.
struct Row {
  int64_t ns = 0;
  double seconds = 0.0;
  int32_t prompt_tokens = 0;
  int32_t output_tokens = 0;
  size_t index = 0;  // its data line, 0 = the first, so sorting keeps its token identity findable
};

// Where a message points: "FILE:LINE: ...".
struct Where {
  const std::string& path;
  size_t line;

  [[noreturn]] void fail(const std::string& detail) const {
    throw InputError(fmt::format("{}:{}: {}", path, line, detail));
  }
};

// ---------------------------------------------------------------- options

void check_options(const TraceOptions& o) {
  if (o.path.empty()) throw InputError("no trace file given (the trace path is empty)");
  if (!std::isfinite(o.rate_scale) || o.rate_scale <= 0) {
    throw InputError(fmt::format("trace rate scale must be a finite number > 0 (got {})",
                                 o.rate_scale));
  }
  if (!std::isfinite(o.window_start_s) || o.window_start_s < 0) {
    throw InputError(fmt::format("trace window start must be a finite number >= 0 s (got {})",
                                 o.window_start_s));
  }
  // Infinity is allowed (no end); NaN fails the comparison.
  if (!(o.window_duration_s > 0)) {
    throw InputError(fmt::format("trace window duration must be > 0 s or inf (got {})",
                                 o.window_duration_s));
  }
  if (o.max_requests != -1 && o.max_requests < 1) {
    throw InputError(fmt::format("trace max requests must be -1 (all) or >= 1 (got {})",
                                 o.max_requests));
  }
}

// ---------------------------------------------------------------- file and lines

std::string read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    throw InputError(fmt::format("cannot open trace file '{}': {}", path, std::strerror(errno)));
  }
  std::string content;
  // One allocation for a regular file's whole content (a pipe grows as read).
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) content.reserve(size_t(size));
  }
  std::array<char, 1 << 16> buffer;
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    content.append(buffer.data(), n);
  }
  if (std::ferror(file.get())) {  // e.g. the path is a directory
    throw InputError(fmt::format("cannot read trace file '{}': {}", path, std::strerror(errno)));
  }
  return content;
}

// Splits into lines without their "\n" or "\r\n" and drops trailing empty
// lines (a final newline, or a few blank lines at the end).
std::vector<std::string_view> split_lines(std::string_view text) {
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
  std::vector<std::string_view> lines;
  lines.reserve(size_t(std::count(text.begin(), text.end(), '\n')) + 1);
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  while (!lines.empty() && lines.back().find_first_not_of(" \t\r") == std::string_view::npos) {
    lines.pop_back();
  }
  return lines;
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

// ---------------------------------------------------------------- timestamps

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
// days_from_civil), so differences across midnight, month ends and leap
// days come out right.
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int days_in_month(int64_t y, int64_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// A left-to-right reader of fixed-width timestamp parts.
class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  bool done() const { return pos_ == s_.size(); }
  bool peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  bool accept(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  // Exactly `width` decimal digits.
  bool digits(int width, int64_t& out) {
    out = 0;
    for (int i = 0; i < width; ++i, ++pos_) {
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') return false;
      out = out * 10 + (s_[pos_] - '0');
    }
    return true;
  }
  // One or more digits after a decimal point, as nanoseconds; digits past
  // the ninth are below a nanosecond and are dropped.
  bool fraction_ns(int64_t& out) {
    out = 0;
    int count = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (count < 9) out = out * 10 + (s_[pos_] - '0');
      ++count;
      ++pos_;
    }
    for (int i = count; i < 9; ++i) out *= 10;
    return count > 0;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

// Optional UTC offset after the time: "Z", "+HH:MM" or "-HH:MM", in seconds.
bool parse_utc_offset(Scanner& in, int64_t& offset_s) {
  offset_s = 0;
  if (in.accept('Z')) return true;
  const bool plus = in.accept('+');
  if (!plus && !in.accept('-')) return true;  // no offset
  int64_t hh = 0, mm = 0;
  if (!in.digits(2, hh) || !in.accept(':') || !in.digits(2, mm) || hh > 23 || mm > 59) {
    return false;
  }
  offset_s = (plus ? 1 : -1) * (hh * 3600 + mm * 60);
  return true;
}

// "YYYY-MM-DD HH:MM:SS[.fraction][Z|+HH:MM|-HH:MM]" ('T' may replace the
// space) to nanoseconds since 1970-01-01 00:00:00 UTC.
bool parse_timestamp_ns(std::string_view text, int64_t& out) {
  Scanner in(text);
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, frac = 0, offset = 0;
  const bool ok = in.digits(4, y) && in.accept('-') && in.digits(2, mo) && in.accept('-') &&
                  in.digits(2, d) && (in.accept(' ') || in.accept('T')) && in.digits(2, h) &&
                  in.accept(':') && in.digits(2, mi) && in.accept(':') && in.digits(2, s);
  if (!ok) return false;
  if (in.accept('.') && !in.fraction_ns(frac)) return false;
  if (!parse_utc_offset(in, offset) || !in.done()) return false;
  if (y < 1900 || y > 2100) return false;  // so ns since 1970, and their differences, fit int64
  if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo)) return false;
  if (h > 23 || mi > 59 || s > 59) return false;
  const int64_t seconds = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset;
  out = seconds * kNsPerSecond + frac;
  return true;
}

// ---------------------------------------------------------------- fields

int32_t parse_tokens(std::string_view text, std::string_view field, const Where& where) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < 1 || value > kMaxTokens) {
    where.fail(fmt::format("field '{}': '{}' is not a positive integer (1..{})", field, text,
                           kMaxTokens));
  }
  return static_cast<int32_t>(value);
}

double parse_arrival_seconds(std::string_view text, std::string_view field, const Where& where) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value) || value < 0) {
    where.fail(fmt::format("field '{}': '{}' is not a finite number of seconds >= 0", field,
                           text));
  }
  return value;
}

int64_t parse_azure_timestamp(std::string_view text, std::string_view field,
                              const Where& where) {
  int64_t ns = 0;
  if (!parse_timestamp_ns(text, ns)) {
    where.fail(fmt::format(
        "field '{}': '{}' is not a timestamp 'YYYY-MM-DD HH:MM:SS[.fraction]'", field, text));
  }
  return ns;
}

// Splits a data line into exactly three trimmed fields named by `header`.
std::array<std::string_view, 3> split_fields(std::string_view line, std::string_view header,
                                             const Where& where) {
  std::array<std::string_view, 3> fields;
  size_t count = 0;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    if (count == fields.size()) {
      where.fail(fmt::format("too many fields (expected 3 comma-separated fields: {})", header));
    }
    fields[count++] = trim(line.substr(start, comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (count < fields.size()) {
    std::string_view missing = header;
    for (size_t i = 0; i < count; ++i) missing.remove_prefix(missing.find(',') + 1);
    missing = missing.substr(0, missing.find(','));
    where.fail(fmt::format("missing field '{}' (expected 3 comma-separated fields: {})", missing,
                           header));
  }
  return fields;
}

// ---------------------------------------------------------------- formats

std::string_view header_of(TraceFormat format) {
  return format == TraceFormat::Azure ? kAzureHeader : kCsvHeader;
}

std::string name_of(TraceFormat format) { return to_string(format); }

void check_header(std::string_view line, TraceFormat format, const Where& where) {
  const std::string_view expected = header_of(format);
  if (line == expected) return;
  const TraceFormat other = format == TraceFormat::Azure ? TraceFormat::Csv : TraceFormat::Azure;
  std::string hint;
  if (line == header_of(other)) {
    hint = fmt::format(" (it is the {} format's header)", name_of(other));
  } else if (trim(line).starts_with('{')) {
    hint = " (it looks like JSON lines: --trace-format mooncake?)";
  }
  where.fail(fmt::format("header '{}' does not match the {} trace format; expected '{}'{}", line,
                         name_of(format), expected, hint));
}

Row parse_row(std::string_view line, TraceFormat format, const Where& where) {
  const std::string_view header = header_of(format);
  if (trim(line).empty()) where.fail(fmt::format("empty line (expected '{}')", header));
  const auto fields = split_fields(line, header, where);
  const bool azure = format == TraceFormat::Azure;
  Row row;
  if (azure) {
    row.ns = parse_azure_timestamp(fields[0], "TIMESTAMP", where);
  } else {
    row.seconds = parse_arrival_seconds(fields[0], "arrival_s", where);
  }
  row.prompt_tokens = parse_tokens(fields[1], azure ? "ContextTokens" : "prompt_tokens", where);
  row.output_tokens = parse_tokens(fields[2], azure ? "GeneratedTokens" : "output_tokens", where);
  return row;
}

std::vector<Row> parse_rows(const std::string& path, const std::string& content,
                            TraceFormat format) {
  const std::vector<std::string_view> lines = split_lines(content);
  if (lines.empty()) {
    Where{path, 1}.fail(fmt::format("the file is empty; expected the header line '{}'",
                                    header_of(format)));
  }
  check_header(lines[0], format, Where{path, 1});
  if (lines.size() == 1) Where{path, 2}.fail("no requests: the file has only a header line");

  std::vector<Row> rows;
  rows.reserve(lines.size() - 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    rows.push_back(parse_row(lines[i], format, Where{path, i + 1}));
    rows.back().index = i - 1;
  }
  // Azure times become seconds since the earliest request; the subtraction
  // is done on integers so no digits are lost.
  if (format == TraceFormat::Azure) {
    const int64_t first =
        std::min_element(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
          return a.ns < b.ns;
        })->ns;
    for (Row& r : rows) r.seconds = static_cast<double>(r.ns - first) / 1e9;
  }
  return rows;
}

// Sorts, windows, shifts, scales and numbers the rows; `kept_rows`, when
// given, receives the Row::index of each request kept, in id order.
std::vector<Request> select_requests(std::vector<Row> rows, const TraceOptions& o,
                                     std::vector<size_t>* kept_rows = nullptr) {
  // A trace is usually in time order already: then there is nothing to sort
  // (a stable sort would leave it as it is, after a buffer the size of the rows).
  auto earlier = [](const Row& a, const Row& b) { return a.seconds < b.seconds; };
  if (!std::is_sorted(rows.begin(), rows.end(), earlier)) std::stable_sort(rows.begin(), rows.end(), earlier);
  const double origin = rows.front().seconds;
  std::vector<Request> out;
  out.reserve(o.max_requests >= 0 ? std::min(rows.size(), size_t(o.max_requests)) : rows.size());
  double first_kept = 0.0;
  for (const Row& r : rows) {
    if (o.max_requests >= 0 && static_cast<int64_t>(out.size()) >= o.max_requests) break;
    const double t = r.seconds - origin;
    // t - start < duration (rather than t < start + duration) keeps an
    // infinite duration meaningful.
    if (t < o.window_start_s || !(t - o.window_start_s < o.window_duration_s)) continue;
    if (out.empty()) first_kept = t;
    Request q;
    q.id = static_cast<int64_t>(out.size());
    q.arrival_s = (t - first_kept) / o.rate_scale;
    q.prompt_tokens = r.prompt_tokens;
    q.output_tokens = r.output_tokens;
    out.push_back(q);
    if (kept_rows) kept_rows->push_back(r.index);
  }
  if (out.empty()) {
    throw InputError(fmt::format(
        "{}: no requests in window [{}, {}) s; the trace's requests span [0, {}] s after its "
        "first request",
        o.path, o.window_start_s, o.window_start_s + o.window_duration_s,
        rows.back().seconds - origin));
  }
  return out;
}

// ---------------------------------------------------------------- Mooncake

std::vector<Request> read_mooncake(const TraceOptions& o, const std::string& content) {
  const std::vector<std::string_view> lines = split_lines(content);
  // A CSV trace given the wrong format: say which one it is.
  for (const TraceFormat other : {TraceFormat::Azure, TraceFormat::Csv}) {
    if (!lines.empty() && lines[0] == header_of(other)) {
      Where{o.path, 1}.fail(fmt::format(
          "'{}' is the {} trace format's header; the mooncake format is one JSON object a line",
          lines[0], name_of(other)));
    }
  }
  const MooncakeTrace trace = parse_mooncake_trace(o.path, lines);
  std::vector<Row> rows(trace.lines.size());
  const int32_t bt = o.mooncake_block_tokens;
  if (bt < 1 || bt > kMooncakeBlockTokens)
    throw InputError(fmt::format("--mooncake-block-tokens must be in 1 .. {} (got {})", kMooncakeBlockTokens, bt));
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].seconds = trace.lines[i].timestamp_s;
    rows[i].prompt_tokens = scaled_mooncake_length(trace.lines[i].input_length, bt);
    rows[i].output_tokens = scaled_mooncake_length(trace.lines[i].output_length, bt);
    rows[i].index = i;
  }
  std::vector<size_t> kept;
  std::vector<Request> requests = select_requests(std::move(rows), o, &kept);
  // Identity after numbering: the output source names the final id.
  for (size_t i = 0; i < requests.size(); ++i) {
    const MooncakeLine& line = trace.lines[kept[i]];
    requests[i].tokens.prompt_spans = mooncake_prompt_spans(trace.ids_of(line), requests[i].prompt_tokens, bt);
    requests[i].tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(requests[i].id));
  }
  return requests;
}

}  // namespace

TraceFormat parse_trace_format(const std::string& name) {
  if (name == "azure") return TraceFormat::Azure;
  if (name == "csv") return TraceFormat::Csv;
  if (name == "mooncake") return TraceFormat::Mooncake;
  throw InputError(fmt::format(
      "unknown trace format '{}' (expected 'azure', 'csv' or 'mooncake')", name));
}

std::string to_string(TraceFormat format) {
  switch (format) {
    case TraceFormat::Azure:
      return "azure";
    case TraceFormat::Csv:
      return "csv";
    case TraceFormat::Mooncake:
      return "mooncake";
  }
  return "unknown";
}

std::vector<Request> read_trace(const TraceOptions& options) {
  check_options(options);
  const std::string content = read_file(options.path);
  if (options.format == TraceFormat::Mooncake) return read_mooncake(options, content);
  return select_requests(parse_rows(options.path, content, options.format), options);
}

}  // namespace servesim
