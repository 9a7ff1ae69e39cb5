// libFuzzer target for the whole path of `strata run` (fuzz_loader stops at the loaders): each input is loaded as
// an experiment and its first cases (kMaxCases) are evaluated as `strata run` does (analytical memory and layer
// costs, then the discrete-event simulation), one after another, then again on two threads at once. A finding is
// anything a valid input must never produce:
//   - a crash, a sanitizer report, an exception escaping evaluate_case, a timeout, more than the RSS limit;
//   - a case failing as a simulation or internal error (kCaseSimulation, kCaseInternal): only bad input
//     (InputError, e.g. a case over kMaxTasks) may stop a case that the loader accepted;
//   - a result that breaks an invariant: a positive, finite iteration time; 0 < MFU <= HFU (both finite); a bubble
//     fraction in [0, 1]; exposed communication and every stage's busy time within the iteration; peak memory >= 0;
//     each stage's analytical memory equal to its simulated peak (total and by category);
//   - a second evaluation of a case, beside another on a second thread, that differs from the first (strata is
//     deterministic whatever the thread count).
// Relative part files resolve against tests/fuzz/corpus/, as for fuzz_loader. Built with -DSTRATA_FUZZ=ON by clang
// only; run by scripts/fuzz (README "Tests": fuzzing).
#include "fuzz_input.hpp"
#include "strata/memory.hpp"
#include "strata/run.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace {

// The sanitizer build runs the engine about 30x slower than a release build: a case is refused (InputError) above
// this many tasks, so that each input stays well inside the fuzzer's timeout.
constexpr std::uint64_t kMaxTasks = 20000;
constexpr std::size_t kMaxCases = 3;
// A case over this many GPUs is skipped: its fabric (which grows with the GPUs) is built before its tasks are counted
// from the programs (simulate() bounds them from below first), so a huge cluster with few tasks would only test the
// sanitizers' speed.
constexpr int kMaxGpus = 4096;

[[noreturn]] void finding(const strata::Scenario& sc, const std::string& what) {
    std::fprintf(stderr, "fuzz_simulate: case '%s': %s\n", sc.name.c_str(), what.c_str());
    std::abort();
}

void check_invariants(const strata::Scenario& sc, const strata::IterationResult& it) {
    const double T = it.iteration_time_s;
    if (!(it.iteration_time.ps() > 0) || !std::isfinite(T) || !(T > 0))
        finding(sc, "iteration time not positive and finite: " + std::to_string(T) + " s");
    if (!std::isfinite(it.mfu) || !std::isfinite(it.hfu) || it.mfu <= 0 || it.hfu < it.mfu * (1 - 1e-12))
        finding(sc, "MFU " + std::to_string(it.mfu) + ", HFU " + std::to_string(it.hfu) + ": need 0 < MFU <= HFU");
    if (!(it.bubble_fraction >= 0 && it.bubble_fraction <= 1))
        finding(sc, "bubble fraction " + std::to_string(it.bubble_fraction) + " outside [0, 1]");
    const double slack = T * 1e-9;
    if (!(it.exposed_comm_s >= 0 && it.exposed_comm_s <= T + slack))
        finding(sc, "exposed communication " + std::to_string(it.exposed_comm_s) + " s outside [0, " +
                        std::to_string(T) + "]");
    for (const double b : it.stage_busy_s)
        if (!(b >= 0 && b <= T + slack))
            finding(sc, "a stage busy " + std::to_string(b) + " s in an iteration of " + std::to_string(T) + " s");
    if (it.peak_memory.value < 0) finding(sc, "negative peak memory");
}

strata::CaseOptions fuzz_options() {
    strata::CaseOptions options;
    options.simulation.keep_timeline = false;
    options.simulation.progress_every = 0;
    options.simulation.max_tasks = kMaxTasks;
    return options;
}

// The analytical memory of each stage (stage_memory: the schedule's program walked unit by unit) against the simulated
// pools' peak, in total and by category: the property tests/test_schedule.cpp holds on a grid, here on any input.
void check_memory(const strata::Scenario& sc, const strata::SimulationDetail& detail) {
    if (detail.stage_peaks.size() != static_cast<std::size_t>(sc.execution.pipeline))
        finding(sc, std::to_string(detail.stage_peaks.size()) + " stage peaks for " +
                        std::to_string(sc.execution.pipeline) + " stages");
    for (int s = 0; s < sc.execution.pipeline; ++s) {
        const strata::StageMemory a = strata::stage_memory(sc.model, sc.execution, sc.system.device_memory(), s);
        const strata::StagePeak& peak = detail.stage_peaks[static_cast<std::size_t>(s)];
        if (a.total() != peak.total)
            finding(sc, "stage " + std::to_string(s) + ": analytical memory " + std::to_string(a.total().value) +
                            " B, simulated peak " + std::to_string(peak.total.value) + " B");
        if (peak.by_category.size() != strata::kMemoryCategoryCount)
            finding(sc, "stage " + std::to_string(s) + ": " + std::to_string(peak.by_category.size()) +
                            " memory categories simulated");
        for (std::uint32_t c = 0; c < strata::kMemoryCategoryCount; ++c)
            if (a.bytes(static_cast<strata::MemoryCategory>(c)) != peak.by_category[c])
                finding(sc, "stage " + std::to_string(s) + ": analytical " +
                                std::string(strata::to_string(static_cast<strata::MemoryCategory>(c))) +
                                " memory differs from the simulated peak's");
    }
}

void evaluate(const std::vector<strata::Scenario>& cases) {
    const strata::CaseOptions options = fuzz_options();
    std::vector<strata::CaseResult> first;
    for (const auto& sc : cases) {
        int failure = 0;
        strata::SimulationDetail detail;
        first.push_back(strata::evaluate_case(sc, options, &failure, &detail));
        if (failure & (strata::kCaseSimulation | strata::kCaseInternal)) finding(sc, first.back().error.value_or("?"));
        if (first.back().iteration) {
            check_invariants(sc, *first.back().iteration);
            check_memory(sc, detail);
        }
    }
    // Again, the cases on two threads at once (as `strata run -j 2`): the same results, to the picosecond. run_cases
    // evaluates a single case inline, so one case goes twice, side by side.
    std::vector<strata::Scenario> twice = cases;
    if (twice.size() == 1) twice.push_back(cases[0]);
    const strata::RunOutcome again = strata::run_cases(twice, options, 2);
    for (std::size_t k = 0; k < twice.size(); ++k) {
        const std::size_t i = k < cases.size() ? k : 0;
        const auto& a = first[i].iteration;
        const auto& b = again.results[k].iteration;
        if (a.has_value() != b.has_value() || first[i].error != again.results[k].error ||
            (a && !strata::fuzz::same_iteration(*a, *b)))
            finding(cases[i], "a second evaluation (two threads) differs from the first (not deterministic)");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::optional<strata::Experiment> ex = strata::fuzz::accepted_experiment(data, size);
    if (!ex) return 0;
    if (ex->cases.size() > kMaxCases) ex->cases.resize(kMaxCases);
    std::erase_if(ex->cases, [](const strata::Scenario& sc) { return sc.execution.gpus() > kMaxGpus; });
    if (ex->cases.empty()) return 0;
    try {
        evaluate(ex->cases);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_simulate: an exception escaped evaluate_case: %s\n", e.what());
        std::abort();
    }
    return 0;
}
