// More than one machine: a strata program started by mpirun (or srun) spreads an experiment's cases, or a
// search's candidates, over the ranks. No MPI type appears here; a build without MPI has the same interface
// and runs as one process.
#pragma once

#include "strata/run.hpp"

#include <vector>

namespace strata::mpi {

/// Whether this build has MPI (Open MPI at configure time).
bool built_with_mpi();

/// This process's place in an MPI job. Joins the job (MPI_Init) only when the process was started by an MPI
/// launcher (mpirun / mpiexec / srun: its environment says so); otherwise, or without MPI, it is rank 0 of 1.
/// One per program, for the whole of main: the destructor leaves the job.
class Session {
public:
    Session(int* argc, char*** argv);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    [[nodiscard]] int rank() const { return rank_; }
    [[nodiscard]] int size() const { return size_; }
    [[nodiscard]] bool distributed() const { return size_ > 1; }
    /// Whether this process joined an MPI job (MPI_Init), even one of a single rank.
    [[nodiscard]] bool joined() const { return joined_; }
    /// Collective (every rank calls it): true when `ok` is true on every rank.
    [[nodiscard]] bool all_ok(bool ok) const;

private:
    int rank_ = 0, size_ = 1;
    bool joined_ = false;
};

/// Collective: every rank calls it with the same scenarios and gets the same outcome, in the scenarios'
/// order. Rank 0 hands out one case at a time to whichever rank asks next (dynamic load balancing) and runs
/// cases on a thread of its own meanwhile; results are gathered on rank 0 and sent back to every rank.
/// `progress` is called on rank 0 as cases complete. A session of one rank runs the cases on `jobs` threads
/// (run_cases).
RunOutcome run_cases(const Session& session, const std::vector<Scenario>& scenarios,
                     const CaseOptions& options, unsigned jobs, const CaseProgress& progress = {});

}  // namespace strata::mpi
