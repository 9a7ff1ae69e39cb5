// The search's screen (internal to sim/search): an analytical iteration-time estimate of a candidate.
#pragma once

#include "strata/cost.hpp"
#include "strata/scenario.hpp"

namespace strata::search_detail {

/// Per-stage time per microbatch = layers per stage x (forward + backward) of the analytical layer model
/// (tensor-parallel collectives included) plus the embedding / output layer; iteration estimate = (microbatches +
/// (p - 1) / m) x that + data-parallel gradient reduction over the NIC rails (with overlap_grad_reduce only what the
/// last microbatch's backward on the stage does not hide, at least one layer's bucket; with fsdp each microbatch's
/// gathers and reduce-scatters beyond what its layers hide, and the reduce-scatters its backward waits for) +
/// optimizer. The screen only orders candidates; the reported times are simulated, and every candidate whose estimate
/// is within the margin of the best is simulated, since the screen can misorder close ones.
[[nodiscard]] double estimate(const Scenario& sc, const CostModel& boost);

}  // namespace strata::search_detail
