// Main gradients in 16 bits (ExecutionSpec::grad_reduce_in_fp32 false: Megatron-Core's grad_reduce_in_fp32, which
// NeMo's and Megatron-Bridge's performance recipes turn off): the gradient buffer, the accumulation into it and the
// data-parallel reduction in bf16; the step first copies the shard's gradients to fp32. FP16 keeps 16-bit gradients.
#include "fixtures.hpp"
#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

using namespace strata;
using Catch::Contains;

namespace {

Experiment load(const std::string& execution_extra) { return strata::testing::load_small("grad-reduce.yaml", execution_extra); }

/// A data-parallel case whose reduction dominates: 4 replicas on 4 nodes, the reduction after the backward.
Scenario reduction_bound(bool fp32) {
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(1, 1, 1, true, Recompute::selective), 4);
    sc.system.gpus_per_node = 8;  // t = 8: each replica on a node of its own
    sc.system.variation.gpu_sigma = 0;
    sc.execution.grad_reduce_in_fp32 = fp32;
    validate(sc);
    return sc;
}

}  // namespace

TEST_CASE("grad_reduce_in_fp32: the key, its default and its conflict with fp16", "[grad_reduce]") {
    CHECK(load("").cases.at(0).execution.grad_reduce_in_fp32);
    CHECK(load("").cases.at(0).execution.fp32_gradients());
    const Experiment off = load(", grad_reduce_in_fp32: false");
    CHECK_FALSE(off.cases.at(0).execution.fp32_gradients());
    // fp16 keeps 16-bit gradients: saying it is false is fine, true is not modelled and says so.
    CHECK_FALSE(load(", precision: fp16").cases.at(0).execution.fp32_gradients());
    CHECK_NOTHROW(load(", precision: fp16, grad_reduce_in_fp32: false"));
    try {
        (void)load(", precision: fp16, grad_reduce_in_fp32: true");
        FAIL("fp16 with fp32 gradient reduction loaded");
    } catch (const InputError& e) {
        CHECK_THAT(e.what(), Contains("grad-reduce.yaml:3:") && Contains("grad_reduce_in_fp32") && Contains("fp16"));
    }
    try {
        (void)load(", grad_reduce_in_fp32: maybe");
        FAIL("a non-boolean loaded");
    } catch (const InputError& e) {
        CHECK_THAT(e.what(), Contains("grad_reduce_in_fp32"));
    }
}

TEST_CASE("grad_reduce_in_fp32 false: 2-byte gradients in memory, the reduction and the accumulation", "[grad_reduce]") {
    ExecutionSpec e;
    CHECK(bytes_per_param(e).gradients == 4);
    e.grad_reduce_in_fp32 = false;
    CHECK(bytes_per_param(e).gradients == 2);
    CHECK(bytes_per_param(e).optimizer == 16);  // the fp32 copy of the gradients joins the master weights, m and v
    e.precision = Precision::fp8;
    CHECK(bytes_per_param(e).gradients == 2);

    // The embedding's main-gradient add (no GEMM fuses it) reads and writes 2-byte main gradients.
    const Scenario sc = reduction_bound(true);
    Scenario half = sc;
    half.execution.grad_reduce_in_fp32 = false;
    auto add_bytes = [](const Scenario& s) {
        const EmbeddingPlan emb = build_embedding(layer_config(s.model, s.execution));
        for (const Step& st : emb.backward)
            for (const Kernel& k : st.kernels)
                if (k.name == "embedding.main-grad-add") return k.bytes.value;
        return std::int64_t{-1};
    };
    // 2 + 2 x (main-gradient bytes) per element of the rank's rows (vocabulary shard and learned positions).
    REQUIRE(add_bytes(sc) > 0);
    CHECK(add_bytes(sc) % 10 == 0);
    CHECK(add_bytes(half) == add_bytes(sc) / 10 * 6);
}

TEST_CASE("grad_reduce_in_fp32 false: the step copies the shard's gradients to fp32, the zeroing writes 2 bytes",
          "[grad_reduce]") {
    const Scenario sc = reduction_bound(true);
    const SystemSpec& sys = sc.system;
    const double shard = 1e9, params = 4e9;
    const double bw = sys.device.hbm_bandwidth * sys.device.elementwise_bandwidth_efficiency;
    const double b = sys.optimizer.bytes_per_param_step;
    CHECK(sys.optimizer_step_seconds(shard, params, Precision::bf16, 4) == Approx((shard * (b - 4) + params * 4) / bw));
    CHECK(sys.optimizer_step_seconds(shard, params, Precision::bf16, 2) ==
          Approx((shard * (b + 4 - 2) + params * 2) / bw));
    // fp16 has its own step (loss scaling): unchanged.
    const double f = sys.optimizer.bytes_per_param_step_fp16;
    CHECK(sys.optimizer_step_seconds(shard, params, Precision::fp16, 2) == Approx((shard * (f - 2) + params * 2) / bw));
}

TEST_CASE("grad_reduce_in_fp32 false: the data-parallel reduction moves half the bytes", "[grad_reduce]") {
    const Scenario a = reduction_bound(true), b = reduction_bound(false);
    const Bytes grads_fp32 = stage_state(a.model, a.execution, a.system.device_memory(), 0).gradients;
    const Bytes grads_half = stage_state(b.model, b.execution, b.system.device_memory(), 0).gradients;
    CHECK(std::llabs(2 * grads_half.value - grads_fp32.value) <= 1);
    const IterationResult fp32 = simulate(a);
    const IterationResult half = simulate(b);
    REQUIRE(fp32.exposed_comm.data_parallel > Time::zero());
    // The reduction after the backward is bandwidth-bound: about half as long (its latencies do not halve).
    const double ratio = half.exposed_comm.data_parallel.seconds() / fp32.exposed_comm.data_parallel.seconds();
    CHECK(ratio > 0.45);
    CHECK(ratio < 0.6);
    CHECK(half.iteration_time < fp32.iteration_time);
}

TEST_CASE("SP: the norms' and row-parallel biases' gradients are summed over the tensor-parallel group before the step") {
    // Megatron (2022: optimizer.allreduce_layernorm_grads; Megatron-Core: finalize_model_grads) flattens the gradients
    // of every parameter tagged sequence_parallel (the norms' gamma and beta, the row-parallel layers' biases) into
    // one buffer (torch.cat, one kernel per 128 tensors), all-reduces it over the tensor-parallel group and copies each
    // tensor back (one kernel each).
    Scenario sc = strata::testing::small_22b(1, 1, 1, true, Recompute::selective);  // t = 8, SP, GPT: LayerNorm, biases
    const LayerConfig lc = layer_config(sc.model, sc.execution);
    const std::int64_t h = sc.model.hidden, layers = sc.model.layers;
    const std::vector<Step> sync = build_sequence_parallel_grad_sync(lc, int(layers), true);
    REQUIRE(sync.size() == 3);
    const std::int64_t tensors = 6 * layers + 2, bytes = 4 * (6 * layers + 2) * h;  // fp32 main gradients
    CHECK(sync[0].kernels.size() == std::size_t((tensors + 127) / 128));
    REQUIRE(sync[1].kind == Step::Kind::collective);
    CHECK(sync[1].collective.kind == CollectiveKind::all_reduce);
    CHECK(sync[1].collective.message.value == bytes);
    CHECK_FALSE(sync[1].overlapped);
    CHECK(sync[2].kernels.size() == std::size_t(tensors));
    std::int64_t flattened = 0, copied = 0;
    for (const Kernel& k : sync[0].kernels) flattened += k.bytes.value;
    for (const Kernel& k : sync[2].kernels) copied += k.bytes.value;
    CHECK(flattened == 2 * bytes);
    CHECK(copied == 2 * bytes);
    // Without the final norm (a stage other than the last), RMSNorm without biases (Llama): one tensor per norm.
    CHECK(build_sequence_parallel_grad_sync(lc, int(layers), false)[2].kernels.size() == std::size_t(6 * layers));
    ModelSpec llama = sc.model;
    llama.norm = Norm::rmsnorm;
    llama.linear_bias = false;
    LayerConfig ll = lc;
    ll.model = &llama;
    CHECK(build_sequence_parallel_grad_sync(ll, int(layers), true)[2].kernels.size() == std::size_t(2 * layers + 1));
    // 16-bit main gradients halve the bytes.
    LayerConfig bf16 = lc;
    bf16.fp32_main_grads = false;
    CHECK(build_sequence_parallel_grad_sync(bf16, int(layers), true)[1].collective.message.value == bytes / 2);
    // Nothing without SP, or with t = 1 (SP then means nothing).
    LayerConfig no_sp = lc;
    no_sp.sequence_parallel = false;
    CHECK(build_sequence_parallel_grad_sync(no_sp, int(layers), true).empty());
    LayerConfig t1 = lc;
    t1.tensor = 1;
    CHECK(build_sequence_parallel_grad_sync(t1, int(layers), true).empty());

    // In the simulation: the optimizer's span on the compute stream is the step and, before it, the sync (one stage,
    // one replica, no variation).
    sc.system.variation.gpu_sigma = 0;
    SimulationOptions opt;
    opt.keep_trace = true;
    SimulationDetail detail;
    (void)simulate(sc, opt, &detail);
    const double params = parameters_on_stage(sc.model, sc.execution, 0);
    const Time step = Time::from_seconds(sc.system.optimizer_step_seconds(params, params, sc.execution.precision, 4)) +
                      sc.system.optimizer.fixed_overhead;
    const Time sync_time = CostModel(sc.system.device).pass_time(sync, sc.execution.tensor);
    CHECK(sync_time > Time::from_seconds(double(tensors) * sc.system.device.kernel_launch_us * 1e-6));  // launch-bound copies
    int optimizers = 0;
    for (const TraceSpan& sp : detail.trace.spans)
        if (std::string(sp.kind) == "optimizer") {
            ++optimizers;
            CHECK(std::llabs((sp.end - sp.start - step - sync_time).ps()) <= 2);
        }
    CHECK(optimizers == 1);  // one per GPU group (the tensor-parallel group runs as one)
}

TEST_CASE("check_for_nan_in_grad: each bucket's gradients read for their norm, checked on the host, before the "
          "reduction", "[grad_reduce]") {
    CHECK_FALSE(load("").cases.at(0).execution.check_for_nan_in_grad);  // Megatron-Core DDP's default
    CHECK(load(", check_for_nan_in_grad: true").cases.at(0).execution.check_for_nan_in_grad);
    CHECK_THROWS_WITH(load(", check_for_nan_in_grad: often"),
                      Contains("grad-reduce.yaml:3:") && Contains("execution.check_for_nan_in_grad"));

    for (const bool overlap : {false, true}) {
        INFO("overlap_grad_reduce " << overlap);
        Scenario sc = reduction_bound(true);
        sc.execution.overlap_grad_reduce = overlap;
        validate(sc);
        const double params = parameters_on_stage(sc.model, sc.execution, 0);
        auto checks = [&](const Scenario& s, Time& total, int& count) {
            SimulationOptions opt;
            opt.keep_trace = true;
            SimulationDetail detail;
            const IterationResult r = simulate(s, opt, &detail);
            total = Time::zero();
            count = 0;
            for (const TraceSpan& span : detail.trace.spans)
                if (std::string(span.kind) == "gradient-nan-check" && span.process == detail.trace.spans.front().process) {
                    total += span.end - span.start;
                    ++count;
                }
            return r.iteration_time;
        };
        Time total;
        int count = 0;
        const Time without = checks(sc, total, count);
        CHECK(count == 0);
        sc.execution.check_for_nan_in_grad = true;
        const Time with = checks(sc, total, count);
        // One check per bucket (a layer's each, and the rest), or one over everything; each reads every gradient
        // once (fp32: 4 bytes) and costs three launches.
        const int buckets = overlap ? sc.model.layers + 1 : 1;
        CHECK(count == buckets);
        const double expected = 3e-6 * sc.system.device.kernel_launch_us * buckets +
                                params * 4 / (sc.system.device.hbm_bandwidth * sc.system.device.elementwise_bandwidth_efficiency);
        if (!overlap) CHECK(total.seconds() == Approx(expected).epsilon(1e-6));
        // Overlapped, the checks run beside earlier buckets' reductions, which hold SMs (a few percent slower).
        if (overlap) CHECK(total.seconds() >= expected * (1 - 1e-9));
        if (overlap) CHECK(total.seconds() <= expected * 1.05);
        CHECK(with > without);
    }
}
