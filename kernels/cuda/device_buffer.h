// An owning device allocation of n elements of T (cudaMalloc / cudaFree),
// movable, not copyable. Host <-> device copies are checked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace servesim::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Discards the contents; allocates exactly n elements (none for n = 0).
  void resize(size_t n) {
    release();
    if (n) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)));
    size_ = n;
  }
  // Grows (discarding the contents) only when n exceeds the capacity.
  void reserve(size_t n) {
    if (n > size_) resize(n);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

  void upload(std::span<const T> host) {
    reserve(host.size());
    if (!host.empty()) CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const { return download(size_); }
  std::vector<T> download(size_t n) const {
    std::vector<T> host(n);
    if (n) CUDA_CHECK(cudaMemcpy(host.data(), data_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void release() noexcept {
    if (data_) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace servesim::cuda
