// GPU-to-GPU and run-to-run variation: the stratified sample, the reference convention, and what a
// synchronous job makes of it (it waits for its slowest members).
#include "../sim/workload/variation.hpp"  // private: the distribution, tested directly below
#include "fixtures.hpp"
#include "strata/errors.hpp"
#include "strata/simulate.hpp"

#include <catch2/catch.hpp>

#include <cmath>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

using namespace strata;
using strata::workload::Variation;

namespace {
std::vector<int> iota_ranks(int n) {
    std::vector<int> r(static_cast<std::size_t>(n));
    std::iota(r.begin(), r.end(), 0);
    return r;
}
}  // namespace

TEST_CASE("variation: a job's GPUs are a stratified normal sample dealt by the seed", "[variation]") {
    const int n = 1000;
    Variation v({0.01, 0.0, 7}, 1, n);
    std::vector<double> z;
    for (int r = 0; r < n; ++r)
        z.push_back(v.z(r));
    std::vector<double> sorted = z;
    std::sort(sorted.begin(), sorted.end());
    // Exactly the n quantiles (k + 0.5) / n: symmetric, mean 0, the slowest at Phi^-1(1 - 0.5 / n).
    CHECK(sorted.back() == Approx(Variation::slowest_of(n)));
    CHECK(sorted.back() == Approx(3.2905).margin(1e-3));
    CHECK(sorted.front() == Approx(-sorted.back()));
    CHECK(std::accumulate(z.begin(), z.end(), 0.0) == Approx(0.0).margin(1e-9));
    // The order is drawn from the seed: not the rank order, the same for the same seed, another for another.
    CHECK(z != sorted);
    Variation same({0.01, 0.0, 7}, 1, n), other({0.01, 0.0, 8}, 1, n);
    int moved = 0;
    for (int r = 0; r < n; ++r) {
        CHECK(same.z(r) == z[static_cast<std::size_t>(r)]);
        moved += other.z(r) != z[static_cast<std::size_t>(r)];
    }
    CHECK(moved > n / 2);
}

TEST_CASE("variation: a group runs at its slowest member's speed, relative to the profile's reference",
          "[variation]") {
    // The profile's times are those of the slowest of 8: a job of 8 GPUs in step runs exactly at them.
    Variation eight({0.01, 0.0, 1}, 8, 8);
    CHECK(eight.group_factor(iota_ranks(8)) == 1.0);
    // 512 GPUs: the whole job's slowest GPU is slower than the reference's by sigma * (z_512 - z_8).
    Variation big({0.01, 0.0, 1}, 8, 512);
    const double expected = 1.0 + 0.01 * (Variation::slowest_of(512) - Variation::slowest_of(8));
    CHECK(big.group_factor(iota_ranks(512)) == Approx(expected));
    CHECK(expected == Approx(1.0157).margin(2e-4));
    // A single GPU can be faster than the reference; every group of 8 is at most the whole job's factor.
    double fastest = 2.0;
    for (int g = 0; g < 64; ++g) {
        std::vector<int> ranks;
        for (int i = 0; i < 8; ++i)
            ranks.push_back(g * 8 + i);
        const double f = big.group_factor(ranks);
        CHECK(f <= big.group_factor(iota_ranks(512)));
        fastest = std::min(fastest, f);
    }
    CHECK(fastest < 1.0);
    // Off: every factor is exactly 1 and times stay bit-identical.
    Variation off({0.0, 0.0, 1}, 8, 512);
    CHECK(off.group_factor(iota_ranks(512)) == 1.0);
    CHECK(workload::scaled(Time::from_ps(123456789), 1.0) == Time::from_ps(123456789));
    CHECK(workload::scaled(Time::from_ps(1000000), 1.01) == Time::from_ps(1010000));
}

TEST_CASE("variation: run-to-run span draws are deterministic, centred, and a group takes its slowest",
          "[variation]") {
    Variation v({0.0, 0.02, 3}, 1, 8);
    const std::vector<int> one = {5};
    const std::vector<int> all = iota_ranks(8);
    double sum_one = 0, sum_all = 0;
    const int spans = 20000;
    for (int k = 0; k < spans; ++k) {
        sum_one += v.span_factor(one, static_cast<std::uint64_t>(k));
        sum_all += v.span_factor(all, static_cast<std::uint64_t>(k));
        CHECK(v.span_factor(all, static_cast<std::uint64_t>(k)) >=
              v.span_factor(one, static_cast<std::uint64_t>(k)));
    }
    // One GPU: mean factor 1; a group of 8 in step: 1 + sigma * E[max of 8 normals] = 1 + 0.02 * 1.4236.
    CHECK(sum_one / spans == Approx(1.0).margin(5e-4));
    CHECK(sum_all / spans == Approx(1.0 + 0.02 * 1.4236).margin(1e-3));
    Variation again({0.0, 0.02, 3}, 1, 8);
    CHECK(again.span_factor(all, 17) == v.span_factor(all, 17));
    // A profile timed on 8 GPUs in step holds their slowest member's mean jitter: a group of 8 then averages 1.
    CHECK(Variation::expected_max_normal(1) == 0.0);
    CHECK(Variation::expected_max_normal(2) == Approx(1.0 / std::sqrt(3.14159265358979)).epsilon(1e-9));
    CHECK(Variation::expected_max_normal(8) == Approx(1.4236).epsilon(1e-4));
    Variation ref8({0.0, 0.02, 3}, 8, 8);
    double sum8 = 0, sum1 = 0;
    for (int k = 0; k < spans; ++k) {
        sum8 += ref8.span_factor(all, static_cast<std::uint64_t>(k));
        sum1 += ref8.span_factor(one, static_cast<std::uint64_t>(k));
    }
    CHECK(sum8 / spans == Approx(1.0).margin(1e-3));
    CHECK(sum1 / spans == Approx(1.0 - 0.02 * 1.4236).margin(1e-3));
}

TEST_CASE("variation: a synchronous job waits for its slowest GPUs", "[variation][simulate]") {
    Scenario base = testing::table4_case(4);  // 22B, t = 8, selective + sequence parallel
    base.system.device.timing_reference_gpus = 8;
    base.execution.global_batch = 8;  // two microbatches
    base.system.variation = {};
    const double plain8 = simulate(base).iteration_time_s;
    base.system.variation = {0.01, 0.0, 1};
    // 8 GPUs, the profile's reference: exactly the same time.
    CHECK(simulate(base).iteration_time_s == plain8);

    Scenario wide = base;  // four data-parallel replicas: 32 GPUs
    wide.execution.data = 4;
    wide.execution.global_batch = 32;
    wide.system.variation = {};
    const IterationResult plain = simulate(wide);
    wide.system.variation = {0.01, 0.0, 1};
    const IterationResult varied = simulate(wide);
    const double bound = 1.0 + 0.01 * (Variation::slowest_of(32) - Variation::slowest_of(8));
    CHECK(varied.slowest_group_factor == Approx(bound));
    CHECK(varied.iteration_time_s > plain.iteration_time_s);
    CHECK(varied.iteration_time_s <= plain.iteration_time_s * bound * 1.0001);
    // Deterministic for a seed; the seed moves the slow GPUs, not the job's slowest speed.
    CHECK(simulate(wide).iteration_time == varied.iteration_time);
    wide.system.variation.seed = 99;
    CHECK(simulate(wide).slowest_group_factor == Approx(bound));

    // Run-to-run jitter of each span, waited for at every tensor-parallel collective: slower on average when the
    // profile's times are one GPU's (reference 1: E[max of 8] = 1.42 sigma per span).
    Scenario one_gpu_profile = base;
    one_gpu_profile.system.device.timing_reference_gpus = 1;
    one_gpu_profile.system.variation = {};
    const double plain1 = simulate(one_gpu_profile).iteration_time_s;
    one_gpu_profile.system.variation = {0.0, 0.02, 1};
    const double jittered = simulate(one_gpu_profile).iteration_time_s;
    CHECK(jittered > plain1 * 1.01);
    CHECK(simulate(one_gpu_profile).iteration_time_s == jittered);
    // Timed on 8 GPUs in step (Table 4), the profile already holds their slowest member's mean jitter: a group of
    // 8 runs near the profile's times (a few spans: within the draws' spread, not 2.8% slow).
    base.system.variation = {0.0, 0.02, 1};
    CHECK(std::abs(simulate(base).iteration_time_s / plain8 - 1) < 0.015);
}

TEST_CASE("variation: the system file's block is checked", "[variation][errors]") {
    const auto dir = std::filesystem::temp_directory_path() / "strata-variation-test";
    std::filesystem::create_directories(dir);
    const std::string sys = std::string(STRATA_SOURCE_DIR) + "/scenarios/systems/selene-a100.yaml";
    auto write = [&](const std::string& variation) {
        std::ofstream(dir / "exp.yaml")
            << "name: v\nmodel: " << STRATA_SOURCE_DIR
            << "/scenarios/models/gpt-22b.yaml\nsystem:\n  file: " << sys << "\n"
            << variation
            << "execution: {tensor: 8, pipeline: 1, data: 1, interleave: 1, microbatch: 4, global_batch: 4, "
               "sequence_parallel: true, recompute: selective}\n";
        return (dir / "exp.yaml").string();
    };
    CHECK(load_experiment(write("")).cases.at(0).system.variation.gpu_sigma == 0.01);
    CHECK(load_experiment(write("  variation: {gpu_sigma: 0.02, seed: 5}\n"))
              .cases.at(0)
              .system.variation.seed == 5);
    auto message = [&](const std::string& variation) {
        try {
            (void)load_experiment(write(variation));
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(message("  variation: {gpu_sigma: 0.5}\n").find("variation.gpu_sigma") != std::string::npos);
    CHECK(message("  variation: {span_sigma: -1}\n").find("variation.span_sigma") != std::string::npos);
    CHECK(message("  variation: {sigma: 0.01}\n").find("variation.sigma") != std::string::npos);
    std::filesystem::remove_all(dir);
}

namespace {
/// The golden cases' tiny GPT at t = 1, d = 16 over two nodes, its gradient reduction overlapped with the
/// backward (16 SMs of 108 held: 2 channels per NIC x 8 NICs), no variation.
Scenario overlapped_dp_scenario() {
    const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/tests/golden/cases.yaml");
    Scenario sc = ex.cases.at(0);
    sc.execution.tensor = 1;
    sc.execution.pipeline = 1;
    sc.execution.interleave = 1;
    sc.execution.schedule = Schedule::one_f_one_b;
    sc.execution.data = 16;
    sc.execution.microbatch = 1;
    sc.execution.global_batch = 32;
    sc.execution.overlap_grad_reduce = true;
    sc.system.variation = {};
    validate(sc);
    return sc;
}
}  // namespace

TEST_CASE("an overlapped data-parallel collective slows the kernels under it by its SMs",
          "[variation][interference]") {
    Scenario sc = overlapped_dp_scenario();
    Scenario free = sc;
    free.system.device.nccl_channels = 0;  // collectives that hold no SMs
    // The kernels' busy time grows by the SMs the overlapped collectives hold (the iteration itself may be
    // bound by the reduction chain here).
    const IterationResult r_free = simulate(free);
    const IterationResult r_two = simulate(sc);  // 2 channels per NIC x 8 NICs = 16 SMs of 108
    sc.system.network.nccl_channels_per_nic = 1;
    const IterationResult r_one = simulate(sc);
    const double b_free = r_free.stage_busy_s.at(0), b_two = r_two.stage_busy_s.at(0),
                 b_one = r_one.stage_busy_s.at(0);
    CHECK(b_two > b_one);
    CHECK(b_one > b_free);
    CHECK(b_two < b_free * (1.0 + 16.0 / 108.0));
    CHECK(r_two.iteration_time_s >= r_free.iteration_time_s);
}

TEST_CASE("a measured slowdown with SMs held sets the data-parallel interference, per kernel kind",
          "[variation][interference]") {
    Scenario sc = overlapped_dp_scenario();
    auto busy = [](Scenario s, std::vector<MeasuredSmsHeld> table) {
        s.system.device.measured_sms_held = std::move(table);
        return simulate(s).stage_busy_s.at(0);
    };
    const double share = busy(sc, {});
    // A table that says GEMMs lose nothing: only fused attention (none here: the case's attention is unfused)
    // would keep the share, and the bandwidth-bound kernels are spared, so the kernels run as if no SM were held.
    REQUIRE(sc.execution.attention == Attention::unfused);
    Scenario free = sc;
    free.system.device.nccl_channels = 0;
    const double none = simulate(free).stage_busy_s.at(0);
    CHECK(share > none);
    CHECK(busy(sc, {{8, 1.0}, {32, 1.0}}) == Approx(none).epsilon(1e-9));
    // Slowdowns above the share's slow the stage more than the share model did, and more for a larger table.
    const double hard = busy(sc, {{8, 1.5}, {32, 2.0}});
    CHECK(hard > share);
    CHECK(busy(sc, {{8, 2.0}, {32, 3.0}}) > hard);
}
