// The layer model against the paper: Table 2 (activation bytes per layer) exactly, and the FLOPs
// conventions that reproduce Table 5's MFU / HFU from its published iteration times.
#include "strata/layer.hpp"
#include "strata/scenario.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace strata;

namespace {
std::string root() { return STRATA_SOURCE_DIR; }

// Table 2 formulas in exact integer arithmetic (paper-tables.yaml).
std::int64_t table2(const std::string& config, std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a,
                    std::int64_t t) {
    const std::int64_t sbh = s * b * h, attn = 5 * a * s * s * b;
    if (config == "no parallelism") return 34 * sbh + attn;
    if (config == "tensor parallel (baseline)") return 10 * sbh + 24 * sbh / t + attn / t;
    if (config == "tensor + sequence parallel") return 34 * sbh / t + attn / t;
    if (config == "tensor parallel + selective recompute") return 10 * sbh + 24 * sbh / t;
    if (config == "tensor + sequence parallel + selective recompute") return 34 * sbh / t;
    if (config == "full activation recompute") return 2 * sbh;
    FAIL("unknown configuration " << config);
    return 0;
}
}  // namespace

TEST_CASE("Table 2: activation bytes per layer from the op list equal the paper's formulas (24 cases)") {
    const Experiment ex = load_experiment(root() + "/scenarios/paper/table2.yaml");
    REQUIRE(ex.cases.size() == 24);
    int checked = 0;
    for (const Scenario& sc : ex.cases) {
        const auto space = sc.name.find(' ');
        const std::string config = sc.name.substr(space + 1);
        const auto& m = sc.model;
        const auto& e = sc.execution;
        const std::int64_t expected = table2(config, m.seq_len, e.microbatch, m.hidden, m.heads, e.tensor);
        const Bytes got = activation_bytes_per_layer(m, e.tensor, e.sequence_parallel, e.recompute, e.microbatch);
        INFO(sc.name);
        CHECK(got.value == expected);
        ++checked;
    }
    CHECK(checked == 24);
}

TEST_CASE("Table 2 holds for other shapes too (t = 2, 4, b = 2)") {
    ModelSpec m{"x", 32, 4096, 4, 1024, 50304, 4 * 4096, true};
    for (int t : {2, 4}) {
        const std::int64_t s = 1024, b = 2, h = 4096, a = 32, sbh = s * b * h;
        CHECK(activation_bytes_per_layer(m, t, false, Recompute::none, 2).value ==
              10 * sbh + 24 * sbh / t + 5 * a * s * s * b / t);
        CHECK(activation_bytes_per_layer(m, t, true, Recompute::selective, 2).value == 34 * sbh / t);
        // Full recompute with sequence parallelism keeps only the sharded layer input.
        CHECK(activation_bytes_per_layer(m, t, true, Recompute::full, 2).value == 2 * sbh / t);
    }
}

TEST_CASE("per-op accounting follows Section 4.1") {
    ModelSpec m{"x", 64, 6144, 48, 2048, 51200, 4 * 6144, true};
    const LayerPlan plan = build_layer({&m, 1, false, Recompute::none, 1});
    const std::int64_t sbh = 2048LL * 6144, as2b = 64LL * 2048 * 2048;
    std::int64_t attention = 0, mlp = 0, norms = 0;
    for (const auto& op : plan.ops) {
        if (op.name.rfind("ln", 0) == 0) norms += op.stored.value;
        else if (op.name.rfind("attn", 0) == 0 || op.name.rfind("qkv", 0) == 0 || op.name.rfind("proj", 0) == 0)
            attention += op.stored.value;
        else mlp += op.stored.value;
    }
    CHECK(attention == 11 * sbh + 5 * as2b);
    CHECK(mlp == 19 * sbh);
    CHECK(norms == 4 * sbh);
}

TEST_CASE("passes: collectives per layer follow Megatron with and without sequence parallelism") {
    ModelSpec m{"x", 64, 6144, 48, 2048, 51200, 4 * 6144, true};
    auto count = [](const std::vector<Step>& pass, CollectiveKind kind, bool overlapped) {
        int n = 0;
        for (const auto& s : pass)
            if (s.kind == Step::Kind::collective && s.collective.kind == kind && s.overlapped == overlapped) ++n;
        return n;
    };
    const LayerPlan tp = build_layer({&m, 8, false, Recompute::none, 4});
    CHECK(count(tp.forward, CollectiveKind::all_reduce, false) == 2);
    CHECK(count(tp.backward, CollectiveKind::all_reduce, true) == 2);
    const LayerPlan sp = build_layer({&m, 8, true, Recompute::none, 4});
    CHECK(count(sp.forward, CollectiveKind::all_gather, false) == 2);
    CHECK(count(sp.forward, CollectiveKind::reduce_scatter, false) == 2);
    CHECK(count(sp.backward, CollectiveKind::all_gather, false) == 2);
    CHECK(count(sp.backward, CollectiveKind::all_gather, true) == 2);
    CHECK(count(sp.backward, CollectiveKind::reduce_scatter, true) == 2);
    // Full recompute re-runs the forward (with its collectives) inside the backward.
    const LayerPlan full = build_layer({&m, 8, false, Recompute::full, 4});
    CHECK(count(full.backward, CollectiveKind::all_reduce, false) == 2);
    // Message size: the full s*b*h tensor in 2-byte elements.
    for (const auto& s : sp.forward)
        if (s.kind == Step::Kind::collective) CHECK(s.collective.message.value == 2LL * 2048 * 4 * 6144);
}

TEST_CASE("2021 Megatron: no async tensor-parallel communication, no gradient-accumulation fusion") {
    ModelSpec m{"x", 64, 6144, 48, 2048, 51200, 4 * 6144, true};
    auto collectives = [](const std::vector<Step>& pass, bool overlapped) {
        int n = 0;
        for (const auto& s : pass)
            if (s.kind == Step::Kind::collective && s.overlapped == overlapped) ++n;
        return n;
    };
    auto kernels_named = [](const std::vector<Step>& pass, const std::string& suffix) {
        std::vector<Kernel> out;
        for (const auto& s : pass)
            for (const auto& k : s.kernels)
                if (k.name.size() >= suffix.size() && k.name.compare(k.name.size() - suffix.size(), suffix.size(), suffix) == 0)
                    out.push_back(k);
        return out;
    };
    for (const bool sp : {false, true}) {
        LayerConfig c{&m, 8, sp, Recompute::none, 4};
        const LayerPlan modern = build_layer(c);
        c.async_tp_comm = false;
        const LayerPlan sync = build_layer(c);
        // Same collectives, none overlapped any more; the compute steps hold the same kernels.
        CHECK(collectives(modern.backward, true) == (sp ? 4 : 2));
        CHECK(collectives(sync.backward, true) == 0);
        CHECK(collectives(sync.backward, false) == collectives(modern.backward, false) + collectives(modern.backward, true));
        CHECK(kernels_named(sync.backward, "").size() == kernels_named(modern.backward, "").size());
        // The input-gradient reduction follows the weight-gradient GEMM, not the data-gradient GEMM.
        for (std::size_t i = 1; i < sync.backward.size(); ++i) {
            const Step& st = sync.backward[i];
            if (st.kind != Step::Kind::collective) continue;
            if (st.collective.name != "fc1.grad-all-reduce" && st.collective.name != "fc1.grad-reduce-scatter") continue;
            REQUIRE(sync.backward[i - 1].kind == Step::Kind::compute);
            CHECK(sync.backward[i - 1].kernels.back().name == "fc1.wgrad");
        }
    }
    LayerConfig c{&m, 8, false, Recompute::none, 4};
    const auto fused = kernels_named(build_layer(c).backward, ".wgrad");
    REQUIRE(fused.size() == 4);
    for (const auto& k : fused) {
        CHECK(k.gemm.accumulate_fp32);
        CHECK(k.bytes.value == 2 * (k.gemm.m * k.gemm.k + k.gemm.k * k.gemm.n) + 8 * k.gemm.m * k.gemm.n);
    }
    CHECK(kernels_named(build_layer(c).backward, ".main-grad-add").empty());
    c.gradient_accumulation_fusion = false;
    const LayerPlan unfused = build_layer(c);
    const auto plain = kernels_named(unfused.backward, ".wgrad");
    const auto adds = kernels_named(unfused.backward, ".main-grad-add");
    REQUIRE(plain.size() == 4);
    REQUIRE(adds.size() == 4);
    std::int64_t weights = 0, added = 0;
    for (const auto& k : plain) {
        CHECK_FALSE(k.gemm.accumulate_fp32);
        weights += k.gemm.m * k.gemm.n;
    }
    for (const auto& k : adds) added += k.bytes.value;
    // Every weight of the layer (12 h^2 / t): read the 16-bit gradient (2) and the fp32 main gradient (4),
    // write the main gradient (4).
    CHECK(weights == 12LL * 6144 * 6144 / 8);
    CHECK(added == 10 * weights);
    c.fp32_main_grads = false;  // fp16 training keeps 16-bit main gradients: 2 + 2 + 2
    std::int64_t added16 = 0;
    for (const auto& k : kernels_named(build_layer(c).backward, ".main-grad-add")) added16 += k.bytes.value;
    CHECK(added16 == 6 * weights);
}

TEST_CASE("layer_config carries the execution's switches") {
    ModelSpec m{"x", 64, 6144, 48, 2048, 51200, 4 * 6144, true};
    ExecutionSpec e;
    e.tensor = 8;
    e.microbatch = 2;
    e.sequence_parallel = true;
    e.recompute = Recompute::selective;
    LayerConfig c = layer_config(m, e);
    CHECK(c.tensor == 8);
    CHECK(c.microbatch == 2);
    CHECK(c.sequence_parallel);
    CHECK(c.recompute == Recompute::selective);
    CHECK(c.gradient_accumulation_fusion);
    CHECK(c.async_tp_comm);
    CHECK(c.fp32_main_grads);
    e.gradient_accumulation_fusion = false;
    e.async_tp_comm = false;
    e.precision = Precision::fp16;
    c = layer_config(m, e);
    CHECK_FALSE(c.gradient_accumulation_fusion);
    CHECK_FALSE(c.async_tp_comm);
    CHECK_FALSE(c.fp32_main_grads);
}

TEST_CASE("recompute FLOPs: selective re-runs the attention core, full re-runs the whole forward") {
    ModelSpec m{"x", 96, 12288, 96, 2048, 51200, 4 * 12288, true};
    auto gemm_flops = [](const std::vector<Step>& pass) {
        double f = 0;
        for (const auto& s : pass)
            for (const auto& k : s.kernels)
                if (k.kind != KernelKind::elementwise) f += k.gemm.flops().value;
        return f;
    };
    const double s = 2048, h = 12288, t = 8, b = 1;
    const LayerPlan none = build_layer({&m, 8, true, Recompute::none, 1});
    const LayerPlan sel = build_layer({&m, 8, true, Recompute::selective, 1});
    const LayerPlan full = build_layer({&m, 8, true, Recompute::full, 1});
    const double fwd = gemm_flops(none.forward);
    CHECK(fwd == Approx(24 * b * s * h * h / t * (1 + s / (6 * h))));
    CHECK(gemm_flops(none.backward) == Approx(2 * fwd));
    CHECK(gemm_flops(sel.backward) - gemm_flops(none.backward) == Approx(4 * b * s * s * h / t));
    CHECK(gemm_flops(full.backward) - gemm_flops(none.backward) == Approx(fwd));
}

TEST_CASE("FLOPs conventions reproduce Table 5's MFU and HFU from the published times (within 0.2 points)") {
    struct Row { const char* file; int B; int gpus; double full_s, present_s, mfu, hfu; };
    const Row rows[] = {{"gpt-22b", 4, 8, 1.42, 1.10, 41.5, 43.7},
                        {"gpt3-175b", 64, 64, 18.13, 13.75, 51.4, 52.8},
                        {"mt-nlg-530b", 280, 280, 49.05, 37.83, 56.0, 57.0},
                        {"gpt-1t", 512, 512, 94.42, 71.49, 56.3, 57.0}};
    for (const auto& r : rows) {
        const Experiment ex = load_experiment(root() + "/scenarios/paper/table2.yaml");
        const ModelSpec* model = nullptr;
        for (const auto& c : ex.cases)
            if (c.model.name == r.file) model = &c.model;
        REQUIRE(model != nullptr);
        const double peak = double(r.gpus) * 312e12;
        const double mfu = model_flops_per_iteration(*model, r.B).value / (r.present_s * peak) * 100;
        const double hfu = hardware_flops_per_iteration(*model, r.B, Recompute::selective).value / (r.present_s * peak) * 100;
        INFO(r.file);
        CHECK(std::abs(mfu - r.mfu) < 0.2);
        CHECK(std::abs(hfu - r.hfu) < 0.2);
        // Full recompute's MFU uses the same model FLOPs: slower time, lower MFU.
        CHECK(model_flops_per_iteration(*model, r.B).value / (r.full_s * peak) * 100 < r.mfu);
    }
}
