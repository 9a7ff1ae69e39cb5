// Gradient averaging (ExecutionSpec::gradient_average): a pass that reads and writes every gradient once on the
// compute stream before the data-parallel reduction (scale: only with replicas, Megatron-Core; scale_always:
// also with one, Megatron-LM's local DDP of 2021-2023), or none (in_collective). And the other whole-buffer pass of
// the step: the gradient buffer is zeroed for every parameter the GPU holds, also with the distributed optimizer.
#include "fixtures.hpp"
#include "strata/memory.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

using namespace strata;

namespace {

struct Passes {
    IterationResult result;
    int count = 0;
    std::int64_t stage0_ps = 0;  ///< stage 0 replica 0's passes, summed
};

Passes run(Scenario sc, GradientAverage mode) {
    sc.execution.gradient_average = mode;
    validate(sc);
    SimulationOptions opt;
    opt.keep_trace = true;
    SimulationDetail detail;
    Passes out;
    out.result = simulate(sc, opt, &detail);
    for (const TraceSpan& s : detail.trace.spans) {
        if (std::string(s.kind) != "gradient-average") continue;
        ++out.count;
        if (s.process == 0) out.stage0_ps += (s.end - s.start).ps();
    }
    return out;
}

Scenario one_stage(int d) {
    Scenario sc = strata::testing::small_22b(1, 1, 4, true, Recompute::selective);
    sc.system.variation.gpu_sigma = 0;  // the pass at the profile's speed exactly
    return d > 1 ? strata::testing::with_data(sc, d) : sc;
}

}  // namespace

TEST_CASE("gradient averaging: the paper's scenarios name Megatron-LM's local DDP", "[gradient_average]") {
    const Scenario sc = strata::testing::table4_case(0);
    CHECK(sc.execution.gradient_average == GradientAverage::scale_always);
    CHECK(sc.execution.averages_by_pass());
    ExecutionSpec e;
    CHECK(e.gradient_average == GradientAverage::scale);  // the default: Megatron-Core
    CHECK_FALSE(e.averages_by_pass());                     // one replica: nothing to average
    e.data = 2;
    CHECK(e.averages_by_pass());
    e.gradient_average = GradientAverage::in_collective;
    CHECK_FALSE(e.averages_by_pass());
    CHECK(std::string(to_string(GradientAverage::scale_always)) == "scale_always");
}

TEST_CASE("gradient averaging with one replica: scale_always adds the pass to the critical path", "[gradient_average]") {
    const Scenario sc = one_stage(1);
    const Passes none = run(sc, GradientAverage::scale);
    const Passes always = run(sc, GradientAverage::scale_always);
    const Passes collective = run(sc, GradientAverage::in_collective);
    CHECK(none.count == 0);
    CHECK(collective.count == 0);
    CHECK(none.result.iteration_time == collective.result.iteration_time);
    REQUIRE(always.count == 1);
    // Every gradient read and written once at the elementwise bandwidth: 2 x 4 bytes (fp32 main gradients).
    const double params = parameters_on_stage(sc.model, sc.execution, 0);
    const double expected = 2.0 * params * 4.0 / (sc.system.device.hbm_bandwidth * sc.system.device.elementwise_bandwidth_efficiency);
    CHECK(std::abs(double(always.stage0_ps) * 1e-12 / expected - 1) < 1e-9);
    // One stage, no replicas: the pass sits between the last backward and the optimizer step, nothing hides it.
    CHECK(always.result.iteration_time.ps() - none.result.iteration_time.ps() == always.stage0_ps);
    CHECK(always.result.exposed_comm.data_parallel == none.result.exposed_comm.data_parallel);
}

TEST_CASE("gradient averaging with replicas: scale and scale_always agree, in_collective has no pass", "[gradient_average]") {
    const Scenario sc = one_stage(2);
    const Passes scale = run(sc, GradientAverage::scale);
    const Passes always = run(sc, GradientAverage::scale_always);
    const Passes collective = run(sc, GradientAverage::in_collective);
    CHECK(scale.count == 2);  // one per replica
    CHECK(scale.result.iteration_time == always.result.iteration_time);
    CHECK(collective.count == 0);
    CHECK(scale.result.iteration_time.ps() - collective.result.iteration_time.ps() == scale.stage0_ps);
    CHECK(scale.result.exposed_comm.data_parallel == collective.result.exposed_comm.data_parallel);
}

TEST_CASE("gradient averaging with an overlapped reduction: one pass per layer bucket and one for the rest",
          "[gradient_average]") {
    Scenario sc = one_stage(2);
    sc.execution.overlap_grad_reduce = true;
    const Passes scale = run(sc, GradientAverage::scale);
    const Passes collective = run(sc, GradientAverage::in_collective);
    CHECK(scale.count == 2 * (sc.model.layers + 1));
    // The same bytes as the whole buffer's pass, in pieces; those that run while an earlier bucket's reduction
    // holds SMs (the NCCL channels) run slower, never faster.
    const double params = parameters_on_stage(sc.model, sc.execution, 0);
    const double expected = 2.0 * params * 4.0 / (sc.system.device.hbm_bandwidth * sc.system.device.elementwise_bandwidth_efficiency);
    const double slowest = 1.0 / (1.0 - double(sc.system.device.nccl_channels) / sc.system.device.sm_count);
    CHECK(double(scale.stage0_ps) * 1e-12 >= expected * (1 - 1e-9));
    CHECK(double(scale.stage0_ps) * 1e-12 <= expected * slowest);
    CHECK(scale.result.iteration_time > collective.result.iteration_time);
}

TEST_CASE("optimizer step: the distributed optimizer updates its shard but zeroes the whole gradient buffer",
          "[gradient_average]") {
    const Scenario sc = one_stage(1);
    const SystemSpec& sys = sc.system;
    const double bw = sys.device.hbm_bandwidth * sys.device.elementwise_bandwidth_efficiency;
    const double params = 1e9, bytes = sys.optimizer.bytes_per_param(Precision::bf16);
    REQUIRE(bytes == 42);
    // Without the distributed optimizer the shard is everything: the step's bytes over every parameter.
    CHECK(sys.optimizer_step_seconds(params, params, Precision::bf16, 4) == Approx(params * bytes / bw).epsilon(1e-12));
    // Sharded over 8 replicas: 38 bytes over an eighth, the 4-byte zeroing over all of them.
    CHECK(sys.optimizer_step_seconds(params / 8, params, Precision::bf16, 4) ==
          Approx((params / 8 * 38 + params * 4) / bw).epsilon(1e-12));
    // fp16: 2-byte gradients, 54 bytes in all.
    CHECK(sys.optimizer_step_seconds(params / 8, params, Precision::fp16, 2) ==
          Approx((params / 8 * 52 + params * 2) / bw).epsilon(1e-12));
}
