// The command line's heap on transparent huge pages (internal to sim/cli).
#pragma once

#include "strata/scenario.hpp"

#include <vector>

namespace strata::cli {

/// Cases from this many GPUs on are large enough for the heap's pages to matter (0.89 of the wall time at
/// 32,768 GPUs; at 512 GPUs two measurements gave 1.05 and 0.92, within the noise); below it the
/// re-execution's ~6 ms are not spent.
inline constexpr long long kHugeHeapGpus = 4096;

/// At 10^4-10^5 GPUs the event loop's state is a few hundred MiB read in no useful order, and much of the
/// time goes to TLB misses: the engine's big arrays are on 2 MiB pages already (sim/engine/huge_pages.hpp),
/// the many small blocks from malloc are not. glibc puts its heap on transparent huge pages only when asked
/// at start-up (the tunable glibc.malloc.hugetlb=1, glibc 2.35 and later), so this re-executes the program
/// once with it set. It returns (and the program goes on as it is) when GLIBC_TUNABLES is set already (the
/// user's choice, or the second start), STRATA_HUGE_HEAP=0, the kernel's transparent huge pages are off, the
/// C library is not glibc 2.35 or later, the program runs under valgrind or a sanitizer, or the exec fails.
/// Results do not depend on it: only where the heap's blocks lie. The commands call it once they know their
/// largest case, before any output, when it has at least kHugeHeapGpus GPUs and the process is not one rank
/// of an MPI job. `argv` is main's, unchanged.
void reexec_with_huge_heap(char** argv);

/// reexec_with_huge_heap(argv) when `largest_gpus` >= kHugeHeapGpus and the process is not in an MPI job.
void use_huge_heap_if_large(long long largest_gpus, bool in_mpi_job, char** argv);

/// The most GPUs of one of `cases`.
long long largest_gpus(const std::vector<Scenario>& cases);

}  // namespace strata::cli
