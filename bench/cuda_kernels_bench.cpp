// The CUDA backend's kernels one at a time, over their axes (as nvbench
// lays benchmarks out), each with the traffic and work it declares, against
// the GPU's ceilings measured at the start of the same run.
//
//   build/release/bench/servesim_cuda_kernels_bench [--model llama-3.1-8b]
//       [Google Benchmark flags: --benchmark_filter=RE
//        --benchmark_out=FILE --benchmark_out_format=json ...]
//
// Benchmarks (the model's shapes):
//   gemm/<qkv|o|gate_up|down|lm_head>/M:<rows>/path:<small_m|cublaslt>
//       out[M, N] = in[M, K] W[N, K]^T through cuda::Gemm; small_m is the
//       weight-streaming kernel (M <= 8), cublaslt the library's.
//       bytes = 2 N K + 2 M K + M N (2, or 4 for the LM head's fp32 logits);
//       FLOPs = 2 M N K.
//   decode_attention/batch:<B>/context:<C>[/splits:<S>]
//       B sequences of one new token after C - 1 cached (flash-decoding with
//       the backend's split count, or S). bytes = the K and V read (2 B C Hkv dh
//       bf16 each) plus q and out; FLOPs = 4 B H C dh.
//   prefill_attention/tokens:<T>[/head_dim:64]/kernel:<wmma|mma>
//       one causal prompt of T tokens, tiled as the backend tiles it, by
//       either prefill kernel (cuda_kernels.h, PrefillKernel); the model's
//       head dim, or 64.
//       bytes = q, K, V and out once each (T rows); FLOPs = 4 H dh T (T + 1) / 2.
// Each benchmark's counters: bytes_per_second (Google Benchmark's own),
// flop_per_second, share_of_copy (bytes/s over the device-to-device copy
// bandwidth) and share_of_gemm (FLOP/s over cuBLAS's bf16 GEMM at 8192^3).
// Timing: CUDA events around a CUDA graph of back-to-back launches (as the
// decoder replays its steps), per launch = elapsed / launches. Weights
// rotate through enough copies to exceed twice the L2 cache, so every
// launch reads its weight from HBM as a served step does.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "calib/cuda_ceilings.h"
#include "calib/cuda_timer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

using namespace servesim;
using cuda::bf16;
using cuda::DeviceBuffer;

constexpr int32_t kBlockSize = 16;
constexpr int kLaunchesPerGraph = 20;

struct Context {
  cudaStream_t stream = nullptr;
  size_t l2_bytes = 0;
  int sm_count = 0;
  cuda_calib::Ceilings ceilings;
};
Context& context() {
  static Context c;
  return c;
}

// A graph of kLaunchesPerGraph calls of launch(i), i = 0, 1, ...; its
// replays timed with events; per launch = elapsed / launches.
void time_launches(benchmark::State& state, const std::function<void(int)>& launch, double bytes, double flops) {
  cudaStream_t stream = context().stream;
  for (int i = 0; i < kLaunchesPerGraph; ++i) launch(i);  // warm-up, eager
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunchesPerGraph; ++i) launch(i);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up of the graph
  double total_s = 0;
  for (auto _ : state) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    const double per_launch = double(ms) / 1e3 / kLaunchesPerGraph;
    total_s += per_launch;
    state.SetIterationTime(per_launch);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  const double n = double(state.iterations());
  state.SetBytesProcessed(int64_t(bytes * n));
  state.counters["bytes"] = bytes;
  state.counters["flops"] = flops;
  if (total_s > 0) {
    state.counters["flop_per_second"] = flops * n / total_s;
    state.counters["share_of_copy"] = bytes * n / total_s / context().ceilings.copy_bytes_per_s;
    state.counters["share_of_gemm"] = flops * n / total_s / context().ceilings.gemm_flops_per_s;
  }
}

// Copies of an n-element bf16 tensor that together exceed twice the L2.
int copies_for(size_t elements) {
  const double bytes = 2.0 * double(elements);
  return std::clamp(int(2.0 * double(context().l2_bytes) / bytes) + 1, 1, kLaunchesPerGraph);
}

DeviceBuffer<bf16> filled(size_t n, uint64_t seed) {
  DeviceBuffer<bf16> b(n);
  cuda::launch_fill_uniform(b.data(), int64_t(n), seed, 0.05f, 0.0f, context().stream);
  return b;
}

struct Projection {
  std::string name;
  int64_t N, K;
  bool f32_out;
};

std::vector<Projection> projections(const ModelSpec& m) {
  const int64_t d = m.hidden_size, I = m.intermediate_size, dh = m.head_dim;
  const int64_t H = m.num_attention_heads, Hkv = m.num_key_value_heads;
  return {{"qkv", (H + 2 * Hkv) * dh, d, false},
          {"o", d, H * dh, false},
          {"gate_up", 2 * I, d, false},
          {"down", d, I, false},
          {"lm_head", m.vocab_size, d, true}};
}

void gemm_benchmark(benchmark::State& state, Projection p, int64_t M, bool small_m) {
  cudaStream_t stream = context().stream;
  cuda::Gemm gemm(stream);
  gemm.set_small_m_rows(small_m ? cuda::kSmallMGemmMaxRows : 0);
  const size_t weight = size_t(p.N * p.K);
  const int copies = copies_for(weight);
  DeviceBuffer<bf16> w = filled(weight * size_t(copies), 1), in = filled(size_t(M * p.K), 2);
  DeviceBuffer<bf16> out_bf16(p.f32_out ? 1 : size_t(M * p.N));
  DeviceBuffer<float> out_f32(p.f32_out ? size_t(M * p.N) : 1);
  auto launch = [&](int i) {
    const bf16* wi = w.data() + size_t(i % copies) * weight;
    if (p.f32_out)
      gemm.f32_out(in.data(), wi, M, p.N, p.K, out_f32.data());
    else
      gemm.bf16_out(in.data(), wi, M, p.N, p.K, out_bf16.data());
  };
  const double bytes = 2.0 * double(weight) + 2.0 * double(M * p.K) + (p.f32_out ? 4.0 : 2.0) * double(M * p.N);
  time_launches(state, launch, bytes, 2.0 * double(M) * double(p.N) * double(p.K));
}

// B sequences, each `context` positions (the last one new), KV blocks laid
// out one sequence after another; `prefill`: one sequence whose `context`
// tokens are all new.
struct AttentionSetup {
  DeviceBuffer<bf16> qkv, k_cache, v_cache, out;
  DeviceBuffer<cuda::DeviceSequence> sequences;
  DeviceBuffer<int32_t> block_tables;
  cuda::AttentionArgs args;

  AttentionSetup(const ModelSpec& m, int32_t batch, int32_t context, bool prefill)
      : qkv(filled(size_t(prefill ? context : batch) * size_t((m.num_attention_heads + 2 * m.num_key_value_heads) *
                                                               m.head_dim),
                   3)),
        k_cache(filled(size_t(batch) * size_t((context + kBlockSize - 1) / kBlockSize) * size_t(m.num_key_value_heads) *
                           kBlockSize * size_t(m.head_dim),
                       4)),
        v_cache(filled(k_cache.size(), 5)),
        out(size_t(prefill ? context : batch) * size_t(m.num_attention_heads * m.head_dim)),
        sequences(size_t(batch)),
        block_tables(size_t(batch) * size_t((context + kBlockSize - 1) / kBlockSize)) {
    const int32_t blocks = (context + kBlockSize - 1) / kBlockSize;
    std::vector<cuda::DeviceSequence> seq(static_cast<size_t>(batch));
    for (int32_t b = 0; b < batch; ++b)
      seq[size_t(b)] = prefill ? cuda::DeviceSequence{0, context, 0, 0}
                               : cuda::DeviceSequence{b, 1, context - 1, b * blocks};
    sequences.upload(seq);
    std::vector<int32_t> tables(block_tables.size());
    std::iota(tables.begin(), tables.end(), 0);
    block_tables.upload(tables);
    args.qkv = qkv.data();
    args.qkv_stride = (m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim;
    args.k_cache = k_cache.data();
    args.v_cache = v_cache.data();
    args.sequences = sequences.data();
    args.block_tables = block_tables.data();
    args.num_heads = int32_t(m.num_attention_heads);
    args.num_kv_heads = int32_t(m.num_key_value_heads);
    args.head_dim = int32_t(m.head_dim);
    args.block_size = kBlockSize;
    args.out = out.data();
  }
};

// splits 0: the backend's choice (decode_attention_splits).
void decode_attention_benchmark(benchmark::State& state, ModelSpec m, int32_t batch, int32_t context_len,
                                int32_t splits) {
  AttentionSetup s(m, batch, context_len, false);
  if (splits == 0) splits = cuda::decode_attention_splits(batch, int32_t(m.num_key_value_heads), context().sm_count);
  DeviceBuffer<float> workspace(
      size_t(cuda::decode_attention_workspace_floats(batch, int32_t(m.num_attention_heads), int32_t(m.head_dim),
                                                     splits)));
  auto launch = [&](int) {
    cuda::launch_decode_attention(s.args, batch, splits, workspace.data(), context().stream);
  };
  const double H = double(m.num_attention_heads), Hkv = double(m.num_key_value_heads), dh = double(m.head_dim);
  const double bytes = 2.0 * 2.0 * batch * double(context_len) * Hkv * dh + 2.0 * 2.0 * batch * H * dh;
  state.counters["splits"] = splits;
  time_launches(state, launch, bytes, 4.0 * batch * H * double(context_len) * dh);
}

void prefill_attention_benchmark(benchmark::State& state, ModelSpec m, int32_t tokens, cuda::PrefillKernel kernel) {
  AttentionSetup s(m, 1, tokens, true);
  std::vector<cuda::PrefillWorkItem> items;
  for (int32_t q = 0; q < tokens; q += cuda::kPrefillQueryTile)
    items.push_back({0, q, std::min(cuda::kPrefillQueryTile, tokens - q)});
  DeviceBuffer<cuda::PrefillWorkItem> items_d(items.size());
  items_d.upload(items);
  auto launch = [&](int) {
    cuda::launch_prefill_attention(s.args, items_d.data(), int32_t(items.size()), context().stream, kernel);
  };
  const double H = double(m.num_attention_heads), Hkv = double(m.num_key_value_heads), dh = double(m.head_dim);
  const double T = double(tokens);
  const double bytes = 2.0 * T * dh * (2.0 * H + 2.0 * Hkv);  // q and out, K and V
  time_launches(state, launch, bytes, 4.0 * H * dh * T * (T + 1) / 2);
}

void register_benchmarks(const ModelSpec& m) {
  for (const Projection& p : projections(m))
    for (int64_t M : {1, 2, 4, 8, 16, 64})
      for (bool small_m : {true, false}) {
        if (small_m && M > cuda::kSmallMGemmMaxRows) continue;
        benchmark::RegisterBenchmark(
            fmt::format("gemm/{}/M:{}/path:{}", p.name, M, small_m ? "small_m" : "cublaslt").c_str(),
            [p, M, small_m](benchmark::State& s) { gemm_benchmark(s, p, M, small_m); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
  auto decode = [&m](const std::string& name, int32_t batch, int32_t ctx, int32_t splits) {
    benchmark::RegisterBenchmark(name.c_str(), [m, batch, ctx, splits](benchmark::State& s) {
      decode_attention_benchmark(s, m, batch, ctx, splits);
    })->UseManualTime()->Unit(benchmark::kMicrosecond);
  };
  for (int32_t batch : {1, 8, 32, 128})
    for (int32_t ctx : {512, 4096}) decode(fmt::format("decode_attention/batch:{}/context:{}", batch, ctx), batch, ctx, 0);
  // The split count's axis at one long context (the backend's choice above).
  for (int32_t batch : {1, 8})
    for (int32_t splits : {1, 4, 16, 64})
      decode(fmt::format("decode_attention/batch:{}/context:4096/splits:{}", batch, splits), batch, 4096, splits);
  for (int32_t tokens : {512, 1024, 2048, 4096})
    for (cuda::PrefillKernel kernel : {cuda::PrefillKernel::Wmma, cuda::PrefillKernel::Mma})
      benchmark::RegisterBenchmark(
          fmt::format("prefill_attention/tokens:{}/kernel:{}", tokens,
                      kernel == cuda::PrefillKernel::Mma ? "mma" : "wmma")
              .c_str(),
          [m, tokens, kernel](benchmark::State& s) { prefill_attention_benchmark(s, m, tokens, kernel); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  // The head dim's axis: the model's heads at head dim 64 (the model's own above).
  if (m.head_dim != 64) {
    ModelSpec dh64 = m;
    dh64.head_dim = 64;
    for (cuda::PrefillKernel kernel : {cuda::PrefillKernel::Wmma, cuda::PrefillKernel::Mma})
      benchmark::RegisterBenchmark(
          fmt::format("prefill_attention/tokens:2048/head_dim:64/kernel:{}",
                      kernel == cuda::PrefillKernel::Mma ? "mma" : "wmma")
              .c_str(),
          [dh64, kernel](benchmark::State& s) { prefill_attention_benchmark(s, dh64, 2048, kernel); })
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model = "llama-3.1-8b";
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::puts("servesim_cuda_kernels_bench [--model M] [Google Benchmark flags]\n"
                "The CUDA backend's GEMMs and attention kernels over their axes, against the copy bandwidth\n"
                "and bf16 GEMM rate measured at the start of the run (see the file's opening comment).");
      return 0;
    }
    if (flag == "--model") {
      if (i + 1 >= argc) throw InputError("--model needs a value (see --help)");
      model = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = int(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  const ModelSpec spec = resolve_model(model);

  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "servesim_cuda_kernels_bench: no CUDA device\n");
    return 3;
  }
  Context& c = context();
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&c.sm_count, cudaDevAttrMultiProcessorCount, 0));
  c.l2_bytes = size_t(l2);
  CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  {
    cuda_calib::TimerSettings settings;
    settings.repetitions = 10;
    cuda_calib::Timer timer(c.stream, c.l2_bytes, settings);
    c.ceilings = cuda_calib::measure_ceilings(timer, c.stream, {size_t(2) << 30, 8192}, 1);
  }
  std::fprintf(stderr, "ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s; %s shapes\n",
               c.ceilings.copy_bytes_per_s / 1e9, c.ceilings.gemm_flops_per_s / 1e12, spec.name.c_str());
  benchmark::AddCustomContext("model", spec.name);
  benchmark::AddCustomContext("copy_bytes_per_s", fmt::format("{:.6g}", c.ceilings.copy_bytes_per_s));
  benchmark::AddCustomContext("gemm_flops_per_s", fmt::format("{:.6g}", c.ceilings.gemm_flops_per_s));
  register_benchmarks(spec);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  CUDA_CHECK(cudaStreamDestroy(c.stream));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "servesim_cuda_kernels_bench: %s\n", e.what());
  return 2;
}
