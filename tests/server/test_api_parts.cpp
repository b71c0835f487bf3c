// The server's parts without a socket: the OpenAI request parser (errors
// naming the field), the completion text stream (stop strings, UTF-8 held
// back) and the Prometheus text exposition.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/server/completion_stream.h"
#include "engine/server/openai_request.h"
#include "engine/server/prometheus.h"
#include "engine/server/serving_metrics.h"
#include "engine/server/http_server.h"

using namespace servesim;
using Catch::Matchers::Contains;

namespace {

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer(1000);
  ApiContext context() const {
    ApiContext c;
    c.model_name = "m";
    c.tokenizer = tokenizer.get();
    c.vocab_size = 1000;
    c.max_model_len = 64;
    return c;
  }
  CompletionRequest parse(const std::string& body, ApiEndpoint e = ApiEndpoint::Completions) const {
    return parse_completion_request(body, e, context());
  }
  // The status and param of the ApiError `body` raises.
  std::pair<int, std::string> error(const std::string& body, ApiEndpoint e = ApiEndpoint::Completions) const {
    try {
      parse(body, e);
    } catch (const ApiError& err) {
      return {err.status(), err.param()};
    }
    FAIL("no error for " << body);
    return {0, ""};
  }
};

}  // namespace

TEST_CASE("server: a completion request's fields", "[server]") {
  Fixture f;
  const CompletionRequest r = f.parse(R"({"model":"m","prompt":[5,6,7],"max_tokens":4,"temperature":0.5,
      "top_p":0.9,"seed":11,"stop":["xy","z"],"ignore_eos":true,"min_tokens":2,"stream":true,
      "stream_options":{"include_usage":true}})");
  CHECK(r.prompt_ids == std::vector<int32_t>{5, 6, 7});
  CHECK(r.max_tokens == 4);
  CHECK(r.temperature == 0.5);
  CHECK(r.top_p == 0.9);
  CHECK(r.seed == uint64_t(11));
  CHECK(r.stop == std::vector<std::string>{"xy", "z"});
  CHECK(r.ignore_eos);
  CHECK(r.min_tokens == 2);
  CHECK(r.stream);
  CHECK(r.include_usage);
  // Text goes through the tokenizer (byte-level: one id a byte); 16 tokens by default.
  const CompletionRequest text = f.parse(R"({"prompt":"abc"})");
  CHECK(text.prompt_ids == f.tokenizer->encode("abc"));
  CHECK(text.prompt_ids.size() == 3);
  CHECK(text.max_tokens == 16);
  CHECK(text.model == "m");
  // Chat: the template's text, and max_tokens from what the context leaves.
  const CompletionRequest chat = f.parse(R"({"messages":[{"role":"user","content":"hi"}]})", ApiEndpoint::ChatCompletions);
  CHECK(chat.prompt_ids.size() > 2);
  CHECK(int64_t(chat.prompt_ids.size()) + chat.max_tokens == 64);
}

TEST_CASE("server: bad requests name the field and the status", "[server]") {
  Fixture f;
  using P = std::pair<int, std::string>;
  CHECK(f.error("{oops") == P{400, ""});
  CHECK(f.error("[]") == P{400, ""});
  CHECK(f.error(R"({"prompt":"a","max_tokens":"3"})") == P{400, "max_tokens"});
  CHECK(f.error(R"({"prompt":"a","max_tokens":0})") == P{400, "max_tokens"});
  CHECK(f.error(R"({"prompt":"a","max_tokens":2.5})") == P{400, "max_tokens"});
  CHECK(f.error(R"({"prompt":[1,1000]})") == P{400, "prompt"});
  CHECK(f.error(R"({"prompt":[1,"a"]})") == P{400, "prompt"});
  CHECK(f.error(R"({"prompt":["a","b"]})") == P{400, "prompt"});
  CHECK(f.error(R"({"prompt":[]})") == P{400, "prompt"});
  CHECK(f.error(R"({"prompt":""})") == P{400, "prompt"});
  CHECK(f.error(R"({"prompt":[1,2],"max_tokens":63})") == P{400, "max_tokens"});
  CHECK(f.error(R"({"model":"other","prompt":"a"})") == P{404, "model"});
  CHECK(f.error(R"({"prompt":"a","temperature":-1})") == P{400, "temperature"});
  CHECK(f.error(R"({"prompt":"a","top_p":0})") == P{400, "top_p"});
  CHECK(f.error(R"({"prompt":"a","stop":[1]})") == P{400, "stop"});
  CHECK(f.error(R"({"prompt":"a","stop":""})") == P{400, "stop"});
  CHECK(f.error(R"({"prompt":"a","stream_options":{"include_usage":true}})") == P{400, "stream_options"});
  CHECK(f.error(R"({"prompt":"a","min_tokens":17})") == P{400, "min_tokens"});
  CHECK(f.error(R"({"prompt":"a","n":2})") == P{400, "n"});
  CHECK(f.error(R"({"prompt":"a","logprobs":3})") == P{400, "logprobs"});
  CHECK(f.error(R"({"messages":"hi"})", ApiEndpoint::ChatCompletions) == P{400, "messages"});
  CHECK(f.error(R"({"messages":[{"content":"hi"}]})", ApiEndpoint::ChatCompletions) == P{400, "messages"});
  CHECK(f.error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", ApiEndpoint::ChatCompletions) ==
        P{400, "messages"});
  // The body is OpenAI's: {"error": {message, type, param, code}}.
  const auto body = nlohmann::json::parse(ApiError(400, "bad \xff value", "max_tokens").body());
  CHECK(body["error"]["type"] == "invalid_request_error");
  CHECK(body["error"]["param"] == "max_tokens");
  CHECK(body["error"]["code"] == 400);
}

TEST_CASE("server: stop strings end the text, split across tokens too", "[server]") {
  Fixture f;
  CompletionRequest r;
  r.stop = {"END"};
  CompletionStream s(r, *f.tokenizer, "cmpl-1", 0);
  std::string out;
  for (char c : std::string("abcEN")) out += s.add_tokens(f.tokenizer->encode(std::string(1, c)));
  CHECK(out == "abc");  // "EN" may start the stop string: held back
  CHECK_FALSE(s.stopped());
  out += s.add_tokens(f.tokenizer->encode("Dxyz"));
  CHECK(s.stopped());
  CHECK(out == "abc");
  CHECK(s.add_tokens(f.tokenizer->encode("more")).empty());
  CHECK(s.text() == "abc");
  // A held-back tail that turned out not to stop is released.
  CompletionStream t(r, *f.tokenizer, "cmpl-2", 0);
  std::string got = t.add_tokens(f.tokenizer->encode("aE"));
  got += t.add_tokens(f.tokenizer->encode("x"));
  CHECK(got == "aEx");
  CHECK(t.completion_tokens() == 3);
}

TEST_CASE("server: an unfinished UTF-8 character waits for its last byte", "[server]") {
  Fixture f;
  CompletionRequest r;
  CompletionStream s(r, *f.tokenizer, "cmpl-1", 0);
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, three bytes
  const std::vector<int32_t> ids = f.tokenizer->encode(euro);
  REQUIRE(ids.size() == 3);
  CHECK(s.add_tokens(std::span(ids).first(1)).empty());
  CHECK(s.add_tokens(std::span(ids).subspan(1, 1)).empty());
  CHECK(s.add_tokens(std::span(ids).subspan(2, 1)) == euro);
  CHECK(utf8_complete_prefix("ab\xF0\x9F", 0, 4) == 2);
  CHECK(utf8_complete_prefix("ab", 0, 2) == 2);
  // The whole response carries the text and the usage.
  const auto whole = nlohmann::json::parse(s.full_response("length", CompletionUsage{5, 3, 0}));
  CHECK(whole["choices"][0]["text"] == euro);
  CHECK(whole["usage"]["total_tokens"] == 8);
}

TEST_CASE("server: Prometheus text exposition of counters, gauges and histograms", "[server]") {
  PromRegistry reg;
  reg.counter("x:requests", "Requests.", {{"model_name", "m"}}).inc(3);
  reg.gauge("x:running", "Running.", {{"model_name", "m"}}).set(2);
  auto& h = reg.histogram("x:ttft_seconds", "TTFT.", {{"model_name", "m"}}, {0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le="0.1" counts values <= 0.1
  h.observe(5);
  const std::string text = reg.render();
  CHECK_THAT(text, Contains("# TYPE x:requests counter\nx:requests_total{model_name=\"m\"} 3.0\n"));
  CHECK_THAT(text, Contains("x:running{model_name=\"m\"} 2.0\n"));
  CHECK_THAT(text, Contains("x:ttft_seconds_bucket{le=\"0.1\",model_name=\"m\"} 2.0\n"));
  CHECK_THAT(text, Contains("x:ttft_seconds_bucket{le=\"1.0\",model_name=\"m\"} 2.0\n"));
  CHECK_THAT(text, Contains("x:ttft_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 3.0\n"));
  CHECK_THAT(text, Contains("x:ttft_seconds_count{model_name=\"m\"} 3.0\n"));
  CHECK_THAT(text, Contains("x:ttft_seconds_sum{model_name=\"m\"} 5.15\n"));
  CHECK(prom_number(0.25) == "0.25");
  // vLLM's names are all there.
  ServingMetrics metrics("m");
  const std::string all = metrics.render();
  for (const char* name : {"vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                           "vllm:time_per_output_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
                           "vllm:request_queue_time_seconds_bucket", "vllm:request_prefill_time_seconds_bucket",
                           "vllm:request_decode_time_seconds_bucket", "vllm:num_requests_running",
                           "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                           "vllm:generation_tokens_total", "vllm:num_preemptions_total",
                           "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                           "vllm:request_success_total", "vllm:iteration_tokens_total_bucket"})
    CHECK_THAT(all, Contains(name));
  CHECK_THAT(all, Contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2560.0\",model_name=\"m\"}"));
  CHECK_THAT(all, Contains("vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"16384.0\",model_name=\"m\"}"));
}

TEST_CASE("server: API keys compare in constant time and exactly", "[server]") {
  CHECK(constant_time_equal("Bearer abc", "Bearer abc"));
  CHECK_FALSE(constant_time_equal("Bearer abc", "Bearer abd"));
  CHECK_FALSE(constant_time_equal("Bearer ab", "Bearer abc"));
  CHECK_FALSE(constant_time_equal("", "Bearer abc"));
}

TEST_CASE("server: numbers JSON cannot hold and values of odd types are 400s, not crashes", "[server]") {
  Fixture f;
  // Found by fuzzing (tests/fuzz): nlohmann's out_of_range escaped the parser.
  CHECK(f.error(R"({"prompt":"a","max_tokens":1e400})").first == 400);
  CHECK(f.error(R"({"prompt":[1e400]})").first == 400);
  CHECK(f.error(R"({"messages":[{"role":"user","content":[{"type":7,"text":"x"}]}]})",
                ApiEndpoint::ChatCompletions).first == 400);
  CHECK(f.error(R"({"prompt":"a","seed":18446744073709551615})").first == 400);
}

TEST_CASE("server: with a Llama-3 tokenizer text prompts start with <|begin_of_text|> and chats use its template",
          "[server]") {
  const auto tokenizer = load_tokenizer_json(std::string(SERVESIM_TEST_DATA_DIR) + "/tokenizers/tiny_llama3.json", 300);
  ApiContext c;
  c.model_name = "m";
  c.tokenizer = tokenizer.get();
  c.vocab_size = 300;
  c.max_model_len = 256;
  const int32_t bos = *tokenizer->special_token_id("<|begin_of_text|>");
  const CompletionRequest text = parse_completion_request(R"({"prompt":"hello"})", ApiEndpoint::Completions, c);
  REQUIRE(text.prompt_ids.size() >= 2);
  CHECK(text.prompt_ids[0] == bos);
  CHECK(std::count(text.prompt_ids.begin(), text.prompt_ids.end(), bos) == 1);
  // Token ids are sent as they are.
  const CompletionRequest ids = parse_completion_request(R"({"prompt":[5,6]})", ApiEndpoint::Completions, c);
  CHECK(ids.prompt_ids == std::vector<int32_t>{5, 6});
  const CompletionRequest chat = parse_completion_request(R"({"messages":[{"role":"user","content":"hi"}]})",
                                                          ApiEndpoint::ChatCompletions, c);
  CHECK(chat.prompt_ids[0] == bos);
  CHECK(std::count(chat.prompt_ids.begin(), chat.prompt_ids.end(), *tokenizer->special_token_id("<|eot_id|>")) == 1);
}
