// Provenance of a run's results: the program's version and revision, and each input file's SHA-256.
#pragma once

#include "strata/report.hpp"

#include <filesystem>
#include <vector>

namespace strata::cli {

/// The provenance of results built from `inputs` (hashed now; an unreadable file throws InputError).
Provenance provenance_of(const std::vector<std::filesystem::path>& inputs);

}  // namespace strata::cli
