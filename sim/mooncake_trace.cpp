#include "sim/mooncake_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "sim/errors.h"

namespace servesim {

namespace {

using nlohmann::json;

constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();

// Where a message points: "FILE:LINE: ...".
struct Where {
  const std::string& path;
  size_t line;

  [[noreturn]] void fail(const std::string& detail) const {
    throw InputError(fmt::format("{}:{}: {}", path, line, detail));
  }
};

// A value as it appears in the file, shortened so a long array cannot flood
// the message.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

const json& field(const json& object, const char* name, const Where& where) {
  const auto it = object.find(name);
  if (it == object.end()) where.fail(fmt::format("missing field '{}'", name));
  return *it;
}

// A strictly positive token count: 512.0, -3, 0 and "7" are refused.
int32_t parse_length(const json& object, const char* name, const Where& where) {
  const json& v = field(object, name, where);
  if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > uint64_t(kMaxTokens)) {
    where.fail(fmt::format("field '{}': {} is not a positive integer (1..{})", name, shown(v),
                           kMaxTokens));
  }
  return int32_t(v.get<uint64_t>());
}

double parse_timestamp_s(const json& object, const Where& where) {
  const json& v = field(object, "timestamp", where);
  const double ms = v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
  if (!(std::isfinite(ms) && ms >= 0)) {
    where.fail(fmt::format("field 'timestamp': {} is not a finite number of milliseconds >= 0",
                           shown(v)));
  }
  return ms / 1000.0;
}

// Appends the line's ids to `ids`; their number must match the prompt's
// blocks, or the spans would not cover the prompt.
size_t parse_hash_ids(const json& object, int32_t input_length, std::vector<uint64_t>& ids,
                      const Where& where) {
  const json& v = field(object, "hash_ids", where);
  if (!v.is_array()) where.fail(fmt::format("field 'hash_ids': {} is not an array", shown(v)));
  const size_t expected = (size_t(input_length) + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens;
  if (v.size() != expected) {
    where.fail(fmt::format(
        "field 'hash_ids': {} ids for input_length {}; expected ceil({} / {}) = {} (one per "
        "{}-token block)",
        v.size(), input_length, input_length, kMooncakeBlockTokens, expected,
        kMooncakeBlockTokens));
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_unsigned()) {
      where.fail(fmt::format("field 'hash_ids': element {} ({}) is not an integer >= 0", i,
                             shown(v[i])));
    }
    ids.push_back(v[i].get<uint64_t>());
  }
  return expected;
}

// nlohmann's message without its exception tag and its "line 1" (each line
// is parsed alone, so only the column means anything).
std::string parse_error_detail(const json::exception& e) {
  std::string text = e.what();
  const size_t column = text.find("column");
  if (column != std::string::npos) return text.substr(column);
  const size_t tag = text.find("] ");
  return tag == std::string::npos ? text : text.substr(tag + 2);
}

}  // namespace

MooncakeTrace parse_mooncake_trace(const std::string& path,
                                   const std::vector<std::string_view>& lines) {
  if (lines.empty()) {
    Where{path, 1}.fail("the file is empty; expected one JSON object a line (Mooncake format)");
  }
  MooncakeTrace trace;
  trace.lines.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const Where where{path, i + 1};
    const std::string_view text = lines[i];
    if (text.find_first_not_of(" \t") == std::string_view::npos) {
      where.fail("empty line (expected a JSON object with timestamp, input_length, "
                 "output_length and hash_ids)");
    }
    json object;
    try {
      object = json::parse(text.begin(), text.end());
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double (1E8888)
      where.fail("not a JSON line: " + parse_error_detail(e));
    }
    if (!object.is_object()) where.fail(fmt::format("{} is not a JSON object", shown(object)));
    MooncakeLine line;
    line.timestamp_s = parse_timestamp_s(object, where);
    line.input_length = parse_length(object, "input_length", where);
    line.output_length = parse_length(object, "output_length", where);
    line.first_id = trace.hash_ids.size();
    line.num_ids = parse_hash_ids(object, line.input_length, trace.hash_ids, where);
    trace.lines.push_back(line);
  }
  return trace;
}

int32_t scaled_mooncake_length(int32_t length, int32_t block_tokens) {
  const int64_t scaled = (int64_t(length) * block_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens;
  return int32_t(std::max<int64_t>(scaled, 1));
}

std::vector<TokenSpan> mooncake_prompt_spans(std::span<const uint64_t> hash_ids,
                                             int32_t input_length, int32_t block_tokens) {
  std::vector<TokenSpan> spans;
  spans.reserve(hash_ids.size());
  int64_t left = input_length;
  for (const uint64_t id : hash_ids) {
    const auto length = int32_t(std::min<int64_t>(block_tokens, left));
    spans.push_back({token_source(TokenSourceKind::MooncakeBlock, id), 0, length});
    left -= length;
  }
  return spans;
}

}  // namespace servesim
