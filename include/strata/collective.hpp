// The collective operations strata models; one kind for the layer model, the cost model and the fabric.
#pragma once

namespace strata {

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter };
[[nodiscard]] const char* to_string(CollectiveKind k);

}  // namespace strata
