// A weight matrix [rows, cols] row-major (a Hugging Face nn.Linear weight:
// [out_features, in_features]) in fp32, bf16 or int8 with one fp32 scale
// per row (per output channel), in memory advised into huge pages.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "kernels/cpu/storage.h"

namespace servesim::cpu {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;

class WeightMatrix {
 public:
  WeightMatrix() = default;
  // From fp32 rows (converted to `storage`).
  WeightMatrix(const Matrix& m, Storage storage);
  // Uninitialised, for filling row blocks with set_rows.
  WeightMatrix(int64_t rows, int64_t cols, Storage storage);

  // Rows row0 .. row0 + n - 1 from fp32 `src` ([n, cols], row-major).
  void set_rows(int64_t row0, const float* src, int64_t n);

  Storage storage() const { return storage_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool empty() const { return rows_ == 0; }
  // Bytes as stored, scales included.
  double bytes() const;

  // The fp32 matrix (storage() == Fp32 only).
  const Matrix& fp32() const { return f32_; }
  // Rows r0 .. r0 + n - 1 in fp32 into dst ([n, cols], row-major).
  void load_rows(int64_t r0, int64_t n, float* dst) const;
  // dot(x, row r) for x [cols].
  float dot_row(const float* x, int64_t r) const;

 private:
  Storage storage_ = Storage::Fp32;
  int64_t rows_ = 0, cols_ = 0;
  Matrix f32_;                  // Fp32: [rows, cols]
  std::vector<uint16_t> bf16_;  // Bf16: [rows, cols]
  std::vector<int8_t> q_;       // Int8: [rows, cols]
  std::vector<float> scale_;    // Int8: [rows]
};

// Asks Linux to back the whole 2 MiB pages inside [p, p + bytes) with
// transparent huge pages when they are first touched. A decode step streams
// every weight once; with 4 KiB pages it also takes a TLB miss every 4 KiB
// (docs/performance.md). Advisory only: where THP is off or madvise fails,
// the memory stays in ordinary pages.
void advise_huge_pages(void* p, size_t bytes);

// A vector of n elements allocated (not touched) and advised into huge
// pages, then value-initialised.
template <class T>
void allocate_huge(std::vector<T>& v, size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
  v.assign(n, T{});
}

}  // namespace servesim::cpu
