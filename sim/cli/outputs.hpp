// Output files and progress for the `strata` command: written by rank 0 only, each checked before the run.
#pragma once

#include "strata/mpi.hpp"
#include "strata/run.hpp"

#include <string>
#include <vector>

namespace strata::cli {

/// Writes `text` to `path`; InputError when it cannot.
void write_file(const std::string& path, const std::string& text);

/// Progress of many cases or candidates: a bar with an ETA in a terminal; under MPI, lines from rank 0 at every
/// tenth otherwise (mpirun's output is no terminal).
strata::CaseProgress progress_printer(const strata::mpi::Session& session, bool tty, const char* what);

/// Every output must be writable before anything is simulated (a long run must not fail at its end), and no file
/// may be named for two outputs. Only rank 0 writes; the other ranks of an MPI job learn whether it can. Throws on
/// rank 0, false on the others.
bool outputs_writable(const strata::mpi::Session& session, const std::vector<std::string>& paths);

/// Under MPI: how many cases each rank ran, on standard error.
void print_ranks(const strata::RunOutcome& run);

}  // namespace strata::cli
