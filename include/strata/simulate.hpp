// Simulates one training iteration of a scenario, event by event, on the modelled cluster.
#pragma once

#include "strata/engine.hpp"
#include "strata/metrics.hpp"
#include "strata/spec.hpp"

#include <cstdint>
#include <functional>
#include <string>

namespace strata {

struct SimulationOptions {
    /// Called as the run progresses: (tasks done, tasks total, simulated time), every `progress_every` tasks done (0:
    /// never) and once at the end. The total is the estimate made before the run, or the tasks created so far where
    /// they are more.
    engine::ProgressFn progress;
    std::uint64_t progress_every = 200000;
    /// Keep the first stage's memory timeline (for plots).
    bool keep_timeline = true;
    /// Fill SimulationDetail::trace with the processes and lanes of the iteration and its spans: every span goes to
    /// `trace_spans` as its task ends if that is set (streamed; report's ChromeTraceWriter), else into trace.spans
    /// (report's write_chrome_trace renders it).
    bool keep_trace = false;
    std::function<void(const TraceSpan&)> trace_spans;
    /// Which GPU groups the trace shows (inclusive ranges; default all): a 256-GPU trace is tens of MB.
    int trace_first_stage = 0, trace_last_stage = 1 << 30;
    int trace_first_replica = 0, trace_last_replica = 1 << 30;
    /// Refuse (InputError) a case that would run more than this many tasks (a bound on run time: the graph is
    /// streamed, memory follows the tasks in flight).
    std::uint64_t max_tasks = 1'000'000'000;
    /// What the refusal tells the reader to raise (the option of the command or function that set max_tasks).
    std::string max_tasks_option = "strata run --max-tasks";
    /// Representative replicas (an explicit option; off: every GPU group is simulated). Each stage's
    /// data-parallel replicas run the same program, so only those on replica 0's node are simulated
    /// (representative_replicas()), each standing for the replicas at its place on the other nodes; the
    /// data-parallel collectives still move every replica's flows over the fabric, and each simulated group
    /// runs at the pace of the slowest replica it stands for (variation). What is lost: the other nodes'
    /// pipeline transfers and tensor-parallel flows competing for shared links, and differences between
    /// replicas' pipelines.
    bool representative_replicas = false;
    /// Fused units (on by default; the result is the same to the picosecond, only tasks and events change): a GPU
    /// group whose spans nothing reads (not replica 0, not traced) runs each forward or backward unit during which no
    /// data-parallel collective of its stage can run (before its first backward split by layer for
    /// overlap_grad_reduce, after the stage's overlapped parameter gather) as one compute task lasting the sum of its
    /// kernels and of its tensor-parallel collectives that move alone (no other route crosses their links, or only
    /// the stage's data-parallel collectives; an overlapped pair: the longer of the two); a backward unit that holds
    /// a recompute workspace keeps its first task apart, a collective that shares links stays a transfer, and the
    /// unit's last task posts the pipeline call that follows it.
    bool fuse_units = true;
};

/// With SimulationOptions::representative_replicas, how many data-parallel replicas per stage are simulated:
/// those whose GPUs share replica 0's first node: all d when a stage fits on one node, gpus_per_node / (t x
/// c) when that divides evenly and stages start on node boundaries, else one.
int representative_replicas(const Scenario& scenario);

/// Builds the task graph (workload) for `scenario`, runs the engine and fills an IterationResult (and `detail`,
/// if given: memory timeline, per-stage peaks, stage intervals, the trace with keep_trace).
/// Throws InputError for an unsupported configuration and SimulationError if the graph stalls.
IterationResult simulate(const Scenario& scenario, const SimulationOptions& options = {},
                         SimulationDetail* detail = nullptr);

}  // namespace strata
