// How the simulation commands ask glibc's allocator for memory.
#pragma once

namespace servesim::cli {

// For simulate, sweep and capacity: keep the heap's memory once taken
// (arrays up to 32 MiB come from the heap and go back to it, not to the
// kernel) and grow it in steps of 256 MiB of address space advised for
// transparent huge pages. A simulation fills tens of MB of fresh arrays
// (requests, inter-token runs, iteration records); on 4 KiB pages each page
// costs a fault, which on the project's VMs was a third of a short run's
// time (docs/performance.md, "Start-up and memory"). The heap's unaligned
// start, below its first 2 MiB boundary, is set aside unwritten so that no
// allocation lands on 4 KiB pages there. Only address space is reserved: a
// page is backed when first written, as before. Does nothing where the
// allocator is not glibc's, and nothing visible where THP is off.
// Call it first thing in a command, before its large allocations.
void prepare_heap_for_simulation();

}  // namespace servesim::cli
