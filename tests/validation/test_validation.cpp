// Validation as CTest tests (label "validation"): the published end-to-end figures strata is judged on, with the
// accuracy reached today written here as the tolerance, so that an accuracy regression fails CI. Nothing in
// strata is fitted to these figures (README "Validation"); the published values come from plots/paper_values.json.
//   Table 5 (Korthikanti et al. 2023): 8 iteration times, 22B-1T, full recompute and the present work.
//   SC21 Table 1 (Narayanan et al. 2021): achieved TFLOP/s per GPU of 10 models on 32-3072 GPUs.
// Errors are signed (simulated / published - 1); the mean signed error is printed: a bias is information.
#include "strata/layer.hpp"
#include "strata/parallel.hpp"
#include "strata/scenario.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

using namespace strata;

namespace {

const std::string kRoot = std::string(STRATA_SOURCE_DIR) + "/";

nlohmann::json published() {
    std::ifstream in(kRoot + "plots/paper_values.json");
    REQUIRE(in);
    return nlohmann::json::parse(in);
}

std::vector<IterationResult> simulate_all(const Experiment& ex, bool representative_replicas = false) {
    std::vector<IterationResult> out(ex.cases.size());
    parallel_for(ex.cases.size(), 0, [&](std::size_t i) {
        SimulationOptions opt;
        opt.keep_timeline = false;
        opt.representative_replicas = representative_replicas;
        out[i] = simulate(ex.cases[i], opt);
    });
    return out;
}

struct Summary {
    double mean_abs = 0, worst_abs = 0, mean_signed = 0;
};

Summary summarize(const std::string& title, const std::vector<std::string>& names, const std::vector<double>& errors) {
    Summary s;
    std::cout << title << " (error = simulated / published - 1)\n";
    for (std::size_t i = 0; i < errors.size(); ++i) {
        std::cout << fmt::format("  {:<24} {:+6.2f}%\n", names[i], 100 * errors[i]);
        s.mean_abs += std::abs(errors[i]);
        s.mean_signed += errors[i];
        s.worst_abs = std::max(s.worst_abs, std::abs(errors[i]));
    }
    s.mean_abs /= double(errors.size());
    s.mean_signed /= double(errors.size());
    std::cout << fmt::format("  mean |error| {:.2f}%, worst {:.2f}%, mean signed {:+.2f}%\n", 100 * s.mean_abs,
                             100 * s.worst_abs, 100 * s.mean_signed);
    return s;
}

}  // namespace

/// A table's cases and their signed errors.
struct Errors {
    std::vector<std::string> names;
    std::vector<double> errors;
};

/// Table 5's eight iteration times: simulated / published - 1 (time: positive = strata slow).
Errors table5_errors() {
    const nlohmann::json paper = published()["table5"];
    const Experiment ex = load_experiment(kRoot + "scenarios/paper/table5.yaml");
    REQUIRE(ex.cases.size() == 8);
    const std::vector<IterationResult> sim = simulate_all(ex);
    std::vector<std::string> names;
    std::vector<double> errors;
    for (std::size_t i = 0; i < ex.cases.size(); ++i) {
        const std::string& name = ex.cases[i].name;  // "<model> full recompute" | "<model> present work"
        const std::string model = name.substr(0, name.find(' '));
        const bool full = name.find("full recompute") != std::string::npos;
        REQUIRE(paper.contains(model));
        const double published_s = paper[model][full ? "full_recompute" : "present_work"].get<double>();
        names.push_back(name);
        errors.push_back(sim[i].iteration_time_s / published_s - 1);
    }
    return {names, errors};
}

/// SC21 Table 1's ten rows: simulated / published TFLOP/s per GPU - 1 (throughput: positive = strata fast). SC21
/// counts FLOPs with the full recompute: achieved TFLOP/s per GPU = HFU x the device's peak.
Errors sc21_errors();

TEST_CASE("validation: Table 5 iteration times, mean |error| <= 1.9%, worst <= 3.5%") {
    // Was 1.5 / 3.2% until the host gaps after the 2022 software's synchronisations were measured and shipped
    // (session 22): they moved Table 5 from 1.39 / 2.94% (-0.69% signed) to 2.65 / 5.26% (+2.17%) and SC21 the other
    // way; with get_batch's time from A100 runs (session 23) 2.21 / 4.59% (+1.72%); less what an A100's longer
    // kernels hide of the H200's host waits (session 25) 2.03 / 4.16% (+1.50%), and with the GPU's own idle instead
    // of the difference method 1.77 / 3.38% (+1.11%). The README's "Fidelity" gives both tables. The tolerance pins
    // today's figure.
    const Errors t5 = table5_errors();
    const Summary s = summarize("Table 5", t5.names, t5.errors);
    CHECK(s.mean_abs <= 0.019);
    CHECK(s.worst_abs <= 0.035);
}

/// Simulates a published per-GPU throughput table (entry `key` of paper_values.json: tflops_per_gpu and gpus, in the
/// order of the experiment's cases) and returns the summary of the signed errors; `achieved` gives a case's
/// simulated TFLOP/s per GPU by the publication's own FLOPs convention.
Errors throughput_errors(const std::string& key, const std::string& experiment,
                         const std::function<double(const Scenario&, const IterationResult&)>& achieved) {
    const nlohmann::json paper = published()[key];
    const Experiment ex = load_experiment(kRoot + experiment);
    const auto tflops = paper["tflops_per_gpu"].get<std::vector<double>>();
    const auto gpus = paper["gpus"].get<std::vector<int>>();
    REQUIRE(ex.cases.size() == tflops.size());
    const std::vector<IterationResult> sim = simulate_all(ex);
    std::vector<std::string> names;
    std::vector<double> errors;
    for (std::size_t i = 0; i < ex.cases.size(); ++i) {
        REQUIRE(ex.cases[i].execution.gpus() == gpus[i]);
        names.push_back(ex.cases[i].name);
        errors.push_back(achieved(ex.cases[i], sim[i]) / tflops[i] - 1);
    }
    return {names, errors};
}

Summary throughput_table(const std::string& title, const std::string& key, const std::string& experiment,
                         const std::function<double(const Scenario&, const IterationResult&)>& achieved) {
    const Errors e = throughput_errors(key, experiment, achieved);
    return summarize(title, e.names, e.errors);
}

Errors sc21_errors() {
    return throughput_errors("sc21_table1", "scenarios/crosscheck/sc21-table1.yaml",
                             [](const Scenario& sc, const IterationResult& r) { return r.hfu * sc.system.device.peak_flops / 1e12; });
}

/// Megatron-LM's own FLOPs count (model FLOPs) per GPU and second, in TFLOP/s: what its README's tables report.
double megatron_tflops_per_gpu(const Scenario& sc, const IterationResult& r) {
    return model_flops_per_iteration(sc.model, sc.execution.global_batch).value /
           (r.iteration_time_s * sc.execution.gpus()) / 1e12;
}

TEST_CASE("validation: SC21 Table 1 TFLOP/s per GPU, mean |error| <= 2.2%, worst <= 3.8%") {
    // 2.09 / 3.38% with the H200's whole forward gap (session 22), 2.10 / 3.40% with get_batch's time from A100 runs,
    // 2.09 / 3.43% less what an A100 hides of the host waits (session 25), 2.09 / 3.69% with the GPU's own idle.
    const Errors e = sc21_errors();
    const Summary s = summarize("SC21 Table 1", e.names, e.errors);
    CHECK(s.mean_abs <= 0.022);
    CHECK(s.worst_abs <= 0.038);
}

TEST_CASE("validation: Table 5 and SC21 together, mean signed within +-1%, mean |error| <= 2.0%, worst <= 3.8%") {
    // Issue 14's targets over the 18 rows in one sense, throughput (Table 5's times as published / simulated - 1):
    // mean signed within +-1% (met since the host gaps: +0.24%), mean |error| <= 2.5% (1.94%), worst <= 5% (3.69%,
    // SC21's 76.1B row). The tolerances pin today's figures.
    Errors all = sc21_errors();
    const Errors t5 = table5_errors();
    for (std::size_t i = 0; i < t5.errors.size(); ++i) {
        all.names.push_back("Table 5 " + t5.names[i]);
        all.errors.push_back(1.0 / (1.0 + t5.errors[i]) - 1.0);
    }
    REQUIRE(all.errors.size() == 18);
    const Summary s = summarize("Table 5 and SC21 Table 1, as throughput", all.names, all.errors);
    CHECK(std::abs(s.mean_signed) <= 0.01);
    CHECK(s.mean_abs <= 0.020);
    CHECK(s.worst_abs <= 0.038);
}

TEST_CASE("validation: Megatron-LM H100 weak scaling TFLOP/s per GPU, mean |error| <= 9.4%, worst <= 24.1%") {
    // Hopper: today's accuracy, short of issue 12's aim (mean <= 5%, worst <= 10%): the small models (t = 1, 2)
    // come out 4-7% fast, the 32B row 23.9% slow. The tolerance pins today's figure so that a regression is seen.
    // It moved from 6.00% / 12.27% when the fused attention became the measured cuDNN kernel (2026-11-26, an H100 and
    // an H200: slower than the FlashAttention-3 figure the profile had), an independent measurement, kept; and
    // from 6.39% / 13.64% when the interference of overlapped collectives became the H100's measured slowdown
    // with SMs held (measured.sms_held, 2026-11-26: 2 of 132 SMs held slow a GEMM 10%, not 1.5%), likewise kept;
    // then the embedding's dense gradient took it to 6.84% / 14.96% (the 32B row's worst by 0.2 points), the
    // measured sparing of bandwidth-bound kernels and fused attention by held SMs to 6.85% / 14.86%; the first
    // forward's layers waiting for their parameters' all-gather buckets (physics: a GEMM cannot use a weight before
    // it arrives; docs/validation-hopper.md) to 9.26% / 21.98%, kept: the published 32B row is below what its stated
    // configuration allows on one NDR rail per GPU even without it. The SP sum of the norm and bias gradients over the
    // tensor-parallel group before the step and the output layer's input gathered again in its backward (both in
    // Megatron's code, session 19) to 9.29% / 22.08%; Megatron-Core's NaN check of each gradient bucket before its
    // reduction (on by default in Megatron-LM r0.8 for BF16; the t = 1, 2 rows 0.7-0.9 points closer, the pipelined
    // ones 0.4-0.7 further: the last microbatch's backward carries it down the pipeline) to 9.36% / 22.09%; the DGX
    // H100 fabric's adaptive routing (NVIDIA's subnet manager's default since 2022, NCCL's on IB: each flow spread over
    // all of a leaf's uplinks instead of hashed onto one; 119B-462B 1.3-5.3 points closer) to 7.97% / 22.09%;
    // Transformer Engine's chunked GEMMs under --tp-comm-overlap (its defaults: t chunks per ring exchange, 4 per
    // pipelined reduce-scatter) costed with Hopper's stream-K (both from H100 GEMM microbenchmarks, session 24) to
    // 10.56% / 24.70%, signed -7.87%; the last chunk's reduce-scatter after each pipelined GEMM (TE's split_overlap_rs
    // issues it after the last GEMM chunk) to 11.06% / 25.39%, signed -8.45%; stream-K's fixup cost where few tiles are
    // shared by many SMs (the same microbenchmarks: chunk ratios' rms 11% -> 5.4%) to 10.37% / 25.50%, signed -7.77%:
    // kept, the mechanisms are TE's code and their costs H100 GEMM microbenchmarks, independent of these rows (NeMo's
    // rows and Megatron-Bridge's 405B closer, these, the strong series' large rows and Bridge's 70B further). Then
    // TE's own SMs per overlap (session 26: ring exchanges by the copy engines, no SM; pipeline and bulk kernels of
    // their num_sm, TE 1.x's 16 here, instead of NCCL's 32; no SM margin in TE 1.x) to 8.58% / 23.39%, signed -5.71%;
    // the slowdown with SMs held by each GEMM's waves (the H100 sweep's per-wave lines: the pipelined chunks, few tiles
    // per SM, lose more) to 8.86% / 24.33%, signed -6.16%: kept, calibration data alone chose it. Then the power limit
    // (session 27: a layer's kernels settle at the SM clock where their mix meets the board's 700 W, measured on a lent
    // H100 and H200; the profile's rates placed on the clock curve by one GPU's layers at their steady state) to
    // 10.62% / 25.32%, signed -8.20%: the t = 1 row +0.5 points (a lighter layer keeps a higher clock), the others
    // 1.0-3.7 points slower. Kept: calibration data alone chose it; NeMo's mean unchanged, Megatron-Bridge's closer.
    // Then the headroom after rest (session 28: a rested board runs above its sustained clock until it has spent the
    // energy the same run's GEMM bursts after idle gaps measured) to 9.60% / 23.86%, signed -6.81%: the pipelined rows'
    // ramps, where stages wait, 1.3-2.1 points faster, the p = 1 rows 0.5-1.4 (the first forward's waits for its
    // parameter buckets). Session 30 timed the headroom GEMM by GEMM on a second H100 (152 ms at the boost clock, NVML
    // had read 154: 46.0 J and 122.8 W for 46.7 and 134.8): 9.59% / 23.81% / -6.80%. Session 33 charged the fused
    // attention's dropout (the rows' attention_dropout 0.1; x1.034 from TE issue #3312's H200 microbenchmark): 9.60% /
    // 23.92% / -6.98%, the t = 1, 2 rows 0.3-0.4 points closer, the others 0.1-0.2 further. Session 38 took Megatron-
    // Core's own gradient buckets (grad_buckets megatron_core: on the first stage max(40 M, 1 M x 48) = 48 M
    // parameters, the output layer reduced first, a t = 8 layer in two buckets, each with its NaN check; one bucket on
    // every later stage): 9.62% / 24.40% / -6.55%, the t = 1, 2 rows 0.8-1.2 points faster (further), 16B and 32B
    // 0.1-0.5 slower, the pipelined rows -0.1 to +0.9 (the later stages' single reduction). Session 43's bias gradients
    // where Megatron-Core's TE spec computes them (transformer_impl: transformer_engine; QKV's in TE's weight-gradient
    // GEMM epilogue, the projection's and fc2's over the rank's n / t tokens in the bias-dropout-add): 9.32% / 23.96% /
    // -6.02%, every row 0.4-0.7 points faster (the t = 1, 2 rows further, the rest closer). Megatron's own FLOPs count
    // (model FLOPs) per GPU and second.
    const Summary s = throughput_table("Megatron-LM H100", "megatron_h100", "scenarios/validation/megatron-h100.yaml",
                                       megatron_tflops_per_gpu);
    CHECK(s.mean_abs <= 0.094);
    CHECK(s.worst_abs <= 0.241);
}

TEST_CASE("validation: Megatron-LM H100 strong scaling (177B, 96-4608 GPUs), mean |error| <= 11.9%, worst <= 18.8%") {
    // Hopper, strong scaling at a fixed batch of 1,152: today's accuracy, pinned so that a change is seen. strata's
    // MFU falls from 52.0% to 33.5% where the published one falls from 47% to 42% (docs/validation-hopper.md, "strong
    // scaling").
    const Summary s = throughput_table("Megatron-LM H100 strong scaling", "megatron_h100_strong",
                                       "scenarios/validation/megatron-h100-strong.yaml",
                                       megatron_tflops_per_gpu);
    // 11.45% before the measured fused attention, 11.56% before the measured SMs held, 12.31% before the first
    // forward waited for its parameters' buckets; 14.55% / 18.29% before the gradient buckets' NaN check (each stage's
    // check in the last microbatch's backward delays that backward on its way down the pipeline); 14.97% / 19.14%
    // before the fabric's adaptive routing (the 2,304-GPU row -8.8% -> -3.5%); 13.20% / 19.11% before Transformer
    // Engine's chunked GEMMs, the pipelined reduce-scatters' exposed last chunks and stream-K (session 24: 13.81% /
    // 22.42%; 96 GPUs +17.0% -> +11.3%, 4,608 GPUs -19.1% -> -22.4%); 13.81% / 22.42% before TE's own SMs per overlap
    // (session 26: 13.39% / 20.18%, signed -3.32%; 96 GPUs +11.3% -> +15.1%, 2,304 -7.8% -> -4.9%, 4,608 -22.4% ->
    // -20.2%; then with the slowdown by each GEMM's waves 13.42% / 20.37% / -3.58%: +14.8 / -5.1 / -20.4%); the power
    // limit (session 27) 13.86% / 22.73% / -6.74%: +10.7 / -8.2 / -22.7%; the headroom after rest (session 28) 12.40% /
    // 20.10% / -5.17%: +10.9 / -6.3 / -20.1%; its GEMM-by-GEMM measurement (session 30) 12.41% / 20.11% / -5.17%;
    // the fused attention's dropout (session 33, x1.034 from a public microbenchmark) 12.43% / 20.20% / -5.30%:
    // +10.7 / -6.4 / -20.2%; Megatron-Core's own gradient buckets (session 38: one bucket on every stage after the
    // first) 11.92% / 19.24% / -4.76%: +10.8 / -5.8 / -19.2%; session 43's bias gradients where Megatron-Core's TE spec
    // computes them 11.80% / 18.72% / -4.11%: +11.5 / -5.2 / -18.7%.
    CHECK(s.mean_abs <= 0.119);
    CHECK(s.worst_abs <= 0.188);
}

namespace {

/// The signed errors of a tokens/s table and their summary.
struct TokensErrors {
    std::vector<double> errors;
    Summary summary;
    std::vector<double> iteration_s;   ///< each case's simulated iteration time
    std::vector<double> microbatches;  ///< each case's microbatches per pipeline, global batch / (microbatch x data)
    std::vector<std::string> rows;     ///< the table's row names, where it has them (each checked against its case)
    std::vector<double> published_step_s;  ///< the table's step times, where it has them
};

/// Whether a scenario's case is the published row `published`: the row's name starts the case's, and a trailing
/// parenthesis ("(25.11)") is the same on both or on neither ("Llama 3 70B (25.11)" is "Llama 3 70B on 64 (25.11)").
bool is_published_row(const std::string& published, const std::string& simulated) {
    const auto split = [](const std::string& name) {
        const std::size_t open = name.rfind(" (");
        if (name.empty() || name.back() != ')' || open == std::string::npos) return std::pair{name, std::string{}};
        return std::pair{name.substr(0, open), name.substr(open)};
    };
    const auto [p_base, p_paren] = split(published);
    const auto [s_base, s_paren] = split(simulated);
    return p_paren == s_paren && s_base.starts_with(p_base);
}

/// Simulated against published tokens/s per GPU of plots/paper_values.json's table `key`, for the experiment `file`:
/// the signed errors, printed with their summary.
TokensErrors tokens_errors(const std::string& key, const std::string& file) {
    const nlohmann::json paper = published()[key];
    const Experiment ex = load_experiment(kRoot + file);
    const auto tokens = paper["tokens_per_s_per_gpu"].get<std::vector<double>>();
    const auto gpus = paper["gpus"].get<std::vector<int>>();
    REQUIRE(ex.cases.size() == tokens.size());
    TokensErrors out;
    // Where the table names its rows, each simulated case is the published row (a BF16 / FP8 pair has one GPU count).
    if (paper.contains("cases")) out.rows = paper["cases"].get<std::vector<std::string>>();
    REQUIRE((out.rows.empty() || out.rows.size() == ex.cases.size()));
    if (paper.contains("step_time_s")) out.published_step_s = paper["step_time_s"].get<std::vector<double>>();
    REQUIRE((out.published_step_s.empty() || out.published_step_s.size() == ex.cases.size()));
    const std::vector<IterationResult> sim = simulate_all(ex);
    std::vector<std::string> names;
    for (std::size_t i = 0; i < ex.cases.size(); ++i) {
        const Scenario& sc = ex.cases[i];
        const ExecutionSpec& e = sc.execution;
        REQUIRE(e.gpus() == gpus[i]);
        if (!out.rows.empty()) REQUIRE(is_published_row(out.rows[i], sc.name));
        const double per_gpu = double(e.global_batch) * sc.model.seq_len / sim[i].iteration_time_s / gpus[i];
        names.push_back(sc.name);
        out.errors.push_back(per_gpu / tokens[i] - 1);
        out.iteration_s.push_back(sim[i].iteration_time_s);
        out.microbatches.push_back(double(e.global_batch) / double(e.microbatch * e.data));
    }
    out.summary = summarize(paper["title"].get<std::string>(), names, out.errors);
    return out;
}

/// The slope of the least-squares line through the points (x[i], y[i]).
double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y) {
    const double n = double(x.size());
    double mx = 0, my = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        mx += x[i] / n;
        my += y[i] / n;
    }
    double sxy = 0, sxx = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
    }
    return sxy / sxx;
}

/// The part of the step time per microbatch, simulated over published - 1: the slopes of the least-squares lines
/// through (m, step time) over the cases [first, first + count) of `t`'s table (one layout and device), printed.
double per_microbatch_error(const TokensErrors& t, std::size_t first, std::size_t count) {
    const std::vector<double>& steps = t.published_step_s;
    REQUIRE(steps.size() == t.microbatches.size());
    REQUIRE(first + count <= steps.size());
    const auto slice = [&](const std::vector<double>& v) {
        return std::vector<double>(v.begin() + std::ptrdiff_t(first), v.begin() + std::ptrdiff_t(first + count));
    };
    const std::vector<double> m = slice(t.microbatches);
    const double published_slope = least_squares_slope(m, slice(steps));
    const double simulated_slope = least_squares_slope(m, slice(t.iteration_s));
    std::cout << fmt::format("  per microbatch: published {:.2f} ms, simulated {:.2f} ms ({:+.2f}%)\n",
                             1e3 * published_slope, 1e3 * simulated_slope, 100 * (simulated_slope / published_slope - 1));
    return simulated_slope / published_slope - 1;
}

// FP8's speed-up over BF16 (BF16 step / FP8 step), simulated against published, over a table whose cases come in
// pairs, BF16 then FP8 of the same layout (checked by name): the mean |relative difference|.
double fp8_speedup_mean_abs(const TokensErrors& t) {
    const std::vector<std::string>& names = t.rows;
    const std::vector<double>& steps = t.published_step_s;
    REQUIRE(names.size() == t.iteration_s.size());
    REQUIRE(steps.size() == t.iteration_s.size());
    REQUIRE(names.size() % 2 == 0);
    double sum_abs = 0;
    for (std::size_t i = 0; i + 1 < names.size(); i += 2) {
        REQUIRE(names[i].ends_with(" BF16"));
        REQUIRE(names[i + 1] == names[i].substr(0, names[i].size() - 4) + "FP8");
        const double published_speedup = steps[i] / steps[i + 1];
        const double simulated_speedup = t.iteration_s[i] / t.iteration_s[i + 1];
        sum_abs += std::abs(simulated_speedup / published_speedup - 1);
    }
    const double mean_abs = sum_abs / double(names.size() / 2);
    std::cout << fmt::format("  FP8 speed-up over BF16: mean |difference| {:.2f}%\n", 100 * mean_abs);
    return mean_abs;
}

}  // namespace

TEST_CASE(
    "validation: Megatron-Bridge H100 (Llama 3 70B, 3.1 405B, FP8) tokens/s per GPU within 0.5% / 0.8%, 25.11: 1.2% / "
    "10.7%, 25.09's 8B with Megatron-FSDP 2.1%") {
    // Hopper, today's software (Megatron-Bridge 26.04 and 26.04.01: bf16 gradient reduction, TE's fused cross-entropy,
    // FP8 current scaling and parameter gather, overlapped pipeline communication; 405B: context parallelism and the
    // embedding and loss counted in the pipeline split). Session 31's figures, 70B +0.04%, 405B -0.96%, pinned so that
    // a change is seen (-0.21% / -1.16% before the headroom after rest, session 28; +1.95% / +3.02% before the power
    // limit, session 27; +1.88% / +3.19% before the slowdown with SMs held by each GEMM's waves; +2.19% / +3.51% before
    // a ring exchange's last GEMM chunk waited for its last transfer; -1.62% / -2.08% before TE's own SMs per overlap,
    // session 26: the recipes' ring exchanges by the copy engines, no SM, their bulk overlaps' 2-24 SMs instead of
    // NCCL's 32, proj_fprop's and fc2_fprop's GEMMs on 131 SMs; +0.29% / +3.02% before Transformer Engine's chunked
    // GEMMs and its ring-exchange reduce-scatters (the recipes' userbuffer configs: proj_fprop and fc2_fprop
    // ring_exchange, the sum of the partial outputs exposed), session 24; 70B -4.30%, 405B -0.42% with blocking
    // pipeline calls, before overlap_p2p_comm was modelled). Session 31 read the vocabulary as the recipes build it,
    // unpadded (128,256; 70B +0.03% -> +0.04%), and added the 25.11 container's rows (tag v0.2.0: the same recipes at
    // GBS 128 and 512, read before they were simulated): 70B +0.72%, 405B +10.00% (strata fast; one model and layout's
    // published figures move 3-6% either way between releases: 405B 302, 292, 311, 328, 326 tokens/s from 25.09 to
    // 26.06). With session 42's FP8 as Transformer Engine moves and converts it (all-gathers of FP8 shards, casts,
    // transposes and bias gradients where TE makes them; here also current scaling's amax all-reduce over the
    // tensor-parallel group before each gather): +0.28%, +0.12%, 25.11 +0.96%, +11.17%.
    const std::vector<double> errors =
        tokens_errors("megatron_bridge_h100", "scenarios/validation/megatron-bridge-h100.yaml").errors;
    // Session 47 added 25.09's 8B row with Megatron-FSDP (its configuration read before it ran; the table's unnamed FP8
    // recipe fixed as the script's default, delayed scaling): +1.82% (current scaling -0.64%). Session 48's context
    // parallelism (Transformer Engine's copies, output corrections and gradient accumulations around the ring's steps;
    // the fused-attention grid read past its longest sequence): the 405B rows -0.62% and +10.36% (+0.12%, +11.17%).
    // Session 49's SMs beside a collective (bandwidth-bound kernels unslowed, fused attention at the share of the SMs
    // left, for the collective's time on the fabric; the context-parallel ring at NCCL's point-to-point channels, 2 for
    // CP 2 across nodes): +0.46%, -0.40%, 25.11 +1.15%, +10.61%, the 8B +1.8%. Session 50's measured slowdown of
    // cuDNN's fused attention beside held SMs (less than the share): the 8B with Megatron-FSDP +2.07%, the rest within
    // 0.05.
    REQUIRE(errors.size() == 5);
    CHECK(std::abs(errors[0]) <= 0.005);
    CHECK(std::abs(errors[1]) <= 0.008);
    CHECK(std::abs(errors[2]) <= 0.012);
    CHECK(std::abs(errors[3]) <= 0.107);
    CHECK(std::abs(errors[4]) <= 0.021);
}

TEST_CASE("validation: Megatron-Bridge's recompute modules (Llama 3 70B SFT, 32 H100, FP8): cost against core_attn within 1.9%") {
    // Session 45: the ratio of each case's throughput to the core_attn run's (paired in one experiment; the same model
    // FLOPs, so published TFLOP/s ratios are inverse step-time ratios): no recompute (the recipe's golden figure)
    // +0.89%, mlp -1.55%, mlp + core_attn -1.80% (before session 45's MLP recompute, which re-runs the whole module:
    // +6.54% and +6.15%, strata cheap). The absolute level (strata -0.6% to +2.1%) is not held here.
    const nlohmann::json pub = published()["bridge_recompute_h100"];
    const Experiment ex = load_experiment(kRoot + "scenarios/validation/bridge-recompute-h100.yaml");
    REQUIRE(ex.cases.size() == 4);
    REQUIRE(pub["tflops_per_gpu"].size() == 4);
    const std::vector<IterationResult> sim = simulate_all(ex);
    std::vector<std::string> names;
    std::vector<double> errors;
    const double ref_tf = pub["tflops_per_gpu"][1].get<double>();
    for (std::size_t i : {0u, 2u, 3u}) {
        const double published_ratio = pub["tflops_per_gpu"][i].get<double>() / ref_tf;
        const double simulated_ratio = sim[1].iteration_time_s / sim[i].iteration_time_s;
        names.push_back(ex.cases[i].name);
        errors.push_back(simulated_ratio / published_ratio - 1);
    }
    const Summary s = summarize("Megatron-Bridge recompute modules: throughput against core_attn", names, errors);
    CHECK(s.worst_abs <= 0.019);
    // The MLP's recompute costs most of the published 16% (not the 11% of fc1 and the activation alone).
    CHECK(sim[1].iteration_time_s / sim[2].iteration_time_s < 0.86);
}

TEST_CASE("validation: NeMo H100 (eleven dense FP8 rows) tokens/s per GPU, mean |error| <= 2.8%, worst <= 6.7%") {
    // NeMo 24.07's launcher configurations (FlashAttention-2 by NVTE_FUSED_ATTN=0, delayed scaling, Apex's sharded
    // optimizer) and NeMo 25.02's GPT3-175B on 512. Today's figures: mean 2.90%, worst 6.60% (GPT3-175B on 512, strata
    // slow), signed +1.30% with session 42's FP8 as Transformer Engine moves and converts it (all-gathers of FP8
    // shards, casts, transposes and bias gradients where TE makes them; LLAMA3-70B's and GPT3-175B on 512's fp8_buf
    // reduce-scatters as their userbuffer configs set them): the GPT3 rows with biases 0.0-3.0 points faster (175B on
    // 128, without the overlap, most), the Llama and Nemotron t = 1, 2 rows 0.4-0.8 slower (the transposes), the t = 4
    // ones 0.3-0.8 faster; 2.87% / 7.36% / +1.06% with session 41's deferred output-layer weight gradients
    // (defer_embedding_wgrad_compute, LLAMA3-70B limit 22, GPT3-175B on 512 limit 50: -0.0 -> +0.6%, -8.2 -> -7.4%);
    // 2.90% / 8.22% / +0.93% before (+0.98% before session 40's fp32 embedding gradients, fp32_embedding_grads, the
    // 24.07 rows 0-0.2 points slower; 2.85% / 8.16% / +0.70% before session 39's NeMo groups for Apex, grad_buckets
    // nemo_apex_layers, with Apex's first group stepped first and gathered under the rest of the step, the 24.07 rows
    // 0.1-0.9% faster, and Megatron-Core's buckets for the 25.02 row, its later chunks' gathers after the step that
    // makes their parameters; 2.91% / 8.14% / +0.81% before session 37's FP8 amax all-reduce at each region's end, over
    // the whole stage for the 24.07 rows, over the tensor-parallel group for the 25.02 row; 2.85% / 8.14% / +0.90%
    // before session 33 charged the fused attention's dropout, x1.034: the GPT3 5B, 20B and 175B-on-128 rows, dropout
    // 0.1, 0.2-0.5 points slower; 2.84% / 8.15% / +0.89% before session 30's GEMM-by-GEMM headroom; 2.63% / 8.92% /
    // +0.44% before the headroom after rest, session 28; 2.64% / 5.78% (Nemotron-8B on 64, strata fast) / +1.85% before
    // the power limit, session 27; 2.79% / 5.91% / +1.99% before the slowdown with SMs held by each GEMM's waves; 2.60%
    // / 6.33% / +1.34% before TE's own SMs per overlap, each row's userbuffer config's num_sm, set_sm_margin and
    // aggregate, session 26; 3.08% / 5.26% / +2.16% before Transformer Engine's chunked GEMMs and its exposed last
    // reduce-scatter chunks, session 24; 3.41% / 6.11% / +2.67% before sessions 18-19); with cuDNN's attention in place
    // of FlashAttention-2 the mean would be about 9.8%. Session 43's bias gradients where Megatron-Core's TE spec
    // computes them (transformer_impl: only QKV's inside TE; fc1's and the row-parallel layers', which session 42 had
    // dropped as inside TE's cast-transposes, back as 16-bit sums, the latter over the rank's n / t tokens): GPT3-5B
    // 0.9 points slower, GPT3-20B 0.2, GPT3-175B 0.1 faster; 3.00% / 6.51% / +1.20%.
    // Session 48's context parallelism (Transformer Engine's bookkeeping around the ring's steps; the fused-attention
    // grid read past its longest sequence): LLAMA3-8B and LLAMA3-70B (CP 2) 2.0 and 1.2 points slower; 2.72% / 6.51% /
    // +0.92%.
    const Summary s = tokens_errors("nemo_h100", "scenarios/validation/nemo-h100.yaml").summary;
    CHECK(s.mean_abs <= 0.028);
    CHECK(s.worst_abs <= 0.067);
}

TEST_CASE(
    "validation: MLPerf v3.1 GPT-3 175B on DGX H100 (seven sizes, 512-10,752 GPUs) step time: the part per microbatch "
    "within 1.5%, tokens/s mean |error| <= 7.7%, worst <= 12.8%") {
    // NVIDIA's closed-division submissions (NeMo 23.09, FP8 delayed scaling, TP 4, PP 8, one layer per chunk), first
    // simulated in session 35 with nothing changed for them: +1.2 / +1.0 / +5.9 / +5.9 / +5.9 / +9.2 / +9.9% (strata
    // fast; mean 5.57%, signed +5.57%); 5.48% / +5.48% with session 37's amax all-reduce over the tensor-parallel group
    // (TE 1.0's NVTE_DP_AMAX_REDUCE_INTERVAL=0); 6.41% / 11.51% / +6.41% with session 39's NeMo groups for Apex
    // (grad_buckets nemo_apex: Apex steps the first group first and gathers it under the rest of the step, 0.1-1.6%
    // faster); 7.04% / 12.19% / +7.04% with session 42's FP8 as Transformer Engine moves and converts it (all-gathers
    // of FP8 shards, casts, transposes and bias gradients where TE makes them): every row 0.4-0.7 points faster, the
    // work per microbatch 83.68 ms (-0.84%; the bias gradients, now inside the cast-transposes, most of it). Split into
    // a fixed part and a part per microbatch (least squares of time = fixed + per_microbatch x m over the rows; m =
    // 128, 16, 8), the published steps are 280 ms + 84.39 ms x m and strata's 182 ms + 84.22 ms x m before session 42
    // (196 ms before session 39): the microbatches' work (layers, tensor-parallel overlap, pipeline transfers) is right
    // to 0.2%, and strata misses about 98 ms per step that does not scale with the microbatches (docs/
    // validation-hopper.md, "MLPerf Training GPT-3 175B"). Session 43 built these runs from TE's own TransformerLayer,
    // as NeMo r1.20 without Megatron-Core does (transformer_impl: te_transformer_layer): fc1's bias gradient inside
    // LayerNormMLP, the GeLU writing fc2's input in FP8 and its backward fc1's FP8 output gradient and transpose (no
    // casts of their own), the row-parallel layers' bias gradients over n / t tokens: 8.33% / 13.40% / +8.33%, the
    // work per microbatch 82.50 ms (-2.2%). Then TE 1.x's amax and scale update by every FP8 module before its forward
    // and its backward (fp8_scale_update: per_module, the submission's TE revision 09ba842 predates 1.6's fused
    // update; three launch-bound kernels per module and pass, counted from TE's code and how torch.compile fuses):
    // 7.54% / 12.68% / +7.54%, the work per microbatch 83.20 ms (-1.4%). Each step is TE's code; what the microbatches
    // still miss (about 1.2 ms each) is open. Session 49's SMs beside a collective (the copies and casts beside the
    // tensor-parallel collectives unslowed) and FlashAttention-2's ratios per direction (0.54 / 0.65 of the grid's
    // cuDNN, the flash-attn package's absolute rates): 7.63% / 12.70% / +7.63%, 83.13 ms (-1.5%). Both are pinned so
    // that a change is seen.
    const TokensErrors t = tokens_errors("mlperf_gpt3_h100", "scenarios/validation/mlperf-gpt3-h100.yaml");
    REQUIRE(t.errors.size() == 7);
    CHECK(t.summary.mean_abs <= 0.077);
    CHECK(t.summary.worst_abs <= 0.128);

    CHECK(std::abs(per_microbatch_error(t, 0, 7)) <= 0.015);
}

TEST_CASE(
    "validation: MLPerf v4.0 / v4.1 GPT-3 175B on DGX H100 (four runs) tokens/s mean |error| <= 9.7%, worst <= 12.7%") {
    // The next rounds' stack (NeMo 24.04 / 24.09, FP8 parameters, cuDNN attention), first simulated in session 35 with
    // nothing changed for them: 512 GPUs (microbatch 2, m = 72) -5.8%, 10,752 and 11,616 GPUs (m = 6) +9.8% / +9.9%,
    // 256 GPUs (microbatch 2, m = 128) -9.1%; mean 8.66%, signed +1.21%. The microbatch-2 rows are slow in strata as
    // NeMo 2.0's GPT3-175B on 512 is (-8.1%), the m = 6 rows fast as v3.1's m = 8 rows are. Session 37's FP8 amax
    // all-reduce (v4.0's TE 1.6rc1 over the whole stage, v4.1 over the tensor-parallel group) moved them to -5.9 /
    // +10.7 / +10.8 / -9.2% (mean 9.12%, signed +1.59%): the stage-wide all-reduce makes the 448 and 484 replicas meet
    // at every region, so they no longer drift apart under GPU variation, and their data-parallel rings no longer move
    // at their slowest link's rate for longer (docs/engine-performance.md, "Desynchronized replicas"): 0.8% faster with
    // variation, 0.5% slower (the latency) without. Session 39's NeMo groups for Apex (v4.0's NeMo v2.0.0.rc0.beta one
    // per layer, nemo_apex_layers; v4.1's one per chunk, nemo_apex; Apex's first group stepped first and gathered under
    // the rest of the step): -5.8 / +12.3 / +12.4 / -9.1% (mean 9.93%, signed +2.46%). Session 40's fp32 embedding
    // gradients (NeMo's with_fp32_embedding_grads, default true in both versions: the tied word embedding's and the
    // positions' gradients reduce-scattered, and the tied copies summed, in fp32; fp32_embedding_grads): -5.9 / +10.9 /
    // +11.0 / -9.2% (mean 9.23%, signed +1.70%), 11 ms more per step. Session 41's deferred output-layer weight
    // gradients as the runs had them (defer_embedding_wgrad_compute; v4.0's large runs every microbatch, as
    // Megatron-Core 0.7 has no limit; v4.1 limit 65; v4.0's 512 off by its custom.yaml rule for microbatch 2; NeMo's
    // held-back Apex group reduced after them): -5.9 / +11.6 / +11.7 / -8.7% (mean 9.44%, signed +2.16%): worse, kept,
    // as the configuration says so. With session 42's FP8 as Transformer Engine moves and converts it (all-gathers of
    // FP8 shards, casts, transposes and bias gradients where TE makes them; the large runs' proj_fprop in FP8 by
    // NVTE_UB_FP8_RS=1): -5.5 / +12.5 / +12.6 / -8.2% (mean 9.69%, signed +2.84%). Session 43's bias gradients where
    // Megatron-Core's TE spec computes them (transformer_impl: transformer_engine): -5.4 / +12.6 / +12.6 / -8.1% (mean
    // 9.67%, signed +2.92%). Pinned so that a change is seen.
    const TokensErrors t = tokens_errors("mlperf_gpt3_h100_v4", "scenarios/validation/mlperf-gpt3-h100-v4.yaml");
    REQUIRE(t.errors.size() == 4);
    CHECK(t.summary.mean_abs <= 0.097);
    CHECK(t.summary.worst_abs <= 0.127);
}

TEST_CASE(
    "validation: MLPerf v5.0 Llama 3.1 405B (H100 and H200, 512-8,192 GPUs) step time: the H100 part per microbatch "
    "within 1%, tokens/s mean |error| <= 2.7%, worst <= 8.3%") {
    // NVIDIA's five Eos runs (TP 8, CP 2, PP 8, 8 chunks, FP8 delayed scaling with FP8 parameters) and Nebius's two
    // H200 runs (TP 4) of the same code, first simulated in session 36 with nothing changed for them (+0.1 / +1.9 /
    // +3.5 / +3.9 / +8.4%, +0.8 / +1.3%), then with the userbuffer settings that NeMo v2.2.0's callback passes on (a
    // review: no aggregation or margin for the ring exchanges): +0.3 / +2.1 / +3.8 / +4.1 / +8.6% on H100, +0.8 / +1.3%
    // on H200 (strata fast; mean 3.01%, signed +3.01%); with session 37's amax all-reduce over the tensor x context
    // group (tp_only_amax_red) +0.2 / +2.0 / +3.6 / +4.0 / +8.5%, +0.8 / +1.3% (mean 2.90%). Split as for v3.1 over the
    // five H100 rows (m = 288, 72, 64, 56, 24): published 718 ms + 189.30 ms x m, strata 260 ms + 190.49 ms x m:
    // Llama-class layers (GQA, SwiGLU, RMSNorm), context parallelism, FP8 and the overlaps right to 0.6% per
    // microbatch, about 0.46 s per step missing (docs/ validation-hopper.md, "MLPerf Training Llama 3.1 405B"; 190.49
    // ms per microbatch before session 42). With session 42's FP8 as Transformer Engine moves and converts it
    // (all-gathers of FP8 shards, casts, transposes and bias gradients where TE makes them): +0.7 / +2.5 / +4.1 / +4.4
    // / +8.9%, +0.8 / +1.3% (mean 3.23%), per microbatch 189.57 ms. With session 48's context parallelism
    // (Transformer Engine's copies, output corrections and gradient accumulations around the ring's steps; the
    // fused-attention grid read past its longest sequence): -0.1 / +1.6 / +3.3 / +3.6 / +8.0%, +0.2 / +0.8% (mean
    // 2.52%), per microbatch 191.04 ms (+0.92%). With session 49's SMs beside a collective (bandwidth-bound kernels
    // unslowed, fused attention at the share of the SMs left, for the collective's time on the fabric; the CP 2 ring
    // across nodes at NCCL's 2 point-to-point channels): +0.1 / +1.9 / +3.5 / +3.8 / +8.2%, +0.3 / +0.9% (mean 2.66%),
    // per microbatch 190.72 ms (+0.75%). Session 50's measured slowdown of cuDNN's fused attention beside held SMs:
    // mean 2.67%, worst 8.26%, per microbatch 190.71 ms (+0.74%). Pinned so that a change is seen.
    const TokensErrors t = tokens_errors("mlperf_llama31_405b", "scenarios/validation/mlperf-llama31-405b.yaml");
    REQUIRE(t.errors.size() == 7);
    CHECK(t.summary.mean_abs <= 0.027);
    CHECK(t.summary.worst_abs <= 0.083);

    // The H100 rows' part per microbatch: the first five cases, one layout on one device (the H200 rows come after).
    REQUIRE(t.rows.size() == 7);
    for (std::size_t i = 0; i < t.rows.size(); ++i) REQUIRE((t.rows[i].ends_with(" H200") == (i >= 5)));
    CHECK(std::abs(per_microbatch_error(t, 0, 5)) <= 0.01);
}

TEST_CASE(
    "validation: NeMo long sequences on H100 (Llama 2 7B, FP8, 4K-1,024K tokens, context parallelism up to 32) "
    "tokens/s mean |error| <= 5.3%, worst <= 7.9%") {
    // NeMo 24.03.01's published TFLOP/s with context parallelism, as tokens/s by NeMo's own FLOPs count (plots/
    // paper_values.json "nemo_long_h100"), the configuration from the launcher's Llama 2 7B files at that tag (read
    // before any row ran). First simulated in session 48: +2.0 / +5.3 / +5.5 / +7.2 / -5.0 / -4.8 / -5.6 / -24.9 /
    // -23.4% (9.28% / 24.9% / -4.86%): the fused-attention grid was clamped at its longest sequence, so the t = 8 rows'
    // 4 heads per GPU ran at the efficiency of a short kernel of 4 heads; read past it (the further query tiles as
    // further heads) and with Transformer Engine's copies, output corrections and gradient accumulations around the
    // ring's steps: +2.0 / +5.3 / +7.2 / +7.2 / +4.1 / +5.9 / +5.8 / +3.2 / +6.1% (5.20% / 7.22% / +5.20%, strata
    // fast throughout). Session 49's SMs beside a collective: the ring's NCCL point-to-point channels by where each
    // GPU's neighbours are (16 for CP 2 in a node, 18 with one neighbour on another node, 4 with both), the kernels
    // beside it slowed for the ring's time on the fabric (across nodes at the network's pace, no longer at the
    // intra-node figure), bandwidth-bound kernels unslowed and fused attention at the share of the SMs left: +2.0 /
    // +5.3 / +7.4 / +7.8 / +4.8 / +5.5 / +4.8 / +3.6 / +6.4% (5.28% / 7.83% / +5.28%); with FlashAttention-2's ratios
    // per direction (0.54 / 0.65 of the grid's cuDNN, were 0.62 both ways) 5.24% / 7.79% / +5.24%. Pinned so that a
    // change is seen (docs/validation-hopper.md, "NeMo's long sequences").
    const TokensErrors t = tokens_errors("nemo_long_h100", "scenarios/validation/nemo-long-h100.yaml");
    REQUIRE(t.errors.size() == 9);
    CHECK(t.summary.mean_abs <= 0.053);
    CHECK(t.summary.worst_abs <= 0.079);
}

TEST_CASE(
    "validation: DGX Cloud Benchmarking H100 (BF16 and FP8, 8-2,304 GPUs) tokens/s mean |error| <= 2.6%, "
    "worst <= 7.9%, FP8's speed-up over BF16 within 2.8% on average") {
    // NVIDIA's dgxc-benchmarking v25.02 (NeMo 24.12): Llama 3.1 8B / 70B / 405B, GPT-3 175B and Nemotron-4 15B, each at
    // its smallest and largest published size, in BF16 and in FP8 with the same layout, first simulated in session 36
    // with nothing changed for them: mean 3.15%, worst 8.63% (Llama 3.1 70B on 2,048 in FP8), signed +2.31%; the BF16
    // rows within 4.4% (mean 2.0%), the first BF16 Hopper rows with fully published configurations. FP8's speed-up
    // (BF16 step / FP8 step) per pair: mean |difference| 3.51%, signed +1.47%. With session 37's FP8 amax all-reduce
    // over the whole stage: 3.11% / 8.30% / +2.21%, speed-up 3.41% / +1.27%. Session 39's NeMo groups for Apex: 3.07% /
    // 8.27% / +2.19%; session 40's fp32 embedding gradients (NeMo v2.1.0's with_fp32_embedding_grads,
    // fp32_embedding_grads): 3.05% / 8.20% / +2.14%; session 41's deferred output-layer weight gradients (Llama 3.1 70B
    // limit 22, 405B limit 50; NeMo's own drain with Apex's optimizer, its held-back group reduced after it): 3.14% /
    // 8.84% / +2.33% (the 70B and 405B rows 0.3-0.7 points faster, so 70B FP8 on 2,048 worse), speed-up 3.51% / +1.17%:
    // worse, kept, as the configuration says so. With session 42's FP8 as Transformer Engine moves and converts it
    // (all-gathers of FP8 shards, casts, transposes and bias gradients where TE makes them; 405B FP8's fp8_buf on
    // both): 3.00% / 8.80% / +2.60%, speed-up 2.97% / +1.71%. Session 43's bias gradients where Megatron-Core's TE
    // layers compute them (GPT-3 175B: BF16 rows 0.4 points faster, FP8 0.1): 2.97% / 8.80% / +2.65%, speed-up 2.90% /
    // +1.64%. Session 48's context parallelism (Transformer Engine's bookkeeping around the ring's steps; the
    // fused-attention grid read past its longest sequence; the Llama rows' CP 2): 2.37% / 7.51% / +1.90%, speed-up
    // 2.79% / +1.44%. Session 49's SMs beside a collective (bandwidth-bound kernels unslowed, fused attention at the
    // share of the SMs left, for the collective's time on the fabric; the CP 2 rings at NCCL's point-to-point
    // channels): 2.49% / 7.81% / +2.06%, speed-up 2.77% / +1.61%. Session 50's measured slowdown of cuDNN's fused
    // attention beside held SMs: 2.51% / 7.84% / +2.09%, speed-up 2.78%. Pinned so that a change is seen
    // (docs/validation-hopper.md, "DGX Cloud Benchmarking, BF16 and FP8").
    const TokensErrors t = tokens_errors("dgxc_h100", "scenarios/validation/dgxc-h100.yaml");
    REQUIRE(t.errors.size() == 20);
    CHECK(t.summary.mean_abs <= 0.026);
    CHECK(t.summary.worst_abs <= 0.079);
    CHECK(fp8_speedup_mean_abs(t) <= 0.028);
}

TEST_CASE(
    "validation: DGX Cloud Benchmarking v25.04 H100, NeMo 2 (BF16 and FP8, 8-2,048 GPUs) tokens/s mean |error| "
    "<= 1.7%, worst <= 6.3%, FP8's speed-up over BF16 within 3.0% on average") {
    // NVIDIA's dgxc-benchmarking v25.04 (nemo:25.02.01: NeMo 2.2, Megatron-Core 0.11, MLPerf v5.0's stack): Llama 3.1
    // 8B / 70B / 405B and Nemotron-4 15B / 340B at every published full-model size, BF16 and FP8 in pairs, first
    // simulated in session 37 with nothing changed for them: 52 rows, mean 2.42%, worst 7.03% (Nemotron-4 15B on 2,048
    // in FP8), signed +0.08%; FP8's speed-up per pair: mean |difference| 4.20%, signed +0.54%; with the FP8 amax
    // all-reduce over the whole stage (the same session): 2.47% / 6.99% / +0.01%, speed-up 4.30% / +0.42%; with
    // Megatron-Core's 128 Mi-parameter buckets (session 38: in BF16 the output layer reduced first; in FP8 the weights
    // bucketed apart and the 16-bit rest, output layer included, reduced with the last FP8 bucket) 2.40% / 6.54% /
    // -0.05%, speed-up 4.07% / +0.20%; with session 41's deferred output-layer weight gradients (the recipes' limits:
    // 70B and Nemotron-4 340B 22, 405B 50) 2.12% / 6.54% / +0.64%, speed-up 3.82% / +0.52% (the 70B FP8 rows 0.9-1.3
    // points and the 340B rows 2.4-3.9 points faster, the 405B FP8 rows 0.1-0.3 slower: there the drain of 50 outlasts
    // the cool-down). With session 42's FP8 as Transformer Engine moves and converts it (all-gathers of FP8 shards,
    // casts, transposes and bias gradients where TE makes them; the Llama FP8 rows' fp8_buf on both): 1.82% / 6.13% /
    // +0.76%, speed-up 3.16% / +0.74%. With session 48's context parallelism (Transformer Engine's bookkeeping around
    // the ring's steps; the fused-attention grid read past its longest sequence): 1.68% / 6.13% / +0.20%, speed-up
    // 2.90% / +0.82%. With session 49's SMs beside a collective (bandwidth-bound kernels unslowed, fused attention at
    // the share of the SMs left, for the collective's time on the fabric; the CP 2 rings at NCCL's point-to-point
    // channels): 1.69% / 6.26% / +0.33%, speed-up 2.90% / +0.94%. Session 50's measured slowdown of cuDNN's fused
    // attention beside held SMs: 1.70% / 6.29% / +0.35%, speed-up 2.91% (the mean's pin rounds up to its figure).
    // Pinned so that a change is seen (docs/validation-hopper.md, "DGX Cloud Benchmarking v25.04, NeMo 2").
    const TokensErrors t = tokens_errors("dgxc_h100_v2504", "scenarios/validation/dgxc-h100-v2504.yaml");
    REQUIRE(t.errors.size() == 52);
    CHECK(t.summary.mean_abs <= 0.017);
    CHECK(t.summary.worst_abs <= 0.063);
    CHECK(fp8_speedup_mean_abs(t) <= 0.030);
}

TEST_CASE(
    "validation: representative replicas within 1.3% of the full simulation (SC21, 530B/2240, Megatron H100)") {
    // `--replicas representative` (README "Speed") against every GPU group, on the shipped experiments with
    // data parallelism: today's worst is the 16B Megatron row (-1.10% in session 31, -1.22% before: the other node's
    // replicas' flows are not on the links its reduction ring shares, and its gradient-averaging passes run under
    // them; -1.05% before the H100's measured slowdown with SMs held made its overlapped reduction cost more), the
    // mean |difference| 0.18% over these 24 cases (session 31). Nothing published is
    // involved: the full simulation is the reference.
    std::vector<double> diffs;
    for (const char* file :
         {"scenarios/crosscheck/sc21-table1.yaml", "scenarios/paper/530b-2240.yaml",
          "scenarios/validation/megatron-h100.yaml", "scenarios/validation/megatron-h100-strong.yaml"}) {
        const Experiment ex = load_experiment(kRoot + file);
        const std::vector<IterationResult> full = simulate_all(ex);
        const std::vector<IterationResult> rep = simulate_all(ex, true);
        for (std::size_t i = 0; i < ex.cases.size(); ++i) {
            if (ex.cases[i].execution.data < 2) continue;
            CHECK(rep[i].representative_replicas);
            CHECK(rep[i].tasks < full[i].tasks);
            CHECK(rep[i].peak_memory == full[i].peak_memory);
            diffs.push_back(rep[i].iteration_time_s / full[i].iteration_time_s - 1);
        }
    }
    REQUIRE(diffs.size() >= 20);
    double worst = 0, mean = 0;
    for (double d : diffs) {
        worst = std::max(worst, std::abs(d));
        mean += std::abs(d) / double(diffs.size());
    }
    std::cout << fmt::format("representative vs full: {} cases, mean |diff| {:.3f}%, worst {:.3f}%\n",
                             diffs.size(), 100 * mean, 100 * worst);
    CHECK(worst <= 0.013);
    CHECK(mean <= 0.002);
}
