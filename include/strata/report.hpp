// Results of a case and their renderings: terminal table, JSON, CSV.
#pragma once

#include "strata/memory.hpp"
#include "strata/metrics.hpp"
#include "strata/spec.hpp"

#include <cstddef>
#include <optional>
#include <ostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct LayerTiming {
    double forward_ms = 0;
    double backward_ms = 0;   ///< recompute included
    std::string cost_source;  ///< analytical | measured | mixed
    /// Under the profile's power limit (CostModel::sustain): GEMMs' and fused attention's speed over the profile's
    /// rates, and the SM clock (1 and 0 without a power limit).
    double compute_speed = 1;
    double compute_speed_fp8 = 1;
    double sm_clock_mhz = 0;
    double headroom_ms = 0;             ///< the most a rested GPU saves at the boost clock (0: no headroom)
    double headroom_saving_fraction = 0;  ///< the share of a kernel's time the boost clock saves
};

/// Where a configuration search (strata search) placed a simulated candidate: its analytical estimate, that
/// estimate's rank among every candidate that fit in memory, and its rank by simulated time.
struct ScreenRecord {
    double estimate_s = 0;
    int estimate_rank = 0;
    int simulated_rank = 0;
};

struct CaseResult {
    Scenario scenario;
    MemoryReport memory;
    LayerTiming layer;
    std::optional<IterationResult> iteration;
    std::optional<std::string> error;      ///< set when the case could not be simulated
    int failure = 0;                       ///< the error's CaseFailure bit (strata/run.hpp); 0: none, or infeasible
    std::optional<ScreenRecord> screen;    ///< set for a search's candidates
};

/// Sequences x tokens per second of a simulated iteration.
double tokens_per_s(const Scenario& sc, const IterationResult& it);
/// Model FLOPs per second per GPU, in TFLOP/s (Megatron's convention).
double tflops_per_gpu(const Scenario& sc, const IterationResult& it);
/// A search candidate's analytical estimate against its simulated time: estimate / simulated - 1.
double estimate_error(const ScreenRecord& s, const IterationResult& it);

/// Runs the analytical parts (memory, per-layer time) for one case.
CaseResult analyze(const Scenario& scenario);

/// One layer's forward and backward passes, step by step, with each kernel's cost and its source.
/// `clock_from_kernels`: the power limit's clock from the layer's kernels alone, its collectives left out (as one GPU
/// runs the layer in a calibration: scripts/power-profile.py).
void print_layer_breakdown(std::ostream& out, const Scenario& scenario, bool clock_from_kernels = false);

/// For each whole layer a calibrated profile measured: the per-layer forward / backward time the simulator
/// predicts from the profile's op-level entries (tensor-parallel collectives left out when the calibration ran
/// on fewer GPUs than t, as the measurement did), the error, and the measured activation bytes against the
/// layer model's. Returns the largest absolute relative time error (0 if there is no measured layer).
double print_profile_check(std::ostream& out, const DeviceProfile& profile);

/// The detail as JSON: {"name", "iteration_time_s", "capacity_bytes", "pipeline", "categories",
/// "stage_peaks_bytes": [...], "memory": [[t_s, bytes], ...] (stage 0),
/// "intervals": [[stage, kind, start_s, end_s, microbatch, chunk], ...]}
std::string detail_to_json(const Scenario& scenario, const IterationResult& result, const SimulationDetail& detail);

/// Writes a Chrome trace-event JSON (Perfetto opens it): a process per GPU group, a thread per stream.
/// Throws InputError if the file cannot be written.
void write_chrome_trace(const std::string& path, const Trace& trace);

/// The same file written as the simulation runs: each span as it is reported (SimulationOptions::trace_spans),
/// then the names of the processes and lanes. Memory stays flat however long the trace.
class ChromeTraceWriter {
public:
    /// Throws InputError if the file cannot be opened.
    explicit ChromeTraceWriter(const std::string& path);
    ~ChromeTraceWriter();
    ChromeTraceWriter(const ChromeTraceWriter&) = delete;
    ChromeTraceWriter& operator=(const ChromeTraceWriter&) = delete;
    void span(const TraceSpan& span);
    /// Writes the process and lane names (trace.spans is ignored) and closes; throws InputError if writing failed.
    void finish(const Trace& names);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

void print_table(std::ostream& out, const std::string& title, const std::vector<CaseResult>& results);
/// Where results came from, for a reader to check: the program and each input file's SHA-256.
struct Provenance {
    std::string strata_version;
    std::string git_revision;
    struct Input {
        std::string file;
        std::string sha256;  ///< lowercase hex
    };
    std::vector<Input> inputs;
};

/// A configuration search's account of itself, for its JSON.
struct SearchSummary {
    int gpus = 0;
    int global_batch = 0;
    std::vector<std::string> constraints;             ///< as given (--fix KEY=VALUES)
    std::size_t enumerated = 0;
    std::vector<std::pair<std::string, std::size_t>> rejected;  ///< reason, count
    std::size_t screened = 0;                         ///< fit in memory, ranked by the analytical estimate
    double margin = 0;                                ///< fraction of the best estimate
    std::size_t within_margin = 0;
    int simulate_top = 0;
    int simulate_max = 0;
    std::size_t simulated = 0;
    int overturned_by = 0;   ///< the estimate rank of the fastest simulated candidate when not 1, else 0
    bool representative_replicas = false;  ///< candidates simulated with representative replicas
    /// Rank 1 simulated again with every GPU group (representative replicas, more than one replica per
    /// stage).
    std::optional<double> best_in_full_s;
};

/// {"experiment", "provenance" (when given), "search" (when given), "results": [...]}. A result with a screen
/// record carries it as "screen": {"estimate_s", "estimate_rank", "simulated_rank", "estimate_error"} (estimate
/// over simulated time, minus 1). docs/results.schema.json describes every key (a key added here needs it there:
/// CTest results_schema fails otherwise).
std::string to_json(const std::string& experiment, const std::vector<CaseResult>& results,
                    const Provenance* provenance = nullptr, const SearchSummary* search = nullptr);
/// One row per result; when any result has a screen record, the columns estimate_s, estimate_rank,
/// simulated_rank and estimate_error follow the others; when any was simulated with representative replicas,
/// a last column `replicas` (representative or all).
std::string to_csv(const std::vector<CaseResult>& results);

}  // namespace strata
