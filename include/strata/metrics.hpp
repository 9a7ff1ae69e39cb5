// What one simulated iteration yields, as neutral records: read back from the engine by the workload
// (sim/workload/metrics.cpp), rendered by report/ (tables, JSON, CSV, trace, timeline) without any engine type.
#pragma once

#include "strata/units.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// Communication the compute streams wait for (exposed: nothing computes meanwhile), by kind, in exact integer
/// picoseconds. `tensor` and `pipeline` are per pipeline stage on average (replica 0 of each stage), `data_parallel`
/// is stage 0's (replica 0); sim/workload/metrics.cpp says what each counts.
struct ExposedComm {
    /// Synchronous tensor-parallel collectives on the tp stream (all-reduce, or the sequence-parallel all-gather /
    /// reduce-scatter; context-parallel ones too when not overlapped): the kernels after them wait.
    Time tensor;
    /// Pipeline transfers (and, without sequence parallelism, the receiver's all-gather of the scattered activation)
    /// while the blocking send/receive call waits for them; waiting for the peer to post its call is bubble.
    Time pipeline;
    /// From the last backward to the optimizer step (gradient reduce-scatter / all-reduce over the data-parallel
    /// replicas, waiting for the slowest of them, the tied-embedding sync) and from the optimizer step to the end of
    /// the distributed optimizer's parameter all-gather when it is not overlapped with the next forward; with the
    /// overlapped gather or with fsdp, the time the first group's kernels wait for their weights' gathers (and with
    /// fsdp for each backward's reduce-scatters).
    Time data_parallel;
    [[nodiscard]] constexpr Time total() const { return tensor + pipeline + data_parallel; }
};

/// (A field added here must also travel between MPI ranks: write_result / read_result in sim/mpi/mpi.cpp; the
/// MPI test compares the JSON of 1 and 2 ranks byte for byte.)
struct IterationResult {
    Time iteration_time;                   ///< exact (integer picoseconds)
    double iteration_time_s = 0;
    double mfu = 0;
    double hfu = 0;
    double bubble_fraction = 0;
    double exposed_comm_s = 0;             ///< exposed_comm.total() in seconds
    ExposedComm exposed_comm;              ///< the same by kind, exact
    /// The GPU idle while its host, synchronised with it, issues the next unit (execution.host_gap_forward /
    /// _backward), per pipeline stage on average (replica 0), exact; counted apart from the bubble.
    Time host_gap;
    std::vector<double> stage_busy_s;      ///< compute-stream busy time per pipeline stage
    /// With activation offloading: the first stage's copies to and from host memory, busy time per iteration (replica 0).
    Time host_copies_out, host_copies_in;
    /// Variation: the slowest GPU group's kernel-time factor against the profile (1 without variation).
    double slowest_group_factor = 1.0;
    Bytes peak_memory;                     ///< largest simulated per-GPU peak
    int peak_memory_stage = 0;
    bool oom = false;
    std::string oom_detail;
    Bytes first_stage_activation_peak;     ///< simulated, activations only
    std::uint64_t events = 0;
    std::uint64_t tasks = 0;
    double wall_s = 0;
    /// Simulated with representative replicas (SimulationOptions::representative_replicas), not every group.
    bool representative_replicas = false;
};

/// A GPU memory pool's total at one instant.
struct MemorySample {
    Time time;
    Bytes in_use;
};

/// A compute or communication interval of the first replica of a stage, for the timeline chart.
struct StageInterval {
    double start_s = 0, end_s = 0;
    int stage = 0;
    char kind = 'F';   ///< F forward, B backward (recompute inside), C communication, O other (optimizer, calls)
    int microbatch = 0;
    int chunk = 0;
};

/// The simulated per-stage memory peak (replica 0), by category (MemoryCategory order).
struct StagePeak {
    Bytes total;
    Time time;                   ///< first instant the peak was reached
    std::vector<Bytes> by_category;
};

/// A whole iteration as a trace: lanes (one per stream, grouped into processes) and spans on them.
struct TraceLane {
    std::uint32_t process = 0;
    std::uint32_t id = 0;
    std::string name;
};
struct TraceSpan {
    std::uint32_t process = 0;
    std::uint32_t lane = 0;
    const char* kind = "";   ///< static string: forward, backward, tp-collective, p2p, dp-reduce, ...
    int chunk = 0;
    int microbatch = 0;
    Time start, end;
    Bytes bytes;             ///< a transfer's size (0 for compute)
    /// A pipeline send: the receiving group's process and compute lane (a flow arrow from this span to it).
    bool has_receiver = false;
    std::uint32_t receiver_process = 0, receiver_lane = 0;
};
/// A memory counter track: one stage's first replica, bytes in use over time.
struct TraceCounter {
    std::uint32_t process = 0;
    std::vector<MemorySample> samples;
};
struct Trace {
    std::vector<std::string> processes;   ///< index = process id
    std::vector<TraceLane> lanes;
    std::vector<TraceSpan> spans;         ///< in the order the tasks ended
    std::vector<TraceCounter> memory;     ///< per stage (replica 0)
};

struct SimulationDetail {
    std::vector<MemorySample> stage0_memory;   ///< first stage, replica 0: total bytes over time
    std::vector<std::string> memory_categories;
    std::vector<StagePeak> stage_peaks;        ///< per pipeline stage (replica 0)
    std::vector<StageInterval> intervals;
    Trace trace;                               ///< filled when SimulationOptions::keep_trace
};

}  // namespace strata
