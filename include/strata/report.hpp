// Results of a case and their renderings: terminal table, JSON, CSV.
#pragma once

#include "strata/memory.hpp"
#include "strata/metrics.hpp"
#include "strata/spec.hpp"

#include <optional>
#include <ostream>
#include <memory>
#include <string>
#include <vector>

namespace strata {

struct LayerTiming {
    double forward_ms = 0;
    double backward_ms = 0;   ///< recompute included
    std::string cost_source;  ///< analytical | measured | mixed
};

struct CaseResult {
    Scenario scenario;
    MemoryReport memory;
    LayerTiming layer;
    std::optional<IterationResult> iteration;
    std::optional<std::string> error;      ///< set when the case could not be simulated
};

/// Runs the analytical parts (memory, per-layer time) for one case.
CaseResult analyze(const Scenario& scenario);

/// One layer's forward and backward passes, step by step, with each kernel's cost and its source.
void print_layer_breakdown(std::ostream& out, const Scenario& scenario);

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

/// {"experiment", "provenance" (when given), "results": [...]}.
std::string to_json(const std::string& experiment, const std::vector<CaseResult>& results,
                    const Provenance* provenance = nullptr);
std::string to_csv(const std::vector<CaseResult>& results);

}  // namespace strata
