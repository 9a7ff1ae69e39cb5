// libFuzzer target for the whole path of `strata run` (fuzz_loader stops at the loaders): each input is loaded as
// an experiment and each of its first cases (kMaxCases) is evaluated as `strata run` does (analytical memory and layer
// costs, then the discrete-event simulation), twice. A finding is anything a valid input must never produce:
//   - a crash, a sanitizer report, an exception escaping evaluate_case, a timeout, more than the RSS limit;
//   - a case failing as a simulation or internal error (kCaseSimulation, kCaseInternal): only bad input
//     (InputError, e.g. a case over kMaxTasks) may stop a case that the loader accepted;
//   - a result that breaks an invariant: a positive, finite iteration time; 0 <= MFU <= HFU (both finite); a bubble
//     fraction in [0, 1]; exposed communication and every stage's busy time within the iteration;
//   - a second evaluation of the same case that differs from the first (strata is deterministic).
// Relative part files resolve against tests/fuzz/corpus/, as for fuzz_loader. Built with -DSTRATA_FUZZ=ON by clang
// only; run by scripts/fuzz (README "Tests": fuzzing).
#include "strata/errors.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

// The sanitizer build runs the engine about 30x slower than a release build: a case is refused (InputError) above
// this many tasks, so that each input stays well inside the fuzzer's timeout.
constexpr std::uint64_t kMaxTasks = 20000;
constexpr std::size_t kMaxCases = 3;

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

void evaluate(const strata::Scenario& sc) {
    strata::CaseOptions options;
    options.simulation.keep_timeline = false;
    options.simulation.progress_every = 0;
    options.simulation.max_tasks = kMaxTasks;
    int failure = 0;
    const strata::CaseResult first = strata::evaluate_case(sc, options, &failure);
    if (failure & (strata::kCaseSimulation | strata::kCaseInternal)) finding(sc, first.error.value_or("?"));
    if (!first.iteration) return;  // infeasible, or refused as bad input (e.g. over kMaxTasks)
    check_invariants(sc, *first.iteration);
    int again_failure = 0;
    const strata::CaseResult second = strata::evaluate_case(sc, options, &again_failure);
    if (again_failure != failure || !second.iteration ||
        second.iteration->iteration_time.ps() != first.iteration->iteration_time.ps() ||
        second.iteration->peak_memory.value != first.iteration->peak_memory.value ||
        second.iteration->events != first.iteration->events)
        finding(sc, "a second evaluation differs from the first (not deterministic)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::string origin = std::string(STRATA_FUZZ_PARTS) + "/input.yaml";
    strata::Experiment ex;
    try {
        ex = strata::load_experiment_text(text, origin);
    } catch (const strata::InputError&) {
        return 0;  // fuzz_loader's ground; rejected input is not simulated
    }
    try {
        for (std::size_t i = 0; i < ex.cases.size() && i < kMaxCases; ++i) evaluate(ex.cases[i]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_simulate: an exception escaped evaluate_case: %s\n", e.what());
        std::abort();
    }
    return 0;
}
