// Simulates one training iteration of a scenario, event by event, on the modelled cluster.
#pragma once

#include "strata/engine.hpp"
#include "strata/report.hpp"
#include "strata/scenario.hpp"

#include <functional>
#include <string>
#include <vector>

namespace strata {

struct SimulationOptions {
    /// Chrome trace-event JSON to write (Perfetto opens it); empty for none.
    std::string trace_path;
    /// Called as the run progresses: (tasks done, tasks total, simulated time).
    engine::ProgressFn progress;
    /// Keep the first stage's memory timeline (for plots).
    bool keep_timeline = true;
    /// Refuse (InputError) a case whose task graph would exceed this many tasks (about 180 bytes each).
    std::uint64_t max_tasks = 100'000'000;
};

struct SimulationDetail {
    std::vector<engine::MemorySample> stage0_memory;   ///< first stage, replica 0: total bytes over time
    std::vector<std::string> memory_categories;
    std::vector<Bytes> stage_peaks;                     ///< per pipeline stage (replica 0), bytes
    /// Per stage: compute intervals (start s, end s, kind) of replica 0 for a timeline chart.
    struct Interval {
        double start_s, end_s;
        int stage;
        char kind;   ///< F forward, B backward (recompute inside), R recompute share, C communication, O optimizer
        int microbatch;
        int chunk;
    };
    std::vector<Interval> intervals;
};

/// The detail as JSON: {"name", "iteration_time_s", "capacity_bytes", "stage_peaks_bytes": [...],
/// "memory": [[t_s, bytes], ...] (stage 0), "intervals": [[stage, kind, start_s, end_s, microbatch, chunk], ...]}
std::string detail_to_json(const Scenario& scenario, const IterationResult& result, const SimulationDetail& detail);

/// Builds the task graph (workload) for `scenario`, runs the engine and fills an IterationResult.
/// Throws InputError for an unsupported configuration and SimulationError if the graph stalls.
IterationResult simulate(const Scenario& scenario, const SimulationOptions& options = {},
                         SimulationDetail* detail = nullptr);

}  // namespace strata
