// Configuration search: the fastest execution of a model on N GPUs of a system that fits in memory.
#pragma once

#include "strata/report.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace strata {

struct SearchRequest {
    ModelSpec model;
    SystemSpec system;
    int gpus = 0;
    int global_batch = 0;
    /// The execution keys the search does not vary (attention, precision, overlaps): every candidate starts from
    /// this; parallel sizes, interleave, microbatch, recompute, SP and the distributed optimizer are enumerated.
    ExecutionSpec base;
    std::vector<int> microbatches = {1, 2, 4, 8};
    int max_interleave = 4;
    int simulate_top = 8;    ///< candidates confirmed by the discrete-event simulation
    int jobs = 0;            ///< threads for the simulations (0: one per core)
    std::function<void(std::size_t, std::size_t)> progress;  ///< (simulated, to simulate)
    /// Evaluates the candidates chosen for simulation (default: run_cases on `jobs` threads with `progress`;
    /// the MPI runner spreads them over the ranks).
    CaseRunner runner;
};

struct SearchCandidate {
    ExecutionSpec execution;
    double estimate_s = 0;   ///< analytical screen
    CaseResult result;       ///< filled for simulated candidates
};

struct SearchResult {
    std::size_t enumerated = 0;
    std::map<std::string, std::size_t> rejected;   ///< reason -> count (infeasible sizes, out of memory)
    std::size_t screened = 0;                      ///< fit in memory, ranked analytically
    std::vector<SearchCandidate> simulated;        ///< best first (simulated time; OOM in simulation last)
    double wall_s = 0;
};

/// Enumerates t, p, d, m, b, recompute, sequence parallelism and the distributed optimizer; drops
/// infeasible sizes and configurations that do not fit (analytical memory), ranks the rest with an
/// analytical pipeline estimate, and simulates the best `simulate_top` event by event.
/// A candidate that fails to simulate throws (InputError, SimulationError) as the simulation would.
SearchResult search(const SearchRequest& request);

/// The first `top` simulated candidates as results named "rank 1", "rank 2", ... (what `strata search --json`
/// writes, with to_json).
std::vector<CaseResult> ranked_results(const SearchResult& result, int top);

}  // namespace strata
