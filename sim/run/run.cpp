// Running an experiment's cases (see include/strata/run.hpp).
#include "strata/run.hpp"

#include "strata/errors.hpp"
#include "strata/parallel.hpp"

#include <atomic>

namespace strata {

std::vector<Scenario> select_cases(const Experiment& ex, const std::string& case_name,
                                   const DeviceProfile* profile) {
    std::vector<Scenario> selected;
    for (const auto& sc : ex.cases) {
        if (!case_name.empty() && sc.name != case_name) continue;
        selected.push_back(sc);
        if (profile) {
            SystemSpec& sys = selected.back().system;
            sys.device = *profile;
            sys.use_nvlink_for_missing_intra_node();
            sys.apply_power_limit();
        }
    }
    if (selected.empty()) {
        std::string names;
        for (const auto& sc : ex.cases)
            names += (names.empty() ? "" : ", ") + ("'" + sc.name + "'");
        throw InputError(ex.file.string() + ": no case named '" + case_name + "'; the cases are: " + names);
    }
    return selected;
}

CaseResult evaluate_case(const Scenario& sc, const CaseOptions& options, int* failure,
                         SimulationDetail* detail) {
    CaseResult r;
    r.scenario = sc;
    if (!sc.infeasible.empty()) {
        r.error = "infeasible: " + sc.infeasible;
        return r;
    }
    int bits = 0;
    try {
        r = analyze(sc);
        if (!options.analytical_only) r.iteration = simulate(sc, options.simulation, detail);
    } catch (const SimulationError& e) {
        r.error = std::string("simulation failed: ") + e.what();
        bits = kCaseSimulation;
    } catch (const InputError& e) {  // bad input found while building the case (e.g. its fabric)
        r.error = e.what();
        bits = kCaseBadInput;
    } catch (const std::exception& e) {
        r.error = std::string("internal error: ") + e.what();
        bits = kCaseInternal;
    }
    r.failure = bits;
    if (failure) *failure |= bits;
    return r;
}

RunOutcome run_cases(const std::vector<Scenario>& scenarios, const CaseOptions& options, unsigned jobs,
                     const CaseProgress& progress) {
    RunOutcome out;
    out.results.resize(scenarios.size());
    if (scenarios.size() == 1) {
        out.results[0] = evaluate_case(scenarios[0], options, &out.failures);
        if (progress) progress(1, 1);
        return out;
    }
    CaseOptions many = options;
    many.simulation.progress = nullptr;  // task-level progress means nothing across parallel cases
    std::atomic<int> failures{0};
    parallel_for(
        scenarios.size(), jobs,
        [&](std::size_t i) {
            int f = 0;
            out.results[i] = evaluate_case(scenarios[i], many, &f);
            failures |= f;
        },
        progress);
    out.failures = failures;
    return out;
}

}  // namespace strata
