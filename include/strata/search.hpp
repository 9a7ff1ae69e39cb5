// Configuration search: the fastest execution of a model on N GPUs of a system that fits in memory.
#pragma once

#include "strata/report.hpp"
#include "strata/run.hpp"
#include "strata/scenario.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata {

/// Every non-empty set of selective-recompute modules, by recompute_modules_index (core_attn 1, layernorm 2, mlp 4).
std::vector<RecomputeModules> every_recompute_modules_set();
/// An offload module set as a number: attn_norm 1 + qkv_linear 2 + core_attn 4 + attn_proj 8 + mlp_norm 16.
[[nodiscard]] constexpr int offload_modules_index(const OffloadModules& m) {
    return (m.attn_norm ? 1 : 0) + (m.qkv_linear ? 2 : 0) + (m.core_attn ? 4 : 0) + (m.attn_proj ? 8 : 0) +
           (m.mlp_norm ? 16 : 0);
}
/// A module set as a number: core_attn 1 + layernorm 2 + mlp 4.
[[nodiscard]] constexpr int recompute_modules_index(const RecomputeModules& m) {
    return (m.core_attn ? 1 : 0) + (m.layernorm ? 2 : 0) + (m.mlp ? 4 : 0);
}
/// What a candidate recomputes, as the search's table names it: none, full, selective (the attention core, the
/// paper's), `sel:` and the modules (attn, ln, mlp) joined by + (sel:ln+mlp), or `block:K` (full recompute of the
/// first K layers of each model chunk, recompute_method block).
[[nodiscard]] std::string recompute_label(const ExecutionSpec& e);

/// The values the search tries for each execution key it varies. Every list is sorted and free of repeats.
/// tensor, pipeline and data empty: every size that divides the GPUs (t up to the GPUs per node, p up to L);
/// otherwise only those sizes. A boolean key lists the values tried (false first).
struct SearchSpace {
    std::vector<int> tensor, pipeline, data;
    std::vector<int> context_parallel = {1};
    std::vector<int> interleave = {1, 2, 3, 4};
    std::vector<int> microbatch = {1, 2, 4, 8};
    std::vector<Recompute> recompute = {Recompute::none, Recompute::selective, Recompute::full};
    /// `block` among the recompute values: also full recompute of only the first K layers of each model chunk
    /// (Megatron-LM's recompute_method block, recompute_num_layers K), K the fewest that fit, where full recompute of
    /// every layer fits and no recompute does not (fewer layers recompute less; more would only add work).
    bool block_recompute = true;
    /// The module sets tried with selective recompute (Megatron-Core's recompute_modules): by default every non-empty
    /// set of core_attn, layernorm and mlp, in the order of recompute_modules_index.
    std::vector<RecomputeModules> recompute_modules = every_recompute_modules_set();
    /// Whether a constraint named recompute (recompute_fixed) or recompute_modules (modules_fixed). With modules fixed
    /// and recompute not, only selective recompute is tried (the sets asked for); modules fixed with a recompute that
    /// leaves selective out is an error (search). Unfixed, the module sets Megatron-Core's layers cannot run
    /// (layernorm with Transformer Engine's, any but core_attn with TE's own TransformerLayer) are not tried.
    bool recompute_fixed = false;
    bool modules_fixed = false;
    /// The offload module sets tried (Megatron-Core's fine-grained activation offloading, offload_modules): by default
    /// none (off); `--fix offload_modules=none,qkv_linear+core_attn+attn_proj` tries each set given with every
    /// recompute policy (offloading needs Transformer Engine's layers and refuses full recompute: such candidates are
    /// rejected with the reason).
    std::vector<OffloadModules> offload_modules = {OffloadModules{}};
    std::vector<bool> sequence_parallel = {false, true};        ///< on only where t > 1
    std::vector<bool> distributed_optimizer = {false, true};    ///< on only where d x c > 1
    /// Megatron-FSDP (ExecutionSpec::fsdp): on only with the distributed optimizer, pipeline 1 and d x c > 1; its
    /// candidates run both overlaps (Megatron-FSDP's own), which are then not varied, and in FP8 gather FP8 parameters.
    std::vector<bool> fsdp = {false};
    std::vector<bool> overlap_grad_reduce = {false, true};      ///< on only where d x c > 1
    std::vector<bool> overlap_param_gather = {false};           ///< on only with the distributed optimizer
    std::vector<bool> tp_comm_overlap = {false};                ///< on only with t > 1 and SP
    /// on: where model.layers do not split evenly over pipeline x interleave chunks, count the embedding and the loss
    /// (or one of them) as layers (Megatron-Core's account_for_*_in_pipeline_split) when that makes them split.
    std::vector<bool> ends_in_split = {false, true};
};

/// A key `--fix` accepts: its name (the scenario file's execution key) and what the search tries by default.
struct SearchKey {
    std::string name;
    std::string default_values;
};
/// SearchResult::rejected's reason for a candidate that recomputes or offloads more than another that fits with the
/// rest the same (offloading what it recomputes counts as none of it: a recomputed attention core has nothing to copy).
inline constexpr const char* kDominated =
    "more recompute or offloading than a candidate that fits with the rest the same";
/// Every key of SearchSpace, in the order the search nests them.
const std::vector<SearchKey>& search_keys();
/// The execution keys the search sets on every candidate itself (those of search_keys(), and global_batch and what it
/// derives: schedule, the pipeline-split options, partial recompute's), each with what a user gives instead: a --set
/// of one of them is refused.
std::vector<VariedKey> search_varied_execution_keys();

/// Restricts `space` by one constraint `KEY=VALUES` (`--fix`): VALUES is a comma-separated list of values and, for
/// the integer keys, closed ranges LO..HI (tensor=8, pipeline=4..16, microbatch=1,2,4..8, recompute=selective,full,
/// sequence_parallel=on). recompute: none, selective, full, block (SearchSpace::block_recompute). Booleans: on/off,
/// true/false. recompute_modules: module sets, each its module names joined by +
/// (recompute_modules=core_attn,layernorm+mlp); offload_modules likewise, with none for no offloading
/// (offload_modules=none,qkv_linear+core_attn+attn_proj). A later constraint on the same key replaces an earlier one.
/// Throws InputError naming `option` (e.g. "--fix"), the constraint, what was expected and the valid keys or values.
void apply_constraint(SearchSpace& space, const std::string& constraint, const std::string& option = "--fix");

struct SearchRequest {
    ModelSpec model;
    SystemSpec system;
    int gpus = 0;
    int global_batch = 0;
    /// The execution keys the search does not vary (attention, precision, gradient_average): every candidate starts
    /// from this.
    ExecutionSpec base;
    SearchSpace space;
    /// Candidates simulated event by event, chosen by the analytical estimate: the `simulate_top` best, and every
    /// other whose estimate is within `margin` (a fraction: 0.1 = 10 %) of the best estimate, at most
    /// `simulate_max` in all (the best estimates first).
    int simulate_top = 8;
    double margin = 0.10;
    int simulate_max = 64;
    /// Simulate the candidates with representative replicas (SimulationOptions::representative_replicas),
    /// then the fastest one again with every GPU group (SearchResult::best_in_full); false (the default):
    /// every candidate in full.
    bool representative_replicas = false;
    int jobs = 0;            ///< threads for the simulations (0: one per core)
    /// Each simulated candidate's task limit, and how messages name the option that raises it and the inputs.
    std::uint64_t max_tasks = 1'000'000'000;
    std::string max_tasks_option = "strata search --max-tasks";
    std::string source = "search";   ///< what messages name as the input (e.g. "M.yaml on S.yaml")
    std::function<void(std::size_t, std::size_t)> progress;  ///< (simulated, to simulate)
    /// Evaluates the candidates chosen for simulation (default: run_cases on `jobs` threads with `progress`;
    /// the MPI runner spreads them over the ranks).
    CaseRunner runner;
};

struct SearchCandidate {
    ExecutionSpec execution;
    double estimate_s = 0;   ///< analytical screen
    int estimate_rank = 0;   ///< 1: the best estimate of every candidate that fits
    CaseResult result;       ///< filled for simulated candidates
};

/// How many of the candidates, sorted by estimate (`estimates` ascending), are simulated: at least
/// min(top, n), plus every one within `margin` of the best, at most max(top, max) unless fewer exist.
std::size_t simulation_count(const std::vector<double>& estimates, int top, double margin, int max);

struct SearchResult {
    std::size_t enumerated = 0;
    std::map<std::string, std::size_t> rejected;   ///< reason -> count (infeasible sizes, out of memory)
    std::string first_infeasible;                  ///< the first infeasible candidate's error (what validation said)
    std::size_t screened = 0;                      ///< fit in memory, ranked analytically
    std::size_t within_margin = 0;                 ///< screened candidates whose estimate is within the margin
    std::vector<SearchCandidate> simulated;        ///< best first (simulated time; OOM in simulation last)
    /// With representative replicas: the fastest candidate simulated again with every GPU group (unset when
    /// it has a single replica per stage, where both are the same simulation, or when it ran out of memory).
    std::optional<CaseResult> best_in_full;
    double wall_s = 0;
};

/// The estimate rank of the fastest simulated candidate when it is not the best estimate (the screen's ranking
/// was overturned at the top); 0 when the best estimate is also the fastest simulated, or nothing was simulated.
int screen_overturned(const SearchResult& result);

/// Enumerates the space (t, c, p, d, m, b, recompute and its modules, sequence parallelism, the distributed optimizer,
/// the overlaps); drops infeasible sizes, configurations that do not fit (analytical memory) and those that recompute
/// more than another candidate that fits with everything else the same (none < selective < full, a selective
/// module set < its supersets, block:K < block:K' for K < K' < full: more recompute only adds work), ranks the rest
/// with an analytical pipeline estimate, and simulates the best (see SearchRequest::margin) event by event. A candidate
/// that fails to simulate throws as the simulation would (InputError, SimulationError), and an internal error (a bug,
/// run.hpp's kCaseInternal) as std::logic_error.
SearchResult search(const SearchRequest& request);

/// Why a search has nothing to show (empty when it simulated a candidate): none enumerated (the sizes the search
/// tries, and the constraints if `constrained`), or each rejection with its count and, when every candidate had
/// infeasible sizes, the first one's problem. What `strata search` prints and the Python search raises.
std::string search_failure(const SearchRequest& request, const SearchResult& result, bool constrained);

/// The search's account of itself for its JSON (to_json): the request's sizes and limits, the `constraints` as
/// given (--fix), the counts, and whether the screen's ranking was overturned.
SearchSummary search_summary(const SearchRequest& request, const SearchResult& result,
                             const std::vector<std::string>& constraints);

/// The first `top` simulated candidates as results named "rank 1", "rank 2", ..., each with its screen record
/// (estimate, estimate rank, simulated rank): what `strata search --json / --csv` write, with to_json / to_csv.
std::vector<CaseResult> ranked_results(const SearchResult& result, int top);

}  // namespace strata
