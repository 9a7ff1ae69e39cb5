// Results of a case and their renderings: terminal table, JSON, CSV.
#pragma once

#include "strata/memory.hpp"
#include "strata/scenario.hpp"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace strata {

struct LayerTiming {
    double forward_ms = 0;
    double backward_ms = 0;   ///< recompute included
    std::string cost_source;  ///< analytical | measured | mixed
};

/// Filled by the discrete-event engine (sim/workload).
struct IterationResult {
    double iteration_time_s = 0;
    double mfu = 0;
    double hfu = 0;
    double bubble_fraction = 0;
    double exposed_comm_s = 0;
    std::vector<double> stage_busy_s;      ///< compute-stream busy time per pipeline stage
    Bytes peak_memory;                     ///< largest simulated per-GPU peak
    int peak_memory_stage = 0;
    bool oom = false;
    std::string oom_detail;
    Bytes first_stage_activation_peak;     ///< simulated, activations only
    std::uint64_t events = 0;
    std::uint64_t tasks = 0;
    double wall_s = 0;
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

void print_table(std::ostream& out, const std::string& title, const std::vector<CaseResult>& results);
std::string to_json(const std::string& experiment, const std::vector<CaseResult>& results);
std::string to_csv(const std::vector<CaseResult>& results);

}  // namespace strata
