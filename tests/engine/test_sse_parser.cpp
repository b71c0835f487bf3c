// The server-sent events parser of `servesim bench` (engine/client/
// sse_parser.h): the events an OpenAI stream holds come out whole and in
// order however the network splits the bytes.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "engine/client/sse_parser.h"

using namespace servesim;

namespace {

// Feeds `stream` cut at the given byte offsets (sorted, within the stream).
std::vector<std::string> parse_in_pieces(const std::string& stream, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<std::string> events;
  size_t at = 0;
  for (size_t cut : cuts) {
    REQUIRE(parser.feed(std::string_view(stream).substr(at, cut - at), events));
    at = cut;
  }
  REQUIRE(parser.feed(std::string_view(stream).substr(at), events));
  return events;
}

const std::string kOpenAiStream =
    "data: {\"choices\":[{\"text\":\"Hello\"}]}\n\n"
    ": a comment, as a keep-alive ping\n\n"
    "data: {\"choices\":[{\"text\":\" wor\\nld\"}]}\r\n\r\n"
    "event: message\nid: 7\nretry: 100\ndata:{\"choices\":[],\"usage\":{\"completion_tokens\":2}}\r\r"
    "data: [DONE]\n\n";

const std::vector<std::string> kOpenAiEvents = {
    "{\"choices\":[{\"text\":\"Hello\"}]}", "{\"choices\":[{\"text\":\" wor\\nld\"}]}",
    "{\"choices\":[],\"usage\":{\"completion_tokens\":2}}", "[DONE]"};

}  // namespace

TEST_CASE("SSE parser: an OpenAI stream in one piece gives its events, comments and other fields skipped",
          "[bench]") {
  CHECK(parse_in_pieces(kOpenAiStream, {}) == kOpenAiEvents);
}

TEST_CASE("SSE parser: the same events at every single split point and byte by byte", "[bench]") {
  for (size_t cut = 0; cut <= kOpenAiStream.size(); ++cut) {
    INFO("cut at byte " << cut);
    CHECK(parse_in_pieces(kOpenAiStream, {cut}) == kOpenAiEvents);
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < kOpenAiStream.size(); ++i) every_byte.push_back(i);
  CHECK(parse_in_pieces(kOpenAiStream, every_byte) == kOpenAiEvents);
}

TEST_CASE("SSE parser: random splits of a long stream, a CRLF split between its CR and LF included", "[bench]") {
  std::string stream;
  std::vector<std::string> expected;
  for (int i = 0; i < 300; ++i) {
    const std::string data = "{\"choices\":[{\"text\":\"t" + std::to_string(i) + "\"}]}";
    stream += "data: " + data + (i % 3 == 0 ? "\r\n\r\n" : i % 3 == 1 ? "\n\n" : "\r\r");
    expected.push_back(data);
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::uniform_int_distribution<size_t> pos(0, stream.size());
    std::vector<size_t> cuts(size_t(1 + trial % 40));
    for (size_t& c : cuts) c = pos(rng);
    std::sort(cuts.begin(), cuts.end());
    CHECK(parse_in_pieces(stream, cuts) == expected);
  }
}

TEST_CASE("SSE parser: multi-line data joins with newlines and a field without a colon or space is handled",
          "[bench]") {
  SseParser parser;
  std::vector<std::string> events;
  REQUIRE(parser.feed("data: a\ndata: b\ndata\n\ndata:c\n\n\n\n", events));
  // "data" alone is a data line with an empty value; blank lines without data dispatch nothing.
  CHECK(events == std::vector<std::string>{"a\nb\n", "c"});
  CHECK(parser.finish());
}

TEST_CASE("SSE parser: an event cut off by the end of the stream is not dispatched", "[bench]") {
  SseParser parser;
  std::vector<std::string> events;
  REQUIRE(parser.feed("data: whole\n\ndata: {\"choices\":[{\"te", events));
  CHECK(events == std::vector<std::string>{"whole"});
  CHECK_FALSE(parser.finish());
}

TEST_CASE("SSE parser: a line over the limit fails instead of growing without bound", "[bench]") {
  SseParser parser(64);
  std::vector<std::string> events;
  CHECK_FALSE(parser.feed(std::string(100, 'x'), events));
  CHECK(parser.failed());
  CHECK_FALSE(parser.feed("\n\n", events));
  CHECK(events.empty());
}
