// FP8 delayed scaling's amax all-reduces (ExecutionSpec::tp_only_amax_red, Builder::emit_amax_reduction): each FP8
// region (a unit) ends with an all-reduce that the compute stream waits for, over the whole stage (every replica meets)
// or the group's own tensor x context ranks; and run-to-run levels that hold (variation.span_hold_ms), which such a
// meeting of the replicas makes the job wait for.
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

using namespace strata;

namespace {

/// The small 22B (t = 8, one stage, 4 microbatches) on the H100 profile in FP8, d replicas on d nodes, no variation.
Scenario fp8_scenario(int d, Fp8Recipe recipe, bool tp_only) {
    Scenario sc = testing::with_data(testing::small_22b(1, 1, 4, true, Recompute::none), d);
    sc.system.device = load_device_profile(testing::source_path("scenarios/devices/h100-sxm5-80gb.yaml"));
    sc.execution.precision = Precision::fp8;
    sc.execution.fp8_recipe = recipe;
    sc.execution.tp_only_amax_red = tp_only;
    sc.system.variation = {};
    validate(sc);
    return sc;
}

}  // namespace

TEST_CASE("FP8 amax reduction: tp_only_amax_red is read, and inert without FP8 delayed scaling", "[fp8]") {
    // Accepted with any precision, so that `--set execution.tp_only_amax_red=true` runs over a file of BF16 and FP8
    // cases alike; only FP8 with delayed scaling has the reduction it scopes.
    const Experiment bf16 = testing::load_small("amax.yaml", ", tp_only_amax_red: true");
    CHECK(bf16.cases.at(0).execution.tp_only_amax_red);
    CHECK_FALSE(bf16.cases.at(0).execution.reduces_fp8_amax());
    // With FP8 (a device with FP8 tensor cores) the key is read; Megatron-Core's default is the stage-wide group.
    const auto load_fp8 = [](const std::string& extra) {
        const std::string text = "model: " + testing::source_path("scenarios/models/llama3-8b.yaml") +
                                 "\nsystem: " + testing::source_path("scenarios/systems/dgx-h100.yaml") +
                                 "\nexecution: {tensor: 8, pipeline: 1, microbatch: 1, global_batch: 8, "
                                 "recompute: none, precision: fp8" + extra + "}\n";
        return load_experiment_text(text, testing::data_path("valid/amax.yaml"))
            .cases.at(0)
            .execution;
    };
    CHECK(load_fp8(", tp_only_amax_red: true").tp_only_amax_red);
    CHECK_FALSE(load_fp8("").tp_only_amax_red);
}

TEST_CASE("FP8 amax reduction: a small all-reduce's latency is NCCL's tree", "[fp8]") {
    SystemSpec s;
    s.network.collective_step_latency_intra = Time::from_us(1.0);
    s.network.collective_step_latency_inter = Time::from_us(5.0);
    // 2 x ((ranks per node - 1) x intra + ceil(log2 nodes) x inter): a chain in each node, a tree across them.
    CHECK(s.small_all_reduce_latency(1, 1) == Time::zero());
    CHECK(s.small_all_reduce_latency(8, 1) == Time::from_us(14.0));
    CHECK(s.small_all_reduce_latency(1, 2) == Time::from_us(10.0));
    CHECK(s.small_all_reduce_latency(8, 32) == Time::from_us(64.0));
    CHECK(s.small_all_reduce_latency(8, 33) == Time::from_us(74.0));
}

TEST_CASE("FP8 amax reduction: each region waits for its all-reduce, across the replicas unless tp_only_amax_red",
          "[fp8][simulate]") {
    const int d = 4;
    const Scenario stage = fp8_scenario(d, Fp8Recipe::delayed, false);
    const Scenario group = fp8_scenario(d, Fp8Recipe::delayed, true);
    const Scenario current = fp8_scenario(d, Fp8Recipe::current, false);
    // Without variation the replicas are alike, so the meeting costs only its latency: 2 x 4 units, each waiting
    // for the all-reduce over the stage's 32 ranks on 4 nodes (2 x (7 x intra + 2 x inter)) instead of the group's 8;
    // the last backward's is hidden under the data-parallel reduction that the optimizer step waits for: 7 of them.
    const SystemSpec& sys = stage.system;
    const double per_region_s =
        (sys.small_all_reduce_latency(8, d) - sys.small_all_reduce_latency(8, 1)).seconds();
    const IterationResult a = simulate(stage);
    const IterationResult b = simulate(group);
    CHECK(a.iteration_time_s - b.iteration_time_s == Approx(7 * per_region_s).epsilon(0.01));
    CHECK(a.iteration_time_s > b.iteration_time_s);
    CHECK(a.tasks > b.tasks);  // a post and a wait per unit and group, one all-reduce per unit and stage
    CHECK(simulate(stage).iteration_time == a.iteration_time);
    // Exposed tensor-parallel communication either way: the meeting's waits on the compute stream, or the group's own
    // all-reduce on its tp stream; all 8 of them, the last not counted in the data-parallel wait as well.
    CHECK((a.exposed_comm.tensor - b.exposed_comm.tensor).seconds() == Approx(8 * per_region_s).epsilon(0.01));
    CHECK(std::abs((a.exposed_comm.data_parallel - b.exposed_comm.data_parallel).seconds()) < per_region_s / 2);
    // BF16 has no amax reduction: the key changes nothing.
    Scenario bf16 = stage;
    bf16.execution.precision = Precision::bf16;
    Scenario bf16_group = bf16;
    bf16_group.execution.tp_only_amax_red = true;
    CHECK(simulate(bf16_group).iteration_time == simulate(bf16).iteration_time);
    // Current scaling has no such reduction: no amax tasks at all (its cost is the casts' extra amax pass).
    Scenario current_tp_only = current;
    current_tp_only.execution.tp_only_amax_red = true;
    CHECK(simulate(current_tp_only).iteration_time == simulate(current).iteration_time);
}

TEST_CASE("FP8 amax reduction: with levels that hold, meeting every replica at each region costs more",
          "[fp8][variation]") {
    // Run-to-run levels that hold for 30 ms of compute (variation.span_hold_ms): at each region the stage waits for
    // its slowest replica's level; over the group alone each replica keeps its own pace until the data-parallel
    // reduction. So the stage-wide meeting costs more than its latency.
    const int d = 8;
    Scenario stage = fp8_scenario(d, Fp8Recipe::delayed, false);
    Scenario group = fp8_scenario(d, Fp8Recipe::delayed, true);
    const double plain_gap = simulate(stage).iteration_time_s - simulate(group).iteration_time_s;
    for (Scenario* sc : {&stage, &group}) {
        sc->system.variation.span_sigma = 0.02;
        sc->system.variation.span_hold = Time::from_ms(30.0);
    }
    const double held_gap = simulate(stage).iteration_time_s - simulate(group).iteration_time_s;
    CAPTURE(plain_gap, held_gap);
    CHECK(held_gap > plain_gap);
    CHECK(simulate(stage).iteration_time == simulate(stage).iteration_time);
    // A hold of 0 is each span its own draw, as before the key existed.
    Scenario per_span = group;
    per_span.system.variation.span_hold = Time::zero();
    const double independent = simulate(per_span).iteration_time_s;
    per_span.system.variation.span_hold = Time::from_ms(30.0);
    CHECK(simulate(per_span).iteration_time_s != independent);
}

TEST_CASE("FP8 amax reduction: the meeting with an interleaved pipeline and representative replicas", "[fp8][simulate]") {
    // t = 2, so four replicas of a stage share a node: the representative run simulates four of the eight, which meet
    // among themselves (1 < simulated replicas < d); two stages of two chunks each, GPU variation on.
    Scenario sc = testing::with_data(testing::small_22b(2, 2, 4, true, Recompute::none), 8);
    sc.system.device = load_device_profile(testing::source_path("scenarios/devices/h100-sxm5-80gb.yaml"));
    sc.execution.tensor = 2;
    sc.execution.precision = Precision::fp8;
    sc.system.variation.gpu_sigma = 0.01;
    validate(sc);
    Scenario group = sc;
    group.execution.tp_only_amax_red = true;
    SimulationOptions representative;
    representative.representative_replicas = true;
    const IterationResult full = simulate(sc);
    const IterationResult rep = simulate(sc, representative);
    CHECK(rep.representative_replicas);
    CHECK(rep.tasks < full.tasks);
    CHECK(std::abs(rep.iteration_time_s / full.iteration_time_s - 1) < 0.01);
    CHECK(simulate(sc, representative).iteration_time == rep.iteration_time);
    // Every replica's pipeline meets the others' at each region: never faster than each keeping to its own group by
    // more than the variation lets the replicas drift (they all wait for the slowest at the end either way).
    const IterationResult own = simulate(group);
    CHECK(full.iteration_time_s > own.iteration_time_s * 0.99);
    CHECK(full.exposed_comm.tensor > own.exposed_comm.tensor);
}
