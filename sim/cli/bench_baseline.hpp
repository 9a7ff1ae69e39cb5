// `strata bench --baseline OTHER`: this binary and another strata, alternated case by case as whole processes,
// with the ratio taken run by run (the machines are shared and noisy: only a ratio from one run compares).
#pragma once

#include <string>
#include <vector>

namespace strata::cli {

struct BaselineOptions {
    std::string baseline;   ///< path of the other strata binary
    int runs = 5;           ///< alternated pairs per case
    /// "all" or "representative": this binary runs with `--replicas` so (the baseline with its own default),
    /// so that `--replicas representative --baseline build/strata` times representative replicas against the
    /// full run.
    std::string replicas = "all";
    /// `--set PART.KEY=VALUE` overrides: every case loaded with them, and both binaries run with them.
    std::vector<std::string> overrides;
};

/// Runs `SELF run FILE --case NAME` and `BASELINE run FILE --case NAME` (each with the options' --set overrides) alternately `runs` times for every case of
/// every file and prints per case the median wall and CPU seconds and peak RSS of each, and the median (min, max)
/// of the per-pair wall and CPU ratios; then the geometric mean of the case ratios and the load average.
/// Throws InputError for a baseline that cannot be executed or a case either binary fails on.
int bench_against_baseline(const std::vector<std::string>& files, const BaselineOptions& options);

}  // namespace strata::cli
