#include "kernels/cpu/weight_matrix.h"

#include <sys/mman.h>

#include <algorithm>
#include <stdexcept>

namespace servesim::cpu {

void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

WeightMatrix::WeightMatrix(int64_t rows, int64_t cols, Storage storage)
    : storage_(storage), rows_(rows), cols_(cols) {
  const size_t n = size_t(rows * cols);
  switch (storage) {
    case Storage::Fp32:
      f32_.resize(rows, cols);
      advise_huge_pages(f32_.data(), n * sizeof(float));
      break;
    case Storage::Bf16: allocate_huge(bf16_, n); break;
    case Storage::Int8:
      allocate_huge(q_, n);
      scale_.assign(size_t(rows), 1.0f);
      break;
  }
}

WeightMatrix::WeightMatrix(const Matrix& m, Storage storage) : WeightMatrix(m.rows(), m.cols(), storage) {
  set_rows(0, m.data(), m.rows());
}

void WeightMatrix::set_rows(int64_t row0, const float* src, int64_t n) {
  if (row0 < 0 || row0 + n > rows_) throw std::logic_error("WeightMatrix::set_rows: rows out of range");
  for (int64_t r = 0; r < n; ++r) {
    const float* x = src + r * cols_;
    const int64_t row = row0 + r;
    switch (storage_) {
      case Storage::Fp32: std::copy_n(x, cols_, f32_.row(row).data()); break;
      case Storage::Bf16:
        for (int64_t k = 0; k < cols_; ++k) bf16_[size_t(row * cols_ + k)] = to_bf16(x[k]);
        break;
      case Storage::Int8:
        scale_[size_t(row)] = int8_scale(x, cols_);
        quantize_int8(x, cols_, scale_[size_t(row)], q_.data() + row * cols_);
        break;
    }
  }
}

double WeightMatrix::bytes() const {
  return double(rows_ * cols_) * storage_bytes(storage_) + double(scale_.size()) * sizeof(float);
}

void WeightMatrix::load_rows(int64_t r0, int64_t n, float* dst) const {
  for (int64_t r = r0; r < r0 + n; ++r, dst += cols_) {
    switch (storage_) {
      case Storage::Fp32: std::copy_n(f32_.row(r).data(), cols_, dst); break;
      case Storage::Bf16: load_bf16(bf16_.data() + r * cols_, cols_, dst); break;
      case Storage::Int8: load_int8(q_.data() + r * cols_, cols_, scale_[size_t(r)], dst); break;
    }
  }
}

float WeightMatrix::dot_row(const float* x, int64_t r) const {
  switch (storage_) {
    case Storage::Fp32: return Eigen::Map<const Vector>(x, cols_).dot(f32_.row(r).transpose());
    case Storage::Bf16: return dot_bf16(x, bf16_.data() + r * cols_, cols_);
    case Storage::Int8: return dot_int8(x, q_.data() + r * cols_, cols_) * scale_[size_t(r)];
  }
  return 0;
}

}  // namespace servesim::cpu
