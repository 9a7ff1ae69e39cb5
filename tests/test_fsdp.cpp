// Megatron-FSDP (execution.fsdp, optim_grads_params): the sharded memory counted by hand, the refusals, the collectives
// a step launches, and where their time shows.
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace strata;
using strata::testing::source_path;

namespace {

/// Llama 3 8B (`layers` layers, sequence 4096) on one DGX H100, t = 1, d = 8, 16 sequences (2 microbatches each).
std::string llama8b_text(const std::string& extra, int layers = 4, const std::string& grad_fp32 = "false") {
    return "model: {file: ../models/llama3-8b.yaml, layers: " + std::to_string(layers) +
           ", seq_len: 4096}\n"
           "system: ../systems/dgx-h100.yaml\n"
           "execution: {tensor: 1, pipeline: 1, data: 8, microbatch: 1, global_batch: 16, recompute: none, "
           "attention: flash, transformer_impl: transformer_engine, distributed_optimizer: true, "
           "grad_reduce_in_fp32: " +
           grad_fp32 + extra + "}\n";
}

Scenario llama8b(const std::string& extra, int layers = 4, const std::string& grad_fp32 = "false") {
    return load_experiment_text(llama8b_text(extra, layers, grad_fp32), source_path("scenarios/llama/fsdp-test.yaml"))
        .cases.at(0);
}

/// The error loading `text` (as scenarios/llama/x.yaml) gives, or "" when it loads.
std::string error_of(const std::string& text) {
    return strata::testing::load_error(text, "scenarios/llama/x.yaml");
}

struct Run {
    IterationResult it;
    SimulationDetail detail;
    std::map<std::string, int> spans;  // traced tasks by kind
    std::vector<TraceSpan> group0;     // the first GPU group's compute spans and the FSDP collectives, as they end
};

Run simulate_case(const Scenario& sc) {
    Run r;
    SimulationOptions options;
    options.progress_every = 0;
    options.keep_trace = true;
    options.trace_first_replica = options.trace_last_replica = 0;
    options.trace_spans = [&r](const TraceSpan& s) {
        ++r.spans[s.kind];
        const std::string kind = s.kind;
        if (kind == "forward" || kind == "backward" || kind.rfind("fsdp-", 0) == 0) r.group0.push_back(s);
    };
    r.it = simulate(sc, options, &r.detail);
    return r;
}

/// The end of the latest span of `kind` of microbatch `mb` (its `nth` of that kind in end order with nth >= 0).
Time end_of(const std::vector<TraceSpan>& spans, const std::string& kind, int mb, int nth = -1) {
    std::vector<Time> ends;
    for (const TraceSpan& s : spans)
        if (kind == s.kind && s.microbatch == mb) ends.push_back(s.end);
    std::sort(ends.begin(), ends.end());
    if (ends.empty()) return Time::zero();
    return nth < 0 ? ends.back() : ends.at(static_cast<std::size_t>(nth));
}

Time first_start(const std::vector<TraceSpan>& spans, const std::string& kind, int mb) {
    Time t = Time::from_ps(std::numeric_limits<std::int64_t>::max());
    for (const TraceSpan& s : spans)
        if (kind == s.kind && s.microbatch == mb) t = std::min(t, s.start);
    return t;
}

// Llama 3 8B per GPU (t = 1): QKV 4096 x (4096 + 2 x 8 x 128), projection 4096^2, fc1 2 x 4096 x 14336, fc2 14336 x
// 4096; two RMSNorms of 4096. Embedding and output layer 128,256 x 4096 each, the final norm 4096.
constexpr double kLinear = 4096.0 * 6144 + 4096.0 * 4096 + 2.0 * 4096 * 14336 + 14336.0 * 4096;
constexpr double kLayer = kLinear + 2 * 4096.0;
constexpr double kRest = 2 * 128256.0 * 4096 + 4096;

}  // namespace

TEST_CASE("fsdp: weights, gradients and optimizer state sharded over d, beside the double buffer, by hand") {
    const DeviceMemory dev = llama8b("").system.device_memory();
    const double L = 4, P = L * kLayer + kRest, d = 8;
    // BF16: 2-byte weights and gradients, the optimizer's fp32 weights, gradient copy and Adam (16 bytes), all over d;
    // two gathered layers and two layers of gradients; the embedding and output layer gathered and their gradients.
    const Scenario bf16 = llama8b(", fsdp: true");
    const StageMemory m = stage_state(bf16.model, bf16.execution, dev, 0);
    CHECK(m.weights.value == std::llround(2 * P / d + 2 * kRest + 2 * 2 * kLayer));
    CHECK(m.gradients.value == std::llround(2 * P / d + 2 * 2 * kLayer + 2 * kRest));
    CHECK(m.optimizer.value == std::llround(16 * P / d));
    // Against the distributed optimizer alone: weights and gradients whole on every GPU.
    const Scenario ddp = llama8b("");
    const StageMemory dm = stage_state(ddp.model, ddp.execution, dev, 0);
    CHECK(dm.weights.value == std::llround(2 * P));
    CHECK(m.total() < dm.total());
    CHECK(m.optimizer == dm.optimizer);
    // FP8 parameters: the layers' linear weights 1 byte, sharded and gathered; one layer's transposes beside them.
    const Scenario fp8 = llama8b(", fsdp: true, precision: fp8, fp8_param_gather: true");
    const StageMemory f = stage_state(fp8.model, fp8.execution, dev, 0);
    const double unit = kLinear + 2 * (kLayer - kLinear);
    CHECK(f.weights.value == std::llround((L * unit + 2 * kRest) / d + 2 * kRest + 2 * unit + kLinear));
    // fp32 gradients (grad_reduce_in_fp32, Megatron-Core 0.14-0.15): 4 bytes each, the optimizer's copy not needed.
    const Scenario fp32 = llama8b(", fsdp: true", 4, "true");
    const StageMemory g = stage_state(fp32.model, fp32.execution, dev, 0);
    CHECK(g.gradients.value == std::llround(4 * P / d + 4 * 2 * kLayer + 4 * kRest));
    CHECK(g.optimizer.value == std::llround(12 * P / d));
}

TEST_CASE("fsdp: the settings it is not modelled with are errors that say why") {
    const auto with = [](const std::string& extra) { return error_of(llama8b_text(", fsdp: true" + extra)); };
    CHECK(with("").empty());
    CHECK_THAT(error_of(llama8b_text(", fsdp: true")
                            .replace(llama8b_text("").find("distributed_optimizer: true"),
                                     std::strlen("distributed_optimizer: true"), "distributed_optimizer: false")),
               Catch::Contains("execution.fsdp: fsdp: needs distributed_optimizer: true"));
    std::string two_stages = llama8b_text(", fsdp: true");
    two_stages.replace(two_stages.find("pipeline: 1"), 11, "pipeline: 2");
    CHECK_THAT(error_of(two_stages), Catch::Contains("without pipeline parallelism (pipeline: 1; here 2)"));
    std::string one = llama8b_text(", fsdp: true");
    one.replace(one.find("data: 8"), 7, "data: 1");
    one.replace(one.find("global_batch: 16"), 16, "global_batch: 2");
    CHECK_THAT(error_of(one), Catch::Contains("needs data x context_parallel > 1"));
    CHECK_THAT(with(", precision: fp8"), Catch::Contains("FP8 is modelled with fp8_param_gather: true"));
    CHECK_THAT(with(", offload_modules: [qkv_linear]"), Catch::Contains("not modelled together with offload_modules"));
    CHECK_THAT(with(", grad_buckets: nemo_apex"), Catch::Contains("grad_buckets: nemo_apex is Apex's"));
    // (Deferring the embedding's weight gradient needs pipeline > 1, which fsdp refuses: the loader says so first.)
    CHECK_THAT(with(", defer_embedding_wgrad_compute: true"), Catch::Contains("needs pipeline > 1"));
}

TEST_CASE(
    "fsdp: each layer gathered for every forward and backward, reduced after every backward, its time shown "
    "where the link cannot keep pace") {
    const int L = 4, microbatches = 2;
    const Scenario sc = llama8b(", fsdp: true");
    Run r = simulate_case(sc);
    // The step's first forward gathers the embedding and the output layer too; each backward reduce-scatters them.
    CHECK(r.spans["fsdp-all-gather"] == microbatches * 2 * L + 2);
    CHECK(r.spans["fsdp-reduce-scatter"] == microbatches * (L + 2));
    CHECK(r.spans["dp-reduce"] == 0);
    // The memory never passes the analytical count: the static state and one microbatch's activations.
    const DeviceMemory dev = sc.system.device_memory();
    CHECK(r.detail.stage_peaks.at(0).total == stage_memory(sc.model, sc.execution, dev, 0).total());
    // Over NVLink the gathers hide behind the layers but for the step's first and each backward's last layer, and the
    // last reduce-scatters each backward waits for: some exposed data-parallel time, a small share of the step.
    CHECK(r.it.exposed_comm.data_parallel > Time::zero());
    CHECK(r.it.exposed_comm.data_parallel.seconds() < 0.1 * r.it.iteration_time_s);
    // At 1/100 of the bandwidth every layer waits for its weights: the step slows, the waits show as data-parallel.
    Scenario slow = sc;
    slow.system.network.nvlink_bandwidth = {sc.system.network.nvlink_bandwidth.value / 100};
    slow.system.device.intra_node_bus_bandwidth = slow.system.network.nvlink_bandwidth.value;
    const Run s = simulate_case(slow);
    CHECK(s.it.iteration_time_s > 2 * r.it.iteration_time_s);
    CHECK(s.it.exposed_comm.data_parallel.seconds() > 0.5 * s.it.iteration_time_s);
    // The reduce-scatters of a microbatch, in launch order: the output layer's, layers L-1 .. 0, the embedding's. Each
    // backward ends waiting for all of them, so the next forward starts after the last; the backward of layer 0 (and
    // the embedding's after it) starts only once layer 2's reduce-scatter has freed the gradient buffer it reuses.
    for (int mb = 0; mb < microbatches; ++mb) {
        const Time last_rs = end_of(s.group0, "fsdp-reduce-scatter", mb);
        CHECK(s.spans.count("fsdp-reduce-scatter") > 0);
        if (mb + 1 < microbatches) CHECK(first_start(s.group0, "forward", mb + 1) >= last_rs);
        CHECK(end_of(s.group0, "backward", mb) > end_of(s.group0, "fsdp-reduce-scatter", mb, 1 + (L - 1 - 2)));
    }
    // The distributed optimizer alone on the same slow link reduces once per step: far less exposed.
    Scenario ddp = llama8b("");
    ddp.system.network = slow.system.network;
    ddp.system.device.intra_node_bus_bandwidth = slow.system.device.intra_node_bus_bandwidth;
    CHECK(simulate_case(ddp).it.iteration_time_s < s.it.iteration_time_s);
}

TEST_CASE("fsdp: across two nodes the collectives cross the rails and the representative replicas agree") {
    std::string text = llama8b_text(", fsdp: true", 3);
    text.replace(text.find("data: 8"), 7, "data: 16");
    text.replace(text.find("global_batch: 16"), 16, "global_batch: 32");
    const Scenario two = load_experiment_text(text, source_path("scenarios/llama/fsdp-test.yaml")).cases.at(0);
    const Scenario one = llama8b(", fsdp: true", 3);
    SimulationOptions all, rep;
    all.progress_every = rep.progress_every = 0;
    rep.representative_replicas = true;
    const IterationResult a = simulate(two, all), b = simulate(two, rep), o = simulate(one, all);
    // Over the NICs (48 GB/s a rail against NVLink's 360) each gather and reduce-scatter takes longer: more is exposed.
    CHECK(a.exposed_comm.data_parallel > o.exposed_comm.data_parallel);
    CHECK(a.iteration_time > o.iteration_time);
    // The 8 replicas of the first node standing for all 16: within a percent of simulating every one.
    CHECK(std::abs(b.iteration_time_s / a.iteration_time_s - 1) < 0.01);
    // Deterministic.
    CHECK(simulate(two, all).iteration_time == a.iteration_time);
}

TEST_CASE("fsdp: with FP8 weights each backward transposes them before its data-gradient GEMMs, once per weight") {
    const Scenario sc = llama8b(", fsdp: true, precision: fp8, fp8_param_gather: true");
    const LayerPlan with = build_layer(layer_config(sc.model, sc.execution));
    LayerConfig plain_config = layer_config(sc.model, sc.execution);
    plain_config.fp8_weight_transposes = false;
    const LayerPlan without = build_layer(plain_config);
    std::int64_t bytes = 0;
    int kernels = 0;
    for (const LayerPlan* plan : {&with, &without})
        for (const Step& st : plan->backward)
            for (const Kernel& k : st.kernels)
                if (k.name.find(".fp8-weight-transpose") != std::string::npos) {
                    CHECK(plan == &with);
                    bytes += k.bytes.value;
                    ++kernels;
                }
    // QKV, the projection, fc1 and fc2: each weight read and written once, 1 byte each.
    CHECK(kernels == 4);
    CHECK(bytes == std::llround(2 * kLinear));
    for (const Step& st : with.forward)
        for (const Kernel& k : st.kernels)
            CHECK(k.name.find("weight-transpose") == std::string::npos);
    // Nothing once per step instead (the distributed optimizer alone casts its FP8 weights' transposes at the step).
    CHECK(fp8_weight_cast_bytes(sc.model, sc.execution, 0) == 0.0);
    CHECK(fp8_weight_cast_bytes(sc.model, llama8b(", precision: fp8, fp8_param_gather: true").execution, 0) > 0.0);
}
