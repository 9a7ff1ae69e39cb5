// Representative replicas (SimulationOptions::representative_replicas): only the data-parallel replicas on
// replica 0's node are simulated, their gradient reductions' flows kept for all. Where nothing but the
// replicas' own speeds tells them apart (one stage: no pipeline transfers competing between replicas), the
// result is the full simulation's to the picosecond, variation included (the representative runs at the
// slowest replica's pace, which is what every reduction waits for); with a pipeline it stays close; and the
// task count falls by about d.
#include "fixtures.hpp"
#include "strata/report.hpp"
#include "strata/run.hpp"
#include "strata/search.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

using namespace strata;

namespace {

/// The shrunk 22B (strata::testing::small_22b), t = 8, on p stages and d replicas, 4 microbatches each.
Scenario replicated(int p, int d, bool variation) {
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(p, 1, 4, true, Recompute::selective), d);
    if (!variation) sc.system.variation.gpu_sigma = 0;
    return sc;
}

IterationResult run(const Scenario& sc, bool representative) {
    SimulationOptions opt;
    opt.representative_replicas = representative;
    // Task counts compare a replica's tasks with d replicas' (fused units would shrink the full run's: the results
    // are the same either way, test_fused_units.cpp).
    opt.fuse_units = false;
    return simulate(sc, opt);
}

void check_same(const IterationResult& full, const IterationResult& rep) {
    CHECK(rep.iteration_time == full.iteration_time);
    CHECK(rep.exposed_comm.tensor == full.exposed_comm.tensor);
    CHECK(rep.exposed_comm.pipeline == full.exposed_comm.pipeline);
    CHECK(rep.exposed_comm.data_parallel == full.exposed_comm.data_parallel);
    CHECK(rep.peak_memory == full.peak_memory);
    CHECK(rep.slowest_group_factor == full.slowest_group_factor);
}

}  // namespace

TEST_CASE("representative replicas: one stage gives the full simulation's result exactly",
          "[representative]") {
    const bool variation = GENERATE(false, true);
    Scenario sc = replicated(1, 4, variation);
    SECTION("reduction after the backward") {}
    SECTION("overlapped per-layer reduction") {
        sc.execution.overlap_grad_reduce = true;
    }
    SECTION("distributed optimizer, gather after the step") {
        sc.execution.distributed_optimizer = true;
    }
    SECTION("distributed optimizer, overlapped gather") {
        sc.execution.distributed_optimizer = true;
        sc.execution.overlap_param_gather = true;
    }
    CAPTURE(variation, sc.execution.overlap_grad_reduce, sc.execution.distributed_optimizer);
    const IterationResult full = run(sc, false);
    const IterationResult rep = run(sc, true);
    check_same(full, rep);
    CHECK_FALSE(full.representative_replicas);
    CHECK(rep.representative_replicas);
    // Four replicas' compute and tensor-parallel tasks become one's; the reductions stay.
    CHECK(rep.tasks * 3 < full.tasks);
    if (variation) CHECK(full.slowest_group_factor > 1.0);
}

TEST_CASE(
    "representative replicas: with a pipeline, close to the full simulation with about d times fewer tasks",
    "[representative]") {
    const bool variation = GENERATE(false, true);
    const Scenario sc = replicated(4, 4, variation);
    const IterationResult full = run(sc, false);
    const IterationResult rep = run(sc, true);
    CAPTURE(variation, full.iteration_time_s, rep.iteration_time_s);
    // Lost: the other replicas' pipeline transfers on shared links (faster), and each replica's own slowest
    // stage (the representative takes every stage's slowest replica: slower). SC21's ten rows stay within 0.6
    // %.
    CHECK(std::abs(rep.iteration_time_s / full.iteration_time_s - 1) < 0.01);
    CHECK(rep.peak_memory == full.peak_memory);
    CHECK(rep.slowest_group_factor == full.slowest_group_factor);
    CHECK(double(full.tasks) / double(rep.tasks) > 3.5);
}

TEST_CASE("representative replicas: the replicas of replica 0's node are simulated", "[representative]") {
    Scenario sc = replicated(1, 4, true);
    sc.execution.tensor = 2;  // four replicas per 8-GPU node
    validate(sc);
    CHECK(representative_replicas(sc) == 4);
    SECTION("all of them on one node: the full simulation") {
        const IterationResult full = run(sc, false);
        const IterationResult rep = run(sc, true);
        check_same(full, rep);
        CHECK(rep.tasks == full.tasks);
    }
    SECTION("two nodes: one node's replicas simulated") {
        sc = strata::testing::with_data(sc, 8);
        CHECK(representative_replicas(sc) == 4);
        const IterationResult full = run(sc, false);
        const IterationResult rep = run(sc, true);
        CHECK(std::abs(rep.iteration_time_s / full.iteration_time_s - 1) < 0.01);
        CHECK(rep.slowest_group_factor == full.slowest_group_factor);
        CHECK(double(full.tasks) / double(rep.tasks) > 1.8);
    }
    sc.execution.tensor = 8;
    validate(sc);
    CHECK(representative_replicas(sc) == 1);
    sc.execution.tensor = 3;  // groups that do not tile a node: one replica
    CHECK(representative_replicas(sc) == 1);
}

TEST_CASE("representative replicas: a single replica per stage is the full simulation", "[representative]") {
    const Scenario sc = replicated(2, 1, true);
    const IterationResult full = run(sc, false);
    const IterationResult rep = run(sc, true);
    check_same(full, rep);
    CHECK(rep.tasks == full.tasks);
    CHECK(rep.events == full.events);
}

TEST_CASE("representative replicas: the JSON says so, only when used", "[representative]") {
    const Scenario sc = replicated(1, 2, false);
    CaseOptions opt;
    const CaseResult a = evaluate_case(sc, opt);
    opt.simulation.representative_replicas = true;
    const CaseResult b = evaluate_case(sc, opt);
    REQUIRE(a.iteration);
    REQUIRE(b.iteration);
    const auto ja = nlohmann::json::parse(to_json("x", {a}));
    const auto jb = nlohmann::json::parse(to_json("x", {b}));
    CHECK_FALSE(ja["results"][0]["engine"].contains("replicas"));
    CHECK(jb["results"][0]["engine"]["replicas"] == "representative");
    // The CSV: a last column only when some case was simulated with representative replicas.
    CHECK(to_csv({a}).find("replicas") == std::string::npos);
    const std::string both = to_csv({a, b});
    const auto header_end = both.find("\r\n");
    REQUIRE(header_end != std::string::npos);
    CHECK(both.substr(0, header_end).ends_with(",replicas"));
    CHECK(both.find(",all\r\n") != std::string::npos);
    CHECK(both.find(",representative\r\n") != std::string::npos);
}

TEST_CASE("representative replicas: the search simulates its winner again in full",
          "[representative][search]") {
    SearchRequest req;
    req.model = load_model(strata::testing::source_path("scenarios/models/gpt-22b.yaml"));
    req.system = load_system(strata::testing::source_path("scenarios/systems/selene-a100.yaml"));
    req.gpus = 8;
    req.global_batch = 4;
    req.jobs = 1;
    apply_constraint(req.space, "tensor=4");   // with one stage, d = 2 for every candidate: the winner has replicas
    apply_constraint(req.space, "pipeline=1");
    CHECK_FALSE(req.representative_replicas);  // the default: every candidate in full
    req.representative_replicas = true;
    const SearchResult rep = search(req);
    REQUIRE_FALSE(rep.simulated.empty());
    REQUIRE(rep.best_in_full.has_value());
    const CaseResult& best = rep.simulated.front().result;
    CHECK(best.iteration->representative_replicas);
    CHECK_FALSE(rep.best_in_full->iteration->representative_replicas);
    CHECK(rep.best_in_full->scenario.execution.data == best.scenario.execution.data);
    CHECK(rep.best_in_full->scenario.execution.microbatch == best.scenario.execution.microbatch);
    CHECK(std::abs(best.iteration->iteration_time_s / rep.best_in_full->iteration->iteration_time_s - 1) <
          0.01);
    const SearchSummary summary = search_summary(req, rep, {});
    CHECK(summary.representative_replicas);
    REQUIRE(summary.best_in_full_s.has_value());
    CHECK(*summary.best_in_full_s == rep.best_in_full->iteration->iteration_time_s);

    req.representative_replicas = false;
    const SearchResult all = search(req);
    CHECK_FALSE(all.best_in_full.has_value());
    REQUIRE_FALSE(all.simulated.empty());
    CHECK_FALSE(all.simulated.front().result.iteration->representative_replicas);
    // The same candidates were simulated (the screen is the same), every one in full: the representative
    // search's winner, simulated in full there, has the same time here.
    REQUIRE(all.simulated.size() == rep.simulated.size());
    const ExecutionSpec& f = rep.best_in_full->scenario.execution;
    int found = 0;
    for (const SearchCandidate& c : all.simulated) {
        const ExecutionSpec& e = c.execution;
        if (e.tensor == f.tensor && e.pipeline == f.pipeline && e.data == f.data &&
            e.interleave == f.interleave && e.microbatch == f.microbatch && e.recompute == f.recompute &&
            e.sequence_parallel == f.sequence_parallel &&
            e.distributed_optimizer == f.distributed_optimizer &&
            e.overlap_grad_reduce == f.overlap_grad_reduce &&
            e.overlap_param_gather == f.overlap_param_gather && e.tp_comm_overlap == f.tp_comm_overlap) {
            ++found;
            CHECK(c.result.iteration->iteration_time == rep.best_in_full->iteration->iteration_time);
        }
    }
    CHECK(found == 1);
}
