#include "calib/ceilings.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <new>
#include <random>
#include <string>

#include <benchmark/benchmark.h>
#include <omp.h>

namespace servesim::ceilings {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// /sys's L3 size of cpu0 ("32768K"); 0 when absent.
size_t sys_l3_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  size_t value = 0;
  char unit = 0;
  if (!(f >> value)) return 0;
  f >> unit;
  const size_t scale = unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? size_t(1) << 30 : 1;
  return value * scale;
}

size_t sysconf_l3_bytes() {
  const long from_sysconf = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return from_sysconf > 0 ? size_t(from_sysconf) : 0;
}

}  // namespace

size_t last_level_cache_bytes() { return std::max(sys_l3_bytes(), sysconf_l3_bytes()); }

size_t local_last_level_cache_bytes() {
  const size_t sys = sys_l3_bytes();
  return sys ? sys : sysconf_l3_bytes();
}

size_t stream_array_bytes() {
  const size_t llc = last_level_cache_bytes();
  return llc ? 4 * llc : size_t(256) << 20;
}

void StreamArrays::Free::operator()(double* p) const { std::free(p); }

namespace {
constexpr size_t kHugePageBytes = size_t(2) << 20;

// n doubles, aligned to a huge page and advised onto huge pages (a hint:
// where the kernel declines, the array is on ordinary pages).
StreamArrays::Array huge_page_array(size_t n) {
  const size_t bytes = (n * sizeof(double) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  auto* p = static_cast<double*>(std::aligned_alloc(kHugePageBytes, bytes));
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return StreamArrays::Array(p);
}
}  // namespace

StreamArrays::StreamArrays(size_t bytes_per_array) {
  n = std::max<size_t>(bytes_per_array / sizeof(double), 1);
  a = huge_page_array(n);
  b = huge_page_array(n);
  c = huge_page_array(n);
  double *pa = a.get(), *pb = b.get(), *pc = c.get();
  const auto count = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < count; ++i) {
    pa[i] = 1.0;
    pb[i] = 2.0;
    pc[i] = 0.0;
  }
}

double copy_pass(StreamArrays& s) {
  const double* a = s.a.get();
  double* c = s.c.get();
  const auto n = static_cast<std::ptrdiff_t>(s.n);
  const auto start = Clock::now();
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < n; ++i) c[i] = a[i];
  benchmark::ClobberMemory();
  return seconds_since(start);
}
double copy_bytes(const StreamArrays& s) { return 2.0 * double(s.n) * sizeof(double); }

double triad_pass(StreamArrays& s) {
  double* a = s.a.get();
  const double *b = s.b.get(), *c = s.c.get();
  const double q = 3.0;
  const auto n = static_cast<std::ptrdiff_t>(s.n);
  const auto start = Clock::now();
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < n; ++i) a[i] = b[i] + q * c[i];
  benchmark::ClobberMemory();
  return seconds_since(start);
}
double triad_bytes(const StreamArrays& s) { return 3.0 * double(s.n) * sizeof(double); }

cpu::Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  cpu::Matrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

Gemm::Gemm(int64_t size) : n(size), in(random_matrix(size, size, 1)), w(random_matrix(size, size, 2)) {
  cpu::matmul(in, w, out, false);
}

double Gemm::pass() {
  const auto start = Clock::now();
  cpu::matmul(in, w, out, false);
  benchmark::DoNotOptimize(out.data());
  return seconds_since(start);
}

CpuUse CpuUse::now() {
  CpuUse u;
  std::ifstream f("/proc/stat");  // "cpu  user nice system idle iowait irq softirq steal ..."
  std::string label;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (f >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)
    u.machine_busy_s = (user + nice + system + irq + softirq + steal) / double(sysconf(_SC_CLK_TCK));
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  u.self_s = double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
  return u;
}

double CpuUse::others_share_since(const CpuUse& start) const {
  const double others = (machine_busy_s - start.machine_busy_s) - (self_s - start.self_s);
  const double capacity = std::chrono::duration<double>(when - start.when).count() * omp_get_num_procs();
  return capacity > 0 ? std::max(0.0, others / capacity) : 0;
}

}  // namespace servesim::ceilings
