// The attention kernels (launch_decode_attention, launch_prefill_attention)
// against a double-precision reference written here: paged cache, causal
// over cached + new keys, GQA, scale 1/sqrt(dh).
//
// Inputs are bf16-representable random values (never zero): queries in
// [-2, 2], the keys and values of real positions in [-1, 1], and junk in
// [-50, 50] everywhere else in the caches (unused slots, the tail of a
// sequence's last block, spare blocks) and in the k/v columns of qkv, so
// reading a wrong slot shows. Block tables are shuffled, non-contiguous and
// separated by entries pointing at junk blocks; rows of a batch are packed in
// shuffled order. Outputs (and the decode workspace) are poisoned (NaN)
// first, so an element left unwritten fails.
//
// Tolerance, per (token, head) output vector r (reference) and o (kernel):
//   |o_d - r_d| <= 1e-2 * max_d |r_d| + |r_d| / 128
// bf16 output is one rounding (<= |r| / 256); the prefill kernel also rounds
// its probabilities to bf16 (2^-9 relative each, normalised by their own sum),
// both accumulate in fp32. A key wrongly masked or read shifts the output by
// about its weight times |v - o|: far beyond the bound for junk slots and
// short contexts, where the mask matters most.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "kernels/cuda/cuda_backend.h"

using namespace servesim::cuda;
using namespace servesim::cuda::test;

namespace {

struct Shape {
  int32_t H, Hkv, dh, block_size;
};
std::string describe(const Shape& s) {
  return "H " + std::to_string(s.H) + ", Hkv " + std::to_string(s.Hkv) + ", dh " + std::to_string(s.dh) +
         ", block_size " + std::to_string(s.block_size);
}
// GQA 32/8 and H = Hkv (12/12, 8/8); dh 48, 64, 128 (and 80, 256); block
// sizes 16 and 7; a GQA group of 12 (decode serves it in two blocks of 8
// heads, the second half empty).
const std::vector<Shape> kShapes = {{32, 8, 128, 16}, {12, 12, 64, 7}, {8, 8, 48, 16}, {32, 8, 64, 7},
                                    {4, 1, 80, 16},   {8, 2, 256, 7},  {12, 1, 64, 16}};

struct SequenceSpec {
  int32_t num_cached, num_query;
};

// A packed batch on the host.
struct Batch {
  Shape s;
  int32_t T = 0;
  int64_t qkv_stride = 0;
  std::vector<DeviceSequence> seqs;
  std::vector<float> qkv;     // [T, qkv_stride]
  std::vector<float> k, v;    // [num_blocks][Hkv][block_size][dh]
  std::vector<int32_t> tables;

  int64_t row_offset(int32_t block, int32_t g, int32_t offset) const {
    return ((int64_t(block) * s.Hkv + g) * s.block_size + offset) * s.dh;
  }
};

std::vector<float> bf16_uniform(size_t n, std::mt19937_64& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& e : x) {
    do e = to_float(to_bf16(u(rng)));
    while (e == 0.0f);
  }
  return x;
}

Batch make_batch(const Shape& s, const std::vector<SequenceSpec>& specs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  b.s = s;
  const int32_t n = int32_t(specs.size());
  std::vector<int32_t> blocks_of(static_cast<size_t>(n));
  int32_t needed = 0;
  for (int32_t i = 0; i < n; ++i) {
    blocks_of[size_t(i)] = (specs[size_t(i)].num_cached + specs[size_t(i)].num_query + s.block_size - 1) / s.block_size;
    needed += blocks_of[size_t(i)];
    b.T += specs[size_t(i)].num_query;
  }
  const int32_t spare = 3, num_blocks = needed + spare;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);  // ids[needed ..] are junk-only blocks
  b.k = bf16_uniform(size_t(num_blocks) * s.Hkv * s.block_size * s.dh, rng, -50, 50);
  b.v = bf16_uniform(b.k.size(), rng, -50, 50);

  // Rows packed in shuffled order; tables in sequence order, a junk entry
  // before each.
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> first_row(static_cast<size_t>(n));
  for (int32_t i = 0, row = 0; i < n; ++i) {
    first_row[size_t(order[size_t(i)])] = row;
    row += specs[size_t(order[size_t(i)])].num_query;
  }
  int32_t next_id = 0;
  for (int32_t i = 0; i < n; ++i) {
    const SequenceSpec& sp = specs[size_t(i)];
    b.tables.push_back(ids[size_t(needed + i % spare)]);
    b.seqs.push_back({first_row[size_t(i)], sp.num_query, sp.num_cached, int32_t(b.tables.size())});
    for (int32_t j = 0; j < blocks_of[size_t(i)]; ++j) b.tables.push_back(ids[size_t(next_id++)]);
    // Real keys and values at positions 0 .. num_cached + num_query - 1.
    for (int32_t p = 0; p < sp.num_cached + sp.num_query; ++p)
      for (int32_t g = 0; g < s.Hkv; ++g) {
        const int64_t at = b.row_offset(b.tables[size_t(b.seqs.back().block_offset + p / s.block_size)], g,
                                         p % s.block_size);
        const auto kr = bf16_uniform(size_t(s.dh), rng, -1, 1), vr = bf16_uniform(size_t(s.dh), rng, -1, 1);
        std::copy(kr.begin(), kr.end(), b.k.begin() + at);
        std::copy(vr.begin(), vr.end(), b.v.begin() + at);
      }
  }
  b.tables.push_back(ids[size_t(needed)]);
  // q columns in [-2, 2], the k/v columns junk.
  b.qkv_stride = int64_t(s.H + 2 * s.Hkv) * s.dh;
  b.qkv = bf16_uniform(size_t(b.T * b.qkv_stride), rng, -50, 50);
  const auto q = bf16_uniform(size_t(b.T) * s.H * s.dh, rng, -2, 2);
  for (int32_t t = 0; t < b.T; ++t)
    std::copy(q.begin() + int64_t(t) * s.H * s.dh, q.begin() + int64_t(t + 1) * s.H * s.dh,
              b.qkv.begin() + t * b.qkv_stride);
  return b;
}

// out [T, H dh] in double for every new token of `seqs` (the batch's
// sequences, or the same with other num_cached).
std::vector<double> reference(const Batch& b, const std::vector<DeviceSequence>& seqs) {
  const Shape& s = b.s;
  const int32_t group = s.H / s.Hkv;
  const double scale = 1.0 / std::sqrt(double(s.dh));
  std::vector<double> out(size_t(b.T) * s.H * s.dh, NAN), w;
  for (const DeviceSequence& sq : seqs)
    for (int32_t i = 0; i < sq.num_query; ++i) {
      const int32_t visible = sq.num_cached + i + 1;
      const int64_t t = sq.first_row + i;
      for (int32_t h = 0; h < s.H; ++h) {
        const int32_t g = h / group;
        const float* q = b.qkv.data() + t * b.qkv_stride + int64_t(h) * s.dh;
        w.assign(size_t(visible), 0.0);
        double mx = -INFINITY, l = 0;
        for (int32_t p = 0; p < visible; ++p) {
          const float* k = b.k.data() + b.row_offset(b.tables[size_t(sq.block_offset + p / s.block_size)], g,
                                                     p % s.block_size);
          double dot = 0;
          for (int32_t d = 0; d < s.dh; ++d) dot += double(q[d]) * double(k[d]);
          w[size_t(p)] = dot * scale;
          mx = std::max(mx, w[size_t(p)]);
        }
        for (double& x : w) l += x = std::exp(x - mx);
        double* o = out.data() + t * s.H * s.dh + int64_t(h) * s.dh;
        std::fill(o, o + s.dh, 0.0);
        for (int32_t p = 0; p < visible; ++p) {
          const float* v = b.v.data() + b.row_offset(b.tables[size_t(sq.block_offset + p / s.block_size)], g,
                                                     p % s.block_size);
          for (int32_t d = 0; d < s.dh; ++d) o[d] += w[size_t(p)] / l * double(v[d]);
        }
      }
    }
  return out;
}

// The batch on the device, the output poisoned.
struct DeviceBatch {
  DeviceBuffer<bf16> qkv, k, v, out;
  DeviceBuffer<DeviceSequence> seqs;
  DeviceBuffer<int32_t> tables;
  AttentionArgs args;

  explicit DeviceBatch(const Batch& b)
      : qkv(device_copy(to_bf16(b.qkv))),
        k(device_copy(to_bf16(b.k))),
        v(device_copy(to_bf16(b.v))),
        out(poisoned<bf16>(size_t(b.T) * b.s.H * b.s.dh)),
        seqs(device_copy(b.seqs)),
        tables(device_copy(b.tables)) {
    args.qkv = qkv.data();
    args.qkv_stride = b.qkv_stride;
    args.k_cache = k.data();
    args.v_cache = v.data();
    args.sequences = seqs.data();
    args.block_tables = tables.data();
    args.num_heads = b.s.H;
    args.num_kv_heads = b.s.Hkv;
    args.head_dim = b.s.dh;
    args.block_size = b.s.block_size;
    args.out = out.data();
  }
};

// Checks every element of every (token, head) vector that `ref` defines.
void check_output(const Batch& b, const std::vector<double>& ref, const std::vector<bf16>& got_bf16,
                  const std::string& what) {
  const int64_t dh = b.s.dh;
  const std::vector<float> got = to_float(got_bf16);
  size_t bad = 0, checked = 0;
  std::string first;
  for (int64_t base = 0; base < int64_t(ref.size()); base += dh) {
    if (std::isnan(ref[size_t(base)])) continue;
    double scale = 0;
    for (int64_t d = 0; d < dh; ++d) scale = std::max(scale, std::fabs(ref[size_t(base + d)]));
    for (int64_t d = 0; d < dh; ++d) {
      const double r = ref[size_t(base + d)], o = got[size_t(base + d)];
      ++checked;
      if (std::fabs(o - r) <= 1e-2 * scale + std::fabs(r) / 128) continue;  // false for NaN
      if (bad++ == 0)
        first = "token " + std::to_string(base / (b.s.H * dh)) + ", head " + std::to_string(base / dh % b.s.H) +
                ", d " + std::to_string(d) + ": got " + std::to_string(o) + ", want " + std::to_string(r);
    }
  }
  INFO(what << ": " << bad << " of " << checked << " elements off; first: " << first);
  REQUIRE(checked == size_t(b.T) * b.s.H * dh);
  REQUIRE(bad == 0);
}

std::vector<SequenceSpec> decode_specs(const std::vector<int32_t>& contexts) {
  std::vector<SequenceSpec> specs;
  for (int32_t c : contexts) specs.push_back({c - 1, 1});
  return specs;
}

void run_decode(const Batch& b, DeviceBatch& d, int32_t splits) {
  const int32_t n = int32_t(b.seqs.size());
  auto ws = poisoned<float>(size_t(decode_attention_workspace_floats(n, b.s.H, b.s.dh, splits)));
  poison(d.out);
  launch_decode_attention(d.args, n, splits, ws.data(), nullptr);
  synchronize();
}

// Work items: each sequence's new tokens in tiles of kPrefillQueryTile, shuffled.
std::vector<PrefillWorkItem> prefill_items(const Batch& b, uint64_t seed) {
  std::vector<PrefillWorkItem> items;
  for (int32_t i = 0; i < int32_t(b.seqs.size()); ++i)
    for (int32_t q0 = 0; q0 < b.seqs[size_t(i)].num_query; q0 += kPrefillQueryTile)
      items.push_back({i, q0, std::min(kPrefillQueryTile, b.seqs[size_t(i)].num_query - q0)});
  std::mt19937_64 rng(seed);
  std::shuffle(items.begin(), items.end(), rng);
  return items;
}

// Both prefill kernels (Mma where it supports the head dim, else Wmma again).
constexpr PrefillKernel kPrefillKernels[] = {PrefillKernel::Wmma, PrefillKernel::Mma};
const char* kernel_name(PrefillKernel k) { return k == PrefillKernel::Mma ? "mma" : "wmma"; }

void check_prefill(const Shape& s, const std::vector<SequenceSpec>& specs, uint64_t seed, const std::string& what) {
  const Batch b = make_batch(s, specs, seed);
  DeviceBatch d(b);
  const auto items = prefill_items(b, seed + 1);
  auto d_items = device_copy(items);
  const std::vector<double> ref = reference(b, b.seqs);
  for (PrefillKernel kernel : kPrefillKernels) {
    poison(d.out);
    launch_prefill_attention(d.args, d_items.data(), int32_t(items.size()), nullptr, kernel);
    synchronize();
    check_output(b, ref, d.out.download(), what + ", " + describe(s) + ", " + kernel_name(kernel) + " kernel");
  }
}

// Batch 37: contexts 1, 15, 16, 17, 1000, 5000 and short random ones.
std::vector<int32_t> contexts_37() {
  const int32_t pattern[] = {1, 15, 16, 17, 1000, 5000};
  std::mt19937_64 rng(37);
  std::vector<int32_t> c;
  for (int32_t i = 0; i < 37; ++i)
    c.push_back(i < 12 ? pattern[i % 6] : int32_t(std::uniform_int_distribution<int32_t>(1, 300)(rng)));
  return c;
}

}  // namespace

TEST_CASE("decode attention matches the reference for every batch, split count and shape", "[cuda]") {
  const std::vector<std::vector<int32_t>> batches = {{1000}, {1, 17, 5000}, contexts_37()};
  for (const Shape& s : kShapes)
    for (const auto& contexts : batches) {
      const Batch b = make_batch(s, decode_specs(contexts), uint64_t(s.dh * 1000 + contexts.size()));
      const std::vector<double> ref = reference(b, b.seqs);
      DeviceBatch d(b);
      const int32_t n = int32_t(contexts.size());
      for (int32_t splits : {1, 4, 64, decode_attention_splits(n, s.Hkv, 132)}) {
        run_decode(b, d, splits);
        check_output(b, ref, d.out.download(),
                     "decode, batch " + std::to_string(n) + ", splits " + std::to_string(splits) + ", " + describe(s));
      }
    }
}

TEST_CASE("decode attention replays from a CUDA graph with new contexts", "[cuda]") {
  // The contexts live on the device: a graph captured once serves later
  // steps whose sequences have grown.
  const Shape s{32, 8, 128, 16};
  const Batch b = make_batch(s, decode_specs({40, 1, 300, 17}), 7);
  DeviceBatch d(b);
  std::vector<DeviceSequence> shorter = b.seqs;
  for (DeviceSequence& sq : shorter) sq.num_cached = sq.num_cached / 2;
  d.seqs.upload(shorter);
  const int32_t n = int32_t(b.seqs.size()), splits = 8;
  auto ws = poisoned<float>(size_t(decode_attention_workspace_floats(n, s.H, s.dh, splits)));

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  launch_decode_attention(d.args, n, splits, ws.data(), stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  check_output(b, reference(b, shorter), d.out.download(), "graph, shorter contexts");

  d.seqs.upload(b.seqs);
  poison(d.out);
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  check_output(b, reference(b, b.seqs), d.out.download(), "graph, full contexts");

  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("prefill attention: a first chunk of 1 to 200 tokens", "[cuda]") {
  for (const Shape& s : kShapes)
    for (int32_t q : {1, 5, 64, 65, 200})
      check_prefill(s, {{0, q}}, uint64_t(q * 31 + s.dh), "first chunk of " + std::to_string(q));
}

TEST_CASE("prefill attention: a later chunk over cached history", "[cuda]") {
  for (const Shape& s : kShapes) check_prefill(s, {{100, 37}}, uint64_t(s.dh + 5), "100 cached, 37 new");
}

TEST_CASE("prefill attention: several sequences of different sizes in one launch", "[cuda]") {
  // A first chunk, a later chunk, speculative verification (3 new tokens
  // after a long cache), single tokens, and tiles that straddle blocks.
  const std::vector<SequenceSpec> specs = {{0, 200}, {100, 37}, {4000, 3}, {0, 1}, {15, 64}, {17, 65}, {999, 1}};
  for (const Shape& s : kShapes) check_prefill(s, specs, uint64_t(s.dh + 11), "mixed batch");
}

TEST_CASE("attention rejects a head_dim that is not a multiple of 16 up to 256", "[cuda]") {
  const Shape s{4, 2, 64, 16};
  const Batch b = make_batch(s, decode_specs({5}), 3);
  DeviceBatch d(b);
  const auto items = prefill_items(b, 4);
  auto d_items = device_copy(items);
  auto ws = poisoned<float>(size_t(decode_attention_workspace_floats(1, 4, 272, 1)));
  for (int32_t dh : {0, 8, 40, 272}) {
    d.args.head_dim = dh;
    for (PrefillKernel kernel : kPrefillKernels)
      REQUIRE_THROWS_AS(launch_prefill_attention(d.args, d_items.data(), 1, nullptr, kernel), std::invalid_argument);
    REQUIRE_THROWS_AS(launch_decode_attention(d.args, 1, 1, ws.data(), nullptr), std::invalid_argument);
  }
}

TEST_CASE("prefill attention: the mma kernel's head dims, and SERVESIM_PREFILL_ATTENTION", "[cuda]") {
  for (int32_t dh : {16, 48, 64, 128}) CHECK(prefill_mma_supports(dh));
  for (int32_t dh : {0, 8, 40, 144, 256}) CHECK_FALSE(prefill_mma_supports(dh));
  const char* before = std::getenv("SERVESIM_PREFILL_ATTENTION");
  const std::string saved = before ? before : "";
  unsetenv("SERVESIM_PREFILL_ATTENTION");
  CHECK(prefill_kernel_from_environment() == PrefillKernel::Wmma);
  setenv("SERVESIM_PREFILL_ATTENTION", "mma", 1);
  CHECK(prefill_kernel_from_environment() == PrefillKernel::Mma);
  setenv("SERVESIM_PREFILL_ATTENTION", "flash", 1);
  CHECK_THROWS_AS(prefill_kernel_from_environment(), std::invalid_argument);
  if (before) setenv("SERVESIM_PREFILL_ATTENTION", saved.c_str(), 1);
  else unsetenv("SERVESIM_PREFILL_ATTENTION");
}

TEST_CASE("SERVESIM_SMALL_M_GEMM turns decode's small-M products off and on", "[cuda]") {
  const char* before = std::getenv("SERVESIM_SMALL_M_GEMM");
  const std::string saved = before ? before : "";
  unsetenv("SERVESIM_SMALL_M_GEMM");
  CHECK(small_m_gemm_from_environment());
  setenv("SERVESIM_SMALL_M_GEMM", "off", 1);
  CHECK_FALSE(small_m_gemm_from_environment());
  setenv("SERVESIM_SMALL_M_GEMM", "on", 1);
  CHECK(small_m_gemm_from_environment());
  setenv("SERVESIM_SMALL_M_GEMM", "0", 1);
  CHECK_THROWS_AS(small_m_gemm_from_environment(), std::invalid_argument);
  if (before) setenv("SERVESIM_SMALL_M_GEMM", saved.c_str(), 1);
  else unsetenv("SERVESIM_SMALL_M_GEMM");
}
