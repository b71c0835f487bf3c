// Helpers shared by the tests of every folder. Header-only: every .cpp of a
// test folder is globbed into its test executable as a test source.
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "engine/serving_loop.h"
#include "engine/simulation.h"
#include "sim/clock.h"
#include "sim/errors.h"
#include "sim/executor.h"
#include "sim/hardware_spec.h"
#include "sim/iteration_plan.h"
#include "sim/model_spec.h"
#include "sim/request.h"
#include "sim/scheduler.h"
#include "sim/workload.h"

namespace servesim::test {

// The message of the InputError that `f` throws; fails the test if it throws
// nothing or something else.
template <typename F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected InputError, got another exception: " << e.what());
  }
  FAIL("expected InputError, nothing was thrown");
  return {};
}

// A path in the system temp folder named by `tag` and the process id, so
// test processes running at the same time do not collide.
inline std::filesystem::path unique_temp_path(const std::string& tag) {
  return std::filesystem::temp_directory_path() /
         ("servesim_test_" + std::to_string(::getpid()) + "_" + tag);
}

// A file holding `content` byte for byte, named by `tag` and `extension`
// (".json", ".csv"); removed in the destructor.
class TempFile {
 public:
  TempFile(const std::string& tag, const std::string& content, const std::string& extension)
      : path_(unique_temp_path(tag + extension).string()) {
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A fresh, empty folder named by `tag`; removed with its contents in the
// destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) : path_(unique_temp_path(tag)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// An executor whose iterations take overhead + per_token * the plan's tokens.
// Optional, off by default: record every plan's aggregates (`record_plans`),
// emit up to `decode_emit` tokens per sampling decode (speculative-style:
// at most its query tokens, so every draft accepted), and end
// request `eos_id` once it has `eos_after` tokens (end of sequence).
class FixedCostExecutor final : public Executor {
 public:
  // One plan's aggregates and the duration it was given.
  struct Seen {
    int32_t prefill_tokens, decode_tokens, prefill_sequences, decode_sequences, sampled;
    double duration_s;
  };

  FixedCostExecutor(double overhead_s, double per_token_s)
      : overhead_s_(overhead_s), per_token_s_(per_token_s) {}
  std::string name() const override { return "fixed-cost"; }

  // The duration of an iteration of `tokens` query tokens.
  double cost(int64_t tokens) const { return overhead_s_ + per_token_s_ * double(tokens); }

  void execute(const IterationPlan& plan, IterationResult& result) override {
    result.duration_s = cost(plan.num_tokens());
    if (record_plans) {
      seen.push_back({plan.num_prefill_tokens, plan.num_decode_tokens, plan.num_prefill_sequences,
                      plan.num_decode_sequences, plan.num_sampling_sequences, result.duration_s});
    }
    if (decode_emit > 1 || eos_id >= 0) {
      for (const auto& s : plan.sequences) {
        // A decode emits at most its query tokens (accepted drafts + 1).
        int32_t n = s.samples ? (s.is_prefill ? 1 : std::min(decode_emit, s.num_query_tokens)) : 0;
        result.emitted_tokens.push_back(n);
        emitted[s.request_id] += n;
        result.finished.push_back(s.request_id == eos_id && emitted[s.request_id] >= eos_after);
      }
    }
  }

  bool record_plans = false;
  int32_t decode_emit = 1;
  int64_t eos_id = -1;
  int32_t eos_after = 0;
  std::vector<Seen> seen;              // with record_plans: one per plan, in order
  std::map<int64_t, int32_t> emitted;  // with decode_emit > 1 or eos_id: tokens per request

 private:
  double overhead_s_, per_token_s_;
};

// A hand-made model shape: d, I, L, H, Hkv, dh, V, the longest context and
// the dtype given; rope_theta, rms_norm_eps and eos_token_id at their
// defaults (set them afterwards where a test needs others). Not validated.
inline ModelSpec small_model(std::string name, int64_t d, int64_t I, int64_t L, int64_t H,
                             int64_t Hkv, int64_t dh, int64_t V, int64_t max_pos,
                             std::string dtype, bool tied = false, bool bias = false,
                             std::string arch = "llama") {
  ModelSpec m;
  m.name = std::move(name);
  m.architecture = std::move(arch);
  m.hidden_size = d;
  m.intermediate_size = I;
  m.num_hidden_layers = L;
  m.num_attention_heads = H;
  m.num_key_value_heads = Hkv;
  m.head_dim = dh;
  m.vocab_size = V;
  m.tie_word_embeddings = tied;
  m.attention_bias = bias;
  m.max_position_embeddings = max_pos;
  m.torch_dtype = std::move(dtype);
  return m;
}

// A scheduler listener that records nothing.
class QuietListener final : public SchedulerListener {
 public:
  void on_first_scheduled(int64_t) override {}
  void on_tokens(int64_t, int32_t) override {}
  void on_finished(int64_t) override {}
  void on_preempted(int64_t) override {}
};

// A scheduler configuration with every field given.
inline SchedulerConfig scheduler_config(SchedulerPolicy policy, int32_t max_num_seqs,
                                        int32_t max_num_batched_tokens, int32_t block_size,
                                        int64_t num_gpu_blocks, int64_t max_model_len,
                                        double watermark) {
  SchedulerConfig c;
  c.policy = policy;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.block_size = block_size;
  c.num_gpu_blocks = num_gpu_blocks;
  c.max_model_len = max_model_len;
  c.watermark = watermark;
  return c;
}

// A request with every field given.
inline Request request(int64_t id, double arrival_s, int32_t prompt_tokens, int32_t output_tokens) {
  Request r;
  r.id = id;
  r.arrival_s = arrival_s;
  r.prompt_tokens = prompt_tokens;
  r.output_tokens = output_tokens;
  return r;
}

// Runs `workload` through a Scheduler, `executor` and a VirtualClock.
inline RunRecords run(const SchedulerConfig& config, Executor& executor, const Workload& workload,
                      bool keep_iterations) {
  Scheduler scheduler(config);
  VirtualClock clock;
  LoopOptions loop;
  loop.keep_iterations = keep_iterations;
  return run_serving_loop(scheduler, executor, clock, workload, loop);
}

// A cost model whose iterations take overhead + per_token * the plan's tokens.
class FixedCost final : public CostModel {
 public:
  FixedCost(double overhead_s, double per_token_s) : overhead_s_(overhead_s), per_token_s_(per_token_s) {}
  std::string name() const override { return "fixed-cost"; }
  double seconds(const IterationPlan& plan) const override {
    return overhead_s_ + per_token_s_ * double(plan.num_tokens());
  }
  nlohmann::json describe() const override { return {{"executor", "fixed-cost"}}; }

 private:
  double overhead_s_, per_token_s_;
};

// `n` Poisson arrivals at `rate` with the given length specs and seed.
inline Workload poisson_workload(int64_t n, double rate, const std::string& prompt_len,
                                 const std::string& output_len, uint64_t seed) {
  WorkloadSpec spec;
  spec.arrival = ArrivalProcess::Poisson;
  spec.num_requests = n;
  spec.rate = rate;
  spec.prompt_len = prompt_len;
  spec.output_len = output_len;
  spec.seed = seed;
  return make_workload(spec);
}

// A roofline simulation of llama-3.1-8b on an h200: `n` Poisson arrivals at
// `rate` with the given length specs and seed; everything else at defaults.
inline SimulationSetup roofline_setup(SchedulerPolicy policy, double rate, int64_t n,
                                      const std::string& prompt_len, const std::string& output_len,
                                      uint64_t seed) {
  SimulationSetup setup;
  setup.model = resolve_model("llama-3.1-8b");
  setup.hardware = resolve_hardware("h200");
  setup.scheduler.policy = policy;
  setup.workload.arrival = ArrivalProcess::Poisson;
  setup.workload.rate = rate;
  setup.workload.num_requests = n;
  setup.workload.prompt_len = prompt_len;
  setup.workload.output_len = output_len;
  setup.workload.seed = seed;
  return setup;
}

// `n` sequences decoding one token each over `cached` cached tokens, every
// one sampling (request ids 0 .. n-1).
inline IterationPlan decode_plan(int n, int32_t cached) {
  IterationPlan p;
  for (int i = 0; i < n; ++i) {
    ScheduledSequence s;
    s.request_id = i;
    s.num_query_tokens = 1;
    s.num_cached_tokens = cached;
    s.samples = true;
    p.add(s);
  }
  return p;
}

// One sequence prefilling `tokens` tokens from scratch and sampling.
inline IterationPlan prefill_plan(int32_t tokens) {
  IterationPlan p;
  ScheduledSequence s;
  s.num_query_tokens = tokens;
  s.is_prefill = true;
  s.samples = true;
  p.add(s);
  return p;
}

// One sequence of a plan: q query tokens over c cached ones.
inline ScheduledSequence seq(int64_t id, int32_t q, int32_t c, bool prefill, bool samples) {
  ScheduledSequence s;
  s.request_id = id;
  s.num_query_tokens = q;
  s.num_cached_tokens = c;
  s.is_prefill = prefill;
  s.samples = samples;
  return s;
}

}  // namespace servesim::test
