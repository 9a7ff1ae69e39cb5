// Running an experiment's cases: the one path the strata command, the Python module and the MPI runner share.
// Every case is evaluated independently (analytical memory and layer costs, then the simulation); a case that
// fails keeps its place in the results with the reason, and the run records what kind of failure it was.
#pragma once

#include "strata/report.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace strata {

/// Kinds of case failure, as bits (a run ORs them): the strata command maps them to its exit codes.
enum CaseFailure : int { kCaseBadInput = 1, kCaseSimulation = 2, kCaseInternal = 4 };

struct CaseOptions {
    bool analytical_only = false;  ///< memory and layer costs only, no discrete-event simulation
    SimulationOptions simulation;  ///< its progress callback is used only when a single case runs
};

/// Results in the scenarios' order whatever ran them, and the failure bits of the whole run.
struct RunOutcome {
    std::vector<CaseResult> results;
    int failures = 0;
    std::vector<std::size_t> cases_by_rank;  ///< MPI runs (strata/mpi.hpp): cases each rank evaluated
};

/// (cases done, cases total), called as cases complete.
using CaseProgress = std::function<void(std::size_t, std::size_t)>;

/// The cases of `ex` to run: all of them, or the one named `case_name` (InputError listing the names if none
/// is), with `profile` (if given) replacing every case's device profile.
std::vector<Scenario> select_cases(const Experiment& ex, const std::string& case_name,
                                   const DeviceProfile* profile = nullptr);

/// Evaluates one case. Never throws for a problem of the case itself: the result's `error` says what went
/// wrong, its `failure` says what kind of failure it was (a CaseFailure bit; it travels with the result across threads
/// and MPI ranks, where the run's bits are ORed over all cases), and `*failure` (if given) gets that bit too.
/// `detail` (if given) receives the simulation's detail.
CaseResult evaluate_case(const Scenario& scenario, const CaseOptions& options, int* failure = nullptr,
                         SimulationDetail* detail = nullptr);

/// Evaluates every scenario on up to `jobs` threads of this process (0: one per core); results keep the input
/// order, so the output never depends on the thread count.
RunOutcome run_cases(const std::vector<Scenario>& scenarios, const CaseOptions& options, unsigned jobs = 0,
                     const CaseProgress& progress = {});

/// Something that evaluates a list of scenarios (this process's threads, or the ranks of an MPI job).
using CaseRunner = std::function<RunOutcome(const std::vector<Scenario>&, const CaseOptions&)>;

}  // namespace strata
