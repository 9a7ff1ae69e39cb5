// Whether an MPI launcher started this process, from the environment it sets (private to sim/mpi/).
#pragma once

#include <cstdlib>

namespace strata::mpi::detail {

/// Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), PMIx and PMI launchers (srun --mpi=pmix, MPICH's mpiexec).
inline bool launched_by_mpi() {
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
        if (std::getenv(var) != nullptr) return true;
    return false;
}

/// The job's size when the launcher says it (Open MPI, PMI), else 0.
inline int launcher_size() {
    for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
        if (const char* v = std::getenv(var)) return std::atoi(v);
    return 0;
}

}  // namespace strata::mpi::detail
