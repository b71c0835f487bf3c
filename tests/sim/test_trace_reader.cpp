#include <catch2/catch.hpp>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/trace_reader.h"

#include "support/test_support.h"

using servesim::InputError;
using servesim::read_trace;
using servesim::Request;
using servesim::TraceFormat;
using servesim::TraceOptions;
using servesim::test::TempFile;

namespace {

const std::string kDataDir = SERVESIM_TEST_DATA_DIR;
const std::string kConvTrace = std::string(SERVESIM_SOURCE_DIR) + "/data/traces/azure_conv_2023.csv";
const std::string kCodeTrace = std::string(SERVESIM_SOURCE_DIR) + "/data/traces/azure_code_2023.csv";
const std::string kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
const std::string kCsvHeader = "arrival_s,prompt_tokens,output_tokens\n";

TraceOptions options(const std::string& path, TraceFormat format = TraceFormat::Azure) {
  TraceOptions o;
  o.path = path;
  o.format = format;
  return o;
}

void check_well_formed(const std::vector<Request>& rs) {
  REQUIRE_FALSE(rs.empty());
  CHECK(rs.front().arrival_s == 0.0);
  for (size_t i = 0; i < rs.size(); ++i) {
    REQUIRE(rs[i].id == static_cast<int64_t>(i));
    REQUIRE(rs[i].prompt_tokens >= 1);
    REQUIRE(rs[i].output_tokens >= 1);
    if (i > 0) REQUIRE(rs[i].arrival_s >= rs[i - 1].arrival_s);
  }
}

// Reading the conversation trace with `field` set to each of `bad` in turn
// fails with a message that names `option`.
template <typename T>
void check_refused(T TraceOptions::*field, std::initializer_list<T> bad,
                   const std::string& option) {
  for (T v : bad) {
    auto o = options(kConvTrace);
    o.*field = v;
    CHECK_THROWS_WITH(read_trace(o), Catch::Contains(option));
  }
}

// Expects an InputError whose message points at PATH:LINE and mentions `what`.
void check_error_at(const std::string& name, const std::string& content, int line,
                    const std::string& what, TraceFormat format = TraceFormat::Azure) {
  const TempFile file(name, content, ".csv");
  INFO("case " << name);
  const std::string where = file.path() + ":" + std::to_string(line) + ":";
  CHECK_THROWS_AS(read_trace(options(file.path(), format)), InputError);
  CHECK_THROWS_WITH(read_trace(options(file.path(), format)),
                    Catch::Contains(where) && Catch::Contains(what));
}

}  // namespace

TEST_CASE("parse_trace_format", "[trace]") {
  CHECK(servesim::parse_trace_format("azure") == TraceFormat::Azure);
  CHECK(servesim::parse_trace_format("csv") == TraceFormat::Csv);
  CHECK_THROWS_AS(servesim::parse_trace_format("Azure"), InputError);
  CHECK_THROWS_WITH(servesim::parse_trace_format("tsv"), Catch::Contains("'tsv'"));
}

TEST_CASE("The Azure conversation trace reads in full", "[trace]") {
  const auto rs = read_trace(options(kConvTrace));
  REQUIRE(rs.size() == 19366);
  check_well_formed(rs);
  // First and last lines: 18:15:46.6805900 (374, 44) and 19:14:08.4025270 (197, 183).
  CHECK(rs.front().prompt_tokens == 374);
  CHECK(rs.front().output_tokens == 44);
  CHECK(rs.back().prompt_tokens == 197);
  CHECK(rs.back().output_tokens == 183);
  CHECK(rs.back().arrival_s == Approx(3501.721937).epsilon(0).margin(1e-9));
  // Second line: 18:15:50.9951690.
  CHECK(rs[1].arrival_s == Approx(4.314579).epsilon(0).margin(1e-9));
}

TEST_CASE("The Azure code trace reads in full", "[trace]") {
  const auto rs = read_trace(options(kCodeTrace));
  CHECK(rs.size() == 8819);
  check_well_formed(rs);
}

TEST_CASE("rate_scale divides the arrival times", "[trace]") {
  const auto full = read_trace(options(kConvTrace));
  auto o = options(kConvTrace);
  o.rate_scale = 2.0;
  const auto fast = read_trace(o);
  REQUIRE(fast.size() == full.size());
  CHECK(fast.back().arrival_s == Approx(full.back().arrival_s / 2).epsilon(1e-15));
  for (size_t i = 0; i < full.size(); i += 997) {
    REQUIRE(fast[i].arrival_s == full[i].arrival_s / 2);
    REQUIRE(fast[i].prompt_tokens == full[i].prompt_tokens);
  }
}

TEST_CASE("A window keeps start <= t < start + duration and shifts it to 0", "[trace]") {
  const auto full = read_trace(options(kConvTrace));
  auto o = options(kConvTrace);
  o.window_start_s = 600;
  o.window_duration_s = 600;
  const auto win = read_trace(o);
  check_well_formed(win);

  size_t first = 0, count = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i].arrival_s >= 600 && full[i].arrival_s < 1200) {
      if (count == 0) first = i;
      ++count;
    }
  }
  REQUIRE(count > 100);
  REQUIRE(win.size() == count);
  for (size_t i = 0; i < count; ++i) {
    REQUIRE(win[i].arrival_s == Approx(full[first + i].arrival_s - full[first].arrival_s));
    REQUIRE(win[i].prompt_tokens == full[first + i].prompt_tokens);
    REQUIRE(win[i].output_tokens == full[first + i].output_tokens);
  }
  CHECK(win.back().arrival_s < 600);

  SECTION("rate_scale applies after windowing, in trace seconds") {
    o.rate_scale = 4;
    const auto scaled = read_trace(o);
    REQUIRE(scaled.size() == count);
    CHECK(scaled.back().arrival_s == Approx(win.back().arrival_s / 4));
  }
}

TEST_CASE("max_requests keeps the first N", "[trace]") {
  const auto full = read_trace(options(kConvTrace));
  auto o = options(kConvTrace);
  o.max_requests = 100;
  const auto few = read_trace(o);
  REQUIRE(few.size() == 100);
  for (size_t i = 0; i < few.size(); ++i) {
    REQUIRE(few[i].arrival_s == full[i].arrival_s);
    REQUIRE(few[i].prompt_tokens == full[i].prompt_tokens);
  }
  o.max_requests = 1'000'000;
  CHECK(read_trace(o).size() == full.size());

  SECTION("after the window") {
    o.window_start_s = 1000;
    o.max_requests = 10;
    const auto rs = read_trace(o);
    REQUIRE(rs.size() == 10);
    check_well_formed(rs);
  }
}

TEST_CASE("An empty window is an error", "[trace]") {
  auto o = options(kConvTrace);
  o.window_start_s = 1e6;
  CHECK_THROWS_AS(read_trace(o), InputError);
  CHECK_THROWS_WITH(read_trace(o), Catch::Contains("no requests in window") &&
                                       Catch::Contains("azure_conv_2023.csv"));
}

TEST_CASE("Azure timestamps: CRLF, date rollover, stable sort, trailing blank line", "[trace]") {
  // Rows (file order): 23:59:58.5 (100), 23:59:59.25 (200), 00:00:01 next
  // year (300), 23:59:59.25 again (250), 00:00:00.0000001 (400).
  const auto rs = read_trace(options(kDataDir + "/trace_azure_small.csv"));
  REQUIRE(rs.size() == 5);
  check_well_formed(rs);
  const std::vector<int32_t> prompts = {100, 200, 250, 400, 300};
  const std::vector<double> arrivals = {0.0, 0.75, 0.75, 1.5000001, 2.5};
  for (size_t i = 0; i < rs.size(); ++i) {
    INFO("request " << i);
    CHECK(rs[i].prompt_tokens == prompts[i]);
    CHECK(rs[i].output_tokens == prompts[i] / 10);
    CHECK(rs[i].arrival_s == Approx(arrivals[i]).epsilon(0).margin(1e-12));
  }
}

TEST_CASE("Sorting keeps the file order of requests with equal arrival times", "[trace]") {
  // Enough ties that an unstable sort (introsort past 16 elements) would reorder them.
  std::string content = kCsvHeader;
  for (int i = 1; i <= 60; ++i) content += (i % 2 ? "2.0," : "1.0,") + std::to_string(i) + ",1\n";
  const TempFile file("ties", content, ".csv");
  const auto rs = read_trace(options(file.path(), TraceFormat::Csv));
  REQUIRE(rs.size() == 60);
  for (size_t i = 0; i < 30; ++i) {
    CHECK(rs[i].prompt_tokens == static_cast<int32_t>(2 * i + 2));  // the 1.0 rows, in order
    CHECK(rs[30 + i].prompt_tokens == static_cast<int32_t>(2 * i + 1));
    CHECK(rs[30 + i].arrival_s == 1.0);
  }
}

TEST_CASE("Azure timestamps across month ends, leap days and UTC offsets", "[trace]") {
  struct Case {
    const char* name;
    const char* first;
    const char* second;
    double gap_s;
  };
  const Case cases[] = {
      {"leap", "2024-02-28 23:00:00", "2024-03-01 01:00:00", 26 * 3600.0},
      {"noleap", "2023-02-28 23:00:00", "2023-03-01 01:00:00", 2 * 3600.0},
      {"century", "2100-02-28 23:00:00", "2100-03-01 01:00:00", 2 * 3600.0},
      {"month", "2023-04-30 23:59:59.9", "2023-05-01 00:00:00.1", 0.2},
      {"offset", "2023-11-16 18:00:00+01:00", "2023-11-16 17:30:00Z", 1800.0},
      {"tsep", "2023-11-16T18:00:00", "2023-11-16 18:00:01.123456789123", 1.123456789},
  };
  for (const auto& c : cases) {
    INFO("case " << c.name);
    const TempFile file(std::string("ts_") + c.name,
                        kAzureHeader + c.first + ",1,1\n" + c.second + ",2,2\n", ".csv");
    const auto rs = read_trace(options(file.path()));
    REQUIRE(rs.size() == 2);
    CHECK(rs[0].prompt_tokens == 1);
    CHECK(rs[1].arrival_s == Approx(c.gap_s).epsilon(0).margin(1e-9));
  }
}

TEST_CASE("Plain CSV traces", "[trace]") {
  // Rows (file order): 1.5, 0.5, 3.0, 2.0.
  auto o = options(kDataDir + "/trace_plain_small.csv", TraceFormat::Csv);
  auto rs = read_trace(o);
  REQUIRE(rs.size() == 4);
  check_well_formed(rs);
  CHECK(rs[0].prompt_tokens == 20);
  CHECK(rs[1].arrival_s == 1.0);
  CHECK(rs[2].arrival_s == 1.5);
  CHECK(rs[3].arrival_s == 2.5);
  CHECK(rs[3].prompt_tokens == 30);
  CHECK(rs[3].output_tokens == 7);

  o.window_start_s = 1.0;  // relative to the first request at 0.5: keeps 1.5 .. 3.0
  o.window_duration_s = 1.5;
  rs = read_trace(o);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].prompt_tokens == 10);
  CHECK(rs[1].arrival_s == 0.5);
}

TEST_CASE("Bad trace options are errors", "[trace]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check_refused<double>(&TraceOptions::rate_scale, {0.0, -1.0, nan, inf}, "rate scale");
  check_refused<double>(&TraceOptions::window_start_s, {-1.0, nan, inf}, "window start");
  check_refused<double>(&TraceOptions::window_duration_s, {0.0, -5.0, nan}, "window duration");
  check_refused<int64_t>(&TraceOptions::max_requests, {0, -2}, "max requests");
  CHECK_THROWS_AS(read_trace(options("")), InputError);
}

TEST_CASE("A missing or unreadable file is an InputError naming the path", "[trace]") {
  const std::string missing = kDataDir + "/no_such_trace.csv";
  CHECK_THROWS_AS(read_trace(options(missing)), InputError);
  CHECK_THROWS_WITH(read_trace(options(missing)), Catch::Contains(missing));
  CHECK_THROWS_WITH(read_trace(options(kDataDir)), Catch::Contains(kDataDir));
}

TEST_CASE("Malformed Azure traces name the file, the line and the field", "[trace]") {
  const std::string ok = "2023-11-16 18:15:46.6805900,374,44\n";
  check_error_at("empty", "", 1, "empty");
  check_error_at("blank", "\n\n", 1, "empty");
  check_error_at("header_only", kAzureHeader, 2, "no requests");
  check_error_at("wrong_header", "TIMESTAMP,Context,Generated\n" + ok, 1, "header");
  check_error_at("csv_header", kCsvHeader + ok, 1, "csv format");
  check_error_at("bad_number", kAzureHeader + ok + "2023-11-16 18:15:47,abc,44\n", 3,
                 "field 'ContextTokens': 'abc' is not a positive integer");
  check_error_at("bad_output", kAzureHeader + ok + ok + "2023-11-16 18:15:47,5,4x\n", 4,
                 "field 'GeneratedTokens': '4x'");
  check_error_at("fraction_tokens", kAzureHeader + "2023-11-16 18:15:47,1.5,4\n", 2,
                 "'1.5' is not a positive integer");
  check_error_at("missing_field", kAzureHeader + ok + "2023-11-16 18:15:47,374\n", 3,
                 "missing field 'GeneratedTokens'");
  check_error_at("one_field", kAzureHeader + "2023-11-16 18:15:47\n", 2,
                 "missing field 'ContextTokens'");
  check_error_at("empty_field", kAzureHeader + "2023-11-16 18:15:47,,4\n", 2,
                 "field 'ContextTokens': ''");
  check_error_at("extra_field", kAzureHeader + "2023-11-16 18:15:47,3,4,5\n", 2,
                 "too many fields");
  check_error_at("negative_tokens", kAzureHeader + ok + "2023-11-16 18:15:47,-5,44\n", 3,
                 "'-5' is not a positive integer");
  check_error_at("zero_tokens", kAzureHeader + "2023-11-16 18:15:47,5,0\n", 2,
                 "field 'GeneratedTokens': '0' is not a positive integer");
  check_error_at("huge_tokens", kAzureHeader + "2023-11-16 18:15:47,3000000000,1\n", 2,
                 "'3000000000' is not a positive integer");
  check_error_at("blank_middle", kAzureHeader + ok + "\n" + ok, 3, "empty line");
  check_error_at("crlf_bad", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n" + ok + "x,1,1\r\n", 3,
                 "field 'TIMESTAMP': 'x'");
}

TEST_CASE("Malformed Azure timestamps are errors", "[trace]") {
  const char* bad[] = {
      "garbage",
      "2023-13-16 18:15:46",       // month 13
      "2023-00-16 18:15:46",       // month 0
      "2023-02-29 18:15:46",       // not a leap year
      "2023-04-31 18:15:46",       // April has 30 days
      "2023-11-16 24:00:00",       // hour 24
      "2023-11-16 18:60:00",       // minute 60
      "2023-11-16 18:15:60",       // second 60
      "2023-11-16 18:15:46.",      // empty fraction
      "2023-11-16 18:15",          // no seconds
      "2023-11-16",                // no time
      "2023-11-16 18:15:46 junk",  // trailing text
      "23-11-16 18:15:46",         // two-digit year
      "2023-11-16 18:15:46+1:00",  // malformed offset
      "1700000000",                // a Unix time is not this format
  };
  int i = 0;
  for (const char* ts : bad) {
    check_error_at("bad_ts_" + std::to_string(i++), kAzureHeader + ts + ",1,1\n", 2,
                   std::string("field 'TIMESTAMP': '") + ts + "' is not a timestamp");
  }
}

TEST_CASE("Malformed plain CSV traces name the file, the line and the field", "[trace]") {
  const auto csv = TraceFormat::Csv;
  check_error_at("csv_azure_header", kAzureHeader + "1,1,1\n", 1, "azure format", csv);
  check_error_at("csv_negative_time", kCsvHeader + "0,1,1\n-1,1,1\n", 3,
                 "field 'arrival_s': '-1'", csv);
  check_error_at("csv_nan_time", kCsvHeader + "nan,1,1\n", 2, "field 'arrival_s': 'nan'", csv);
  check_error_at("csv_inf_time", kCsvHeader + "inf,1,1\n", 2, "field 'arrival_s': 'inf'", csv);
  check_error_at("csv_text_time", kCsvHeader + "soon,1,1\n", 2, "field 'arrival_s'", csv);
  check_error_at("csv_zero_prompt", kCsvHeader + "1,0,1\n", 2, "field 'prompt_tokens': '0'",
                 csv);
  check_error_at("csv_bad_output", kCsvHeader + "1,1,many\n", 2, "field 'output_tokens'", csv);
  check_error_at("csv_missing", kCsvHeader + "1,1\n", 2, "missing field 'output_tokens'", csv);
}
