// The Mooncake trace reader: token identity from hash ids, windowing and
// renumbering, and bad lines named by file, line and field.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/mooncake_trace.h"
#include "sim/token_identity.h"
#include "sim/trace_reader.h"

#include "support/test_support.h"

using servesim::InputError;
using servesim::kMooncakeBlockTokens;
using servesim::read_trace;
using servesim::Request;
using servesim::token_source;
using servesim::TokenSourceKind;
using servesim::TokenSpan;
using servesim::TraceFormat;
using servesim::TraceOptions;
using servesim::test::TempFile;

namespace {

const std::string kConversation =
    std::string(SERVESIM_SOURCE_DIR) + "/data/traces/mooncake_conversation.jsonl";
const std::string kSynthetic = std::string(SERVESIM_SOURCE_DIR) + "/data/traces/mooncake_synthetic.jsonl";

TraceOptions mooncake(const std::string& path) {
  TraceOptions o;
  o.path = path;
  o.format = TraceFormat::Mooncake;
  return o;
}

uint64_t block(uint64_t id) { return token_source(TokenSourceKind::MooncakeBlock, id); }
uint64_t output_of(int64_t id) { return token_source(TokenSourceKind::Output, uint64_t(id)); }

std::string line(double ts, int in, int out, const std::string& ids) {
  return "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " + std::to_string(in) +
         ", \"output_length\": " + std::to_string(out) + ", \"hash_ids\": [" + ids + "]}\n";
}

// The well-formedness every Mooncake request has: ids 0..N-1 in arrival
// order, spans of at most one block each summing to the prompt, every span
// a Mooncake block from position 0, the output source of its own id.
void check_mooncake_requests(const std::vector<Request>& rs) {
  REQUIRE_FALSE(rs.empty());
  CHECK(rs.front().arrival_s == 0.0);
  for (size_t i = 0; i < rs.size(); ++i) {
    const Request& r = rs[i];
    INFO("request " << i);
    REQUIRE(r.id == int64_t(i));
    if (i > 0) REQUIRE(r.arrival_s >= rs[i - 1].arrival_s);
    REQUIRE(r.tokens.prompt_tokens() == r.prompt_tokens);
    REQUIRE(r.tokens.prompt_spans.size() ==
            size_t((r.prompt_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens));
    for (size_t b = 0; b < r.tokens.prompt_spans.size(); ++b) {
      const TokenSpan& s = r.tokens.prompt_spans[b];
      REQUIRE(s.offset == 0);
      REQUIRE(s.source != 0);
      // Every block is full but the last.
      if (b + 1 < r.tokens.prompt_spans.size()) REQUIRE(s.length == kMooncakeBlockTokens);
      REQUIRE(s.length >= 1);
      REQUIRE(s.length <= kMooncakeBlockTokens);
    }
    REQUIRE(r.tokens.output_source == output_of(r.id));
    REQUIRE(r.follows == -1);
  }
}

// Expects an InputError whose message points at PATH:LINE and mentions `what`.
void check_error_at(const std::string& name, const std::string& content, int line_number,
                    const std::string& what) {
  const TempFile file("mooncake_" + name, content, ".jsonl");
  INFO("case " << name);
  const std::string where = file.path() + ":" + std::to_string(line_number) + ":";
  CHECK_THROWS_AS(read_trace(mooncake(file.path())), InputError);
  CHECK_THROWS_WITH(read_trace(mooncake(file.path())),
                    Catch::Contains(where) && Catch::Contains(what));
}

}  // namespace

TEST_CASE("Trace format names round-trip, mooncake included", "[trace][mooncake]") {
  for (const TraceFormat f : {TraceFormat::Azure, TraceFormat::Csv, TraceFormat::Mooncake})
    CHECK(servesim::parse_trace_format(servesim::to_string(f)) == f);
  CHECK_THROWS_WITH(servesim::parse_trace_format("jsonl"), Catch::Contains("mooncake"));
}

TEST_CASE("The Mooncake conversation trace reads with its hash ids", "[trace][mooncake]") {
  const auto all = read_trace(mooncake(kConversation));
  REQUIRE(all.size() == 12031);
  check_mooncake_requests(all);
  size_t spans = 0;
  for (const Request& r : all) spans += r.tokens.prompt_spans.size();
  CHECK(spans == 288500);  // len(hash_ids) summed over the file
  CHECK(all.back().arrival_s == Approx(3536.999).margin(1e-9));

  auto first_300 = mooncake(kConversation);
  first_300.max_requests = 300;
  const auto rs = read_trace(first_300);
  REQUIRE(rs.size() == 300);
  // Line 1: {"timestamp": 0, "input_length": 6758, "output_length": 500,
  // "hash_ids": [0, 1, ..., 13]}: 13 full blocks and 6758 - 13 * 512 = 102.
  const Request& r0 = rs[0];
  CHECK(r0.prompt_tokens == 6758);
  CHECK(r0.output_tokens == 500);
  REQUIRE(r0.tokens.prompt_spans.size() == 14);
  for (uint64_t b = 0; b < 14; ++b) CHECK(r0.tokens.prompt_spans[b].source == block(b));
  CHECK(r0.tokens.prompt_spans.back().length == 102);
  // Line 2 shares block 0 (the system prompt) and nothing else with line 1.
  CHECK(rs[1].tokens.prompt_spans[0] == r0.tokens.prompt_spans[0]);
  CHECK(rs[1].tokens.prompt_spans[1].source == block(14));
  // Line 300: {"timestamp": 102000, "input_length": 979, ..., "hash_ids": [0, 7813]}.
  CHECK(rs.back().arrival_s == 102.0);
  CHECK(rs.back().prompt_tokens == 979);
  REQUIRE(rs.back().tokens.prompt_spans.size() == 2);
  CHECK(rs.back().tokens.prompt_spans[1] == TokenSpan{block(7813), 0, 979 - 512});
}

TEST_CASE("The Mooncake synthetic trace reads", "[trace][mooncake]") {
  const auto rs = read_trace(mooncake(kSynthetic));
  REQUIRE(rs.size() == 3993);
  check_mooncake_requests(rs);
  size_t spans = 0;
  for (const Request& r : rs) spans += r.tokens.prompt_spans.size();
  CHECK(spans == 121877);
  CHECK(rs.back().arrival_s == Approx(1022.025).margin(1e-9));
}

TEST_CASE("Mooncake blocks: exact multiples, a one-token prompt, large ids", "[trace][mooncake]") {
  const TempFile file("mooncake_blocks",
                      line(0, 1024, 3, "7, 8") + line(1, 1, 1, "18446744073709551615") +
                          line(2, 513, 2, "7, 9"),
                      ".jsonl");
  const auto rs = read_trace(mooncake(file.path()));
  REQUIRE(rs.size() == 3);
  check_mooncake_requests(rs);
  CHECK(rs[0].tokens.prompt_spans ==
        std::vector<TokenSpan>{{block(7), 0, 512}, {block(8), 0, 512}});
  CHECK(rs[1].tokens.prompt_spans == std::vector<TokenSpan>{{block(18446744073709551615ULL), 0, 1}});
  CHECK(rs[2].tokens.prompt_spans ==
        std::vector<TokenSpan>{{block(7), 0, 512}, {block(9), 0, 1}});
  CHECK(rs[1].arrival_s == 0.001);  // milliseconds
}

TEST_CASE("Mooncake requests are sorted, windowed and renumbered with their identity",
          "[trace][mooncake]") {
  // File order: t = 3 s (ids 30), 1 s (ids 10), 2 s (ids 20), 1 s again (ids 11), 5 s (ids 50).
  const TempFile file("mooncake_order",
                      line(3000, 100, 3, "30") + line(1000, 100, 1, "10") +
                          line(2000, 600, 2, "20, 21") + line(1000, 100, 4, "11") +
                          line(5000, 100, 5, "50"),
                      ".jsonl");
  auto o = mooncake(file.path());
  auto rs = read_trace(o);
  REQUIRE(rs.size() == 5);
  check_mooncake_requests(rs);
  // Stable sort: the two 1 s lines keep their file order.
  const std::vector<uint64_t> first_ids = {10, 11, 20, 30, 50};
  const std::vector<int32_t> outputs = {1, 4, 2, 3, 5};
  for (size_t i = 0; i < rs.size(); ++i) {
    CHECK(rs[i].tokens.prompt_spans[0].source == block(first_ids[i]));
    CHECK(rs[i].output_tokens == outputs[i]);
  }
  CHECK(rs[2].tokens.prompt_spans[1] == TokenSpan{block(21), 0, 88});

  SECTION("a window and a count keep each request's own spans and renumber it") {
    o.window_start_s = 1.0;  // seconds after the first request (1 s): keeps 2, 3 and 5 s
    o.max_requests = 2;
    o.rate_scale = 2.0;
    rs = read_trace(o);
    REQUIRE(rs.size() == 2);
    check_mooncake_requests(rs);
    CHECK(rs[0].tokens.prompt_spans[0].source == block(20));
    CHECK(rs[1].tokens.prompt_spans[0].source == block(30));
    CHECK(rs[1].arrival_s == 0.5);  // (3 s - 2 s) / 2
    CHECK(rs[1].tokens.output_source == output_of(1));
  }
}

TEST_CASE("Azure and CSV requests carry no token identity", "[trace][mooncake]") {
  for (const auto& [path, format] :
       {std::pair{std::string(SERVESIM_TEST_DATA_DIR) + "/trace_azure_small.csv", TraceFormat::Azure},
        std::pair{std::string(SERVESIM_TEST_DATA_DIR) + "/trace_plain_small.csv", TraceFormat::Csv}}) {
    TraceOptions o;
    o.path = path;
    o.format = format;
    for (const Request& r : read_trace(o)) {
      CHECK(r.tokens.empty());
      CHECK(r.tokens.output_source == 0);
    }
  }
}

TEST_CASE("Malformed Mooncake lines name the file, the line and the field", "[trace][mooncake]") {
  const std::string ok = line(0, 600, 5, "1, 2");
  check_error_at("empty", "", 1, "empty");
  check_error_at("not_json", ok + "timestamp=5\n", 2, "not a JSON line");
  check_error_at("truncated", ok + ok.substr(0, 30) + "\n", 2, "not a JSON line");
  check_error_at("array", ok + "[1, 2]\n", 2, "is not a JSON object");
  check_error_at("blank_middle", ok + "\n" + ok, 2, "empty line");
  check_error_at("csv_header", "arrival_s,prompt_tokens,output_tokens\n1,1,1\n", 1, "csv trace format");
  check_error_at("azure_header", "TIMESTAMP,ContextTokens,GeneratedTokens\n", 1, "azure trace format");
  for (const char* field : {"timestamp", "input_length", "output_length", "hash_ids"}) {
    // The ok line without `field`.
    const std::vector<std::pair<std::string, std::string>> fields = {
        {"timestamp", "0"}, {"input_length", "600"}, {"output_length", "5"}, {"hash_ids", "[1, 2]"}};
    std::string text = "{";
    for (const auto& [name, value] : fields) {
      if (name == field) continue;
      text += std::string(text.size() > 1 ? ", " : "") + "\"" + name + "\": " + value;
    }
    check_error_at(std::string("missing_") + field, ok + ok + text + "}\n", 3,
                   std::string("missing field '") + field + "'");
  }
  check_error_at("negative_timestamp", line(-1, 600, 5, "1, 2"), 1, "field 'timestamp': -1");
  check_error_at("text_timestamp",
                 "{\"timestamp\": \"soon\", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
                 1, "field 'timestamp': \"soon\"");
  check_error_at("zero_input", ok + line(1, 0, 5, ""), 2, "field 'input_length': 0 is not a positive integer");
  check_error_at("zero_output", line(1, 10, 0, "3"), 1, "field 'output_length': 0 is not a positive integer");
  check_error_at("negative_output", line(1, 10, -2, "3"), 1, "field 'output_length': -2");
  check_error_at("fraction_input",
                 "{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1, \"hash_ids\": [1]}\n",
                 1, "field 'input_length': 1.5 is not a positive integer");
  check_error_at("huge_input",
                 "{\"timestamp\": 0, \"input_length\": 3000000000, \"output_length\": 1, \"hash_ids\": [1]}\n",
                 1, "field 'input_length': 3000000000 is not a positive integer");
  check_error_at("too_few_ids", ok + line(1, 1025, 5, "1, 2"), 2,
                 "field 'hash_ids': 2 ids for input_length 1025; expected ceil(1025 / 512) = 3");
  check_error_at("too_many_ids", line(1, 512, 5, "1, 2"), 1,
                 "field 'hash_ids': 2 ids for input_length 512; expected ceil(512 / 512) = 1");
  check_error_at("negative_id", line(1, 600, 5, "1, -2"), 1,
                 "field 'hash_ids': element 1 (-2) is not an integer >= 0");
  check_error_at("fraction_id", line(1, 600, 5, "1.5, 2"), 1,
                 "field 'hash_ids': element 0 (1.5) is not an integer >= 0");
  check_error_at("text_id", line(1, 600, 5, "1, \"b\""), 1, "element 1 (\"b\")");
  check_error_at("ids_not_array",
                 "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 4}\n",
                 1, "field 'hash_ids': 4 is not an array");
}

TEST_CASE("An Azure trace read as JSON lines, or JSON lines as Azure, says which", "[trace][mooncake]") {
  TraceOptions o;
  o.path = kConversation;
  o.format = TraceFormat::Azure;
  CHECK_THROWS_WITH(read_trace(o), Catch::Contains(kConversation + ":1:") &&
                                       Catch::Contains("--trace-format mooncake"));
}

TEST_CASE("Mooncake: a replay at fewer tokens per hash id keeps the ids and scales the lengths", "[mooncake]") {
  // ceil(len * N / 512), at least 1; the scaled prompt needs exactly its ids.
  for (int32_t n : {1, 16, 32, 100, 512})
    for (int32_t len : {1, 2, 511, 512, 513, 1024, 6758, 126195}) {
      const int32_t scaled = servesim::scaled_mooncake_length(len, n);
      CHECK(scaled >= 1);
      CHECK(int64_t(scaled) == std::max<int64_t>(1, (int64_t(len) * n + 511) / 512));
      CHECK((scaled + n - 1) / n == (len + 511) / 512);
    }
  const std::vector<uint64_t> ids{7, 8, 9};
  const auto spans = servesim::mooncake_prompt_spans(ids, servesim::scaled_mooncake_length(1100, 32), 32);
  // 1100 tokens over 3 ids at 32 per id: 32 + 32 + ceil(76 * 32 / 512) = 5.
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].length == 32);
  CHECK(spans[1].length == 32);
  CHECK(spans[2].length == 5);
  CHECK(servesim::scaled_mooncake_length(1100, 32) == 69);
}
