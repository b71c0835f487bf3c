#include "sim/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "sim/errors.h"
#include "sim/sessions.h"

namespace servesim {

namespace {

constexpr int64_t kMaxRequests = 10'000'000;
constexpr double kMinCv = 1e-3;
constexpr double kMaxCv = 1e3;
constexpr int64_t kMaxPromptTokens = std::numeric_limits<int32_t>::max();

// Each kind of random choice draws from its own stream, so changing one
// (say the rate) leaves the others (the lengths) exactly as they were.
enum Stream : uint64_t {
  kArrivalStream = 1,
  kPromptStream = 2,
  kOutputStream = 3,
  kResampleStream = 4,
  kPrefixGroupStream = 5,
  kSessionTurnsStream = 6,
  kThinkTimeStream = 7,
};

// SplitMix64's finaliser: a bijective, well-mixing 64-bit hash.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The seed of one stream; nearby user seeds give unrelated streams.
uint64_t stream_seed(uint64_t seed, Stream stream) { return splitmix64(splitmix64(seed) ^ stream); }

// ---------------------------------------------------------------- validation

bool is_open_loop(ArrivalProcess p) {
  return p == ArrivalProcess::Poisson || p == ArrivalProcess::Gamma ||
         p == ArrivalProcess::Constant;
}

void check_spec(const WorkloadSpec& spec) {
  const ArrivalProcess p = spec.arrival;
  if (is_open_loop(p) && !(std::isfinite(spec.rate) && spec.rate > 0)) {
    throw InputError(fmt::format("--rate must be > 0 and finite (got {})", spec.rate));
  }
  if (p == ArrivalProcess::Gamma && !(spec.cv >= kMinCv && spec.cv <= kMaxCv)) {
    throw InputError(fmt::format("--cv must be in [{}, {}] (got {})", kMinCv, kMaxCv, spec.cv));
  }
  if (p == ArrivalProcess::Closed && spec.concurrency < 1) {
    throw InputError(fmt::format("--concurrency must be >= 1 for closed-loop arrivals (got {})",
                                 spec.concurrency));
  }
  if (p != ArrivalProcess::Trace && (spec.num_requests < 1 || spec.num_requests > kMaxRequests)) {
    throw InputError(fmt::format("--num-requests must be in [1, {}] (got {})", kMaxRequests,
                                 spec.num_requests));
  }
  if (p == ArrivalProcess::Trace && spec.trace.path.empty()) {
    throw InputError("--arrival trace needs a trace file (--trace)");
  }
  if (p == ArrivalProcess::Trace && spec.lengths_from_trace) {
    throw InputError(
        "--lengths-from-trace cannot be combined with --arrival trace: the replayed trace "
        "already gives the lengths");
  }
}

// Shared prefixes and sessions shape synthetic prompts; a replayed trace has
// its own, and a closed loop releases on any finish, not a session's own.
void check_token_identity_spec(const WorkloadSpec& spec) {
  const bool trace = spec.arrival == ArrivalProcess::Trace;
  const int64_t groups = spec.shared_prefix_groups, len = spec.shared_prefix_len;
  // Both 0: no shared prefixes; otherwise both must be in range.
  if (groups != 0 || len != 0) {
    if (trace) {
      throw InputError("--shared-prefix-groups does not apply to a trace replay (--trace): the "
                       "trace gives the prompts");
    }
    if (groups < 1 || groups > kMaxRequests) {
      throw InputError(fmt::format(
          "--shared-prefix-groups must be in [1, {}], with --shared-prefix-len (got {})",
          kMaxRequests, groups));
    }
    if (len < 1 || len >= kMaxPromptTokens) {
      throw InputError(fmt::format(
          "--shared-prefix-len must be in [1, {}] tokens, with --shared-prefix-groups (got {})",
          kMaxPromptTokens - 1, len));
    }
  }
  if (!spec.session_turns) return;
  if (trace) {
    throw InputError("--session-turns does not apply to a trace replay (--trace): the trace "
                     "gives the requests");
  }
  if (spec.arrival == ArrivalProcess::Closed) {
    throw InputError(
        "--session-turns needs open-loop arrivals (--arrival poisson, gamma or constant), not "
        "--arrival closed: a session's next turn follows its own previous turn, a closed loop "
        "releases a request whenever any finishes");
  }
  LengthDistribution::parse(*spec.session_turns, "--session-turns");
  ThinkTime::parse(spec.think_time, "--think-time");
}

// ---------------------------------------------------------------- arrivals

// Open-loop arrival times. Constant: t_i = i / rate, so the first request
// arrives at 0. Poisson and gamma: t_i is the sum of i + 1 sampled gaps, so
// the first request arrives after one gap (as if the process had started at
// 0 with nothing in flight).
[[noreturn]] void rate_too_small(double rate) {
  throw InputError(fmt::format("--rate {} is too small: arrival times overflow", rate));
}

std::vector<double> draw_random_arrivals(const WorkloadSpec& spec, size_t n) {
  Rng rng(stream_seed(spec.seed, kArrivalStream));
  // Gamma(k, theta) has mean k*theta and CV 1/sqrt(k): k = 1/cv^2 and
  // theta = 1/(rate*k) give mean gap 1/rate and the requested CV.
  const double shape = 1.0 / (spec.cv * spec.cv);
  const double scale = 1.0 / (spec.rate * shape);
  const bool poisson = spec.arrival == ArrivalProcess::Poisson;
  if (!poisson && !std::isfinite(scale)) rate_too_small(spec.rate);
  std::vector<double> times(n);
  double t = 0.0;
  for (double& time : times) {
    t += poisson ? rng.exponential(spec.rate) : rng.gamma(shape, scale);
    time = t;
  }
  return times;
}

// The first `n` open-loop arrival times.
std::vector<double> draw_arrivals(const WorkloadSpec& spec, size_t n) {
  std::vector<double> times;
  if (spec.arrival == ArrivalProcess::Constant) {
    times.resize(n);
    for (size_t i = 0; i < n; ++i) times[i] = static_cast<double>(i) / spec.rate;
  } else {
    times = draw_random_arrivals(spec, n);
  }
  // Times never decrease, so checking the last one checks them all.
  if (!std::isfinite(times.back())) rate_too_small(spec.rate);
  return times;
}

// ---------------------------------------------------------------- lengths

using LengthPair = std::pair<int32_t, int32_t>;  // (prompt, output)

std::vector<LengthPair> draw_synthetic_lengths(const WorkloadSpec& spec, size_t n) {
  const auto prompt = LengthDistribution::parse(spec.prompt_len, "--prompt-len");
  const auto output = LengthDistribution::parse(spec.output_len, "--output-len");
  Rng prompt_rng(stream_seed(spec.seed, kPromptStream));
  Rng output_rng(stream_seed(spec.seed, kOutputStream));
  std::vector<LengthPair> lengths(n);
  for (auto& [p, o] : lengths) {
    p = prompt.sample(prompt_rng);
    o = output.sample(output_rng);
  }
  return lengths;
}

// Pairs drawn jointly, uniformly with replacement, from a trace, so the
// correlation between prompt and output lengths is kept.
std::vector<LengthPair> resample_trace_lengths(const WorkloadSpec& spec, size_t n) {
  const std::vector<Request> pool = read_trace(*spec.lengths_from_trace);
  Rng rng(stream_seed(spec.seed, kResampleStream));
  const auto last = static_cast<int64_t>(pool.size()) - 1;
  std::vector<LengthPair> lengths(n);
  for (auto& pair : lengths) {
    const Request& r = pool[static_cast<size_t>(rng.uniform_int(0, last))];
    pair = {r.prompt_tokens, r.output_tokens};
  }
  return lengths;
}

// ---------------------------------------------------------------- token identity

// Uniform shared-prefix groups, one per prompt that starts with one, from
// their own stream (so lengths and arrivals stay as drawn without them).
std::vector<int64_t> draw_prefix_groups(const WorkloadSpec& spec, size_t n) {
  Rng rng(stream_seed(spec.seed, kPrefixGroupStream));
  std::vector<int64_t> groups(n);
  for (int64_t& g : groups) g = rng.uniform_int(0, spec.shared_prefix_groups - 1);
  return groups;
}

// A prompt of a shared prefix and `tail` tokens of its own.
void set_prefixed_prompt(Request& r, int64_t group, int64_t prefix_len, int32_t tail) {
  if (prefix_len + tail > kMaxPromptTokens) {
    throw InputError(fmt::format(
        "--shared-prefix-len {} plus a prompt of {} tokens exceeds {} tokens", prefix_len, tail,
        kMaxPromptTokens));
  }
  r.prompt_tokens = int32_t(prefix_len + tail);
  r.tokens.prompt_spans = {
      {token_source(TokenSourceKind::SharedPrefix, uint64_t(group)), 0, int32_t(prefix_len)},
      {token_source(TokenSourceKind::RequestTail, uint64_t(r.id)), 0, tail}};
  r.tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(r.id));
}

// Sessions: --num-requests turns in all, split into sessions whose first
// turns arrive by the open-loop process. Each user message and output has
// the length the same seed draws for that id without sessions.
Workload session_workload(const WorkloadSpec& spec, std::vector<LengthPair> lengths) {
  const auto n = static_cast<size_t>(spec.num_requests);
  SessionInputs in;
  Rng turns_rng(stream_seed(spec.seed, kSessionTurnsStream));
  in.turns = split_into_sessions(LengthDistribution::parse(*spec.session_turns, "--session-turns"),
                                 spec.num_requests, turns_rng);
  in.first_arrivals_s = draw_arrivals(spec, in.turns.size());
  in.lengths = std::move(lengths);
  if (spec.shared_prefix_groups > 0) {
    in.prefix_groups = draw_prefix_groups(spec, in.turns.size());
    in.prefix_len = int32_t(spec.shared_prefix_len);
  }
  const ThinkTime think = ThinkTime::parse(spec.think_time, "--think-time");
  Rng think_rng(stream_seed(spec.seed, kThinkTimeStream));
  in.think_times_s.resize(n);
  for (double& t : in.think_times_s) t = think.sample(think_rng);
  Workload w;
  w.requests = build_session_requests(in);
  return w;
}

Workload synthetic_workload(const WorkloadSpec& spec) {
  const auto n = static_cast<size_t>(spec.num_requests);
  std::vector<LengthPair> lengths = spec.lengths_from_trace ? resample_trace_lengths(spec, n)
                                                            : draw_synthetic_lengths(spec, n);
  if (spec.session_turns) return session_workload(spec, std::move(lengths));
  Workload w;
  w.closed_loop = spec.arrival == ArrivalProcess::Closed;
  w.concurrency = w.closed_loop ? spec.concurrency : 0;
  // Closed loop: the runner sets each arrival when it releases the request.
  const std::vector<double> arrivals = w.closed_loop ? std::vector<double>(n, 0.0)
                                                     : draw_arrivals(spec, n);
  const std::vector<int64_t> groups =
      spec.shared_prefix_groups > 0 ? draw_prefix_groups(spec, n) : std::vector<int64_t>();
  w.requests.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Request& r = w.requests[i];
    r.id = static_cast<int64_t>(i);
    r.arrival_s = arrivals[i];
    r.prompt_tokens = lengths[i].first;
    r.output_tokens = lengths[i].second;
    if (!groups.empty()) set_prefixed_prompt(r, groups[i], spec.shared_prefix_len, lengths[i].first);
  }
  return w;
}

}  // namespace

ArrivalProcess parse_arrival_process(const std::string& name) {
  if (name == "poisson") return ArrivalProcess::Poisson;
  if (name == "gamma") return ArrivalProcess::Gamma;
  if (name == "constant") return ArrivalProcess::Constant;
  if (name == "closed") return ArrivalProcess::Closed;
  if (name == "trace") return ArrivalProcess::Trace;
  throw InputError(fmt::format(
      "--arrival: unknown arrival process '{}' (expected poisson, gamma, constant, closed or "
      "trace)",
      name));
}

std::string to_string(ArrivalProcess p) {
  switch (p) {
    case ArrivalProcess::Poisson:
      return "poisson";
    case ArrivalProcess::Gamma:
      return "gamma";
    case ArrivalProcess::Constant:
      return "constant";
    case ArrivalProcess::Closed:
      return "closed";
    case ArrivalProcess::Trace:
      return "trace";
  }
  return "unknown";
}

namespace {

// Past this the clock's seconds, doubles, resolve an instant no better
// than ~0.1 us, and latencies (differences of such instants) lose their
// digits: at 1e13 s a TPOT rounds to 4 ms, at 1e16 s every latency is 0.
constexpr double kMaxArrivalS = 1e9;  // ~32 years

void check_arrival_range(const Workload& w, const WorkloadSpec& spec) {
  double last = 0;
  for (const Request& r : w.requests) last = std::max(last, r.arrival_s);
  if (!(last <= kMaxArrivalS))
    throw InputError(fmt::format(
        "the last request arrives at {:.3g} s, past {:g} s (32 years), where the simulated clock cannot resolve "
        "latencies: {}",
        last, kMaxArrivalS,
        spec.arrival == ArrivalProcess::Trace ? "raise --rate-scale or narrow --window-duration"
                                              : "raise --rate"));
}

}  // namespace

Workload make_workload(const WorkloadSpec& spec) {
  check_spec(spec);
  check_token_identity_spec(spec);
  Workload w;
  if (spec.arrival == ArrivalProcess::Trace)
    w.requests = read_trace(spec.trace);
  else
    w = synthetic_workload(spec);
  check_arrival_range(w, spec);
  return w;
}

}  // namespace servesim
