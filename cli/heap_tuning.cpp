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
  // The heap's first huge page boundary: what glibc hands out below it
  // (the heap starts at a random, unaligned address) can only be backed by
  // 4 KiB pages, a fault each, up to 2 MiB of them -- in a paravirtualised
  // guest most of a short run's time (docs/performance.md, "Start-up and
  // memory"). So the rest of the heap below the boundary is taken and kept,
  // never written: a mark (larger than any chunk freed this early, so it
  // comes from the heap's top), then a pad that ends a little below the
  // boundary, where the next chunks begin. Their pages past the boundary
  // are first written after the advice, so they are huge pages.
  constexpr size_t kMark = 128 * 1024, kBelow = 256;
  char* mark = static_cast<char*>(std::malloc(kMark));
  if (mark == nullptr) return;
  const auto mark_end = reinterpret_cast<uintptr_t>(mark) + kMark;
  auto boundary = (mark_end + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  if (boundary - mark_end < 4 * kBelow) boundary += kHugePage;
  // Grows the heap (by the pad plus the top pad); its new top chunk's
  // header lies below the boundary.
  if (std::malloc(boundary - mark_end - kBelow) == nullptr) return;
  const auto to = reinterpret_cast<uintptr_t>(sbrk(0)) & ~uintptr_t(kHugePage - 1);
  if (to > boundary) madvise(reinterpret_cast<void*>(boundary), to - boundary, MADV_HUGEPAGE);  // advisory: errors ignored
#endif
}

}  // namespace servesim::cli
