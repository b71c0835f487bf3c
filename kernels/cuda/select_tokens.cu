// launch_select_tokens: the next token of each sampling row
// (kernels/cuda/cuda_kernels.h), the rule of kernels/decoder/sampler.cpp's
// sample_token with top_p = 1 and fp32 sums.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

constexpr int kThreads = 1024;  // one block per row; a multiple of 32
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// A candidate of the argmax: the larger value wins, ties go to the lower id.
struct Best {
  float value;
  int64_t id;
};
__device__ Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.id < a.id)) ? b : a;
}
__device__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o /= 2) {
    const Best other{__shfl_xor_sync(kFull, b.value, o), __shfl_xor_sync(kFull, b.id, o)};
    b = better(b, other);
  }
  return b;
}

// Block-wide reductions and scan (blockDim.x == kThreads). Each ends with a
// barrier after every thread has read the shared result, so the next call
// may reuse the shared arrays.
struct Shared {
  Best best[kWarps + 1];
  float sums[kWarps];
  int64_t ids[kWarps + 1];
};

__device__ Best block_best(Best b, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  b = warp_best(b);
  if (lane == 0) sh.best[warp] = b;
  __syncthreads();
  if (warp == 0) {
    Best w = lane < kWarps ? sh.best[lane] : Best{-INFINITY, INT64_MAX};
    w = warp_best(w);
    if (lane == 0) sh.best[kWarps] = w;
  }
  __syncthreads();
  const Best result = sh.best[kWarps];
  __syncthreads();
  return result;
}

// Minimum (take_max false) or maximum (true) of v over the block.
__device__ int64_t block_min_max(int64_t v, bool take_max, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) {
    const int64_t other = __shfl_xor_sync(kFull, v, o);
    v = take_max ? (other > v ? other : v) : (other < v ? other : v);
  }
  if (lane == 0) sh.ids[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int64_t w = sh.ids[lane < kWarps ? lane : 0];  // padding lanes repeat warp 0's value
    for (int o = 16; o > 0; o /= 2) {
      const int64_t other = __shfl_xor_sync(kFull, w, o);
      w = take_max ? (other > w ? other : w) : (other < w ? other : w);
    }
    if (lane == 0) sh.ids[kWarps] = w;
  }
  __syncthreads();
  const int64_t result = sh.ids[kWarps];
  __syncthreads();
  return result;
}

// Exclusive prefix sum of v in thread order; *total gets the sum of all.
__device__ float block_exclusive_scan(float v, float* total, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float inclusive = v;  // inclusive scan within the warp
  for (int o = 1; o < 32; o *= 2) {
    const float up = __shfl_up_sync(kFull, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  float exclusive = __shfl_up_sync(kFull, inclusive, 1);
  if (lane == 0) exclusive = 0.0f;
  if (lane == 31) sh.sums[warp] = inclusive;  // the warp's total
  __syncthreads();
  if (warp == 0) {  // inclusive scan of the warp totals, in place
    float s = lane < kWarps ? sh.sums[lane] : 0.0f;
    for (int o = 1; o < 32; o *= 2) {
      const float up = __shfl_up_sync(kFull, s, o);
      if (lane >= o) s += up;
    }
    if (lane < kWarps) sh.sums[lane] = s;
  }
  __syncthreads();
  const float before = warp > 0 ? sh.sums[warp - 1] : 0.0f;
  *total = sh.sums[kWarps - 1];
  __syncthreads();
  return before + exclusive;
}

// The unnormalised probability of logit l: exp((l - max) / temperature) in
// fp32. One function for every pass, so each pass sees identical values.
__device__ float weight_of(float l, float max, float temperature) { return expf((l - max) / temperature); }

// logits fp32 [S, V], uniforms double [S] (unused when temperature == 0),
// tokens int32 [S]. One block per row (grid-stride over rows).
//   temperature == 0: argmax, ties to the lowest id (coalesced strided pass).
//   temperature > 0:  p_i = weight_of(logits[i]); thread j owns the
//     contiguous ids [j * chunk, (j + 1) * chunk); the cumulative sum of id i
//     is (sum of the chunks before j) + (p of j's ids up to i), in fp32;
//     the token is the lowest id with p_i > 0 whose cumulative sum exceeds
//     u * total, or, when rounding leaves none, the highest id with p_i > 0
//     (sampler.cpp's inverse CDF with its "u within rounding of 1" rule).
__global__ void __launch_bounds__(kThreads) select_tokens_kernel(const float* __restrict__ logits, int32_t S,
                                                                 int64_t V, float temperature,
                                                                 const double* __restrict__ uniforms,
                                                                 int32_t* __restrict__ tokens) {
  __shared__ Shared sh;
  const int64_t chunk = (V + kThreads - 1) / kThreads;
  const int64_t begin = threadIdx.x * chunk < V ? threadIdx.x * chunk : V;
  const int64_t end = begin + chunk < V ? begin + chunk : V;
  for (int64_t k = blockIdx.x; k < S; k += gridDim.x) {
    const float* row = logits + k * V;
    Best mine{-INFINITY, INT64_MAX};  // id INT64_MAX: none yet (loses every tie, even at -inf)
    for (int64_t i = threadIdx.x; i < V; i += kThreads) mine = better(mine, Best{row[i], i});
    const Best best = block_best(mine, sh);
    if (temperature == 0.0f) {
      if (threadIdx.x == 0) tokens[k] = int32_t(best.id < V ? best.id : 0);  // no id: every logit NaN
      continue;  // uniform across the block: no thread skips a barrier
    }
    const float max = best.value;
    float chunk_sum = 0.0f;
    for (int64_t i = begin; i < end; ++i) chunk_sum += weight_of(row[i], max, temperature);
    float total = 0.0f;
    float cumulative = block_exclusive_scan(chunk_sum, &total, sh);
    const double threshold = uniforms[k] * double(total);
    int64_t first = V, last_nonzero = -1;
    for (int64_t i = begin; i < end; ++i) {
      const float p = weight_of(row[i], max, temperature);
      if (!(p > 0.0f)) continue;
      cumulative += p;
      last_nonzero = i;
      if (first == V && double(cumulative) > threshold) first = i;
    }
    first = block_min_max(first, false, sh);
    last_nonzero = block_min_max(last_nonzero, true, sh);
    if (threadIdx.x == 0) tokens[k] = int32_t(first < V ? first : last_nonzero >= 0 ? last_nonzero : 0);
  }
}

}  // namespace

void launch_select_tokens(const float* logits, int32_t S, int64_t V, float temperature, const double* uniforms,
                          int32_t* tokens, cudaStream_t stream) {
  if (S < 0 || V <= 0 || V > INT32_MAX) throw std::invalid_argument("launch_select_tokens: needs S >= 0, 0 < V < 2^31");
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw std::invalid_argument("launch_select_tokens: temperature must be finite and >= 0");
  if (temperature > 0.0f && uniforms == nullptr)
    throw std::invalid_argument("launch_select_tokens: sampling (temperature > 0) needs uniforms");
  if (S == 0) return;
  select_tokens_kernel<<<unsigned(S), kThreads, 0, stream>>>(logits, S, V, temperature, uniforms, tokens);
  CUDA_CHECK_LAUNCH("select_tokens_kernel");
}

}  // namespace servesim::cuda
