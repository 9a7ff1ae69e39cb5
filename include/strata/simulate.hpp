// Simulates one training iteration of a scenario, event by event, on the modelled cluster.
#pragma once

#include "strata/engine.hpp"
#include "strata/metrics.hpp"
#include "strata/spec.hpp"

#include <cstdint>
#include <string>

namespace strata {

struct SimulationOptions {
    /// Called as the run progresses: (tasks done, tasks total, simulated time).
    engine::ProgressFn progress;
    /// Keep the first stage's memory timeline (for plots).
    bool keep_timeline = true;
    /// Fill SimulationDetail::trace with every span of the iteration (report's write_chrome_trace renders it).
    bool keep_trace = false;
    /// Refuse (InputError) a case whose task graph would exceed this many tasks (about 180 bytes each).
    std::uint64_t max_tasks = 100'000'000;
    /// What the refusal tells the reader to raise (the option of the command or function that set max_tasks).
    std::string max_tasks_option = "strata run --max-tasks";
};

/// Builds the task graph (workload) for `scenario`, runs the engine and fills an IterationResult (and `detail`,
/// if given: memory timeline, per-stage peaks, stage intervals, the trace with keep_trace).
/// Throws InputError for an unsupported configuration and SimulationError if the graph stalls.
IterationResult simulate(const Scenario& scenario, const SimulationOptions& options = {},
                         SimulationDetail* detail = nullptr);

}  // namespace strata
