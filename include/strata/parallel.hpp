// Runs independent jobs over the machine's cores; results stay where the caller put them, so the output
// order never depends on the thread count.
#pragma once

#include <cstddef>
#include <functional>

namespace strata {

/// Calls fn(i) for every i in [0, n) on up to `jobs` threads (0: one per core), each index exactly once,
/// then `done(completed, n)` after each job if given (from the worker threads). An exception from a job
/// is rethrown on the calling thread after all jobs have run (the lowest index's first).
void parallel_for(std::size_t n, unsigned jobs, const std::function<void(std::size_t)>& fn,
                  const std::function<void(std::size_t, std::size_t)>& done = {});

}  // namespace strata
