// Loads a shipped scenario through the installed library, runs one case and prints its iteration time.
// usage: consumer EXPERIMENT.yaml CASE
#include "strata/errors.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"

#include <cstdio>

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    try {
        const strata::Experiment ex = strata::load_experiment(argv[1]);
        const strata::RunOutcome run =
            strata::run_cases(strata::select_cases(ex, argv[2]), strata::CaseOptions{}, 1);
        const strata::CaseResult& r = run.results.at(0);
        if (!r.iteration) return 3;
        std::printf("%s: iteration %.6f s, peak %.2f GiB, %s\n", r.scenario.name.c_str(),
                    r.iteration->iteration_time_s, r.iteration->peak_memory.gib(),
                    r.memory.fits() ? "fits" : "does not fit");
        return 0;
    } catch (const strata::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
}
