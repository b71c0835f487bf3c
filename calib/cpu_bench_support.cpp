#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <benchmark/benchmark.h>

#include "calib/calibration_common.h"
#include "calib/cpu_calibration.h"

namespace servesim::cpu_calibration {

using calibration::ceil_div;
using cpu::Matrix;

void fill_noise(float* p, size_t n, uint64_t seed, float scale) {
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static) if (count > 65536)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    uint64_t z = seed + uint64_t(i) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    p[i] = scale * float(double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
}

Matrix noise(int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m(rows, cols);
  fill_noise(m.data(), size_t(m.size()), seed, 1.0f);
  return m;
}

void add_benchmark(MicrobenchSession& session, const std::string& name, std::function<Step()> make, double flops,
                   double bytes) {
  auto step = std::make_shared<Step>();
  session.add(name, [step, make = std::move(make), flops, bytes](benchmark::State& state) {
    if (!*step) *step = make();
    int64_t i = 0;
    for (auto _ : state) {
      (*step)(i++);
      benchmark::ClobberMemory();
    }
    using C = benchmark::Counter;
    if (flops > 0) state.counters["FLOP/s"] = C(flops, C::kIsIterationInvariantRate, C::kIs1000);
    if (bytes > 0) state.counters["bytes/s"] = C(bytes, C::kIsIterationInvariantRate, C::kIs1000);
  });
}

std::vector<cpu::WeightMatrix> weight_copies(int copies, int64_t rows, int64_t cols, uint64_t seed,
                                             cpu::Storage storage) {
  std::vector<cpu::WeightMatrix> out;
  const float scale = float(std::sqrt(3.0 / double(cols)));
  Matrix values(rows, cols);
  for (int c = 0; c < copies; ++c) {
    fill_noise(values.data(), size_t(values.size()), seed + uint64_t(c) * 0x1000193ULL, scale);
    out.emplace_back(values, storage);
  }
  return out;
}

int copies_for(double bytes, double rotation_bytes, int cap) {
  if (!(bytes > 0)) return 1;
  return int(std::clamp(std::ceil(rotation_bytes / bytes), 1.0, double(cap)));
}

namespace {
ModelSpec one_layer(ModelSpec m) {
  m.num_hidden_layers = 1;
  return m;
}
}  // namespace

LayerKernels::LayerKernels(const ModelSpec& model, int64_t kv_blocks, int32_t block_size, uint64_t seed,
                           const cpu::Precision& precision)
    : spec(one_layer(model)), be(spec, precision), kv(be.make_kv_cache(kv_blocks, block_size)) {
  const int64_t d = model.hidden_size;
  norms.layers.resize(1);
  norms.layers[0].attn_norm = cpu::Vector::Ones(d) + 0.5f * cpu::Vector::Random(d);
  norms.layers[0].mlp_norm = cpu::Vector::Ones(d) + 0.5f * cpu::Vector::Random(d);
  norms.final_norm = cpu::Vector::Ones(d) + 0.5f * cpu::Vector::Random(d);
  // Keys and values of unit scale: softmax over real numbers, not a tie.
  // Row r holds elements r dh .. r dh + dh - 1 of one noise stream per tensor.
  const int64_t dh = kv.head_dim;
  kv.fill([seed, dh](size_t row, float* k, float* v) {
    const uint64_t at = uint64_t(row) * uint64_t(dh) * 0x9E3779B97F4A7C15ULL;
    fill_noise(k, size_t(dh), (seed ^ 0x6b) + at, 1.0f);
    fill_noise(v, size_t(dh), (seed ^ 0x76) + at, 1.0f);
  });
}

std::vector<LayoutCopy> make_layouts(int copies, int64_t sequences, int64_t cached, int64_t query,
                                     int32_t block_size) {
  const int64_t per_seq = ceil_div(cached + query, block_size);
  std::vector<int32_t> blocks(static_cast<size_t>(int64_t(copies) * sequences * per_seq));
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(12345));
  std::vector<LayoutCopy> out(static_cast<size_t>(copies));
  size_t next = 0;
  const std::vector<int32_t> ids(static_cast<size_t>(query), 7);
  for (LayoutCopy& c : out) {
    c.tables.resize(static_cast<size_t>(sequences));
    for (auto& t : c.tables)
      for (int64_t b = 0; b < per_seq; ++b) t.push_back(blocks[next++]);
    for (const auto& t : c.tables) c.layout.add_sequence(ids, int32_t(cached), t, true);
  }
  return out;
}

std::function<Step()> attention_cell(LayerKernels& k, int copies, int64_t sequences, int64_t cached,
                                     int64_t query, int64_t qkv_out, int32_t block_size, uint64_t seed) {
  return [&k, copies, sequences, cached, query, qkv_out, block_size, seed]() -> Step {
    struct Cell {
      cpu::Scratch s;
      std::vector<LayoutCopy> layouts;
    };
    auto cell = std::make_shared<Cell>();
    cell->layouts = make_layouts(copies, sequences, cached, query, block_size);
    cell->s.qkv = noise(sequences * query, qkv_out, seed);
    return [&k, cell](int64_t i) {
      k.be.attention(0, cell->layouts[size_t(i % int64_t(cell->layouts.size()))].layout, k.kv, cell->s);
    };
  };
}

int64_t layout_blocks(int copies, int64_t sequences, int64_t cached, int64_t query, int32_t block_size) {
  return int64_t(copies) * sequences * ceil_div(cached + query, block_size);
}

std::vector<double> medians(const std::vector<MicrobenchResult>& r, size_t first, size_t count) {
  std::vector<double> out;
  for (size_t i = first; i < first + count; ++i) out.push_back(r[i].median_s);
  return out;
}

}  // namespace servesim::cpu_calibration
