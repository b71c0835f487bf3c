#include "cli/heap_tuning.h"

#include <cstdint>
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace servesim::cli {

void prepare_heap_for_simulation() {
#if defined(__GLIBC__) && defined(M_TOP_PAD)
  constexpr size_t kMiB = size_t(1) << 20;
  constexpr size_t kHugePage = 2 * kMiB;
  constexpr size_t kHeapStep = 256 * kMiB;
  // glibc's own limit on the mmap threshold (HEAP_MAX_SIZE / 2 on 64 bits).
  if (mallopt(M_MMAP_THRESHOLD, int(32 * kMiB)) == 0) return;  // not glibc's allocator (a sanitizer's)
  mallopt(M_TRIM_THRESHOLD, int(1024 * kMiB));
  mallopt(M_TOP_PAD, int(kHeapStep));
  // Grow the heap now (by the allocation plus the top pad), then advise all
  // of it past this block for huge pages. Freed, the block goes back to the
  // top of the heap, which the trim threshold keeps.
  void* probe = std::malloc(kMiB);
  if (probe == nullptr) return;
  const auto from = (reinterpret_cast<uintptr_t>(probe) + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  const auto to = reinterpret_cast<uintptr_t>(sbrk(0)) & ~uintptr_t(kHugePage - 1);
  if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);  // advisory: errors ignored
  std::free(probe);
#endif
}

}  // namespace servesim::cli
