// Fused units (SimulationOptions::fuse_units): a GPU group whose spans nothing reads runs each unit as one compute
// task (a backward unit that holds a recompute workspace: two), lasting the sum of its kernels and alone-moving
// collectives, and its pipeline calls are posted by the unit's last task. Each piece would have started the
// instant the one before it ended, so every result is the unfused simulation's to the picosecond; only the task
// and event counts fall. A unit beside which a data-parallel collective can run is not fused.
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>

using namespace strata;

namespace {

IterationResult run(const Scenario& sc, bool fuse) {
    SimulationOptions opt;
    opt.fuse_units = fuse;
    return simulate(sc, opt);
}

/// A run with its progress reported every 50 tasks: the first report's total is the estimate made before the run (the
/// final one is at least the tasks done, so it could not show an underestimate).
struct Estimated {
    IterationResult result;
    std::uint64_t done = 0;
    std::uint64_t estimate = 0;
    /// The estimate within `tolerance` of the tasks run, every task reported.
    void check(double tolerance) const {
        CAPTURE(result.tasks, estimate);
        CHECK(done == result.tasks);
        CHECK(static_cast<double>(estimate) >= (1 - tolerance) * static_cast<double>(result.tasks));
        CHECK(static_cast<double>(estimate) <= (1 + tolerance) * static_cast<double>(result.tasks));
    }
};

Estimated run_estimated(const Scenario& sc, bool fuse) {
    Estimated out;
    SimulationOptions opt;
    opt.fuse_units = fuse;
    opt.progress_every = 50;
    opt.progress = [&](std::uint64_t done, std::uint64_t total, Time) {
        if (out.done == 0) out.estimate = total;
        out.done = done;
    };
    out.result = simulate(sc, opt);
    return out;
}

void check_same(const IterationResult& plain, const IterationResult& fused) {
    CHECK(fused.iteration_time == plain.iteration_time);
    CHECK(fused.exposed_comm.tensor == plain.exposed_comm.tensor);
    CHECK(fused.exposed_comm.pipeline == plain.exposed_comm.pipeline);
    CHECK(fused.exposed_comm.data_parallel == plain.exposed_comm.data_parallel);
    CHECK(fused.stage_busy_s == plain.stage_busy_s);
    CHECK(fused.bubble_fraction == plain.bubble_fraction);
    CHECK(fused.peak_memory == plain.peak_memory);
    CHECK(fused.peak_memory_stage == plain.peak_memory_stage);
    CHECK(fused.first_stage_activation_peak == plain.first_stage_activation_peak);
    CHECK(fused.oom == plain.oom);
    CHECK(fused.oom_detail == plain.oom_detail);
    CHECK(fused.slowest_group_factor == plain.slowest_group_factor);
}

}  // namespace

TEST_CASE("fused units: the same result to the picosecond with fewer tasks", "[fused]") {
    const int p = GENERATE(1, 4);
    const int m = GENERATE(1, 2);
    const bool sp = GENERATE(false, true);
    const Recompute rc = GENERATE(Recompute::selective, Recompute::full);
    if (p == 1 && m == 2) return;  // interleaving needs a pipeline
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(p, m, 8, sp, rc), 4);
    // Variation on, run-to-run jitter too: every span's draw must land where it did.
    sc.system.variation.gpu_sigma = 0.02;
    sc.system.variation.span_sigma = 0.03;
    SECTION("t = 8") {}
    SECTION("t = 8, tensor-parallel overlap") {
        sc.execution.tp_comm_overlap = sp;
        validate(sc);
    }
    SECTION("t = 8, tensor-parallel overlap, selective recompute of the MLP (its fused norm with it) too") {
        sc.execution.tp_comm_overlap = sp;
        if (rc == Recompute::selective) sc.execution.recompute_modules = {true, false, true};
        validate(sc);
    }
    SECTION("t = 8, local layers, selective recompute of the norms and the MLP too") {
        sc.execution.transformer_impl = TransformerImpl::local;
        if (rc == Recompute::selective) sc.execution.recompute_modules = {true, true, true};
        validate(sc);
    }
    SECTION("t = 4: two replicas per node, whose reduction shares the tensor-parallel links (alone while it cannot run)") {
        sc.execution.tensor = 4;
        validate(sc);
    }
    bool over = false;
    SECTION("over capacity (the first group to exceed it is named)") {
        sc.system.memory_capacity = Bytes(8LL << 30);
        over = true;
    }
    CAPTURE(p, m, sp, static_cast<int>(rc), sc.execution.tensor);
    const IterationResult plain = run(sc, false);
    const IterationResult fused = run(sc, true);
    check_same(plain, fused);
    CHECK(plain.oom == over);
    // Three of the four replicas fuse: their units' tasks shrink to one or two each.
    CHECK(fused.tasks * 10 < plain.tasks * 8);
    CHECK(fused.events < plain.events);
}

TEST_CASE("fused units: data-parallel collectives beside the units (buckets, overlapped gathers)", "[fused]") {
    // A unit fuses only while no data-parallel collective of its stage can run beside it (it would slow the kernels
    // and not the collectives): before the group's first backward split by layer, after the overlapped gather.
    const int m = GENERATE(1, 2);
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(2, m, 8, true, Recompute::selective), 4);
    sc.system.variation.gpu_sigma = 0.02;
    SECTION("overlapped per-layer reduction") {
        sc.execution.overlap_grad_reduce = true;
    }
    SECTION("distributed optimizer, overlapped reduction and parameter gather") {
        sc.execution.overlap_grad_reduce = true;
        sc.execution.distributed_optimizer = true;
        sc.execution.overlap_param_gather = true;
    }
    SECTION("distributed optimizer, overlapped parameter gather only") {
        sc.execution.distributed_optimizer = true;
        sc.execution.overlap_param_gather = true;
    }
    validate(sc);
    CAPTURE(m, sc.execution.overlap_grad_reduce, sc.execution.overlap_param_gather);
    const IterationResult plain = run(sc, false);
    const IterationResult fused = run(sc, true);
    check_same(plain, fused);
    CHECK(fused.tasks * 10 < plain.tasks * 8);
}

TEST_CASE("fused units: one replica (nothing but replica 0) runs unfused", "[fused]") {
    const Scenario sc = strata::testing::small_22b(2, 1, 8, true, Recompute::selective);
    const IterationResult plain = run(sc, false);
    const IterationResult fused = run(sc, true);
    check_same(plain, fused);
    CHECK(fused.tasks == plain.tasks);
}

TEST_CASE("fused units: the progress estimate is the task count", "[fused]") {
    // The progress callback's total comes from the programs before the run; it must follow what fusing does, or a
    // progress bar would stop at 70%.
    const bool fuse = GENERATE(false, true);
    const int d = GENERATE(1, 4);
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(4, 2, 8, true, Recompute::selective), d);
    CAPTURE(fuse, d);
    run_estimated(sc, fuse).check(0.01);
}

TEST_CASE("fused units: the progress estimate follows a Hopper run's program", "[fused][headroom]") {
    // Under idle headroom every unit ends on the compute stream (a join after a closing collective), and a unit that
    // opens with a collective starts with an anchor; the overlapped gather and reduction run the first forward and the
    // last backward layer by layer, unfused, with their buckets' checks and passes, and the units after the first
    // bucket unfused too (the estimate had missed all these: 72% of the tasks here, 20-72% on the Megatron-LM rows).
    const bool fuse = GENERATE(false, true);
    const int p = GENERATE(1, 2);
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(p, 1, 8, true, Recompute::none), 4);
    sc.system.device = load_device_profile(strata::testing::source_path("scenarios/devices/h100-sxm5-80gb.yaml"));
    sc.execution.tp_comm_overlap = true;
    sc.execution.cross_entropy = CrossEntropy::te;
    sc.execution.distributed_optimizer = true;
    sc.execution.overlap_grad_reduce = true;
    sc.execution.overlap_param_gather = true;
    const int variant = GENERATE(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    // Megatron-Core's buckets: the last backward cut where tensors complete, buckets of ~0.7 layer (7) or of a tensor (8).
    if (variant == 7 || variant == 8) sc.execution.grad_buckets = GradBuckets::megatron_core;
    // NeMo's groups for Apex: one per layer, the rest with the first, whose step runs first (9); by layer, in FP8 with
    // FP8 parameters (10: everything but the weights with the first group).
    if (variant >= 9) sc.execution.grad_buckets = variant == 9 ? GradBuckets::nemo_apex : GradBuckets::nemo_apex_layers;
    // With NeMo's fp32 embedding gradients beside 16-bit ones (9).
    if (variant == 9) sc.execution.grad_reduce_in_fp32 = false;
    if (variant == 9) sc.execution.fp32_embedding_grads = true;
    if (variant == 10) sc.execution.precision = Precision::fp8;
    if (variant == 10) sc.execution.fp8_param_gather = true;
    if (variant == 8) sc.execution.bucket_size = 1e6;
    if (variant == 1) sc.execution.overlap_param_gather = false;
    // The last stage's output-layer weight gradients of its first three microbatches deferred to a drain (11).
    if (variant == 11 && p > 1) sc.execution.defer_embedding_wgrad_compute = true;
    if (variant == 11 && p > 1) sc.execution.wgrad_deferral_limit = 3;
    // FP8 delayed scaling: each unit ends with its amax all-reduce, over the stage's replicas (5) or the group (6).
    if (variant >= 5 && variant <= 8) sc.execution.precision = Precision::fp8;
    if (variant == 6) sc.execution.tp_only_amax_red = true;
    if (variant == 2) sc.execution.overlap_param_gather = sc.execution.overlap_grad_reduce = false;
    if (variant == 3) sc.system.device.power.headroom_j = 0;
    if (variant == 4) sc.execution.distributed_optimizer = sc.execution.overlap_param_gather = sc.execution.overlap_grad_reduce = false;
    CAPTURE(fuse, p, variant);
    run_estimated(sc, fuse).check(0.01);
}

TEST_CASE("fused units: the same result with idle headroom after rest (a power-limited H100)", "[fused][headroom]") {
    // A rested H100 runs its kernels above the sustained clock until its headroom is spent (cost.hpp): a fused unit
    // takes from the credit exactly what its pieces would, a kernel beside an overlapped collective no more than keeps
    // it as long as the collective, and a unit that ends with a collective (TE's loss all-gather) counts the rest after
    // it from the collective's end either way.
    const int p = GENERATE(1, 4);
    const bool sp = GENERATE(false, true);
    Scenario sc = strata::testing::with_data(strata::testing::small_22b(p, 1, 8, sp, Recompute::selective), 4);
    sc.system.device = load_device_profile(strata::testing::source_path("scenarios/devices/h100-sxm5-80gb.yaml"));
    sc.execution.tp_comm_overlap = sp;
    sc.system.variation.gpu_sigma = 0.02;
    sc.system.variation.span_sigma = 0.03;
    std::string what = "selective recompute";
    SECTION("selective recompute") {}
    SECTION("Transformer Engine's loss: the last stage's forward ends with an all-gather") {
        sc.execution.cross_entropy = CrossEntropy::te;
        what = "te loss";
    }
    SECTION("full recompute") {
        sc.execution.recompute = Recompute::full;
        what = "full";
    }
    SECTION("interleaved, two chunks per stage") {
        if (p == 1) return;
        sc = strata::testing::with_data(strata::testing::small_22b(p, 2, 8, sp, Recompute::selective), 4);
        sc.system.device = load_device_profile(strata::testing::source_path("scenarios/devices/h100-sxm5-80gb.yaml"));
        sc.execution.tp_comm_overlap = sp;
        sc.execution.overlap_p2p_comm = sp;
        // Without run-to-run jitter, so that a fused group takes its cached fused parts (and their savings) here.
        sc.system.variation.gpu_sigma = 0.02;
        what = "interleaved";
    }
    SECTION("distributed optimizer, overlapped reduction and parameter gather: units run layer by layer") {
        sc.execution.overlap_grad_reduce = true;
        sc.execution.distributed_optimizer = true;
        sc.execution.overlap_param_gather = true;
        what = "distributed optimizer";
    }
    validate(sc);
    REQUIRE(sc.system.device.power.headroom_j > 0);
    CAPTURE(p, sp, what);
    const IterationResult plain = run(sc, false);
    const IterationResult fused = run(sc, true);
    check_same(plain, fused);
    CHECK(fused.tasks < plain.tasks);
    // The headroom acts where the GPUs rest: a pipeline's ramps (without it the same iteration is longer).
    Scenario tired = sc;
    tired.system.device.power.headroom_j = 0;
    const IterationResult without = run(tired, true);
    if (p > 1) CHECK(without.iteration_time > fused.iteration_time);
    CHECK(without.iteration_time >= fused.iteration_time);
}


TEST_CASE("fused units: random execution combinations give the unfused result, twice alike, with a close estimate",
          "[fused][random]") {
    // Sixty combinations of the execution keys that change the units (drawn with fixed seeds: a failure names its
    // seed and prints its file) on a small model, on the three shipped systems: the fused run equals the unfused one to
    // the picosecond, runs again alike, and the progress estimate is within 10% of its tasks (10,000 such draws gave
    // 5.9% at worst, on a case of 6,224 tasks: the overlapped parameter gather, whose end the estimate cannot foresee,
    // leaves some units unfused). More draws on demand: STRATA_RANDOM_DRAWS=N (seeds 1 to N; at most 100,000).
    unsigned draws = 60;
    if (const char* env = std::getenv("STRATA_RANDOM_DRAWS")) {
        const unsigned long asked = std::strtoul(env, nullptr, 10);
        REQUIRE(asked >= 1);
        REQUIRE(asked <= 100000);
        draws = static_cast<unsigned>(asked);
    }
    int ran = 0;
    for (unsigned seed = 1; seed <= draws; ++seed) {
        std::mt19937 rng(seed);
        const auto pick = [&](std::initializer_list<const char*> v) { return std::string(*(v.begin() + rng() % v.size())); };
        const bool coin = rng() & 1U;
        const std::string sys = pick({"systems/dgx-h100.yaml", "systems/selene-a100.yaml", "systems/dgx-h200.yaml"});
        const bool a100 = sys.find("selene") != std::string::npos;
        const unsigned split = rng() % 4;  // even; the embedding counted; the embedding and the loss; first_stage_layers
        const int layers = split == 1 ? 23 : split == 2 ? 22 : 24;
        std::string model = fmt::format("{{heads: 16, hidden: 1024, layers: {}, seq_len: {}, vocab: 2048", layers, pick({"256", "512"}));
        if (rng() % 2) model += ", kv_heads: 8, mlp: swiglu, norm: rmsnorm, linear_bias: false, dropout: 0, position_embedding: rope";
        if (rng() % 3 == 0) model += ", tied_embeddings: false";
        const int t = 1 << (rng() % 4), p = 1 + int(rng() % 4), d = 1 + int(rng() % 4), c = rng() % 3 == 0 ? 2 : 1;
        const int v = p > 1 && rng() % 3 == 0 ? 2 : 1;
        const int mb = 1 + int(rng() % 2), microbatches = (v > 1 ? p : 1) * (1 + int(rng() % 4));
        const bool sp = t > 1 && coin;
        // One draw per statement: the order in which a call's arguments are evaluated is unspecified, and a seed must
        // name the same scenario on every compiler.
        const std::string recompute = pick({"none", "selective", "full"});
        const std::string attention = c > 1 ? pick({"flash", "flash2"}) : pick({"unfused", "flash", "flash2"});
        const std::string precision = a100 ? pick({"bf16", "fp16"}) : pick({"bf16", "fp8"});
        std::string e = fmt::format("{{tensor: {}, pipeline: {}, data: {}, context_parallel: {}, interleave: {}, microbatch: {}, "
                                    "global_batch: {}, sequence_parallel: {}, recompute: {}, attention: {}, precision: {}",
                                    t, p, d, c, v, mb, mb * d * microbatches, sp, recompute, attention, precision);
        if (rng() % 2) {
            e += ", distributed_optimizer: true, overlap_grad_reduce: true, overlap_param_gather: true";
        } else {
            const bool distributed = rng() % 2 == 0;
            const bool overlap = rng() % 2 == 0;
            e += fmt::format(", distributed_optimizer: {}, overlap_grad_reduce: {}", distributed, overlap);
        }
        if (sp && rng() % 2) e += ", tp_comm_overlap: true";
        if (v > 1 && sp && rng() % 2) e += ", overlap_p2p_comm: true";
        if (rng() % 3 == 0) e += ", check_for_nan_in_grad: true";
        if (rng() % 4 == 0) e += ", host_gap_forward_us: 300, host_gap_backward_us: 200";
        if (rng() % 3 == 0) e += ", cross_entropy: " + pick({"te", "fused"});
        if (rng() % 4 == 0) e += ", gradient_average: " + pick({"scale_always", "scale", "in_collective"});
        if (split == 1) e += ", account_for_embedding_in_pipeline_split: true";
        if (split == 2) e += ", account_for_embedding_in_pipeline_split: true, account_for_loss_in_pipeline_split: true";
        if (split == 3 && p > 2) e += p == 3 ? ", first_stage_layers: 4" : ", first_stage_layers: 3";
        const std::string variation =
            rng() % 3 == 0 ? (rng() % 2 ? "\n  variation: {gpu_sigma: 0.02, span_sigma: 0.03}" : "\n  variation: {gpu_sigma: 0.02}") : "";
        // Drawn last, so that the draws above name the scenarios they named before these keys existed.
        const bool mcore = rng() % 3 == 0;
        if (mcore) e += rng() % 2 ? ", grad_buckets: megatron_core" : ", grad_buckets: megatron_core, bucket_size: 2000000";
        const bool step_overlap = v > 1 && rng() % 3 == 0;
        if (step_overlap) e += ", overlap_param_gather_with_optimizer_step: true";
        const bool apex = !mcore && !step_overlap && rng() % 3 == 0;
        if (apex) e += rng() % 2 ? ", grad_buckets: nemo_apex" : ", grad_buckets: nemo_apex_layers";
        if (apex && rng() % 2) e += ", fp32_embedding_grads: true, grad_reduce_in_fp32: false";  // NeMo's fp32 embedding gradients
        if (p > 1 && microbatches > 1 && rng() % 3 == 0) e += rng() % 2 ? ", defer_embedding_wgrad_compute: true" : ", defer_embedding_wgrad_compute: true, wgrad_deferral_limit: 2";
        const std::string text = "name: random\nmodel: " + model + "}\nsystem:\n  file: " + sys + variation + "\nexecution: " + e + "}\n";
        Experiment ex;
        try {
            ex = load_experiment_text(text, strata::testing::source_path("scenarios/random.yaml"));
        } catch (const InputError&) {
            continue;  // a combination the loader refuses (interleaving that does not divide, ...): its errors are tested elsewhere
        }
        CAPTURE(seed, text);
        const IterationResult plain = run(ex.cases.at(0), false);
        const Estimated a = run_estimated(ex.cases.at(0), true);
        const IterationResult b = run(ex.cases.at(0), true);
        check_same(plain, a.result);
        CHECK(b.iteration_time == a.result.iteration_time);
        CHECK(b.tasks == a.result.tasks);
        a.check(0.10);
        ++ran;
    }
    CHECK(ran * 6 >= static_cast<int>(draws) * 5);  // the draws mostly load
}
