// Memory per GPU: parameters, bytes per parameter, and the first stage's activations (paper eq. 5).
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/report.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"
#include "fixtures.hpp"

#include <catch2/catch.hpp>

using namespace strata;

namespace {
using strata::testing::estimate;
using strata::testing::table4_case;
Scenario model_case(const char* model_file, int t, int p, int m, int B, bool sp, Recompute rc) {
    Scenario sc = table4_case(0);
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table2.yaml");
    for (const auto& c : ex.cases)
        if (c.model.name == model_file) sc.model = c.model;
    sc.execution.tensor = t;
    return strata::testing::with_pipeline(sc, p, m, B, sp, rc);
}
}  // namespace

TEST_CASE("parameter counts match the models' names") {
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/paper/table2.yaml");
    auto params = [&](const char* name) {
        for (const auto& c : ex.cases)
            if (c.model.name == name) return total_parameters(c.model);
        return 0.0;
    };
    CHECK(params("gpt3-175b") == Approx(175e9).epsilon(0.01));
    CHECK(params("mt-nlg-530b") == Approx(530e9).epsilon(0.01));
    CHECK(params("gpt-1t") == Approx(1.008e12).epsilon(0.01));
    CHECK(params("gpt-22b") == Approx(22e9).epsilon(0.02));
}

TEST_CASE("bytes per parameter: mixed-precision Adam, distributed optimizer shards the optimizer state") {
    ExecutionSpec e;
    BytesPerParam b = bytes_per_param(e);
    CHECK(b.weights + b.gradients + b.optimizer == 18);
    e.precision = Precision::fp16;
    b = bytes_per_param(e);
    CHECK(b.weights + b.gradients + b.optimizer == 20);
    e.precision = Precision::bf16;
    e.distributed_optimizer = true;
    e.data = 4;
    b = bytes_per_param(e);
    CHECK(b.optimizer == 3);
}

TEST_CASE("first stage under 1F1B holds L layers' activations (eq. 5)") {
    const Scenario sc = model_case("gpt-1t", 8, 64, 1, 512, true, Recompute::selective);
    const MemoryReport r = estimate(sc);
    const std::int64_t s = 2048, h = 25600, L = 128, t = 8;
    CHECK(r.activation_first_stage_layers.value == 34 * s * h * L / t);  // eq. 6 with SP + selective
    // Section 4.5: embedding dropout masks of the p microbatches in flight (sbhp/t).
    CHECK(r.first_stage.activations_embedding.value == s * h * 64 / t);
}

TEST_CASE("interleaved schedule multiplies the first stage's activations by 1 + (p-1)/(p m)") {
    const Scenario sc = model_case("gpt3-175b", 8, 8, 3, 64, false, Recompute::none);
    const MemoryReport r = estimate(sc);
    const std::int64_t per_layer = r.activation_per_layer.value, L = 96, p = 8, m = 3;
    // L (1 + (p-1)/(p m)) layers = L (p m + p - 1) / (p m)
    CHECK(r.activation_first_stage_layers.value * (p * m) == per_layer * L * (p * m + p - 1));
    CHECK(schedule::peak_in_flight(schedule::shape_of(sc.execution), 0) == int(p * m + p - 1));
    CHECK(schedule::peak_in_flight(schedule::shape_of(sc.execution), int(p) - 1) == int((m - 1) * p + 1));
}

TEST_CASE("fits / out of memory against the capacity, with the margin") {
    Scenario sc = table4_case(0);  // 22B, t=8, no recompute: 59.7 GiB activations + 49 GiB states
    MemoryReport r = estimate(sc);
    CHECK_FALSE(r.fits());
    CHECK(r.margin().value < 0);
    sc = table4_case(4);  // selective + sequence parallel
    r = estimate(sc);
    CHECK(r.fits());
    CHECK(r.margin().value == r.capacity.value - r.peak_stage.total().value);
    // Full recompute keeps the least.
    CHECK(estimate(table4_case(2)).activation_first_stage < r.activation_first_stage);
}

TEST_CASE("the runtime reserve counts on every stage, outside the activations") {
    Scenario sc = model_case("gpt3-175b", 8, 8, 3, 64, true, Recompute::selective);
    CHECK(sc.system.memory_reserved.value == 1610612736LL);  // selene-a100.yaml: 1.5 GiB
    const MemoryReport with = estimate(sc);
    sc.system.memory_reserved = Bytes(0);
    const MemoryReport without = estimate(sc);
    CHECK(with.first_stage.reserved.value == 1610612736LL);
    CHECK(with.peak_stage.total().value - without.peak_stage.total().value == 1610612736LL);
    CHECK(with.margin().value == without.margin().value - 1610612736LL);
    CHECK(with.activation_first_stage == without.activation_first_stage);
    // A reserve that leaves too little turns a fitting case into one that does not fit.
    sc.system.memory_reserved = Bytes(without.margin().value + 1);
    CHECK(without.fits());
    CHECK_FALSE(estimate(sc).fits());
}

TEST_CASE("fewer microbatches than stages: the first stage holds only those") {
    Scenario sc = model_case("gpt3-175b", 8, 8, 1, 4, true, Recompute::selective);
    CHECK(schedule::peak_in_flight(schedule::shape_of(sc.execution), 0) == 4);
    const MemoryReport r = estimate(sc);
    CHECK(r.activation_first_stage_layers.value == r.activation_per_layer.value * 4 * (96 / 8));
}

TEST_CASE("partial full recompute: block keeps the rest, uniform groups keep one input per group") {
    Scenario sc = model_case("gpt3-175b", 8, 8, 1, 16, true, Recompute::full);  // 12 layers per stage
    const Bytes input = activation_bytes_per_layer(sc.model, 8, true, Recompute::full, 1);
    const Bytes all = activation_bytes_per_layer(sc.model, 8, true, Recompute::none, 1);
    const ActivationPlan every = activation_plan(sc.model, sc.execution);
    CHECK(every.chunk_layers[0] == input * 12);
    CHECK(every.recompute_workspace(0, 0) == all);
    sc.execution.recompute_layers = 4;
    sc.execution.recompute_method = RecomputeMethod::block;   // layers 0-3 recomputed, 4-11 keep everything
    const ActivationPlan block = activation_plan(sc.model, sc.execution);
    CHECK(block.chunk_layers[0] == input * 4 + all * 8);
    CHECK(block.recompute_workspace(0, 0) == all);
    sc.execution.recompute_method = RecomputeMethod::uniform;  // 3 groups of 4: 3 inputs, 4 layers live at once
    const ActivationPlan uniform = activation_plan(sc.model, sc.execution);
    CHECK(uniform.chunk_layers[0] == input * 3);
    CHECK(uniform.recompute_workspace(0, 0) == all * 4);
    sc.execution.recompute_layers = 5;                         // 12 = 5 + 5 + 2: three groups
    CHECK(activation_plan(sc.model, sc.execution).chunk_layers[0] == input * 3);
}

TEST_CASE("partial full recompute: time between no recompute and full, errors name the key") {
    Scenario sc = table4_case(2);  // 22B, t = 8, full recompute, 48 layers on one stage
    sc.execution.recompute_layers = 12;
    sc.execution.recompute_method = RecomputeMethod::block;
    validate(sc);
    const IterationResult block = simulate(sc);
    const IterationResult all = simulate(table4_case(2));
    Scenario none = table4_case(0);
    const IterationResult no = simulate(none);
    CHECK(block.iteration_time_s < all.iteration_time_s);
    CHECK(block.iteration_time_s > no.iteration_time_s);
    // A quarter of the layers re-run: the extra hardware FLOPs are a quarter of the full recompute's.
    const double extra_block = (block.hfu - block.mfu) * block.iteration_time_s;
    const double extra_all = (all.hfu - all.mfu) * all.iteration_time_s;
    CHECK(extra_block == Approx(extra_all / 4).epsilon(1e-9));
    sc.execution.recompute_layers = 49;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.recompute_layers") && Catch::Contains("exceeds the 48 layers"));
    sc = table4_case(4);  // selective
    sc.execution.recompute_layers = 2;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("needs recompute: full"));
}
