// Fine-grained activation offloading (Megatron-Core's offload_modules): the bytes each module moves, the refusals,
// which units keep their last layer, and the simulation against the analytical memory.
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/schedule.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace strata;
using strata::testing::source_path;

namespace {

/// Llama 3 8B on DGX H100 (t = 1, no SP, FlashAttention, Transformer Engine's layers), `layers` layers, with `extra`
/// (", key: value") in its execution mapping.
std::string llama8b_text(const std::string& extra, int layers, const std::string& system_extra,
                         const std::string& recompute) {
    return "model: {file: ../models/llama3-8b.yaml, layers: " + std::to_string(layers) +
           ", seq_len: 4096}\n"
           "system: {file: ../systems/dgx-h100.yaml" +
           system_extra +
           "}\n"
           "execution: {tensor: 1, pipeline: 1, data: 1, microbatch: 1, global_batch: 2, recompute: " +
           recompute + ", attention: flash, transformer_impl: transformer_engine" + extra + "}\n";
}

Scenario llama8b(const std::string& extra, int layers = 4, const std::string& system_extra = "",
                 const std::string& recompute = "none") {
    return load_experiment_text(llama8b_text(extra, layers, system_extra, recompute),
                                source_path("scenarios/llama/offload-test.yaml"))
        .cases.at(0);
}

constexpr const char* kAll = ", offload_modules: [qkv_linear, core_attn, attn_proj]";

/// The error loading `text` (as scenarios/llama/x.yaml) gives, or "" when it loads.
std::string error_of(const std::string& text) {
    return strata::testing::load_error(text, "scenarios/llama/x.yaml");
}

std::string error_of(const std::string& extra, const std::string& recompute) {
    return error_of(llama8b_text(extra, 4, "", recompute));
}

}  // namespace

TEST_CASE("offload: what each module copies, frees and reloads, tensor by tensor") {
    const Scenario sc = llama8b(kAll);
    // n tokens x h = 4096 x 4096; K and V per query group: 8 x 128 = 1024 wide; the softmax statistics (32 heads x
    // 4096, fp32) are under 2^20 elements and stay.
    const std::int64_t nh = 4096LL * 4096, nkv = 4096LL * 1024;
    LayerConfig c = layer_config(sc.model, sc.execution);
    LayerOffload o = build_layer(c).offload;
    // qkv_linear: the layer input and the norm's output; core_attn: q, k, v and the output; attn_proj: its input, in
    // 16-bit training the attention's output again (copied twice, freed once).
    CHECK(o.copied.value == 2 * nh + 2 * nh + (2 * nh + 2 * nkv + 2 * nkv + 2 * nh) + 2 * nh);
    CHECK(o.freed.value == 2 * nh + 2 * nh + (2 * nh + 2 * nkv + 2 * nkv) + 2 * nh);
    CHECK(o.reloaded == o.copied);
    CHECK(o.copies == 7);
    CHECK(o.freed <= build_layer(c).stored_bytes);

    // The attention core alone: its output stays held by the projection, so it is copied but not freed.
    c.offload = OffloadModules{false, false, true, false, false};
    o = build_layer(c).offload;
    CHECK(o.copied.value == 2 * nh + 4 * nkv + 2 * nh);
    CHECK(o.freed.value == 2 * nh + 4 * nkv);

    // FP8: the norm's output and the projection's input in 1 byte; the attention's 16-bit output is its own tensor,
    // freed with the rest.
    c.offload = OffloadModules{false, true, true, true, false};
    c.fp8 = true;
    o = build_layer(c).offload;
    CHECK(o.copied.value == (2 * nh + nh) + (2 * nh + 4 * nkv + 2 * nh) + nh);
    CHECK(o.freed == o.copied);
    CHECK(o.freed <= build_layer(c).stored_bytes);

    // Selective recompute of the attention core: Megatron-Core skips that group; the projection's input remains.
    c.fp8 = false;
    c.recompute = Recompute::selective;
    c.modules = RecomputeModules{true, false, false};
    o = build_layer(c).offload;
    CHECK(o.copied.value == 2 * nh + 2 * nh + 2 * nh);
    CHECK(o.freed == o.copied);
    CHECK(o.freed <= build_layer(c).stored_bytes);

    // Tensors under 2^20 elements stay: at t = 8 with SP the layer input's shard is 512 x 4096 = 2^21 elements
    // (copied), q's 4096 x 512 = 2^21 (copied), K's and V's 4096 x 128 = 2^19 (kept).
    c.recompute = Recompute::none;
    c.tensor = 8;
    c.sequence_parallel = true;
    c.offload = OffloadModules{false, false, true, false, false};
    o = build_layer(c).offload;
    CHECK(o.copies == 2);  // q and the output
    CHECK(o.copied.value == 2 * (nh / 8) * 2);

    // Context parallelism: Transformer Engine saves k and v as one tensor (kv), which the floor then sees whole: at
    // c = 2, t = 4 each is 2048 x 256 = 2^19 elements, together 2^20 (copied).
    c.tensor = 4;
    c.context = 2;
    o = build_layer(c).offload;
    CHECK(o.copies == 3);  // q, kv, the output
    CHECK(o.copied.value == 2 * (nh / 8) + 2 * 2 * (4096LL / 2 * 256) + 2 * (nh / 8));

    // A chunk after the pipeline's first receives its first layer's input from the stage before; the schedule holds it
    // until the backward, so offloading it frees nothing there.
    c.context = 1;
    c.offload = OffloadModules{false, true, true, true, false};
    o = build_layer(c).offload;
    CHECK(o.layer_input.value == 2 * (nh / 4));  // the SP shard of the layer input at t = 4
    CHECK(o.freed_at(0, 0) == o.freed);
    CHECK(o.freed_at(1, 0) == o.freed - o.layer_input);
    CHECK(o.freed_at(1, 1) == o.freed);
}

TEST_CASE("offload: the settings Megatron-Core refuses or ignores are errors that say why") {
    CHECK(error_of(kAll, "none").empty());
    CHECK(error_of(", offload_modules: [qkv_linear], recompute_modules: [mlp]", "selective").empty());
    // The error names the file, line and key.
    const std::string local = error_of(
        "model: {file: ../models/llama3-8b.yaml, layers: 4}\n"
        "system: ../systems/dgx-h100.yaml\n"
        "execution: {tensor: 1, pipeline: 1, microbatch: 1, global_batch: 2, "
        "recompute: none, attention: flash, offload_modules: [qkv_linear]}\n");
    CHECK(local.find("x.yaml:3:") != std::string::npos);
    CHECK(local.find("execution.offload_modules: offload_modules: Megatron-Core's fine-grained activation offloading "
                     "runs with Transformer Engine's layers") != std::string::npos);
    CHECK(local.find("local in force") != std::string::npos);
    CHECK(error_of(", offload_modules: [attn_norm, qkv_linear]", "none").find("attn_norm has no effect") !=
          std::string::npos);
    CHECK(error_of(", offload_modules: [mlp_norm]", "none").find("mlp_norm has no effect") != std::string::npos);
    CHECK(error_of(", offload_modules: [attn_proj]", "none").find("attn_proj needs core_attn too") !=
          std::string::npos);
    CHECK(error_of("model: {file: ../models/llama3-8b.yaml, layers: 4}\n"
                   "system: ../systems/dgx-h100.yaml\n"
                   "execution: {tensor: 1, pipeline: 1, microbatch: 1, global_batch: 2, recompute: none, "
                   "attention: unfused, transformer_impl: transformer_engine, offload_modules: [core_attn]}\n")
              .find("modelled for fused attention") != std::string::npos);
    CHECK(error_of(", offload_modules: [qkv_linear]", "full").find("not modelled with recompute: full") !=
          std::string::npos);
    // A system without the host link.
    CHECK(error_of("model: {file: ../models/llama3-8b.yaml, layers: 4}\n"
                   "system: {name: no-host-link, device_profile: ../devices/h100-sxm5-80gb.yaml, gpus_per_node: 8, "
                   "network: {nvlink_bandwidth_bytes_per_s: 360e9, rails: 8, nic_bandwidth_bytes_per_s: 48e9, "
                   "nodes_per_leaf: 32}, optimizer: {bytes_per_param_step: 42}}\n"
                   "execution: {tensor: 1, pipeline: 1, microbatch: 1, global_batch: 2, recompute: none, "
                   "attention: flash, transformer_impl: transformer_engine, offload_modules: [qkv_linear]}\n")
              .find("needs the host link: network.device_to_host_bandwidth_bytes_per_s") != std::string::npos);
    // The loader names the valid modules.
    const std::string unknown = error_of(", offload_modules: [mlp]", "none");
    CHECK(unknown.find("offload_modules") != std::string::npos);
    CHECK(unknown.find("attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm") != std::string::npos);
}

TEST_CASE("offload: a forward keeps its last layer when its own backward is the stage's next") {
    using schedule::Unit;
    // One stage: F0 B0 F1 B1: every forward's next backward is its own.
    CHECK(offloads_last_layer({{true, 0, 0}, {false, 0, 0}, {true, 0, 1}, {false, 0, 1}}) ==
          std::vector<bool>{false, false, false, false});
    // The first of four stages in 1F1B, 6 microbatches: F0 F1 F2 | F3 B0 F4 B1 F5 B2 | B3 B4 B5. Only F0's next
    // backward is its own; each other forward runs while an earlier microbatch's backward is next, so it offloads its
    // last layer too, and its backward reads the same.
    const schedule::Shape shape{Schedule::one_f_one_b, 4, 1, 6};
    const std::vector<Unit> first = schedule::unit_order(shape, 0);
    REQUIRE(first == std::vector<Unit>{{true, 0, 0},
                                       {true, 0, 1},
                                       {true, 0, 2},
                                       {true, 0, 3},
                                       {false, 0, 0},
                                       {true, 0, 4},
                                       {false, 0, 1},
                                       {true, 0, 5},
                                       {false, 0, 2},
                                       {false, 0, 3},
                                       {false, 0, 4},
                                       {false, 0, 5}});
    CHECK(offloads_last_layer(first) ==
          std::vector<bool>{false, true, true, true, false, true, true, true, true, true, true, true});
    // The last stage runs each microbatch's backward right after its forward: none offloads its last layer.
    const std::vector<bool> last = offloads_last_layer(schedule::unit_order(shape, 3));
    CHECK(last == std::vector<bool>(last.size(), false));
    CHECK(last.size() == 12);
}

namespace {

struct Run {
    IterationResult it;
    SimulationDetail detail;
};

Run simulate_case(const Scenario& sc) {
    Run r;
    SimulationOptions options;
    options.progress_every = 0;
    r.it = simulate(sc, options, &r.detail);
    return r;
}

Scenario with_link(Scenario sc, double bytes_per_s) {
    sc.system.network.device_to_host_bandwidth = {bytes_per_s};
    sc.system.network.host_to_device_bandwidth = {bytes_per_s};
    return sc;
}

}  // namespace

TEST_CASE("offload: simulated copies against the analytical memory, a link that keeps pace and one that does not") {
    const Scenario plain = llama8b("");
    const Scenario fast = with_link(llama8b(kAll), 1e13), slow = with_link(llama8b(kAll), 1e9);
    const Run p = simulate_case(plain), f = simulate_case(fast), s = simulate_case(slow);
    const DeviceMemory dev = plain.system.device_memory();
    const LayerPlan layer = build_layer(layer_config(fast.model, fast.execution));
    const LayerOffload& o = layer.offload;
    REQUIRE(o.any());

    // One stage, one microbatch in flight: every layer but the last leaves (the last is kept: its backward is next);
    // the peak comes as the backward starts with the layer before's reload: L per-layer activations, less L - 2 layers'
    // freed bytes, plus what the reload brings back beyond what it freed (the attention's output, copied twice).
    const std::int64_t L = 4;
    const StageMemory a = stage_memory(fast.model, fast.execution, dev, 0);
    CHECK(a.activations_layers.value ==
          L * layer.stored_bytes.value - (L - 2) * o.freed.value + (o.reloaded.value - o.freed.value));
    CHECK(stage_memory(plain.model, plain.execution, dev, 0).activations_layers.value == L * layer.stored_bytes.value);
    CHECK(a.total() < stage_memory(plain.model, plain.execution, dev, 0).total());

    // With a link that keeps pace the copies hide under the compute (the iteration as without offloading, to a
    // millionth) and the simulated peak is within the analytical bound, here equal to it.
    CHECK(std::abs(f.it.iteration_time_s / p.it.iteration_time_s - 1) < 1e-6);
    CHECK(f.detail.stage_peaks.at(0).total == a.total());
    // With a slow one (1 GB/s each way) the backward waits for its reloads and the copies out lag behind the forward,
    // holding memory longer than the bound assumes.
    CHECK(s.it.iteration_time_s > 1.2 * p.it.iteration_time_s);
    CHECK(s.detail.stage_peaks.at(0).total > a.total());
    CHECK(s.detail.stage_peaks.at(0).total <
          stage_memory(plain.model, plain.execution, dev, 0).total() + Bytes(o.reloaded.value));
    // Every byte allocated is freed by the iteration's end: the pool ends with its static state.
    const Bytes state = stage_state(plain.model, plain.execution, dev, 0).total();
    for (const Run* r : {&p, &f, &s}) {
        REQUIRE_FALSE(r->detail.stage0_memory.empty());
        CHECK(r->detail.stage0_memory.back().in_use == state);
    }
}

TEST_CASE(
    "offload: with context parallelism the ring's transient buffers join the peak at a layer's start, as simulated") {
    // Two GPUs of a ring, a link that keeps pace: the simulated peak is the analytical one, the ring's buffers in it
    // (held from the first layer of a forward or from the last layer of a backward).
    Scenario sc = with_link(llama8b(std::string(kAll) + ", context_parallel: 2"), 1e13);
    validate(sc);
    const StageMemory a = stage_memory(sc.model, sc.execution, sc.system.device_memory(), 0);
    const LayerPlan layer = build_layer(layer_config(sc.model, sc.execution));
    REQUIRE(layer.attention_workspace_forward.value > 0);
    CHECK(a.attention_workspace.value > 0);
    const Run r = simulate_case(sc);
    INFO("simulated " << r.detail.stage_peaks.at(0).total.value << " analytical " << a.total().value << " attention "
                      << r.detail.stage_peaks.at(0).by_category.at(index(MemoryCategory::attention)).value << " / "
                      << a.attention_workspace.value << " layers " << r.detail.stage_peaks.at(0).by_category.at(3).value
                      << " / " << a.activations_layers.value);
    CHECK(r.detail.stage_peaks.at(0).total == a.total());
    CHECK(r.detail.stage_peaks.at(0).by_category.at(index(MemoryCategory::attention)) == a.attention_workspace);
    REQUIRE_FALSE(r.detail.stage0_memory.empty());
    CHECK(r.detail.stage0_memory.back().in_use ==
          stage_state(sc.model, sc.execution, sc.system.device_memory(), 0).total());
}

TEST_CASE("offload: interleaved pipeline stages stay within the analytical bound and free what they allocate") {
    for (const double link : {1e13, 52.8e9}) {
        Scenario sc = with_link(llama8b(kAll, 8), link);
        sc.execution.pipeline = 2;
        sc.execution.interleave = 2;
        sc.execution.schedule = Schedule::interleaved;
        sc.execution.global_batch = 4;
        validate(sc);
        const Run r = simulate_case(sc);
        INFO("link " << link);
        for (int st = 0; st < 2; ++st) {
            const StageMemory a = stage_memory(sc.model, sc.execution, sc.system.device_memory(), st);
            if (link > 1e12) CHECK(r.detail.stage_peaks.at(static_cast<std::size_t>(st)).total <= a.total());
        }
        REQUIRE_FALSE(r.detail.stage0_memory.empty());
        CHECK(r.detail.stage0_memory.back().in_use ==
              stage_state(sc.model, sc.execution, sc.system.device_memory(), 0).total());
        CHECK(r.it.iteration_time_s > 0);
    }
}

TEST_CASE("offload: copies share each GPU's PCIe link with its NIC's traffic, which crosses it only with offloading") {
    // Llama 3 8B (4 layers) on two nodes, t = 8, p = 2: the pipeline's transfers go over the NICs.
    auto two_nodes = [](const std::string& extra, double pcie) {
        Scenario sc = llama8b(extra);
        sc.execution.tensor = 8;
        sc.execution.pipeline = 2;
        sc.execution.sequence_parallel = true;
        sc.execution.global_batch = 4;
        sc.system.network.pcie_bandwidth = {pcie};
        validate(sc);
        SimulationOptions options;
        options.progress_every = 0;
        return simulate(sc, options).iteration_time_s;
    };
    const double wide = two_nodes(kAll, 1e13), shared = two_nodes(kAll, 30e9), narrow = two_nodes(kAll, 5e9);
    CHECK(shared >= wide);
    CHECK(narrow > shared);
    // Without offloading the PCIe hop stays folded into the NIC link: its bandwidth changes nothing.
    CHECK(two_nodes("", 5e9) == two_nodes("", 1e13));
}
