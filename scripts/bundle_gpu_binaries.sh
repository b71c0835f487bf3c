#!/usr/bin/env bash
# Builds the binaries experiments/gpu/run.sh needs for a GPU host that has
# CUDA but not this project's Debian libraries, and copies them, with the
# shared libraries they need beyond glibc and CUDA's own, into gpu-bundle/:
#   gpu-bundle/servesim, libservesim_cuda.so (the CUDA backend servesim opens
#   beside itself), servesim_cuda_tests, servesim_cuda_decoder_bench,
#   servesim_cuda_kernels_bench, servesim_device_query, lib/*.so*
# sm_90 code, no -march=native (the host's CPU is not this one), libstdc++
# and libgcc linked into the executables (the bundled libraries use the host's own, newer ones); cuBLAS and the CUDA runtime come from the
# host's CUDA (LD_LIBRARY_PATH, set by run.sh). Usage: scripts/bundle_gpu_binaries.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "bundle: needs nvcc" >&2; exit 2; }
cmake --preset gpu-bundle >/dev/null
cmake --build --preset gpu-bundle -j "$(nproc)" --target servesim servesim_cuda servesim_cuda_tests \
  servesim_cuda_decoder_bench servesim_cuda_kernels_bench servesim_device_query
rm -rf gpu-bundle && mkdir -p gpu-bundle/lib
build=build/gpu-bundle
cp $build/cli/servesim $build/cli/libservesim_cuda.so $build/tests/servesim_cuda_tests $build/bench/servesim_cuda_decoder_bench \
   $build/bench/servesim_cuda_kernels_bench $build/kernels/servesim_device_query gpu-bundle/
# Shared libraries outside glibc, the CUDA toolkit and the driver.
for bin in gpu-bundle/servesim* gpu-bundle/libservesim_cuda.so; do
  ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas[^/]*)\.so' \
  | while read -r lib; do cp -L "$lib" gpu-bundle/lib/; done
strip gpu-bundle/servesim* 2>/dev/null || true
strip --strip-unneeded gpu-bundle/libservesim_cuda.so 2>/dev/null || true
# The commit the binaries were built from (the device machine gets no .git).
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- ':!experiments' ':!scripts' ':!*.md' || echo -dirty)" >gpu-bundle/commit.txt
du -sh gpu-bundle
ls gpu-bundle gpu-bundle/lib
