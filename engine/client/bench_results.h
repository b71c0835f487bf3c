// What `servesim bench` writes from its measurements: the RunRecords that
// summary.json and requests.csv are made from (the same writers as run and
// simulate), and vllm_result.json in the shape of vLLM's `bench serve
// --save-result`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/client/load_generator.h"
#include "sim/metrics.h"

namespace servesim {

// One RequestRecord per planned request: arrival_s = send time, first and
// last token = first and last token chunk, finish = last token chunk (vLLM's
// latency), tokens_emitted = output tokens (usage), emissions = token
// chunks, prompt_tokens = the server's usage.prompt_tokens where it sent one.
// A failed request is "rejected" with its error as the reason. Every gap
// between token chunks goes into itl_s. Queueing inside the server is not
// observable by a client: first_scheduled_s stays unset (-1).
RunRecords bench_records(const LoadPlan& plan, const LoadResult& result);

struct VllmResultMeta {
  std::string backend;   // "openai" (completions) or "openai-chat", vLLM's names
  std::string model_id;
  std::string tokenizer_id;
  double request_rate = 0;     // requests/s; <= 0: "inf" (closed loop, trace replay)
  double burstiness = 1.0;     // 1 / cv^2 for gamma arrivals, 1 for Poisson
  int64_t max_concurrency = 0; // 0: null
};

// vLLM's result file: date, backend, model_id, num_prompts, request_rate,
// max_concurrency, duration, completed, failed, totals and throughputs, the
// mean/median/std/p99 of TTFT, TPOT, ITL and E2E latency in ms over the
// successful requests (numpy's definitions: linear percentiles, population
// std), and per-request lists in request order: input_lens, output_lens
// (0 for a failure), ttfts (s; 0 for a failure), itls (s), generated_texts,
// errors ("" for a success), plus start_times (s after the start; vLLM's
// file lacks them, `validate --measured` reads them).
nlohmann::json vllm_result_json(const LoadPlan& plan, const LoadResult& result, const VllmResultMeta& meta);

}  // namespace servesim
