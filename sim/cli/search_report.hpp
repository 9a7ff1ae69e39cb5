// `strata search`'s human-readable report (private to the strata command).
#pragma once

#include "strata/search.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace strata::cli {

/// Prints what the search enumerated, screened, rejected and simulated, the best `top` candidates as a table, and
/// whether the screen's ranking held; false (after an error on stderr) when no candidate is feasible.
/// `attention_by_default`: the attention kernel was left at its default (neither --attention nor --set gave it): for a
/// model of today's kind (ModelSpec::todays_kind) a note says what the default means.
bool print_search(std::ostream& human, const SearchRequest& req, const SearchResult& r,
                  const std::vector<std::string>& fix, int top, double margin_pct, bool attention_by_default);

}  // namespace strata::cli
