// Tests of the configuration search: the constraint syntax (--fix KEY=VALUES), which candidates are simulated
// (the best estimates and every one within the margin), the detection of an overturned screen ranking, the
// search space (overlap_grad_reduce only where the gradients are reduced), the search's own task-limit message,
// and the screen columns of the CSV and JSON.
#include "strata/errors.hpp"
#include "strata/memory.hpp"
#include "strata/report.hpp"
#include "strata/search.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

using namespace strata;
using Catch::Contains;

namespace {

SearchRequest small_request() {
    SearchRequest req;
    req.model = load_model(std::string(STRATA_SOURCE_DIR) + "/scenarios/models/gpt-22b.yaml");
    req.system = load_system(std::string(STRATA_SOURCE_DIR) + "/scenarios/systems/selene-a100.yaml");
    req.gpus = 16;
    req.global_batch = 16;
    req.simulate_top = 2;
    req.jobs = 2;
    return req;
}

SearchSpace constrained(std::initializer_list<const char*> constraints) {
    SearchSpace s;
    for (const char* c : constraints) apply_constraint(s, c);
    return s;
}

/// t = 1, c = 2 on two GPUs, one candidate (full recompute), simulated: the context-parallel ring is the layer's only
/// collective.
SearchRequest ring_request() {
    SearchRequest req = small_request();
    req.model = load_model(std::string(STRATA_SOURCE_DIR) + "/tests/golden/tiny-gpt.yaml");  // 1.3B, 1,024 tokens
    req.base.attention = Attention::flash;
    req.gpus = 2;
    req.global_batch = 2;
    req.space = constrained({"tensor=1", "pipeline=1", "context_parallel=2", "microbatch=1", "recompute=full",
                             "sequence_parallel=off", "distributed_optimizer=off", "overlap_grad_reduce=off"});
    req.simulate_top = 1;
    req.margin = 0;
    return req;
}

}  // namespace

TEST_CASE("search constraints (--fix): single values, ranges, lists, booleans and recompute policies") {
    CHECK(constrained({"tensor=8"}).tensor == std::vector<int>{8});
    CHECK(constrained({"pipeline=4..7"}).pipeline == std::vector<int>{4, 5, 6, 7});
    CHECK(constrained({"microbatch=8,1,2,4..5,2"}).microbatch == std::vector<int>{1, 2, 4, 5, 8});
    CHECK(constrained({"interleave = 2 .. 3"}).interleave == std::vector<int>{2, 3});
    CHECK(constrained({"context_parallel=2"}).context_parallel == std::vector<int>{2});
    CHECK(constrained({"recompute=full,selective"}).recompute == std::vector<Recompute>{Recompute::selective, Recompute::full});
    CHECK(constrained({"sequence_parallel=on"}).sequence_parallel == std::vector<bool>{true});
    CHECK(constrained({"overlap_grad_reduce=false"}).overlap_grad_reduce == std::vector<bool>{false});
    CHECK(constrained({"distributed_optimizer=on,off"}).distributed_optimizer == std::vector<bool>{false, true});
    CHECK(constrained({"overlap_param_gather=on,off"}).overlap_param_gather == std::vector<bool>{false, true});
    // Module sets, each its names joined by +, in recompute_modules_index order, repeats once.
    const auto mods = constrained({"recompute_modules=layernorm+mlp, core_attn,mlp+layernorm"}).recompute_modules;
    REQUIRE(mods.size() == 2);
    CHECK(mods[0] == RecomputeModules{true, false, false});
    CHECK(mods[1] == RecomputeModules{false, true, true});
    CHECK(SearchSpace{}.recompute_modules.size() == 7);  // every non-empty set by default
    CHECK(recompute_modules_index(SearchSpace{}.recompute_modules.back()) == 7);
    // A later constraint on a key replaces an earlier one; the others keep their defaults.
    const SearchSpace s = constrained({"tensor=2", "tensor=4,8"});
    CHECK(s.tensor == std::vector<int>{4, 8});
    CHECK(s.pipeline.empty());
    CHECK(s.microbatch == std::vector<int>{1, 2, 4, 8});
    CHECK(s.overlap_grad_reduce == std::vector<bool>{false, true});
}

TEST_CASE("search constraints (--fix): an unknown key or a bad value names the option, the constraint and the valid choices") {
    SearchSpace s;
    CHECK_THROWS_AS(apply_constraint(s, "tensr=8"), InputError);
    CHECK_THROWS_WITH(apply_constraint(s, "tensr=8"), Contains("--fix 'tensr=8'") && Contains("unknown key 'tensr'") &&
                                                          Contains("tensor, context_parallel, pipeline, data") &&
                                                          Contains("overlap_grad_reduce"));
    CHECK_THROWS_WITH(apply_constraint(s, "tensor"), Contains("expected KEY=VALUES") && Contains("keys: tensor"));
    CHECK_THROWS_WITH(apply_constraint(s, "pipeline=4..x"), Contains("'4..x' is not a positive whole number or a range"));
    CHECK_THROWS_WITH(apply_constraint(s, "pipeline=16..4"), Contains("LO <= HI"));
    CHECK_THROWS_WITH(apply_constraint(s, "tensor=0"), Contains("'0' is not a positive whole number"));
    CHECK_THROWS_WITH(apply_constraint(s, "tensor=8,"), Contains("'' is not a positive whole number"));
    CHECK_THROWS_WITH(apply_constraint(s, "tensor="), Contains("is not a value"));
    CHECK_THROWS_WITH(apply_constraint(s, "recompute=sometimes"),
                      Contains("'sometimes' is not none, selective, full or block"));
    CHECK_THROWS_WITH(apply_constraint(s, "sequence_parallel=yes"), Contains("'yes' is not on, off, true or false"));
    CHECK_THROWS_WITH(apply_constraint(s, "recompute_modules=norms"),
                      Contains("'norms' is not a set of modules joined by + (core_attn, layernorm, mlp"));
    CHECK_THROWS_WITH(apply_constraint(s, "recompute_modules=mlp+"), Contains("'mlp+' is not a set of modules"));
    CHECK_THROWS_WITH(apply_constraint(s, "recompute_modules=mlp,"), Contains("'' is not a set of modules"));
    CHECK_THROWS_WITH(apply_constraint(s, "data=1..1000000"), Contains("at most 100000 values"));
    CHECK_THROWS_WITH(apply_constraint(s, "tensor=x", "fix"), Contains("search: fix 'tensor=x'"));
    // A failed constraint leaves the space as it was.
    CHECK(s.tensor.empty());
    CHECK(s.recompute.size() == 3);
    CHECK(s.recompute_modules.size() == 7);
}

TEST_CASE("recompute labels: the paper's selective plain, other module sets named") {
    ExecutionSpec e;
    CHECK(recompute_label(e) == "none");
    e.recompute = Recompute::full;
    CHECK(recompute_label(e) == "full");
    e.recompute = Recompute::selective;
    CHECK(recompute_label(e) == "selective");
    e.recompute_modules = {false, true, true};
    CHECK(recompute_label(e) == "sel:ln+mlp");
    e.recompute_modules = {true, false, true};
    CHECK(recompute_label(e) == "sel:attn+mlp");
}

TEST_CASE("search keys: every key --fix takes, with what is tried without it") {
    std::vector<std::string> names;
    for (const auto& k : search_keys()) {
        names.push_back(k.name);
        CHECK_FALSE(k.default_values.empty());
    }
    CHECK(names == std::vector<std::string>{"tensor", "context_parallel", "pipeline", "data", "interleave",
                                            "microbatch", "recompute", "recompute_modules", "offload_modules",
                                            "sequence_parallel", "distributed_optimizer", "fsdp", "overlap_grad_reduce",
                                            "overlap_param_gather", "tp_comm_overlap", "ends_in_split"});
}

TEST_CASE("simulated: the best estimates, and every one within the margin up to the cap") {
    const std::vector<double> est = {10.0, 10.5, 10.9, 11.0, 12.0, 13.0};
    CHECK(simulation_count(est, 2, 0.10, 64) == 4);    // 10, 10.5, 10.9 and 11.0 (the bound, inclusive)
    CHECK(simulation_count(est, 2, 0.05, 64) == 2);    // 10.5 is within 5 %, the top 2 anyway
    CHECK(simulation_count(est, 1, 0.0, 64) == 1);     // margin 0: the top only
    CHECK(simulation_count(est, 5, 0.10, 64) == 5);    // top beyond the margin
    CHECK(simulation_count(est, 1, 0.10, 3) == 3);     // the cap
    CHECK(simulation_count(est, 4, 0.50, 2) == 4);     // the cap never goes below top
    CHECK(simulation_count(est, 10, 0.10, 64) == 6);   // never more than there are
    CHECK(simulation_count(est, 0, 0.10, 64) == 4);    // within the margin alone
    CHECK(simulation_count({}, 8, 0.10, 64) == 0);
}

TEST_CASE("screen ranking overturned: the estimate rank of the fastest simulated candidate when it is not 1") {
    SearchResult r;
    CHECK(screen_overturned(r) == 0);
    auto with_ranks = [](std::vector<int> ranks) {
        SearchResult res;
        for (int k : ranks) {
            SearchCandidate c;
            c.estimate_rank = k;
            res.simulated.push_back(c);
        }
        return res;
    };
    CHECK(screen_overturned(with_ranks({1, 3, 2})) == 0);   // a change below the top is not an overturn
    CHECK(screen_overturned(with_ranks({3, 1, 2})) == 3);
    CHECK(screen_overturned(with_ranks({2, 1})) == 2);
}

TEST_CASE("search: constraints hold, overlap_grad_reduce only with data parallelism, margin and ranks recorded") {
    SearchRequest req = small_request();
    req.space = constrained({"tensor=8", "microbatch=1..2", "overlap_grad_reduce=on"});
    req.margin = 1.0;   // every candidate within 100 % of the best estimate
    req.simulate_max = 6;
    const SearchResult r = search(req);
    REQUIRE_FALSE(r.simulated.empty());
    CHECK(r.within_margin >= r.simulated.size());
    CHECK(r.simulated.size() == std::min<std::size_t>(6, r.within_margin));
    std::set<int> estimate_ranks;
    for (std::size_t i = 0; i < r.simulated.size(); ++i) {
        const auto& c = r.simulated[i];
        CHECK(c.execution.tensor == 8);
        CHECK(c.execution.microbatch <= 2);
        CHECK(c.execution.data > 1);   // overlap_grad_reduce=on leaves out d = 1, where there is nothing to overlap
        CHECK(c.execution.overlap_grad_reduce);
        REQUIRE(c.result.screen);
        CHECK(c.result.screen->simulated_rank == int(i + 1));
        CHECK(c.result.screen->estimate_rank == c.estimate_rank);
        CHECK(c.result.screen->estimate_s == c.estimate_s);
        CHECK(c.estimate_rank >= 1);
        CHECK(c.estimate_rank <= int(r.simulated.size()));   // the best estimates are the ones simulated
        estimate_ranks.insert(c.estimate_rank);
    }
    CHECK(estimate_ranks.size() == r.simulated.size());
}

TEST_CASE("search: overlap_grad_reduce is in the space where d > 1 and only there") {
    SearchRequest req = small_request();
    req.space = constrained({"tensor=8", "pipeline=1", "microbatch=1", "interleave=1", "recompute=selective",
                             "recompute_modules=core_attn", "sequence_parallel=on", "distributed_optimizer=off"});
    req.simulate_top = 4;
    req.margin = 0;
    const SearchResult r = search(req);
    // t = 8, p = 1 leaves d = 2: two candidates, without and with the overlap.
    CHECK(r.enumerated == 2);
    REQUIRE(r.simulated.size() == 2);
    CHECK(r.simulated[0].execution.overlap_grad_reduce != r.simulated[1].execution.overlap_grad_reduce);
    // The screen counts the overlap as hiding gradient reduction: the overlapped one estimates faster.
    const auto& on = r.simulated[0].execution.overlap_grad_reduce ? r.simulated[0] : r.simulated[1];
    const auto& off = r.simulated[0].execution.overlap_grad_reduce ? r.simulated[1] : r.simulated[0];
    CHECK(on.estimate_s < off.estimate_s);
    req.space.data = {1};
    req.space.tensor = {8};
    req.gpus = 8;
    req.global_batch = 8;
    const SearchResult one = search(req);
    CHECK(one.enumerated == 1);   // d = 1: nothing to reduce, no overlap tried
}

TEST_CASE("search: layers that do not split over the chunks are split with the embedding or the loss counted") {
    SearchRequest req = small_request();
    req.model.layers = 47;  // over 2 stages: 48 places with the embedding or the loss counted
    req.space = constrained({"tensor=8", "pipeline=2", "microbatch=1", "interleave=1", "recompute=selective",
                             "recompute_modules=core_attn", "sequence_parallel=on"});
    req.simulate_top = 4;
    req.margin = 0;
    const SearchResult r = search(req);
    // d = 1: off (infeasible: 47 over 2), on with the embedding, on with the loss.
    CHECK(r.enumerated == 3);
    CHECK(r.screened == 2);
    REQUIRE(r.simulated.size() == 2);
    std::set<std::pair<bool, bool>> ways;
    for (const auto& c : r.simulated) {
        const ExecutionSpec& e = c.execution;
        ways.insert({e.embedding_in_pipeline_split, e.loss_in_pipeline_split});
        CHECK(e.layers_on_stage(47, 0) + e.layers_on_stage(47, 1) == 47);
        CHECK(e.layers_on_stage(47, e.embedding_in_pipeline_split ? 0 : 1) == 23);
        REQUIRE(c.result.iteration);
        CHECK(c.result.iteration->iteration_time_s > 0);
    }
    CHECK(ways == std::set<std::pair<bool, bool>>{{true, false}, {false, true}});
    // ends_in_split=off: nothing splits.
    req.space = constrained({"tensor=8", "pipeline=2", "microbatch=1", "interleave=1", "recompute=selective",
                             "recompute_modules=core_attn", "sequence_parallel=on", "ends_in_split=off"});
    const SearchResult off = search(req);
    CHECK(off.enumerated == 1);
    CHECK(off.screened == 0);
    CHECK(off.rejected.at("infeasible sizes (divisibility, schedule)") == 1);
}

namespace {
/// What a candidate recomputes as bits, ordered by inclusion (none 0, selective its modules, full all).
int recompute_parts(const ExecutionSpec& e) {
    if (e.recompute == Recompute::none) return 0;
    if (e.recompute == Recompute::full)
        return e.recompute_method == RecomputeMethod::block && e.recompute_layers > 0 ? 16 + e.recompute_layers : 15;
    return recompute_modules_index(e.recompute_modules);
}
/// Whether parts `a` recompute strictly more than `b`: a chain none < block:1 < block:2 < ... < full, and module sets
/// ordered by inclusion between none and full; block and selective not comparable.
bool more(int a, int b) {
    if (a == b || a == 0) return false;
    if (b == 0 || a == 15) return true;
    if (b == 15) return false;
    if (a >= 16 || b >= 16) return a >= 16 && b >= 16 && a > b;
    return (a & b) == b;
}
/// Everything but what a candidate recomputes.
std::string layout_of(ExecutionSpec e) {
    e.recompute = Recompute::none;
    e.recompute_modules = {};
    return std::to_string(e.tensor) + "/" + std::to_string(e.pipeline) + "/" + std::to_string(e.data) + "/" +
           std::to_string(e.interleave) + "/" + std::to_string(e.microbatch) + "/" +
           std::to_string(int(e.sequence_parallel)) + std::to_string(int(e.distributed_optimizer)) +
           std::to_string(int(e.overlap_grad_reduce));
}
}  // namespace

TEST_CASE("search: recompute policies and module sets, where one recomputing more than another that fits is dropped") {
    SearchRequest req = small_request();
    req.gpus = 8;
    req.global_batch = 8;
    req.space = constrained({"tensor=2..8", "microbatch=1,2"});
    req.margin = 10.0;  // simulate every screened candidate
    req.simulate_max = 100000;
    const SearchResult r = search(req);
    REQUIRE_FALSE(r.simulated.empty());
    // Every policy was tried: none, full, and selective with each of the 7 module sets (local layers: layernorm too).
    std::size_t rejected = 0;
    for (const auto& [reason, count] : r.rejected)
        rejected += count;
    CHECK(r.enumerated == r.screened + rejected);
    const std::size_t dominated = r.rejected.count(kDominated) ? r.rejected.at(kDominated) : 0;
    CHECK(dominated > 0);
    CHECK(r.simulated.size() == r.screened);
    // No survivor recomputes a strict superset of what another survivor of the same layout recomputes.
    std::set<std::string> labels;
    for (const auto& a : r.simulated) {
        labels.insert(recompute_label(a.execution));
        for (const auto& b : r.simulated) {
            if (&a == &b || layout_of(a.execution) != layout_of(b.execution)) continue;
            CHECK_FALSE(more(recompute_parts(a.execution), recompute_parts(b.execution)));
        }
    }
    CHECK(labels.size() > 3);  // module sets beyond the paper's three policies survive somewhere
    // Where everything fits, one layout under all nine policies leaves only none.
    SearchRequest one = small_request();
    one.gpus = 8;
    one.global_batch = 8;
    one.system.memory_capacity = Bytes(1LL << 40);
    one.space = constrained({"tensor=8", "microbatch=2", "sequence_parallel=on"});
    const SearchResult all = search(one);
    REQUIRE(all.simulated.size() == 1);
    CHECK(all.simulated[0].execution.recompute == Recompute::none);
    CHECK(all.rejected.at(kDominated) == 8);
    // The premise, simulated policy by policy (one at a time, so nothing is dropped): more recompute is never faster.
    std::vector<std::pair<int, double>> times;
    auto time_of = [&](std::initializer_list<const char*> policy) {
        SearchRequest q = one;
        for (const char* c : policy)
            apply_constraint(q.space, c);
        const SearchResult res = search(q);
        REQUIRE(res.simulated.size() == 1);
        times.push_back(
            {recompute_parts(res.simulated[0].execution), res.simulated[0].result.iteration->iteration_time_s});
    };
    time_of({"recompute=none"});
    time_of({"recompute=full"});
    for (const char* m : {"core_attn", "layernorm", "mlp", "core_attn+layernorm", "core_attn+mlp", "layernorm+mlp",
                          "core_attn+layernorm+mlp"})
        time_of({"recompute=selective", (std::string("recompute_modules=") + m).c_str()});
    REQUIRE(times.size() == 9);
    for (const auto& [pa, ta] : times)
        for (const auto& [pb, tb] : times)
            if (more(pa, pb)) CHECK(ta > tb);
}

TEST_CASE("search: offload module sets where asked, an offloading candidate kept only where its twin does not fit") {
    CHECK(SearchSpace{}.offload_modules == std::vector<OffloadModules>{OffloadModules{}});
    CHECK(constrained({"offload_modules=qkv_linear+core_attn+attn_proj,none"}).offload_modules ==
          std::vector<OffloadModules>{OffloadModules{}, OffloadModules{false, true, true, true, false}});
    SearchSpace bad;
    CHECK_THROWS_WITH(apply_constraint(bad, "offload_modules=none,mlp"),
                      Contains("'mlp' is not none or a set of modules joined by +") && Contains("qkv_linear"));
    // Llama 3 70B on 32 H100s in BF16 with Transformer Engine's layers, offloading the attention's inputs or not.
    SearchRequest req;
    req.model = load_model(std::string(STRATA_SOURCE_DIR) + "/scenarios/models/llama3-70b.yaml");
    req.system = load_system(std::string(STRATA_SOURCE_DIR) + "/scenarios/systems/dgx-h100.yaml");
    req.gpus = 32;
    req.global_batch = 128;
    req.base.attention = Attention::flash;
    req.base.transformer_impl = TransformerImpl::transformer_engine;
    req.space = constrained({"offload_modules=none,qkv_linear+core_attn+attn_proj", "microbatch=1"});
    req.representative_replicas = true;
    req.jobs = 2;
    const SearchResult r = search(req);
    REQUIRE_FALSE(r.simulated.empty());
    SearchRequest plain = req;
    plain.space = constrained({"microbatch=1"});
    const SearchResult p = search(plain);
    // The offloading twins of candidates that fit without are dropped too.
    REQUIRE(r.rejected.count(kDominated));
    CHECK(r.rejected.at(kDominated) > p.rejected.at(kDominated));
    bool offloaded = false;
    for (const SearchCandidate& c : r.simulated) {
        if (!c.execution.offload_modules.any()) continue;
        offloaded = true;
        // The same candidate without offloading does not fit: else it would have been dropped.
        Scenario twin = c.result.scenario;
        twin.execution.offload_modules = OffloadModules{};
        CHECK_FALSE(estimate_memory(twin.model, twin.execution, twin.system.device_memory()).fits());
        CHECK(c.execution.recompute != Recompute::full);
    }
    CHECK(offloaded);
    // Recomputing the attention core leaves its group nothing to copy: over a slow host link (4 GB/s, where the
    // copies bind) that beats copying it, so it is not dropped as doing more than offloading alone (the best of the
    // two asked together is the best of each asked alone, here the recomputing one).
    SearchRequest slow = req;
    slow.system.network.device_to_host_bandwidth = {4e9};
    slow.system.network.host_to_device_bandwidth = {4e9};
    auto best = [&](std::initializer_list<const char*> policy) {
        SearchRequest q = slow;
        q.space = constrained({"tensor=8", "pipeline=2", "sequence_parallel=on", "microbatch=1",
                               "offload_modules=qkv_linear+core_attn+attn_proj"});
        for (const char* c : policy)
            apply_constraint(q.space, c);
        const SearchResult res = search(q);
        REQUIRE_FALSE(res.simulated.empty());
        return res.simulated.front().result.iteration->iteration_time_s;
    };
    const double both = best({"recompute=none,selective", "recompute_modules=core_attn"});
    const double none = best({"recompute=none"});
    const double selective = best({"recompute=selective", "recompute_modules=core_attn"});
    CHECK(selective < none);
    CHECK(both == selective);
    // With local layers (BF16's automatic choice) offloading is refused, and the count says why.
    req.base.transformer_impl = TransformerImpl::automatic;
    req.space = constrained({"offload_modules=qkv_linear", "tensor=8", "pipeline=2", "microbatch=1"});
    const SearchResult refused = search(req);
    CHECK(refused.simulated.empty());
    bool named = false;
    for (const auto& [reason, count] : refused.rejected)
        named = named || (reason.rfind("incompatible with execution.offload_modules", 0) == 0 &&
                          reason.find("runs with Transformer Engine's layers") != std::string::npos && count > 0);
    CHECK(named);
}

namespace {
/// 22B on 16 GPUs searched at t = 8, p = 2, d = 1, b = 1 with SP over none, full and block, and that layout.
std::pair<SearchRequest, ExecutionSpec> block_layout() {
    SearchRequest req = small_request();
    req.space = constrained({"tensor=8", "pipeline=2", "interleave=1", "microbatch=1", "sequence_parallel=on",
                             "distributed_optimizer=off", "overlap_grad_reduce=off", "recompute=none,full,block"});
    ExecutionSpec e = req.base;
    e.tensor = 8;
    e.pipeline = 2;
    e.data = 1;
    e.global_batch = 16;
    e.sequence_parallel = true;
    return {req, e};
}
}  // namespace

TEST_CASE("search: block recompute, the fewest first layers of each chunk that fit, only where no recompute does not") {
    auto layout = block_layout();  // 48 layers, 24 per stage
    SearchRequest& req = layout.first;
    ExecutionSpec& e = layout.second;
    auto total = [&](const ExecutionSpec& x) {
        return estimate_memory(req.model, x, req.system.device_memory()).peak_stage.total().value;
    };
    ExecutionSpec full = e, block = e;
    full.recompute = Recompute::full;
    block.recompute = Recompute::full;
    block.recompute_method = RecomputeMethod::block;
    block.recompute_layers = 2;
    const auto two = total(block);
    block.recompute_layers = 3;
    const auto three = total(block);
    REQUIRE(three < two);  // the more layers recomputed, the less kept
    REQUIRE(two < total(e));
    // A device between block:3 and block:2 (each stage holds 24 layers): block:3 is the fewest that fit.
    req.system.memory_capacity = Bytes((two + three) / 2);  // total() counts the reserve
    req.gpus = 16;
    req.margin = 10.0;
    const SearchResult r = search(req);
    REQUIRE(r.simulated.size() == 1);  // full of every layer recomputes more than block:K
    const ExecutionSpec& won = r.simulated[0].execution;
    REQUIRE(won.recompute_method == RecomputeMethod::block);
    CHECK(won.recompute_layers == 3);
    CHECK(recompute_label(won) == "block:3");
    CHECK(r.rejected.at("out of memory (analytical)") == 1);  // none
    CHECK(r.rejected.at(kDominated) == 1);                    // full
    // Simulated: block:K between none and full.
    auto time_of = [&](ExecutionSpec x) {
        Scenario sc;
        sc.model = req.model;
        sc.system = req.system;
        sc.system.memory_capacity = Bytes(1LL << 40);
        sc.execution = x;
        return simulate(sc).iteration_time_s;
    };
    CHECK(time_of(e) < time_of(won));
    CHECK(time_of(won) < time_of(full));
    // The screen prices block:K as K layers recomputed and the rest not, as the simulation runs it: its estimate is as
    // close to its simulation as full recompute's is to its own (not priced as full).
    const double block_error = r.simulated[0].estimate_s / r.simulated[0].result.iteration->iteration_time_s - 1;
    req.space = constrained({"tensor=8", "pipeline=2", "interleave=1", "microbatch=1", "sequence_parallel=on",
                             "distributed_optimizer=off", "overlap_grad_reduce=off", "recompute=full"});
    const SearchResult only_full = search(req);
    REQUIRE(only_full.simulated.size() == 1);
    const double full_error =
        only_full.simulated[0].estimate_s / only_full.simulated[0].result.iteration->iteration_time_s - 1;
    CHECK(std::abs(block_error - full_error) < 0.02);
    CHECK(r.simulated[0].estimate_s < only_full.simulated[0].estimate_s);
    // Without block (recompute=none,full) the same layout can only recompute everything.
    req.space = constrained({"tensor=8", "pipeline=2", "interleave=1", "microbatch=1", "sequence_parallel=on",
                             "distributed_optimizer=off", "overlap_grad_reduce=off", "recompute=none,full"});
    const SearchResult no_block = search(req);
    REQUIRE(no_block.simulated.size() == 1);
    CHECK(recompute_label(no_block.simulated[0].execution) == "full");
    // With memory for everything, block (which --fix names) is not tried, and the account says why.
    auto roomy = block_layout();
    roomy.first.system.memory_capacity = Bytes(1LL << 40);
    const SearchResult all_fit = search(roomy.first);
    CHECK(all_fit.rejected.at("block recompute not tried: no recompute fits (there is nothing to recompute)") == 1);
    CHECK(all_fit.enumerated == 3);  // none, full and the block attempt
}

TEST_CASE("search: block recompute's K may reach a stage's whole chunk where another stage's chunk is larger") {
    // 47 layers over 2 stages with the embedding counted in the split: 23 and 24 layers. block:23 recomputes all of
    // the first stage and 23 of the second's 24: a K to try.
    auto layout = block_layout();
    SearchRequest& req = layout.first;
    ExecutionSpec& e = layout.second;
    req.model.layers = 47;
    e.embedding_in_pipeline_split = true;
    e.recompute = Recompute::full;
    e.recompute_method = RecomputeMethod::block;
    auto total = [&](int k) {
        e.recompute_layers = k;
        return estimate_memory(req.model, e, req.system.device_memory()).peak_stage.total().value;
    };
    const auto k22 = total(22), k23 = total(23);
    REQUIRE(k23 < k22);
    req.system.memory_capacity = Bytes((k22 + k23) / 2);
    req.margin = 10.0;
    req.simulate_max = 100;
    const SearchResult r = search(req);
    bool found = false;
    for (const auto& c : r.simulated)
        found = found || (c.execution.embedding_in_pipeline_split && recompute_label(c.execution) == "block:23");
    CHECK(found);
}

TEST_CASE(
    "search: a fixed module set alone asks for selective recompute, and with a recompute leaving it out is an error") {
    SearchRequest req = small_request();
    req.space = constrained({"tensor=8", "pipeline=1", "microbatch=1", "recompute_modules=mlp"});
    const SearchResult r = search(req);
    REQUIRE_FALSE(r.simulated.empty());
    for (const auto& c : r.simulated)
        CHECK(recompute_label(c.execution) == "sel:mlp");
    req.space = constrained({"tensor=8", "recompute=none,full", "recompute_modules=mlp"});
    CHECK_THROWS_WITH(search(req), Contains("--fix recompute_modules applies to selective recompute"));
    // Transformer Engine's own TransformerLayer checkpoints only the attention core: unfixed, nothing else is tried.
    req.space = constrained({"tensor=8", "pipeline=1", "microbatch=1", "recompute=selective"});
    req.base.transformer_impl = TransformerImpl::te_transformer_layer;
    const SearchResult te = search(req);
    REQUIRE_FALSE(te.simulated.empty());
    for (const auto& c : te.simulated)
        CHECK(recompute_label(c.execution) == "selective");
}

TEST_CASE("search: an attention kernel the device profile cannot cost is an error up front, not an empty search") {
    SearchRequest req = small_request();
    req.base.attention = Attention::flash2;
    req.system.device.flash2_forward_ratio = req.system.device.flash2_backward_ratio = 0;
    CHECK_THROWS_WITH(search(req), Contains("--attention flash2 needs flash_attention.flash2_forward_ratio"));
    req.system.device.flash_forward_efficiency = req.system.device.flash_backward_efficiency = 0;
    req.system.device.measured_flash_attention.clear();
    CHECK_THROWS_WITH(search(req), Contains("--attention flash2 needs a flash_attention block"));
}

TEST_CASE("search: a candidate over the task limit names strata search --max-tasks and the inputs") {
    SearchRequest req = small_request();
    req.space = constrained({"tensor=8", "microbatch=1"});
    req.max_tasks = 10;
    req.source = "models/m.yaml on systems/s.yaml";
    CHECK_THROWS_AS(search(req), InputError);
    CHECK_THROWS_WITH(search(req), Contains("strata search --max-tasks") && Contains("models/m.yaml on systems/s.yaml:") &&
                                       Contains("t=8") && !Contains("strata run"));
}

TEST_CASE("search results: the screen record in the JSON and the CSV, absent from a run's") {
    SearchRequest req = small_request();
    req.space = constrained({"tensor=8", "microbatch=1"});
    req.margin = 0;
    const SearchResult r = search(req);
    const std::vector<CaseResult> ranked = ranked_results(r, 2);
    REQUIRE(ranked.size() == 2);
    const SearchSummary summary = search_summary(req, r, {"tensor=8", "microbatch=1"});
    const auto doc = nlohmann::json::parse(to_json("search", ranked, nullptr, &summary));
    CHECK(doc["search"]["simulated"] == r.simulated.size());
    CHECK(doc["search"]["constraints"] == nlohmann::json::array({"tensor=8", "microbatch=1"}));
    CHECK(doc["search"]["gpus"] == 16);
    CHECK(doc["search"]["screened"] == r.screened);
    CHECK(doc["search"]["enumerated"] == r.enumerated);
    CHECK(doc["search"]["overturned_by_estimate_rank"] == screen_overturned(r));
    const auto& first = doc["results"][0];
    CHECK(first["name"] == "rank 1");
    CHECK(first["screen"]["simulated_rank"] == 1);
    CHECK(first["screen"]["estimate_rank"] == r.simulated[0].estimate_rank);
    CHECK(first["screen"]["estimate_error"].get<double>() ==
          Approx(r.simulated[0].estimate_s / first["iteration_time_s"].get<double>() - 1));
    CHECK(first["tokens_per_s"].get<double>() > 0);
    CHECK(first["tflops_per_gpu"].get<double>() > 0);
    const std::string csv = to_csv(ranked);
    const std::string header = csv.substr(0, csv.find('\r'));
    CHECK(header.size() > 60);
    CHECK_THAT(header, Catch::EndsWith(",estimate_s,estimate_rank,simulated_rank,estimate_error"));
    CHECK_THAT(header, Contains("tokens_per_s") && Contains("tflops_per_gpu"));
    std::vector<CaseResult> plain = ranked;
    for (auto& c : plain) c.screen.reset();
    CHECK_THAT(to_csv(plain), !Contains("estimate_rank"));
    CHECK_FALSE(nlohmann::json::parse(to_json("run", plain)).contains("search"));
    CHECK_FALSE(nlohmann::json::parse(to_json("run", plain))["results"][0].contains("screen"));
}

TEST_CASE(
    "search: Megatron-FSDP (--fix fsdp=off,on) only with the distributed optimizer and one stage, its overlaps on") {
    SearchRequest req = small_request();  // 22B on 16 A100s
    req.space = constrained({"tensor=8", "interleave=1", "microbatch=1", "sequence_parallel=on", "recompute=full",
                             "distributed_optimizer=off,on", "fsdp=off,on"});
    req.margin = 10.0;  // simulate every one that fits
    req.simulate_max = 64;
    const SearchResult r = search(req);
    int fsdp = 0;
    for (const SearchCandidate& c : r.simulated) {
        const ExecutionSpec& e = c.execution;
        if (!e.fsdp) continue;
        ++fsdp;
        CHECK(e.distributed_optimizer);
        CHECK(e.pipeline == 1);
        CHECK(e.overlap_grad_reduce);
        CHECK(e.overlap_param_gather);
        REQUIRE(c.result.iteration);
        // Its weights and gradients sharded over d = 2: less static memory than the distributed optimizer alone.
        ExecutionSpec dopt = e;
        dopt.fsdp = false;
        CHECK(stage_state(req.model, e, req.system.device_memory(), 0).total() <
              stage_state(req.model, dopt, req.system.device_memory(), 0).total());
    }
    // p = 1, d = 2 (t = 8 of 16): one layout, with and without overlapping the reduction under the plain optimizer,
    // once with FSDP.
    CHECK(fsdp == 1);
    // FSDP without the distributed optimizer is a contradiction, said as such (not as sizes that do not fit).
    req.space = constrained({"distributed_optimizer=off", "fsdp=on"});
    CHECK_THROWS_WITH(search(req), Catch::Contains("--fix fsdp=on needs the distributed optimizer"));
}

TEST_CASE("search screen: the context-parallel ring counts in the estimate, with the SMs it holds") {
    // t = 1, c = 2 on one node: the ring is the layer's only collective. A device whose NVLink is 1,000 times slower
    // makes the ring far outlast the attention beside it, and the screen must see it (it used to cost the ring
    // nothing).
    SearchRequest req = ring_request();
    const SearchResult fast = search(req);
    req.system.device.intra_node_bus_bandwidth /= 1000;
    req.system.device.measured_collectives.clear();
    const SearchResult slow = search(req);
    REQUIRE(fast.simulated.size() == 1);
    REQUIRE(slow.simulated.size() == 1);
    CHECK(slow.simulated[0].estimate_s > 1.5 * fast.simulated[0].estimate_s);
}

TEST_CASE("search screen: a context-parallel ring across nodes counts at the NICs' speed") {
    // t = 1, c = 2 on two 1-GPU nodes with NICs 1,000 times slower: the screen must cost the ring through them, where
    // on one 2-GPU node (NVLink) the NICs do not matter.
    SearchRequest req = ring_request();
    req.system.network.nic_bandwidth.value /= 1000;
    req.system.gpus_per_node = 2;
    req.system.network.rails = 1;
    const SearchResult inside = search(req);
    req.system.gpus_per_node = 1;
    const SearchResult across = search(req);
    REQUIRE(inside.simulated.size() == 1);
    REQUIRE(across.simulated.size() == 1);
    CHECK(across.simulated[0].estimate_s > 1.5 * inside.simulated[0].estimate_s);
}
