#include "sim/workload.h"

#include <fmt/format.h>

#include <cmath>
#include <utility>

#include "sim/errors.h"

namespace servesim {

namespace {

constexpr int64_t kMaxRequests = 10'000'000;
constexpr double kMinCv = 1e-3;
constexpr double kMaxCv = 1e3;

// Each kind of random choice draws from its own stream, so changing one
// (say the rate) leaves the others (the lengths) exactly as they were.
enum Stream : uint64_t {
  kArrivalStream = 1,
  kPromptStream = 2,
  kOutputStream = 3,
  kResampleStream = 4,
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

std::vector<double> draw_arrivals(const WorkloadSpec& spec) {
  const auto n = static_cast<size_t>(spec.num_requests);
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

Workload synthetic_workload(const WorkloadSpec& spec) {
  const auto n = static_cast<size_t>(spec.num_requests);
  const std::vector<LengthPair> lengths = spec.lengths_from_trace
                                              ? resample_trace_lengths(spec, n)
                                              : draw_synthetic_lengths(spec, n);
  Workload w;
  w.closed_loop = spec.arrival == ArrivalProcess::Closed;
  w.concurrency = w.closed_loop ? spec.concurrency : 0;
  // Closed loop: the runner sets each arrival when it releases the request.
  const std::vector<double> arrivals = w.closed_loop ? std::vector<double>(n, 0.0)
                                                     : draw_arrivals(spec);
  w.requests.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Request& r = w.requests[i];
    r.id = static_cast<int64_t>(i);
    r.arrival_s = arrivals[i];
    r.prompt_tokens = lengths[i].first;
    r.output_tokens = lengths[i].second;
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

Workload make_workload(const WorkloadSpec& spec) {
  check_spec(spec);
  if (spec.arrival == ArrivalProcess::Trace) {
    Workload w;
    w.requests = read_trace(spec.trace);
    return w;
  }
  return synthetic_workload(spec);
}

}  // namespace servesim
