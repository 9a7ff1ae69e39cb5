// The MPI interface in a build without MPI: one process, rank 0 of 1 (see include/strata/mpi.hpp).
#include "strata/mpi.hpp"

#include "strata/errors.hpp"

#include "launcher.hpp"

#include <string>

namespace strata::mpi {

bool built_with_mpi() {
    return false;
}

Session::Session(int* /*argc*/, char*** /*argv*/) {
    // Every rank of an mpirun job would run the whole experiment and write the same files: refuse.
    if (detail::launched_by_mpi() && detail::launcher_size() > 1)
        throw InputError("this strata was built without MPI but started by an MPI launcher with " +
                         std::to_string(detail::launcher_size()) +
                         " ranks: rebuild with MPI (apt-get install libopenmpi-dev) or run one process");
}
Session::~Session() = default;
bool Session::all_ok(bool ok) const {
    return ok;
}

RunOutcome run_cases(const Session& /*session*/, const std::vector<Scenario>& scenarios,
                     const CaseOptions& options, unsigned jobs, const CaseProgress& progress) {
    return strata::run_cases(scenarios, options, jobs, progress);
}

}  // namespace strata::mpi
