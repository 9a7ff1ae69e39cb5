// Today's transformers: grouped-query attention, SwiGLU, RMSNorm, no biases, no dropout, RoPE, untied output
// layer and FlashAttention. Parameter counts against the published ones, per-op activation bytes derived by hand,
// FLOPs in Megatron-LM's general convention, strict validation, and Llama 3 simulated end to end on DGX H100.
#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/memory.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"
#include "fixtures.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

using namespace strata;

namespace {

const std::string kRoot = std::string(STRATA_SOURCE_DIR) + "/";

ModelSpec model(const std::string& name) { return load_model(kRoot + "scenarios/models/" + name + ".yaml"); }

/// A small Llama-like model for exact byte counts: a = 16 heads, g = 4 groups, d = 64, h = 1024, f = 2816.
ModelSpec small_llama() {
    ModelSpec m;
    m.name = "small-llama";
    m.heads = 16;
    m.kv_heads = 4;
    m.hidden = 1024;
    m.layers = 8;
    m.seq_len = 2048;
    m.vocab = 32000;
    m.ffn_hidden = 2816;
    m.mlp = Mlp::swiglu;
    m.norm = Norm::rmsnorm;
    m.linear_bias = false;
    m.dropout = 0;
    m.position_embedding = PositionEmbedding::rope;
    m.tied_embeddings = false;
    return m;
}

}  // namespace

TEST_CASE("models: parameter counts match the published sizes") {
    struct Row {
        const char* file;
        double published;   // parameters, as published (rounded as published)
        double tolerance;   // the published rounding
    };
    const Row rows[] = {{"llama2-7b", 6.74e9, 0.005e9},   {"llama2-70b", 68.98e9, 0.005e9}, {"llama3-8b", 8.03e9, 0.005e9},
                        {"llama3-70b", 70.6e9, 0.05e9},   {"llama3-405b", 405.9e9, 0.05e9}};
    for (const Row& r : rows) {
        INFO(r.file);
        CHECK(std::abs(total_parameters(model(r.file)) - r.published) <= r.tolerance);
    }
    // Exactly, for Llama 3 8B: 32 x (attention 4096 x (4096 + 2 x 8 x 128) + 4096^2, SwiGLU 3 x 4096 x 14336,
    // two RMSNorms 2 x 4096) + untied input and output embeddings 2 x 128256 x 4096 + final RMSNorm 4096.
    const double layer = 4096.0 * (4096 + 2 * 8 * 128) + 4096.0 * 4096 + 3.0 * 4096 * 14336 + 2 * 4096;
    CHECK(total_parameters(model("llama3-8b")) == 32 * layer + 2.0 * 128256 * 4096 + 4096);
}

TEST_CASE("models: GPT defaults keep the paper's parameter formula") {
    const ModelSpec m = model("gpt3-175b");
    const double h = m.hidden, f = m.ffn_hidden;
    CHECK(m.query_groups() == m.heads);
    CHECK(total_parameters(m) == m.layers * (4 * h * h + 2 * h * f + 9 * h + f) + double(m.vocab) * h + m.seq_len * h + 2 * h);
    CHECK(layer_parameters_per_gpu(m, 8) == (4 * h * h + 2 * h * f + 3 * h + f) / 8 + 6 * h);
}

TEST_CASE("models: per-op activation bytes of a GQA + SwiGLU layer without dropout, derived by hand") {
    const ModelSpec m = small_llama();
    const std::int64_t s = 2048, b = 2, h = 1024, a = 16, g = 4, d = 64, f = 2816, t = 4;
    const std::int64_t sbh = s * b * h;
    // Unfused, no recompute, no SP. ln1 and qkv inputs 2sbh each, q and the expanded k 4sbh/t, softmax output
    // 2 a s^2 b / t (no dropout: no mask, no second copy), the expanded values 2sbh/t, proj input 2sbh/t, ln2 and
    // fc1 inputs 2sbh each, SwiGLU input (gate and up) 2 s b 2f / t, fc2 input 2 s b f / t. No masks anywhere.
    const std::int64_t unfused = 8 * sbh + 8 * sbh / t + 2 * a * s * s * b / t + 4 * s * b * f / t + 2 * s * b * f / t;
    CHECK(activation_bytes_per_layer(m, int(t), false, Recompute::none, int(b)).value == unfused);
    // Selective recompute drops the softmax output only.
    CHECK(activation_bytes_per_layer(m, int(t), false, Recompute::selective, int(b)).value == unfused - 2 * a * s * s * b / t);
    // FlashAttention keeps q (h / t), k and v per group (2 g d / t) and fp32 row statistics (4 b a s / t) instead.
    const std::int64_t flash = 8 * sbh + 2 * s * b * (h + 2 * g * d) / t + 4 * b * a * s / t + 2 * sbh / t +
                               6 * s * b * f / t;
    CHECK(activation_bytes_per_layer(m, int(t), false, Recompute::none, int(b), Attention::flash).value == flash);
    // With SP the norm inputs and the linear layers' inputs are sharded too.
    const std::int64_t flash_sp = 8 * sbh / t + 2 * s * b * (h + 2 * g * d) / t + 4 * b * a * s / t + 2 * sbh / t +
                                  6 * s * b * f / t;
    CHECK(activation_bytes_per_layer(m, int(t), true, Recompute::none, int(b), Attention::flash).value == flash_sp);
    // Selective recompute with FlashAttention drops only the row statistics (the checkpointed core re-runs).
    CHECK(activation_bytes_per_layer(m, int(t), true, Recompute::selective, int(b), Attention::flash).value ==
          flash_sp - 4 * b * a * s / t);
}

TEST_CASE("models: FlashAttention's activations have no s^2 term") {
    ModelSpec m = small_llama();
    auto bytes = [&](int seq, Attention at) {
        m.seq_len = seq;
        return double(activation_bytes_per_layer(m, 2, true, Recompute::none, 1, at).value);
    };
    CHECK(bytes(8192, Attention::flash) == Approx(2 * bytes(4096, Attention::flash)));
    CHECK(bytes(8192, Attention::unfused) > 2.5 * bytes(4096, Attention::unfused));
}

TEST_CASE("models: the layer's kernels follow the model's switches") {
    const ModelSpec m = small_llama();
    LayerConfig c{&m, 2, true, Recompute::none, 1};
    c.attention = Attention::flash;
    const LayerPlan plan = build_layer(c);
    int flash_fwd = 0, flash_bwd = 0, rope = 0, swiglu = 0, rmsnorm = 0, dropout = 0, bias = 0;
    Bytes qkv_out{};
    for (const auto* pass : {&plan.forward, &plan.backward}) {
        for (const Step& st : *pass) {
            for (const Kernel& k : st.kernels) {
                flash_fwd += k.kind == KernelKind::flash_attention_fwd;
                flash_bwd += k.kind == KernelKind::flash_attention_bwd;
                rope += k.op_class.rfind("rope", 0) == 0;
                swiglu += k.op_class.rfind("swiglu", 0) == 0;
                rmsnorm += k.op_class.rfind("rmsnorm", 0) == 0;
                dropout += k.name.find("dropout") != std::string::npos;
                bias += k.name.find("bias-grad") != std::string::npos;
                if (k.name == "qkv") qkv_out = Bytes(k.gemm.n);
            }
        }
    }
    CHECK(flash_fwd == 1);
    CHECK(flash_bwd == 1);
    CHECK(rope == 2);
    CHECK(swiglu == 2);
    CHECK(rmsnorm == 4);
    CHECK(dropout == 0);
    CHECK(bias == 0);
    CHECK(qkv_out.value == (1024 + 2 * 4 * 64) / 2);  // (h + 2 g d) / t
}

TEST_CASE("models: FLOPs in Megatron-LM's general form, reducing to the paper's for a GPT") {
    const ModelSpec l = model("llama3-8b");
    const double B = 8, s = 8192, L = 32, h = 4096, g = 8, a = 32, f = 14336, v = 128256;
    const double expected = 12 * B * s * L * h * h * ((1 + g / a + s / h) + (f / h) * 1.5 + v / (2 * L * h));
    CHECK(model_flops_per_iteration(l, 8).value == Approx(expected).epsilon(1e-12));
    // FlashAttention adds the scores its backward recomputes: a sixth of the attention-core term.
    const double core = 12 * B * s * L * h * h * (s / h);
    CHECK(hardware_flops_per_iteration(l, 8, Recompute::none, Attention::flash).value ==
          Approx(expected + core / 6).epsilon(1e-12));
    CHECK(hardware_flops_per_iteration(l, 8, Recompute::selective).value == Approx(expected + core).epsilon(1e-12));
    // A GPT written as a general model (ffn 4h, gelu, g = a) gives the paper's count.
    ModelSpec gpt = model("gpt3-175b");
    gpt.ffn_hidden = 4 * gpt.hidden + 1;  // leaves the paper's shape: the general form
    const double general = model_flops_per_iteration(gpt, 64).value;
    gpt.ffn_hidden = 4 * gpt.hidden;
    const double paper = model_flops_per_iteration(gpt, 64).value;
    CHECK(general == Approx(paper).epsilon(1e-4));
}

TEST_CASE("models: malformed model keys and combinations are clear errors") {
    Scenario sc = strata::testing::table4_case(0);
    sc.model.kv_heads = 5;  // 64 heads
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("model.kv_heads") && Catch::Contains("divisible by kv_heads (5)"));
    sc.model.kv_heads = 4;  // t = 8 does not divide 4 groups
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.tensor") && Catch::Contains("kv_heads (4)"));
    sc.model.kv_heads = 8;
    validate(sc);
    sc.execution.attention = Attention::flash;
    sc.system.device.flash_forward_efficiency = 0;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.attention") && Catch::Contains("flash_attention block"));
}

TEST_CASE("models: Llama 3 8B and 70B simulate end to end on DGX H100 with every new key") {
    const Experiment ex = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml");
    REQUIRE(ex.cases.size() == 8);
    for (const Scenario& sc : ex.cases) {
        INFO(sc.name);
        CHECK(sc.model.mlp == Mlp::swiglu);
        CHECK(sc.model.norm == Norm::rmsnorm);
        CHECK(sc.model.position_embedding == PositionEmbedding::rope);
        CHECK_FALSE(sc.model.linear_bias);
        CHECK_FALSE(sc.model.has_dropout());
        CHECK_FALSE(sc.model.tied_embeddings);
        CHECK(sc.model.query_groups() == 8);
        SimulationOptions opt;
        opt.keep_timeline = false;
        SimulationDetail detail;
        const IterationResult r = simulate(sc, opt, &detail);
        CHECK_FALSE(r.oom);
        CHECK(r.mfu > 0.2);
        // MFU is against the BF16 peak (Megatron's convention): FP8 runs may pass 75%, never the FP8 peak's 2x.
        CHECK(r.mfu < (sc.execution.precision == Precision::fp8 ? 1.5 : 0.75));
        // The simulated peak equals the analytical one here too, stage by stage.
        for (int st = 0; st < sc.execution.pipeline; ++st)
            CHECK(stage_memory(sc.model, sc.execution, sc.system.device_memory(), st).total() ==
                  detail.stage_peaks[std::size_t(st)].total);
    }
    // FlashAttention beats the unfused attention core at s = 8192 (with less memory even without selective).
    const IterationResult flash = simulate(ex.cases[0]);
    const IterationResult unfused = simulate(ex.cases[1]);
    CHECK(flash.iteration_time_s < unfused.iteration_time_s);
}

TEST_CASE("context parallelism: each GPU holds s / c tokens, the ring moves K and V, the work splits c ways") {
    const ModelSpec m = small_llama();
    LayerConfig one{&m, 2, true, Recompute::none, 1};
    one.attention = Attention::flash;
    LayerConfig two = one;
    two.context = 2;
    ModelSpec half = m;
    half.seq_len = m.seq_len / 2;
    LayerConfig shorter = one;
    shorter.model = &half;
    // Activations: exactly those of a sequence half as long (the ring's K and V are not kept).
    CHECK(build_layer(two).stored_bytes == build_layer(shorter).stored_bytes);
    // The attention kernel: local queries against every key, half the work of the whole sequence's.
    auto flash_flops = [](const LayerPlan& p) {
        double f = 0;
        for (const Step& st : p.forward)
            for (const Kernel& k : st.kernels)
                if (k.kind == KernelKind::flash_attention_fwd) f += flash_attention_flops(k).value;
        return f;
    };
    CHECK(flash_flops(build_layer(two)) == Approx(flash_flops(build_layer(one)) / 2));
    // The ring: the whole sequence's K and V of this tensor rank's groups (2 x 2 bytes x s b g d / t),
    // overlapped with the attention kernel, forward; twice that backward (K, V and their gradients).
    int rings = 0;
    for (const Step& st : build_layer(two).forward) {
        if (st.kind != Step::Kind::collective || !st.collective.context_group) continue;
        ++rings;
        CHECK(st.overlapped);
        CHECK(st.collective.message.value == 2 * 2 * 2048 * 1 * (4 * 64 / 2));
    }
    CHECK(rings == 1);
}

TEST_CASE("context parallelism: Transformer Engine's bookkeeping around the ring's steps, by hand, none without it") {
    const ModelSpec m = small_llama();  // h 1024, 4 query groups of 64
    LayerConfig cfg{&m, 2, true, Recompute::none, 1};
    cfg.attention = Attention::flash;
    auto bytes_of = [](const std::vector<Step>& pass, const std::string& name) {
        std::int64_t n = -1;
        for (const Step& st : pass)
            for (const Kernel& k : st.kernels)
                if (k.name == name) n = k.bytes.value;
        return n;
    };
    CHECK(bytes_of(build_layer(cfg).forward, "attn.cp-copies") == -1);
    CHECK(bytes_of(build_layer(cfg).backward, "attn.cp-grad-accumulate") == -1);
    cfg.context = 4;
    const LayerPlan plan = build_layer(cfg);
    // This GPU's 512 tokens: q 2 x 512 x 1024 / 2 bytes, k and v 2 x 2 x 512 x (4 x 64 / 2); three received steps.
    const std::int64_t q = 2 * 512 * 512, kv = 2 * 2 * 512 * 128, steps = 3;
    CHECK(bytes_of(plan.forward, "attn.cp-copies") == 2 * kv + steps * (kv + q) / 2);
    CHECK(bytes_of(plan.forward, "attn.cp-out-correction") == 4 * q + steps * 9 * q / 4);
    CHECK(bytes_of(plan.backward, "attn.cp-copies.bwd") == 2 * kv + steps * (kv + 3 * q) / 2);
    CHECK(bytes_of(plan.backward, "attn.cp-grad-accumulate") == 2 * (q + kv) + steps * 9 * (q + kv) / 4);
    // Where they run: the copies inside the ring's loop, in the step beside the ring; the output corrections after the
    // loop, in a step of their own after it (not beside the ring, not slowed by its SMs); the backward's accumulations
    // inside its loop, beside the ring.
    auto step_of = [](const std::vector<Step>& pass, const std::string& name) {
        for (std::size_t i = 0; i < pass.size(); ++i)
            for (const Kernel& k : pass[i].kernels)
                if (k.name == name) return int(i);
        return -1;
    };
    const int ring = step_of(plan.forward, "attn.flash") - 1;
    REQUIRE(ring >= 0);
    CHECK(plan.forward[std::size_t(ring)].kind == Step::Kind::collective);
    CHECK(plan.forward[std::size_t(ring)].collective.context_group);
    CHECK(step_of(plan.forward, "attn.cp-copies") == ring + 1);
    CHECK(step_of(plan.forward, "attn.cp-out-correction") == ring + 2);
    CHECK(step_of(plan.backward, "attn.cp-grad-accumulate") == step_of(plan.backward, "attn.flash.bwd"));
    // Recomputing the attention core reruns the ring's forward with its bookkeeping.
    cfg.recompute = Recompute::selective;
    cfg.modules = {true, false, false};
    const LayerPlan re = build_layer(cfg);
    CHECK(bytes_of(re.backward, "recompute.attn.cp-copies") == 2 * kv + steps * (kv + q) / 2);
    CHECK(step_of(re.backward, "recompute.attn.cp-out-correction") == step_of(re.backward, "recompute.attn.flash") + 1);
}

/// Llama 3 8B on DGX H100 with t = 2, c = 2, d = 2 (llama3-h100.yaml's first case with context parallelism), validated.
Scenario llama8b_context2() {
    Experiment ex = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml");
    Scenario sc = ex.cases[0];  // 8B, t2 d4 flash
    sc.execution.context = 2;
    sc.execution.data = 2;
    sc.execution.global_batch = 16;
    validate(sc);
    return sc;
}

TEST_CASE("context parallelism: the ring's transient buffers, by hand, held in the peak memory and none without it") {
    const ModelSpec m = small_llama();  // h 1024, 4 query groups of 64, 16 heads
    LayerConfig cfg{&m, 2, true, Recompute::none, 1};
    cfg.attention = Attention::flash;
    CHECK(build_layer(cfg).attention_workspace_forward.value == 0);
    CHECK(build_layer(cfg).attention_workspace_backward.value == 0);
    cfg.context = 4;
    const LayerPlan plan = build_layer(cfg);
    // 512 tokens on this GPU; q 2 x 512 x 512 bytes, kv 2 x 2 x 512 x 128; fp32 statistics of 8 heads x 512 tokens.
    const std::int64_t q = 2 * 512 * 512, kv = 2 * 2 * 512 * 128, lse = 4 * 8 * 512, c = 4;
    // Forward: the c - 1 buffers beyond the one it saves, every step's output and statistics, two steps' copies.
    CHECK(plan.attention_workspace_forward.value == (c - 1) * kv + c * (q + lse) + std::max(kv, q));
    // Backward: two double buffers of kv and dkv, a step's dq and dkv, a step's copy of half q, out and dout.
    CHECK(plan.attention_workspace_backward.value == 4 * kv + q + kv + 3 * q / 2);
    // Recomputing the attention reruns the forward's ring in the backward: the larger of the two.
    cfg.recompute = Recompute::selective;
    cfg.modules = {true, false, false};
    CHECK(build_layer(cfg).attention_workspace_backward == plan.attention_workspace_forward);
    cfg.modules = {false, false, true};  // the MLP alone: the backward's own
    CHECK(build_layer(cfg).attention_workspace_backward == plan.attention_workspace_backward);
    cfg.recompute = Recompute::full;  // the whole forward again, its ring included
    CHECK(build_layer(cfg).attention_workspace_backward == plan.attention_workspace_forward);
    CHECK(build_layer_left_alone(cfg).attention_workspace_backward == plan.attention_workspace_backward);
    // In the stage's peak, in their own category, as the simulation holds them.
    const Scenario sc = llama8b_context2();
    const StageMemory a = stage_memory(sc.model, sc.execution, sc.system.device_memory(), 0);
    const LayerPlan l8 = build_layer(layer_config(sc.model, sc.execution));
    CHECK(a.attention_workspace == std::max(l8.attention_workspace_forward, l8.attention_workspace_backward));
    CHECK(a.bytes(MemoryCategory::attention) == a.attention_workspace);
    SimulationOptions opt;
    opt.keep_timeline = false;
    SimulationDetail detail;
    (void)simulate(sc, opt, &detail);
    CHECK(detail.stage_peaks.at(0).total == a.total());
    CHECK(detail.stage_peaks.at(0).by_category.at(index(MemoryCategory::attention)) == a.attention_workspace);
}

TEST_CASE("context parallelism: validation, rank layout and gradients over data x context") {
    Scenario sc = llama8b_context2();
    CHECK(sc.execution.gpus() == 8);
    // The distributed optimizer shards over data x context.
    CHECK(bytes_per_param(sc.execution).optimizer == 3);
    sc.execution.attention = Attention::unfused;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.context_parallel") && Catch::Contains("attention: flash"));
    sc.execution.attention = Attention::flash;
    sc.model.seq_len = 8190;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("divisible by 2 x context_parallel"));
}

TEST_CASE("context parallelism: simulated end to end, across nodes, with the analytical memory equal to the simulated") {
    const Experiment ex = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml");
    Scenario sc = ex.cases[2];  // 70B t8 p4 m5 d2 flash
    const IterationResult without = simulate(sc);
    sc.execution.context = 2;  // 128 GPUs: each CP pair spans two nodes
    sc.execution.global_batch = 64;
    validate(sc);
    SimulationDetail detail;
    SimulationOptions opt;
    opt.keep_timeline = false;
    const IterationResult with = simulate(sc, opt, &detail);
    CHECK_FALSE(with.oom);
    // Twice the GPUs on the same batch: faster, but not twice (the ring, smaller GEMMs, the same bubble).
    CHECK(with.iteration_time_s < without.iteration_time_s);
    CHECK(with.iteration_time_s > without.iteration_time_s / 2);
    for (int st = 0; st < 4; ++st)
        CHECK(stage_memory(sc.model, sc.execution, sc.system.device_memory(), st).total() ==
              detail.stage_peaks[std::size_t(st)].total);
    // Activations per GPU halve.
    CHECK(2 * with.first_stage_activation_peak.value == without.first_stage_activation_peak.value);
}

namespace {
/// How many of a pass's kernels and collectives carry each name.
std::map<std::string, int> names_in(const std::vector<Step>& pass) {
    std::map<std::string, int> n;
    for (const Step& st : pass) {
        if (st.kind == Step::Kind::collective) ++n[st.collective.name];
        for (const Kernel& k : st.kernels)
            ++n[k.name];
    }
    return n;
}
}  // namespace

TEST_CASE("recompute_modules: the norms and the MLP join the attention core, derived by hand") {
    const ModelSpec m = small_llama();
    const std::int64_t s = 2048, b = 2, h = 1024, a = 16, f = 2816, t = 4, sbh = s * b * h;
    LayerConfig c{&m, int(t), false, Recompute::selective, int(b)};
    c.modules = {true, true, true};
    const LayerPlan plan = build_layer(c);  // local layers (16 bits, no overlap): each norm a module of its own
    // Kept: ln1 and ln2 inputs (2sbh each), q and the expanded k (4sbh/t), values (2sbh/t), proj input (2sbh/t).
    CHECK(plan.stored_bytes.value == 4 * sbh + 8 * sbh / t);
    // Held while one layer recomputes: what it dropped.
    CHECK(plan.recompute_peak_bytes.value == 2 * a * s * s * b / t + 4 * sbh + 4 * s * b * f / t + 2 * s * b * f / t);
    // The MLP module's whole forward again (Megatron-Core checkpoints the module): fc1, the activation, fc2 and fc2's
    // all-reduce (no SP here); each norm once.
    auto n = names_in(plan.backward);
    CHECK(n["recompute.fc1"] == 1);
    CHECK(n["recompute.swiglu"] == 1);
    CHECK(n["recompute.fc2"] == 1);
    CHECK(n["recompute.mlp.all-reduce"] == 1);
    CHECK(n["recompute.ln1"] + n["recompute.ln2"] == 2);
    // Only the MLP: the attention core's scores stay, and so does fc1's input (the MLP's, kept by its checkpoint).
    c.modules = {false, false, true};
    CHECK(build_layer(c).stored_bytes.value == 8 * sbh + 8 * sbh / t + 2 * a * s * s * b / t);
    // The MLP's recompute adds its forward FLOPs to the hardware count: fc1 2 n h (2f) and fc2 2 n f h per layer.
    const ModelSpec l = model("llama3-8b");
    const double extra = hardware_flops_per_iteration(l, 4, Recompute::selective, Attention::flash, 1.0, {true, false, true}).value -
                         hardware_flops_per_iteration(l, 4, Recompute::selective, Attention::flash).value;
    CHECK(extra == Approx(32 * (2.0 * 4 * 8192 * 4096 * (3 * 14336))).epsilon(1e-9));  // once, forward
}

TEST_CASE(
    "recompute_modules under Transformer Engine's layers: the MLP's fused norm recomputed with it, layernorm refused") {
    const ModelSpec m = small_llama();
    const std::int64_t s = 2048, b = 2, h = 1024, a = 16, t = 4, sbh = s * b * h;
    LayerConfig c{&m, int(t), false, Recompute::selective, int(b)};
    c.transformer_impl = TransformerImpl::transformer_engine;
    c.modules = {false, false, true};
    // ln2 is inside fc1 (LayerNormLinear), so the MLP's checkpoint keeps ln2's input and drops fc1's input as well.
    const LayerPlan te = build_layer(c);
    CHECK(te.stored_bytes.value == 6 * sbh + 8 * sbh / t + 2 * a * s * s * b / t);
    auto n = names_in(te.backward);
    CHECK(n["recompute.ln2"] == 1);
    CHECK(n["recompute.ln1"] == 0);
    CHECK(n["recompute.fc1"] == 1);
    CHECK(n["recompute.fc2"] == 1);
    // The same with sequence parallelism: fc1's input gathered again, fc2's output reduce-scattered again, and the
    // output gradient's gather inside the MLP's backward, after its recompute.
    c.sequence_parallel = true;
    const LayerPlan sp = build_layer(c);
    n = names_in(sp.backward);
    CHECK(n["recompute.mlp.all-gather"] == 1);
    CHECK(n["recompute.mlp.reduce-scatter"] == 1);
    std::vector<std::string> order;
    for (const Step& st : sp.backward)
        if (st.kind == Step::Kind::collective) order.push_back(st.collective.name);
    const auto at = [&](const std::string& name) {
        return std::find(order.begin(), order.end(), name) - order.begin();
    };
    CHECK(at("recompute.mlp.reduce-scatter") < at("mlp.grad-all-gather"));
    CHECK(at("mlp.grad-all-gather") < std::ptrdiff_t(order.size()));
    // Megatron-Core skips layernorm there (the norms are IdentityOp): an error, in the layer model and the loader.
    c.modules = {false, true, true};
    CHECK_THROWS_WITH(build_layer(c), Catch::Contains("layernorm needs transformer_impl local"));
    Scenario sc;
    sc.model = m;
    sc.system = load_system(kRoot + "scenarios/systems/dgx-h100.yaml");
    sc.execution.tensor = 4;
    sc.execution.data = 1;
    sc.execution.global_batch = 4;
    sc.execution.recompute = Recompute::selective;
    sc.execution.recompute_modules = {false, true, false};
    CHECK_FALSE(find_problem(sc));            // auto: local layers in 16 bits
    sc.execution.precision = Precision::fp8;  // auto: Transformer Engine's
    const auto p = find_problem(sc);
    REQUIRE(p);
    CHECK(p->key == "recompute_modules");
    CHECK_THAT(p->message, Catch::Contains("layernorm has no effect") && Catch::Contains("valid here: core_attn, mlp"));
}

TEST_CASE("recompute_modules: bad lists are clear errors") {
    const std::string dir = kRoot + "tests/data/bad/";
    CHECK_THROWS_WITH(load_experiment(dir + "recompute_modules_unknown.yaml"),
                      Catch::Contains("recompute_modules_unknown.yaml:5:") && Catch::Contains("'layernorms' is not valid") &&
                          Catch::Contains("did you mean 'layernorm'"));
    CHECK_THROWS_WITH(load_experiment(dir + "recompute_modules_twice.yaml"), Catch::Contains("'mlp' is listed twice"));
    CHECK_THROWS_WITH(load_experiment(dir + "recompute_modules_not_selective.yaml"),
                      Catch::Contains("execution.recompute_modules") && Catch::Contains("needs recompute: selective"));
}

TEST_CASE("tp_comm_overlap and overlap_param_gather: Megatron's published overlaps shorten the iteration, not memory") {
    const Experiment ex = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml");
    Scenario sc = ex.cases[2];  // 70B t8 p4 m5 d2, SP, distributed optimizer
    const IterationResult base = simulate(sc);
    sc.execution.tp_comm_overlap = true;
    validate(sc);
    const IterationResult tp = simulate(sc);
    CHECK(tp.iteration_time_s < base.iteration_time_s);
    CHECK(tp.peak_memory == base.peak_memory);
    // Each forward SP collective is paired with exactly its GEMM.
    LayerConfig lc = layer_config(sc.model, sc.execution);
    const LayerPlan plan = build_layer(lc);
    // Each reduce-scatter's last quarter (Transformer Engine's pipelined chunks: the last chunk's share runs after the
    // GEMM, alone) follows its GEMM, exposed.
    int paired = 0, last_chunks = 0;
    for (std::size_t i = 0; i + 1 < plan.forward.size(); ++i) {
        const Step& st = plan.forward[i];
        if (st.kind != Step::Kind::collective || st.collective.context_group) continue;
        if (st.collective.name.ends_with(".last-chunk")) {
            CHECK_FALSE(st.overlapped);
            CHECK(st.collective.kind == CollectiveKind::reduce_scatter);
            REQUIRE(plan.forward[i - 1].kernels.size() == 1);
            CHECK(plan.forward[i - 1].kernels[0].gemm.chunks == 4);
            CHECK(plan.forward[i - 1].kernels[0].gemm.chunk_columns);   // TE splits the output's features
            CHECK(plan.forward[i - 2].collective.message.value == 3 * st.collective.message.value);
            ++last_chunks;
            continue;
        }
        CHECK(st.overlapped);
        const Step& next = plan.forward[i + 1];
        REQUIRE(next.kernels.size() == 1);
        CHECK(next.kernels[0].kind == KernelKind::gemm);
        ++paired;
    }
    CHECK(paired == 4);  // two all-gathers, two reduce-scatters
    CHECK(last_chunks == 2);
    // Transformer Engine's userbuffer overlap splits the GEMMs it overlaps (its defaults): ring exchanges into t
    // chunks (QKV and fc1 forward, projection and fc2 data gradients), pipelined reduce-scatters into 4 (projection
    // and fc2 forward); the bulk-overlapped and the weight-gradient GEMMs stay whole.
    std::map<std::string, std::int64_t> chunks;
    for (const auto* pass : {&plan.forward, &plan.backward})
        for (const Step& st : *pass)
            for (const Kernel& k : st.kernels)
                if (k.kind == KernelKind::gemm) chunks[k.name] = k.gemm.chunks;
    const std::map<std::string, std::int64_t> te = {{"qkv", 8}, {"fc1", 8}, {"fc2.dgrad", 8}, {"proj.dgrad", 8},
                                                    {"proj", 4}, {"fc2", 4}, {"qkv.dgrad", 1}, {"fc1.dgrad", 1},
                                                    {"qkv.wgrad", 1}, {"fc1.wgrad", 1}, {"proj.wgrad", 1}, {"fc2.wgrad", 1}};
    for (const auto& [name, n] : te) {
        INFO(name);
        REQUIRE(chunks.count(name) == 1);
        CHECK(chunks[name] == n);
    }
    // A run whose userbuffer configuration reduce-scatters fc2's output by ring exchange (Megatron-Bridge's): t row
    // chunks whose transfers all overlap the GEMM (the last chunk is the rank's own shard, not sent), then the sum of
    // the t partial outputs of the rank's shard.
    lc.tp_overlap_fc2_fprop = TpOverlapRs::ring_exchange;
    const LayerPlan ring = build_layer(lc);
    bool summed = false;
    for (std::size_t i = 2; i < ring.forward.size(); ++i) {
        const Step& st = ring.forward[i];
        CHECK(st.collective.name != "mlp.reduce-scatter.last-chunk");
        if (st.kind == Step::Kind::compute && st.kernels.size() == 1 && st.kernels[0].name == "mlp.reduce-scatter.sum") {
            const Kernel& fc2 = ring.forward[i - 1].kernels.at(0);
            CHECK(fc2.name == "fc2");
            CHECK(fc2.gemm.chunks == 8);
            CHECK_FALSE(fc2.gemm.chunk_columns);
            CHECK(ring.forward[i - 2].overlapped);
            CHECK(ring.forward[i - 2].collective.message.value == 2 * fc2.gemm.m * fc2.gemm.n);
            summed = true;
        }
    }
    CHECK(summed);
    // FP8 keeps the split (the casts are added beside the chunked GEMMs).
    lc.fp8 = true;
    for (const Step& st : build_layer(lc).forward)
        for (const Kernel& k : st.kernels)
            if (k.name == "qkv" || k.name == "fc2") {
                CHECK(k.gemm.fp8);
                CHECK(k.gemm.chunks == 8);
            }
    lc.fp8 = false;
    // What moves each collective: the ring exchanges by the copy engines; the pipelined reduce-scatter and the bulk
    // overlaps by userbuffers kernels of their num_sm CTAs (TE's defaults: 16); the pipeline's last chunk by 32.
    const std::map<std::string, std::pair<CommEngine, int>> engines = {
        {"attn.all-gather", {CommEngine::copy_engine, 0}},      {"mlp.all-gather", {CommEngine::copy_engine, 0}},
        {"attn.reduce-scatter", {CommEngine::userbuffers, 16}}, {"attn.reduce-scatter.last-chunk", {CommEngine::userbuffers, 32}},
        {"mlp.grad-all-gather", {CommEngine::copy_engine, 0}},  {"attn.grad-all-gather", {CommEngine::copy_engine, 0}},
        {"fc1.input-all-gather", {CommEngine::userbuffers, 16}}, {"fc1.grad-reduce-scatter", {CommEngine::userbuffers, 16}},
        {"qkv.input-all-gather", {CommEngine::userbuffers, 16}}, {"qkv.grad-reduce-scatter", {CommEngine::userbuffers, 16}}};
    std::map<std::string, std::pair<CommEngine, int>> seen;
    for (const auto* pass : {&plan.forward, &plan.backward})
        for (const Step& st : *pass)
            if (st.kind == Step::Kind::collective) seen[st.collective.name] = {st.collective.engine, st.collective.sms};
    for (const auto& [name, want] : engines) {
        INFO(name);
        REQUIRE(seen.count(name) == 1);
        CHECK(seen[name] == want);
    }
    // A userbuffer config's SMs: fewer CTAs beside the GEMMs cost less; set_sm_margin runs the GEMM on the SMs left.
    const CostModel cost(sc.system.device);
    const auto layer_ms = [&](const LayerConfig& c) {
        const LayerPlan p = build_layer(c);
        return cost.pass_time(p.forward, 8).ms() + cost.pass_time(p.backward, 8).ms();
    };
    LayerConfig few = lc;
    few.tp_overlap_fc2_fprop = TpOverlapRs::pipeline;
    const double te_defaults = layer_ms(few);
    few.tp_overlap_config.num_sm = {1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    CHECK(layer_ms(few) < te_defaults);
    LayerConfig margin = lc;
    margin.tp_overlap_fc2_fprop = TpOverlapRs::pipeline;
    margin.tp_overlap_config.sm_margin[std::size_t(TpOverlap::fc2_fprop)] = true;
    const LayerPlan carved = build_layer(margin);
    for (const Step& st : carved.forward)
        for (const Kernel& k : st.kernels)
            if (k.kind == KernelKind::gemm) CHECK(k.gemm.sm_margin == (k.name == "fc2" ? 16 : 0));
    CHECK(layer_ms(margin) > te_defaults);
    // TE's aggregate on fc2's data-gradient ring exchange (NeMo's Llama 2 70B config): the first exchange of one chunk
    // between pairs, exposed, then the rest under t / 2 GEMM chunks of two chunks' rows.
    LayerConfig aggregated = lc;
    aggregated.tp_overlap_config.aggregate[std::size_t(TpOverlap::fc2_dgrad)] = true;
    const LayerPlan agg = build_layer(aggregated);
    bool first_seen = false;
    for (std::size_t i = 0; i < agg.backward.size(); ++i) {
        const Step& st = agg.backward[i];
        if (st.kind == Step::Kind::collective && st.collective.name == "mlp.grad-all-gather.first-exchange") {
            first_seen = true;
            CHECK_FALSE(st.overlapped);
            CHECK(st.collective.engine == CommEngine::copy_engine);
            const Step& rest = agg.backward.at(i + 1);
            CHECK(rest.collective.name == "mlp.grad-all-gather");
            CHECK(rest.overlapped);
            const std::int64_t msg = 2 * sc.model.seq_len * sc.model.hidden;  // b = 1
            CHECK(st.collective.message.value == msg / 7);  // one of the 7 chunks each rank receives
            CHECK(st.collective.message.value + rest.collective.message.value == msg);
            CHECK(agg.backward.at(i + 2).kernels.back().name == "fc2.dgrad");
            CHECK(agg.backward.at(i + 2).kernels.back().gemm.chunks == 4);
        }
        for (const Kernel& k : st.kernels)
            if (k.name == "proj.dgrad") CHECK(k.gemm.chunks == 8);  // not aggregated
    }
    CHECK(first_seen);
    lc.tp_comm_overlap = false;
    const LayerPlan whole = build_layer(lc);
    for (const auto* pass : {&whole.forward, &whole.backward})
        for (const Step& st : *pass)
            for (const Kernel& k : st.kernels) CHECK(k.gemm.chunks == 1);
    sc.execution.overlap_param_gather = true;
    validate(sc);
    const IterationResult both = simulate(sc);
    CHECK(both.iteration_time_s < tp.iteration_time_s);
    sc.execution.distributed_optimizer = false;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("overlap_param_gather needs distributed_optimizer"));
    sc.execution.distributed_optimizer = true;
    sc.execution.sequence_parallel = false;
    sc.execution.overlap_param_gather = false;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("tp_comm_overlap needs tensor > 1 and sequence_parallel"));
}

TEST_CASE("transformer_impl: where each bias gradient is computed, and by whose layers") {
    // GPT-like: biases, GeLU MLP, t 4, s 1024, b 2.
    ModelSpec m{"gpt", 16, 2048, 4, 1024, 51200, 4 * 2048, true};
    const std::int64_t t = 4, n = 1024 * 2, h = 2048, f = 4 * 2048;
    // Each bias-grad kernel's HBM bytes, and the kernel before it in the backward.
    auto bias_grads = [](const LayerPlan& plan) {
        std::map<std::string, std::pair<std::int64_t, std::string>> out;
        std::string before;
        for (const Step& st : plan.backward)
            for (const Kernel& k : st.kernels) {
                if (k.name.ends_with(".bias-grad")) out[k.name] = {k.bytes.value, before};
                before = k.name;
            }
        return out;
    };
    using Found = std::map<std::string, std::pair<std::int64_t, std::string>>;
    for (const bool sp : {true, false}) {
        const std::int64_t own = sp ? n / t : n;  // the tokens a row-parallel layer's bias is added to on this rank
        LayerConfig c{&m, int(t), sp, Recompute::none, 2};
        // Megatron-LM's local layers (the default without FP8): QKV's sum after its weight gradient, fc1's as the
        // bias-GeLU's gradient reaches it, the projection's and fc2's in the bias-dropout-add's backward.
        const Found local = {{"qkv.bias-grad", {2 * n * 3 * h / t, "qkv.wgrad"}},
                             {"fc1.bias-grad", {2 * n * f / t, "gelu.bwd"}},
                             {"proj.bias-grad", {2 * own * h, "attn.bias-dropout-add.bwd"}},
                             {"fc2.bias-grad", {2 * own * h, "mlp.bias-dropout-add.bwd"}}};
        CHECK(bias_grads(build_layer(c)) == local);
        c.transformer_impl = TransformerImpl::local;
        CHECK(bias_grads(build_layer(c)) == local);
        // Megatron-Core's TE spec: QKV's inside TE's weight-gradient GEMM; the rest as local.
        c.transformer_impl = TransformerImpl::transformer_engine;
        Found te = local;
        te.erase("qkv.bias-grad");
        CHECK(bias_grads(build_layer(c)) == te);
        // FP8 (TE's cast-transpose for QKV) leaves the same 16-bit sums; automatic is TE's layers there.
        c.fp8 = true;
        CHECK(bias_grads(build_layer(c)) == te);
        c.transformer_impl = TransformerImpl::automatic;
        CHECK(bias_grads(build_layer(c)) == te);
        // TE's TransformerLayer: fc1's inside LayerNormMLP too.
        c.transformer_impl = TransformerImpl::te_transformer_layer;
        Found layer = te;
        layer.erase("fc1.bias-grad");
        CHECK(bias_grads(build_layer(c)) == layer);
        c.fp8 = false;
        CHECK(bias_grads(build_layer(c)) == layer);
        // Megatron-LM's local layers have no FP8.
        c.transformer_impl = TransformerImpl::local;
        c.fp8 = true;
        CHECK_THROWS_AS(build_layer(c), Error);
    }
    // TE's LayerNormMLP in FP8 (delayed scaling, GeLU): the GeLU writes fc2's input in FP8 (no cast) and its backward
    // fc1's output gradient in FP8 with its transpose (no cast-transpose); fc2's weight gradient transposes the GeLU's
    // FP8 output, with or without SP. Megatron-Core's TE spec casts as for any linear layer.
    auto conversions = [](const LayerPlan& plan) {
        std::map<std::string, std::int64_t> out;
        for (const auto* pass : {&plan.forward, &plan.backward})
            for (const Step& st : *pass)
                for (const Kernel& k : st.kernels)
                    if (k.name.starts_with("fc") && k.name.find(".fp8-") != std::string::npos)
                        out[k.name] = k.bytes.value;
        return out;
    };
    auto gelu_bytes = [](const LayerPlan& plan) {
        for (const Step& st : plan.forward)
            for (const Kernel& k : st.kernels)
                if (k.name == "gelu") return k.bytes.value;
        return std::int64_t{-1};
    };
    for (const bool sp : {true, false}) {
        LayerConfig c{&m, int(t), sp, Recompute::none, 2};
        c.fp8 = true;
        c.transformer_impl = TransformerImpl::transformer_engine;
        const LayerPlan mcore = build_layer(c);
        CHECK(gelu_bytes(mcore) == 4 * n * f / t);
        c.transformer_impl = TransformerImpl::te_transformer_layer;
        const LayerPlan te = build_layer(c);
        CHECK(gelu_bytes(te) == 3 * n * f / t);
        std::map<std::string, std::int64_t> expected = conversions(mcore);
        CHECK(expected.erase(sp ? "fc2.fp8-cast" : "fc2.fp8-cast-transpose") == 1);
        CHECK(expected.erase("fc1.dgrad.fp8-cast-transpose") == 1);
        expected["fc2.wgrad.fp8-transpose"] = 2 * n * (f / t + (sp ? h : 0));
        CHECK(conversions(te) == expected);
        // Current scaling (TE 2.2+) has no such fusion here: the same casts as Megatron-Core's TE spec.
        c.fp8_current_scaling = true;
        const LayerPlan current = build_layer(c);
        c.transformer_impl = TransformerImpl::transformer_engine;
        CHECK(conversions(current) == conversions(build_layer(c)));
    }
    // Without biases no layer has a bias gradient, whoever's layers.
    m.linear_bias = false;
    LayerConfig c{&m, int(t), true, Recompute::none, 2};
    c.transformer_impl = TransformerImpl::local;
    CHECK(bias_grads(build_layer(c)).empty());
    // A scenario: precision fp8 with local layers is refused, naming the key and the choices; the echo of auto is the
    // value in force.
    Scenario sc = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml").cases.at(2);
    sc.execution.precision = Precision::fp8;
    CHECK_NOTHROW(validate(sc));
    CHECK(sc.execution.transformer_impl_in_force() == TransformerImpl::transformer_engine);
    sc.execution.transformer_impl = TransformerImpl::local;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.transformer_impl") &&
                                        Catch::Contains("transformer_engine or te_transformer_layer"));
    sc.execution.precision = Precision::bf16;
    CHECK_NOTHROW(validate(sc));
    sc.execution.transformer_impl = TransformerImpl::automatic;
    CHECK(sc.execution.transformer_impl_in_force() == TransformerImpl::local);
    // TE's userbuffer overlap exists only in TE's layers: auto resolves to them, local is refused.
    sc.execution.sequence_parallel = true;
    sc.execution.tp_comm_overlap = true;
    CHECK_NOTHROW(validate(sc));
    CHECK(sc.execution.transformer_impl_in_force() == TransformerImpl::transformer_engine);
    CHECK(layer_config(sc.model, sc.execution).transformer_impl == TransformerImpl::automatic);
    sc.execution.transformer_impl = TransformerImpl::local;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("execution.transformer_impl") &&
                                        Catch::Contains("tp_comm_overlap is Transformer Engine's userbuffer overlap"));
    // A bias-SwiGLU's fc1 bias gradient sums its whole 2 f / t output (gate and up), as bias-GeLU's.
    ModelSpec glu = small_llama();
    glu.linear_bias = true;
    LayerConfig g{&glu, 2, true, Recompute::none, 1};
    g.transformer_impl = TransformerImpl::transformer_engine;
    std::int64_t fc1_bias = -1;
    for (const Step& st : build_layer(g).backward)
        for (const Kernel& k : st.kernels)
            if (k.name == "fc1.bias-grad") fc1_bias = k.bytes.value;
    CHECK(fc1_bias == 2 * std::int64_t(glu.seq_len) * 2 * glu.ffn_hidden / 2);
}

TEST_CASE(
    "fp8_scale_update per_module and per_module_fused: every FP8 module's amax and scale update before its forward and "
    "backward") {
    ModelSpec m{"gpt", 16, 2048, 4, 1024, 51200, 4 * 2048, true};
    LayerConfig c{&m, 4, true, Recompute::none, 1};
    c.fp8 = true;
    auto updates = [](const std::vector<Step>& pass) {
        int n = 0;
        for (const Step& st : pass)
            for (const Kernel& k : st.kernels)
                if (k.name == "fp8.scale-update") ++n;
        return n;
    };
    const LayerPlan region = build_layer(c);
    CHECK(updates(region.forward) == 0);
    CHECK(updates(region.backward) == 0);
    c.fp8_scale_update_kernels = 3;
    // Megatron-Core's TE spec: four FP8 modules (QKV, projection, fc1, fc2), three kernels each, before the pass.
    LayerPlan plan = build_layer(c);
    CHECK(updates(plan.forward) == 12);
    CHECK(updates(plan.backward) == 12);
    REQUIRE(plan.forward.front().kind == Step::Kind::compute);
    CHECK(plan.forward.front().kernels.front().name == "fp8.scale-update");
    CHECK(plan.forward.size() == region.forward.size() + 1);
    // TE's TransformerLayer: three (QKV, projection, LayerNormMLP).
    c.transformer_impl = TransformerImpl::te_transformer_layer;
    plan = build_layer(c);
    CHECK(updates(plan.forward) == 9);
    CHECK(updates(plan.backward) == 9);
    // Full recompute: the recomputed forward updates nothing, the backward's modules do.
    c.recompute = Recompute::full;
    CHECK(updates(build_layer(c).backward) == 9);
    c.recompute = Recompute::none;
    // TE 1.4-1.5: the update one CUDA kernel, two with the copy.
    c.fp8_scale_update_kernels = 2;
    CHECK(updates(build_layer(c).forward) == 6);
    CHECK(updates(build_layer(c).backward) == 6);
    c.transformer_impl = TransformerImpl::transformer_engine;
    CHECK(updates(build_layer(c).forward) == 8);
    c.transformer_impl = TransformerImpl::te_transformer_layer;
    // Inert with current scaling (no history) and without FP8.
    c.fp8_current_scaling = true;
    CHECK(updates(build_layer(c).forward) == 0);
    c.fp8_current_scaling = false;
    c.fp8 = false;
    CHECK(updates(build_layer(c).forward) == 0);
    // The key, its echo and its errors.
    const Experiment ex = load_experiment(kRoot + "scenarios/validation/mlperf-gpt3-h100.yaml");
    CHECK(ex.cases.at(0).execution.fp8_scale_update == Fp8ScaleUpdate::per_module);
    CHECK(layer_config(ex.cases.at(0).model, ex.cases.at(0).execution).fp8_scale_update_kernels == 3);
    ExecutionSpec fused = ex.cases.at(0).execution;
    fused.fp8_scale_update = Fp8ScaleUpdate::per_module_fused;
    CHECK(layer_config(ex.cases.at(0).model, fused).fp8_scale_update_kernels == 2);
    fused.fp8_scale_update = Fp8ScaleUpdate::per_region;
    CHECK(layer_config(ex.cases.at(0).model, fused).fp8_scale_update_kernels == 0);
    CHECK(std::string(to_string(Fp8ScaleUpdate::per_region)) == "per_region");
    CHECK(std::string(to_string(Fp8ScaleUpdate::per_module_fused)) == "per_module_fused");
    CHECK(fp8_scale_update_named("per_module") == Fp8ScaleUpdate::per_module);
    CHECK(fp8_scale_update_named("per_module_fused") == Fp8ScaleUpdate::per_module_fused);
    CHECK_FALSE(fp8_scale_update_named("module").has_value());
}

TEST_CASE("fp8: linear GEMMs in FP8 with their casts, inputs saved in FP8, FP8 weight copies, errors without FP8") {
    const ModelSpec m = small_llama();
    const std::int64_t s = 2048, b = 1, h = 1024, f = 2816, t = 2, sbh = s * b * h;
    LayerConfig c{&m, int(t), true, Recompute::none, int(b)};
    c.attention = Attention::flash;
    const Bytes bf16 = build_layer(c).stored_bytes;
    c.fp8 = true;
    const LayerPlan plan = build_layer(c);
    // qkv, fc1 inputs (SP shards, sbh/t each), proj input (sbh/t) and fc2 input (s b f / t) at 1 byte instead of 2;
    // the attention's 16-bit output (2 sbh/t), in 16-bit training the projection's saved input, now a tensor of its
    // own.
    CHECK(bf16.value - plan.stored_bytes.value == sbh / t + sbh / t + sbh / t + s * b * f / t - 2 * sbh / t);
    // Recomputing the attention core drops that output with the rest of its saved state.
    LayerConfig sel = c;
    sel.recompute = Recompute::selective;
    LayerConfig sel_bf16 = sel;
    sel_bf16.fp8 = false;
    CHECK(build_layer(sel_bf16).stored_bytes.value - build_layer(sel).stored_bytes.value ==
          sbh / t + sbh / t + sbh / t + s * b * f / t);
    int fp8_gemms = 0, bf16_gemms = 0;
    std::map<std::string, std::int64_t> conversions;  // FP8 casts and transposes: kernel name -> HBM bytes
    std::map<std::string, std::int64_t> gathers;      // sequence-parallel all-gathers: name -> bytes
    for (const auto* pass : {&plan.forward, &plan.backward})
        for (const Step& st : *pass) {
            if (st.kind == Step::Kind::collective && st.collective.kind == CollectiveKind::all_gather)
                gathers[st.collective.name] = st.collective.message.value;
            for (const Kernel& k : st.kernels) {
                if (k.kind == KernelKind::gemm) (k.gemm.fp8 ? fp8_gemms : bf16_gemms) += 1;
                if (k.name.find(".fp8-") != std::string::npos) conversions[k.name] = k.bytes.value;
            }
        }
    CHECK(fp8_gemms == 12);  // 4 linear layers x (forward, data gradient, weight gradient)
    CHECK(bf16_gemms == 0);  // the attention core is one FlashAttention kernel each way
    // Transformer Engine's conversions (delayed scaling, SP): the norm writes the QKV / fc1 input in FP8 itself (no
    // kernel); a column-parallel layer's output gradient is cast and transposed in one kernel (read 2, write 1 + 1); a
    // row-parallel layer's input is cast (TE 1.x under SP) and its output gradient cast on its shard (read 2, write 1)
    // before the gather; each FP8 tensor a weight gradient needs transposed is transposed there (read 1, write 1).
    const std::int64_t n = s * b, qkv_out = (h + 2 * 4 * 64) / t, fc1_out = 2 * f / t;
    const std::map<std::string, std::int64_t> expected = {{"proj.fp8-cast", 3 * n * h / t},
                                                          {"fc2.fp8-cast", 3 * n * f / t},
                                                          {"qkv.dgrad.fp8-cast-transpose", 4 * n * qkv_out},
                                                          {"fc1.dgrad.fp8-cast-transpose", 4 * n * fc1_out},
                                                          {"proj.dgrad.fp8-cast", 3 * n / t * h},
                                                          {"fc2.dgrad.fp8-cast", 3 * n / t * h},
                                                          {"qkv.wgrad.fp8-transpose", 2 * n * h},
                                                          {"fc1.wgrad.fp8-transpose", 2 * n * h},
                                                          {"proj.wgrad.fp8-transpose", 2 * n * (h / t + h)},
                                                          {"fc2.wgrad.fp8-transpose", 2 * n * (f / t + h)}};
    CHECK(conversions == expected);
    // The norms before QKV and fc1 write FP8 (read 2, write 1 per element of the shard) where BF16's write 2.
    int norms = 0;
    for (const Step& st : plan.forward)
        for (const Kernel& k : st.kernels)
            if (k.name == "ln1" || k.name == "ln2") {
                CHECK(k.bytes.value == 3 * n / t * h);
                ++norms;
            }
    CHECK(norms == 2);
    // A row-parallel layer's output gradient is cast on its shard before it is gathered: the cast's step comes
    // before the gather's (which, with tp_comm_overlap, runs beside the GEMM's step after it).
    for (const bool overlap : {false, true}) {
        LayerConfig o = c;
        o.tp_comm_overlap = overlap;
        const std::vector<Step>& bwd = build_layer(o).backward;
        auto step_of = [&](const std::string& name) {
            for (std::size_t i = 0; i < bwd.size(); ++i) {
                if (bwd[i].kind == Step::Kind::collective && bwd[i].collective.name == name) return i;
                for (const Kernel& k : bwd[i].kernels)
                    if (k.name == name) return i;
            }
            return bwd.size();
        };
        CHECK(step_of("proj.dgrad.fp8-cast") < step_of("attn.grad-all-gather"));
        CHECK(step_of("attn.grad-all-gather") < step_of("proj.dgrad"));
        CHECK(step_of("fc2.dgrad.fp8-cast") < step_of("mlp.grad-all-gather"));
    }
    // The FP8 shards are what is gathered: 1 byte per element of the n x h input, forward and backward.
    const std::map<std::string, std::int64_t> fp8_gathers = {
        {"attn.all-gather", n * h},      {"mlp.all-gather", n * h},       {"mlp.grad-all-gather", n * h},
        {"attn.grad-all-gather", n * h}, {"qkv.input-all-gather", n * h}, {"fc1.input-all-gather", n * h}};
    CHECK(gathers == fp8_gathers);
    // Without SP nothing is gathered and a row-parallel layer's input and output gradient are each cast and transposed
    // in one kernel.
    LayerConfig no_sp = c;
    no_sp.sequence_parallel = false;
    const LayerPlan unsplit = build_layer(no_sp);
    int fused = 0;
    for (const auto* pass : {&unsplit.forward, &unsplit.backward})
        for (const Step& st : *pass)
            for (const Kernel& k : st.kernels) {
                if (k.name == "fc2.fp8-cast-transpose") CHECK(k.bytes.value == 4 * n * f / t);
                if (k.name == "fc2.dgrad.fp8-cast-transpose") CHECK(k.bytes.value == 4 * n * h);
                fused += k.name.starts_with("fc2.") && k.name.ends_with(".fp8-cast-transpose");
                CHECK(k.name != "fc2.wgrad.fp8-transpose");
            }
    CHECK(fused == 2);
    // Weights: 2 bytes per parameter plus the cached FP8 copy and its transpose of each layer parameter.
    Scenario sc = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml").cases[2];
    const Bytes w16 = stage_weight_bytes(sc.model, sc.execution, 1);
    sc.execution.precision = Precision::fp8;
    validate(sc);
    const double layer_params = double(sc.execution.layers_on_stage(sc.model.layers, 1)) *
                                layer_parameters_per_gpu(sc.model, sc.execution.tensor);
    CHECK(double(stage_weight_bytes(sc.model, sc.execution, 1).value - w16.value) == Approx(2 * layer_params).margin(1));
    const IterationResult r8 = simulate(sc);
    sc.execution.precision = Precision::bf16;
    const IterationResult r16 = simulate(sc);
    CHECK(r8.iteration_time_s < r16.iteration_time_s);
    // A100 has no FP8 tensor cores.
    Scenario a100 = strata::testing::table4_case(0);
    a100.execution.precision = Precision::fp8;
    CHECK_THROWS_WITH(validate(a100), Catch::Contains("execution.precision") && Catch::Contains("peak_flops_fp8"));
}

TEST_CASE("fp8 userbuffers: tp_overlap_fp8_buf reduce-scatters proj_fprop / fc2_fprop in FP8, inert in 16 bits") {
    const ModelSpec m = small_llama();
    const std::int64_t n = 2048, h = 1024, t = 2;
    LayerConfig c{&m, int(t), true, Recompute::none, 1};
    c.attention = Attention::flash;
    c.tp_comm_overlap = true;
    c.fp8 = true;
    // Bytes moved by the forward's reduce-scatters whose names start with `prefix`, and the ring exchange's sum kernel.
    auto scattered = [](const LayerPlan& p, const std::string& prefix) {
        std::int64_t bytes = 0;
        for (const Step& st : p.forward)
            if (st.kind == Step::Kind::collective && st.collective.kind == CollectiveKind::reduce_scatter &&
                st.collective.name.starts_with(prefix))
                bytes += st.collective.message.value;
        return bytes;
    };
    auto sum_bytes = [](const LayerPlan& p, const std::string& name) {
        for (const Step& st : p.forward)
            for (const Kernel& k : st.kernels)
                if (k.name == name) return k.bytes.value;
        return std::int64_t{-1};
    };
    const LayerPlan plain = build_layer(c);
    CHECK(scattered(plain, "attn.reduce-scatter") == 2 * n * h);  // 16-bit partial outputs: the pipeline's 4 chunks
    CHECK(scattered(plain, "mlp.reduce-scatter") == 2 * n * h);
    c.tp_overlap_config.fp8_buf[std::size_t(TpOverlap::proj_fprop)] = true;
    const LayerPlan proj_fp8 = build_layer(c);
    CHECK(scattered(proj_fp8, "attn.reduce-scatter") == n * h);
    CHECK(scattered(proj_fp8, "mlp.reduce-scatter") == 2 * n * h);
    // By ring exchange the transfers and the sum of the t partial outputs read 1 byte per element; the sum writes 16
    // bits.
    c.tp_overlap_fc2_fprop = TpOverlapRs::ring_exchange;
    CHECK(sum_bytes(build_layer(c), "mlp.reduce-scatter.sum") == 2 * n * h + 2 * n / t * h);
    c.tp_overlap_config.fp8_buf[std::size_t(TpOverlap::fc2_fprop)] = true;
    const LayerPlan ring_fp8 = build_layer(c);
    CHECK(scattered(ring_fp8, "mlp.reduce-scatter") == n * h);
    CHECK(sum_bytes(ring_fp8, "mlp.reduce-scatter.sum") == n * h + 2 * n / t * h);
    // In 16 bits TE's buffers are 16-bit whatever fp8_buf says (the loader accepts the key there, as TE ignores it).
    c.fp8 = false;
    CHECK(scattered(build_layer(c), "attn.reduce-scatter") == 2 * n * h);
    // A whole case: with FP8 the FP8 reduce-scatters make the step shorter; in BF16 the key changes nothing (as TE).
    Scenario sc = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml").cases[2];
    sc.execution.precision = Precision::fp8;
    sc.execution.sequence_parallel = true;
    sc.execution.tp_comm_overlap = true;
    sc.system.variation.gpu_sigma = 0;
    validate(sc);
    const double fp8_plain = simulate(sc).iteration_time_s;
    sc.execution.tp_overlap_config.fp8_buf[std::size_t(TpOverlap::proj_fprop)] = true;
    sc.execution.tp_overlap_config.fp8_buf[std::size_t(TpOverlap::fc2_fprop)] = true;
    validate(sc);
    CHECK(simulate(sc).iteration_time_s < fp8_plain);
    sc.execution.precision = Precision::bf16;
    validate(sc);
    const double bf16_buf = simulate(sc).iteration_time_s;
    sc.execution.tp_overlap_config = TpOverlapConfig{};
    CHECK(simulate(sc).iteration_time_s == bf16_buf);
}

TEST_CASE("fp8 current scaling: an amax read before each cast, fp8_param_gather: layer parameters gathered in FP8") {
    const ModelSpec m = small_llama();
    LayerConfig c{&m, 2, true, Recompute::none, 1};
    c.attention = Attention::flash;
    c.fp8 = true;
    struct Conversions {
        std::int64_t cast_bytes = 0;  // casts, cast-transposes and amax passes
        int casts = 0, amax_reductions = 0;
    };
    auto conversions = [](const LayerPlan& p) {
        Conversions r;
        for (const auto* pass : {&p.forward, &p.backward})
            for (const Step& st : *pass) {
                if (st.kind == Step::Kind::collective && st.collective.name.ends_with(".amax-all-reduce")) {
                    CHECK(st.collective.message.value == 4);
                    ++r.amax_reductions;
                }
                for (const Kernel& k : st.kernels)
                    if (k.name.find(".fp8-cast") != std::string::npos || k.name.ends_with(".fp8-amax")) {
                        r.cast_bytes += k.bytes.value;
                        ++r.casts;
                    }
            }
        return r;
    };
    const Conversions delayed = conversions(build_layer(c));
    c.fp8_current_scaling = true;
    const Conversions current = conversions(build_layer(c));
    REQUIRE(delayed.casts == 6);
    // Current scaling reads each 16-bit operand once more for its amax (2 bytes per element cast), and casts the norm's
    // output itself (QKV and fc1 inputs: the shard, 5 bytes per element); under SP each gathered operand's amax is
    // computed apart (its own kernel, 2 bytes per element of the shard) and all-reduced over the tensor-parallel group
    // before its cast (the QKV and fc1 inputs, the projection's and fc2's output gradients).
    const std::int64_t n = 2048, h = 1024, t = 2, f = 2816, qkv_out = (h + 2 * 4 * 64) / t;
    const std::int64_t amax_elements = n * h / t + n * f / t + n * qkv_out + n * 2 * f / t + 2 * (n / t * h);
    CHECK(current.casts == delayed.casts + 2 + 4);  // the QKV and fc1 casts, and four amax kernels
    CHECK(current.cast_bytes == delayed.cast_bytes + 2 * amax_elements + 2 * 5 * (n / t) * h);
    CHECK(delayed.amax_reductions == 0);
    CHECK(current.amax_reductions == 4);

    // The keys: fp8_recipe only with fp8; fp8_param_gather needs fp8 and the distributed optimizer.
    const std::string origin = kRoot + "tests/data/valid/fp8-options.yaml";
    auto load = [&](const std::string& extra) {
        return load_experiment_text("model: model-small.yaml\nsystem: ../../../scenarios/systems/dgx-h100.yaml\n"
                                    "execution: {tensor: 1, pipeline: 1, data: 2, recompute: none, microbatch: 1, "
                                    "global_batch: 8" + extra + "}\n", origin);
    };
    CHECK(load(", precision: fp8").cases.at(0).execution.fp8_recipe == Fp8Recipe::delayed);
    CHECK(load(", precision: fp8, fp8_recipe: current").cases.at(0).execution.fp8_recipe == Fp8Recipe::current);
    CHECK_THROWS_WITH(load(", fp8_recipe: current"), Catch::Contains("fp8-options.yaml:3:") && Catch::Contains("fp8_recipe"));
    CHECK_THROWS_WITH(load(", precision: fp8, fp8_recipe: now"), Catch::Contains("delayed") && Catch::Contains("current"));
    CHECK_THROWS_WITH(load(", precision: fp8, fp8_param_gather: true"), Catch::Contains("distributed_optimizer"));
    CHECK(load(", precision: fp8, distributed_optimizer: true, fp8_param_gather: true").cases.at(0).execution.fp8_param_gather);

    // The gather of a pipelined 70B with FP8 parameters is shorter, so the first forward waits less.
    Scenario sc = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml").cases[2];
    sc.execution.precision = Precision::fp8;
    sc.execution.overlap_param_gather = true;
    sc.system.variation.gpu_sigma = 0;
    validate(sc);
    const IterationResult bf16_gather = simulate(sc);
    sc.execution.fp8_param_gather = true;
    validate(sc);
    const IterationResult fp8_gather = simulate(sc);
    INFO("exposed data-parallel " << bf16_gather.exposed_comm.data_parallel.seconds() << " s -> "
                                  << fp8_gather.exposed_comm.data_parallel.seconds() << " s");
    CHECK(fp8_gather.exposed_comm.data_parallel < bf16_gather.exposed_comm.data_parallel);
    CHECK(fp8_gather.iteration_time < bf16_gather.iteration_time);
    // FP8 primary weights: a layer weight is its FP8 copy and transpose (1 + 1 bytes), no 16-bit weight beside them,
    // so a stage holds as many weight bytes as with bf16, 2 per layer parameter fewer than FP8 with 16-bit weights.
    ExecutionSpec e16 = sc.execution, e8 = sc.execution;
    e16.precision = Precision::bf16;
    e16.fp8_param_gather = false;
    e8.fp8_param_gather = false;
    const double layer_params =
        double(sc.execution.layers_on_stage(sc.model.layers, 1)) * layer_parameters_per_gpu(sc.model, sc.execution.tensor);
    CHECK(stage_weight_bytes(sc.model, sc.execution, 1) == stage_weight_bytes(sc.model, e16, 1));
    CHECK(double(stage_weight_bytes(sc.model, e8, 1).value - stage_weight_bytes(sc.model, sc.execution, 1).value) ==
          Approx(2 * layer_params).margin(1));
    CHECK(fp8_gather.peak_memory.value + std::int64_t(layer_params) < bf16_gather.peak_memory.value);

    // The weights' FP8 casts once per iteration: with 16-bit weights read 2, write 1 + 1 (the transpose) per layer
    // parameter, current scaling 2 more for the amax; FP8 primary weights only their transpose again (1 + 1).
    CHECK(fp8_weight_cast_bytes(sc.model, e16, 1) == 0.0);
    CHECK(fp8_weight_cast_bytes(sc.model, e8, 1) == Approx(4 * layer_params));
    CHECK(fp8_weight_cast_bytes(sc.model, sc.execution, 1) == Approx(2 * layer_params));
    ExecutionSpec e8_current = e8;
    e8_current.fp8_recipe = Fp8Recipe::current;
    CHECK(fp8_weight_cast_bytes(sc.model, e8_current, 1) == Approx(6 * layer_params));
    // ... on the compute stream with the optimizer step (one stage, no SP, no variation: the span is the step, its
    // fixed overhead and the casts).
    Scenario one = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml").cases[0];
    one.execution.precision = Precision::fp8;
    one.execution.sequence_parallel = false;
    one.execution.data = 1;
    one.execution.global_batch = 8;
    one.system.variation.gpu_sigma = 0;
    validate(one);
    SimulationOptions opt;
    opt.keep_trace = true;
    SimulationDetail detail;
    (void)simulate(one, opt, &detail);
    const double params = parameters_on_stage(one.model, one.execution, 0);
    const Time expected =
        Time::from_seconds(one.system.optimizer_step_seconds(params, params, Precision::fp8, 4) +
                           fp8_weight_cast_bytes(one.model, one.execution, 0) /
                               (one.system.device.hbm_bandwidth * one.system.device.elementwise_bandwidth_efficiency)) +
        one.system.optimizer.fixed_overhead;
    int spans = 0;
    for (const TraceSpan& span : detail.trace.spans)
        if (std::string(span.kind) == "optimizer") {
            ++spans;
            CHECK(std::llabs((span.end - span.start - expected).ps()) <= 2);
        }
    CHECK(spans == 1);
}

TEST_CASE("squared_relu: Nemotron's MLP, two matrices and GeLU's bytes, loaded by name, the same memory") {
    const ModelSpec gelu = model("gpt-22b");
    ModelSpec relu2 = gelu;
    relu2.mlp = Mlp::squared_relu;
    CHECK(std::string(to_string(Mlp::squared_relu)) == "squared_relu");
    CHECK(total_parameters(relu2) == total_parameters(gelu));
    ExecutionSpec e;
    e.tensor = 8;
    e.sequence_parallel = true;
    e.microbatch = 1;
    e.global_batch = 1;
    const LayerPlan a = build_layer(layer_config(gelu, e)), b = build_layer(layer_config(relu2, e));
    CHECK(a.stored_bytes == b.stored_bytes);
    // Kernel by kernel the same shapes and bytes; the activation named for what it is.
    std::int64_t bytes_a = 0, bytes_b = 0;
    bool named = false;
    for (const auto& [pass_a, pass_b] : {std::pair{&a.forward, &b.forward}, std::pair{&a.backward, &b.backward}}) {
        REQUIRE(pass_a->size() == pass_b->size());
        for (std::size_t i = 0; i < pass_a->size(); ++i)
            for (std::size_t k = 0; k < (*pass_a)[i].kernels.size(); ++k) {
                bytes_a += (*pass_a)[i].kernels[k].bytes.value;
                bytes_b += (*pass_b)[i].kernels[k].bytes.value;
                named = named || (*pass_b)[i].kernels[k].name == "squared_relu";
            }
    }
    CHECK(bytes_a == bytes_b);
    CHECK(named);
    const Experiment ex = load_experiment_text("model: {name: n, heads: 8, hidden: 512, layers: 2, seq_len: 256, vocab: 1024, "
                                               "mlp: squared_relu}\nsystem: system-small.yaml\n"
                                               "execution: {tensor: 1, pipeline: 1, recompute: none, microbatch: 1, global_batch: 1}\n",
                                               strata::testing::data_path("valid/x.yaml"));
    CHECK(ex.cases.at(0).model.mlp == Mlp::squared_relu);
    CHECK_THROWS_WITH(load_experiment_text("model: {name: n, heads: 8, hidden: 512, layers: 2, seq_len: 256, vocab: 1024, "
                                           "mlp: relu}\nsystem: system-small.yaml\n"
                                           "execution: {tensor: 1, pipeline: 1, recompute: none, microbatch: 1, global_batch: 1}\n",
                                           strata::testing::data_path("valid/x.yaml")),
                      Catch::Contains("squared_relu"));
}

namespace {

/// One layer's kernel time (launch overheads left out), forward and backward: its fused-attention kernels', the rest's,
/// and how many of the fused ones carry dropout.
struct LayerKernelTimes {
    double attention_s = 0, rest_s = 0;
    double attention_forward_s = 0;  ///< of attention_s, the forward kernels'
    int dropout_kernels = 0;
};

LayerKernelTimes layer_kernel_times(const Scenario& s) {
    const CostModel cost(s.system.device);
    const LayerPlan plan = build_layer(layer_config(s.model, s.execution));
    const Time launch = Time::from_seconds(s.system.device.kernel_launch_us * 1e-6);
    LayerKernelTimes r;
    for (const auto* pass : {&plan.forward, &plan.backward})
        for (const Step& st : *pass)
            for (const Kernel& k : st.kernels) {
                const double t = (cost.kernel(k).time - launch).seconds();
                if (k.is_fused_attention()) {
                    r.attention_s += t;
                    if (k.kind == KernelKind::flash_attention_fwd) r.attention_forward_s += t;
                    r.dropout_kernels += k.dropout ? 1 : 0;
                } else {
                    r.rest_s += t;
                }
            }
    return r;
}

}  // namespace

TEST_CASE("attention flash2: FlashAttention-2's kernels at the profile's flash2 ratios, 1.0 on A100, an error without") {
    const Experiment ex = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml");
    Scenario sc = ex.cases[0];
    REQUIRE(sc.execution.attention == Attention::flash);
    auto attention_time = [](const Scenario& s) { return layer_kernel_times(s).attention_s; };
    const LayerKernelTimes cudnn = layer_kernel_times(sc);
    REQUIRE(cudnn.attention_forward_s > 0);
    REQUIRE(cudnn.attention_forward_s < cudnn.attention_s);
    sc.execution.attention = Attention::flash2;
    validate(sc);
    REQUIRE(sc.system.device.flash2_forward_ratio == Approx(0.54));
    REQUIRE(sc.system.device.flash2_backward_ratio == Approx(0.65));
    // Compute-bound: each direction's time over its ratio.
    const LayerKernelTimes fa2 = layer_kernel_times(sc);
    CHECK(fa2.attention_forward_s == Approx(cudnn.attention_forward_s / 0.54).epsilon(1e-3));
    CHECK(fa2.attention_s - fa2.attention_forward_s ==
          Approx((cudnn.attention_s - cudnn.attention_forward_s) / 0.65).epsilon(1e-3));
    CHECK(simulate(sc).iteration_time > simulate(ex.cases[0]).iteration_time);
    // A profile without the ratios cannot run it; the message names the keys.
    sc.system.device.flash2_forward_ratio = sc.system.device.flash2_backward_ratio = 0;
    CHECK_THROWS_WITH(validate(sc), Catch::Contains("flash2_forward_ratio") && Catch::Contains("execution.attention"));
    // On the A100 profile the fused-attention figures are FlashAttention-2's own: the same time.
    Scenario a100 = strata::testing::table4_case(0);
    a100.execution.attention = Attention::flash;
    validate(a100);
    const double fa = attention_time(a100);
    a100.execution.attention = Attention::flash2;
    validate(a100);
    CHECK(attention_time(a100) == Approx(fa));
}

TEST_CASE("fused attention with dropout: its kernels at the profile's dropout_time_factor, none without dropout") {
    // Megatron's GPT (attention dropout 0.1) on the H100 profile: the fused kernels, forward and backward, take
    // dropout_time_factor (1.034, TE issue #3312) times as long as without dropout; nothing else in the layer moves.
    Scenario sc = strata::testing::table4_case(0);
    sc.system = load_system(kRoot + "scenarios/systems/dgx-h100.yaml");
    sc.execution.attention = Attention::flash;
    validate(sc);
    REQUIRE(sc.model.has_dropout());
    REQUIRE(sc.system.device.flash_dropout_time_factor == Approx(1.034));
    // The same layer on the profile with the factor at 1 (not charged).
    const auto without_factor = [](Scenario off) {
        off.system.device.flash_dropout_time_factor = 1.0;
        return layer_kernel_times(off);
    };
    const LayerKernelTimes with = layer_kernel_times(sc);
    CHECK(with.dropout_kernels == 2);
    const LayerKernelTimes plain = without_factor(sc);
    CHECK(plain.dropout_kernels == 2);
    CHECK(with.attention_s == Approx(1.034 * plain.attention_s).epsilon(1e-3));   // compute-bound kernels
    CHECK(with.rest_s == Approx(plain.rest_s));
    // A model without dropout (Llama) marks no kernel and pays nothing: the same time with the factor as without.
    Scenario llama = load_experiment(kRoot + "scenarios/llama/llama3-h100.yaml").cases[0];
    REQUIRE_FALSE(llama.model.has_dropout());
    REQUIRE(llama.system.device.flash_dropout_time_factor == Approx(1.034));
    const LayerKernelTimes llama_with = layer_kernel_times(llama);
    CHECK(llama_with.dropout_kernels == 0);
    const LayerKernelTimes llama_plain = without_factor(llama);
    CHECK(llama_plain.attention_s == Approx(llama_with.attention_s).epsilon(1e-12));
    CHECK(llama_plain.rest_s == Approx(llama_with.rest_s).epsilon(1e-12));
    // The A100 profile gives no figure: 1, not charged.
    CHECK(strata::testing::table4_case(0).system.device.flash_dropout_time_factor == 1.0);
}
