// --trace-groups: which GPU groups a trace shows (private to the strata command).
#pragma once

#include "strata/simulate.hpp"

#include <string>

namespace strata::cli {

/// Parses comma-separated `stages=A[-B]` and `replicas=A[-B]` (inclusive, from 0) into o's trace ranges; an
/// empty text leaves them (all groups). Throws InputError naming the option, the valid keys and an example.
void set_trace_groups(const std::string& text, SimulationOptions& o);

}  // namespace strata::cli
