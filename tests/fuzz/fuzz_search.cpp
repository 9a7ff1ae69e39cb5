// libFuzzer target for `strata search`: each input is loaded as an experiment, and its first case's model, system,
// GPU count, global batch and execution (the keys the search does not vary) become a search request that enumerates
// the whole default space, screens it analytically and simulates the best two candidates; then the same request
// again on two threads. Kept small so that each input stays short: at most kMaxGpus GPUs and kMaxBatch sequences (a
// larger case is skipped), each candidate at most kMaxTasks tasks (more is refused as bad input). A finding is:
//   - a crash, a sanitizer report, an exception other than InputError, a timeout, more than the RSS limit;
//   - an inconsistent account: candidates screened + rejected != enumerated, more within the margin than screened,
//     other than the best two simulated, a simulated candidate whose GPUs or batch are not the request's, simulated
//     candidates not in order (fastest first, those out of memory last), an estimate rank outside 1..screened;
//   - the two-thread search differing from the first (strata is deterministic whatever the thread count).
// Relative part files resolve against tests/fuzz/corpus/, as for fuzz_loader. Built with -DSTRATA_FUZZ=ON by clang
// only; run by scripts/fuzz (README "Tests": fuzzing).
#include "fuzz_input.hpp"
#include "strata/errors.hpp"
#include "strata/search.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

namespace {

constexpr int kMaxGpus = 64;
constexpr int kMaxBatch = 64;
constexpr std::uint64_t kMaxTasks = 20000;

[[noreturn]] void finding(const std::string& what) {
    std::fprintf(stderr, "fuzz_search: %s\n", what.c_str());
    std::abort();
}

void check_account(const strata::SearchRequest& req, const strata::SearchResult& r) {
    std::size_t rejected = 0;
    for (const auto& [reason, count] : r.rejected) rejected += count;
    if (r.screened + rejected != r.enumerated)
        finding("screened " + std::to_string(r.screened) + " + rejected " + std::to_string(rejected) +
                " != enumerated " + std::to_string(r.enumerated));
    if (r.within_margin > r.screened) finding("more within the margin than screened");
    if (r.simulated.size() != std::min<std::size_t>(r.screened, 2))
        finding(std::to_string(r.simulated.size()) + " simulated of " + std::to_string(r.screened) +
                " screened, where the request asks for the best 2");
    bool seen_oom = false;
    double last = 0;
    for (const auto& c : r.simulated) {
        if (c.execution.gpus() != req.gpus || c.execution.global_batch != req.global_batch)
            finding("a candidate of " + std::to_string(c.execution.gpus()) + " GPUs and batch " +
                    std::to_string(c.execution.global_batch) + " in a search for " + std::to_string(req.gpus) +
                    " and " + std::to_string(req.global_batch));
        if (c.estimate_rank < 1 || static_cast<std::size_t>(c.estimate_rank) > r.screened)
            finding("estimate rank " + std::to_string(c.estimate_rank) + " of " + std::to_string(r.screened));
        if (!c.result.iteration) finding("a simulated candidate without a result: " + c.result.error.value_or("?"));
        const auto& it = *c.result.iteration;
        if (it.oom) {
            seen_oom = true;
            continue;
        }
        if (seen_oom) finding("a candidate that fits after one out of memory");
        if (it.iteration_time_s < last) finding("simulated candidates not fastest first");
        last = it.iteration_time_s;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::optional<strata::Experiment> ex = strata::fuzz::accepted_experiment(data, size);
    if (!ex || ex->cases.empty() || !ex->cases[0].infeasible.empty()) return 0;
    const strata::Scenario& sc = ex->cases[0];
    strata::SearchRequest req;
    req.model = sc.model;
    req.system = sc.system;
    req.gpus = sc.execution.gpus();
    req.global_batch = sc.execution.global_batch;
    if (req.gpus > kMaxGpus || req.global_batch > kMaxBatch) return 0;
    req.base = sc.execution;
    req.simulate_top = 2;
    req.simulate_max = 2;
    req.max_tasks = kMaxTasks;
    req.jobs = 1;
    try {
        strata::SearchResult first;
        try {
            first = strata::search(req);
        } catch (const strata::InputError&) {
            return 0;  // e.g. a candidate over kMaxTasks
        }
        check_account(req, first);
        req.jobs = 2;
        const strata::SearchResult again = strata::search(req);
        bool same = again.enumerated == first.enumerated && again.screened == first.screened &&
                    again.rejected == first.rejected && again.within_margin == first.within_margin &&
                    again.simulated.size() == first.simulated.size();
        for (std::size_t i = 0; same && i < first.simulated.size(); ++i)
            same = again.simulated[i].estimate_rank == first.simulated[i].estimate_rank &&
                   strata::fuzz::same_iteration(*first.simulated[i].result.iteration,
                                                *again.simulated[i].result.iteration);
        if (!same) finding("the search on two threads differs from the first (not deterministic)");
    } catch (const strata::InputError& e) {
        finding(std::string("the second search refused what the first accepted: ") + e.what());
    } catch (const std::exception& e) {
        finding(std::string("an exception other than InputError: ") + e.what());
    }
    return 0;
}
