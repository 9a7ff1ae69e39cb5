// strata-calibrate writes what the simulator reads: a calibrated profile round-trips through
// calibrate/profile_writer and strata::load_device_profile, and its measurements drive the cost model.
#include "profile_writer.hpp"
#include "strata/cost.hpp"
#include "strata/layer.hpp"
#include "strata/report.hpp"
#include "strata/errors.hpp"
#include "strata/profile.hpp"
#include "strata/scenario.hpp"
#include "strata/scenario.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

using namespace strata;

namespace {
calibrate::Profile sample(bool with_intra_node) {
    calibrate::Profile p;
    p.name = "test-calibrated";
    p.provenance.gpu = "NVIDIA H100 80GB HBM3";
    p.provenance.sm_count = 132;
    p.provenance.memory_bytes = 85520809984ULL;
    p.provenance.gpus_used = with_intra_node ? 8 : 1;
    p.provenance.command = "strata-calibrate --out x.yaml";
    p.provenance.date = "2026-11-21T10:00:00Z";
    p.device.peak_flops = 989.4e12;
    p.device.hbm_bandwidth_bytes_per_s = 3.35e12;
    p.device.memory_capacity_bytes = 85520809984ULL;
    p.device.sm_count = 132;
    p.device.kernel_launch_us = 3.5;
    p.gemm.efficiency_ceiling = 0.71;
    p.elementwise_bandwidth_efficiency = 0.83;
    if (with_intra_node) p.intra_node = calibrate::IntraNodeBlock{360e9, 1.5, "fit"};
    else p.intra_node_missing_comment = "one GPU: collectives need two or more";
    p.copy_bandwidth_bytes_per_s = 2.9e12;
    p.gemms.push_back({"qkv_wgrad", 2304, 6144, 8192, 1, "bf16", 410.0, 567.0});
    p.elementwise.push_back({"layernorm_fwd", 50331648, 201326592, 80.0, 2516.6});
    p.collectives.push_back({"all_reduce", 8, 100663296, 520.0, 193.6, 338.8});
    p.collective_fits.push_back({"all_reduce", 8, 12.0, 200e9});
    p.layers.push_back({64, 6144, 2048, 4, 8, false, "none", 3.1, 4.9, 1389363200, 1389363200, "single GPU"});
    p.sms_held.push_back({2, 1.1, "12 GEMMs"});
    p.sms_held.push_back({16, 1.25, ""});
    p.skipped.push_back("gemm 65536^3: does not fit in GPU memory");
    return p;
}

DeviceProfile round_trip(const calibrate::Profile& p, const std::string& path) {
    {
        std::ofstream out(path);
        calibrate::write_profile(out, p);
    }
    DeviceProfile d = load_device_profile(path);
    std::remove(path.c_str());
    return d;
}
}  // namespace

TEST_CASE("a calibrated profile written by strata-calibrate loads in the simulator") {
    const DeviceProfile d = round_trip(sample(true), "strata_test_profile_8gpu.yaml");
    CHECK(d.kind == "calibrated");
    CHECK(d.peak_flops == 989.4e12);
    CHECK(d.sm_count == 132);
    CHECK(d.gemm_efficiency_ceiling == Approx(0.71));
    CHECK(d.intra_node_bus_bandwidth == 360e9);
    REQUIRE(d.measured_gemms.size() == 1);
    CHECK(d.measured_gemms[0].time_us == 410.0);
    REQUIRE(d.measured_elementwise.size() == 1);
    CHECK(d.measured_elementwise[0].op == "layernorm_fwd");
    REQUIRE(d.measured_collectives.size() == 1);
    CHECK(d.measured_collectives[0].alpha_us == 12.0);
    REQUIRE(d.measured_sms_held.size() == 2);
    CHECK(d.measured_sms_held[1].sms == 16);
    CHECK(1.0 / speed_with_sms_held(d, 2) == Approx(1.1));
}

TEST_CASE("the simulator uses the calibrated measurements and says so") {
    const CostModel cost(round_trip(sample(true), "strata_test_profile_cost.yaml"));
    Kernel wgrad;
    wgrad.kind = KernelKind::gemm;
    wgrad.gemm = {6144, 2304, 8192, 1, true};  // the layer model's [in, out] layout of the measured [out, in]
    CHECK(cost.kernel(wgrad).source == CostSource::measured);
    CHECK(cost.kernel(wgrad).time == Time::from_us(410));
    CHECK(cost.tp_collective(CollectiveKind::all_reduce, 8, Bytes(200'000'000)) ==
          Time::from_us(12) + Time::from_ms(1));
}

TEST_CASE("a one-GPU calibrated profile needs the system to give the NVLink bandwidth") {
    const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/data/";
    {
        std::ofstream out(dir + "parts/profile-one-gpu.tmp.yaml");
        calibrate::write_profile(out, sample(false));
    }
    const DeviceProfile d = load_device_profile(dir + "parts/profile-one-gpu.tmp.yaml");
    CHECK(d.intra_node_bus_bandwidth == 0);
    std::ofstream(dir + "parts/system-one-gpu.tmp.yaml")
        << "name: x\ndevice_profile: profile-one-gpu.tmp.yaml\ngpus_per_node: 8\n"
           "network: {rails: 8, nic_bandwidth_bytes_per_s: 24e9, nic_latency_us: 1, nodes_per_leaf: 20,\n"
           "          nvlink_latency_us: 1, switch_latency_us: 0.1, collective_step_latency_inter_us: 5, p2p_latency_us: 10}\n"
           "optimizer: {bytes_per_param_step: 38}\n";
    CHECK_THROWS_WITH(load_system(dir + "parts/system-one-gpu.tmp.yaml"),
                      Catch::Contains("system-one-gpu.tmp.yaml") &&
                          Catch::Contains("network.nvlink_bandwidth_bytes_per_s") &&
                          Catch::Contains("has no intra_node block"));
    {
        std::ofstream out(dir + "parts/system-one-gpu.tmp.yaml");
        out << "name: x\ndevice_profile: profile-one-gpu.tmp.yaml\ngpus_per_node: 8\n"
               "network: {rails: 8, nic_bandwidth_bytes_per_s: 24e9, nic_latency_us: 1, nodes_per_leaf: 20,\n"
               "          nvlink_latency_us: 1, switch_latency_us: 0.1, collective_step_latency_inter_us: 5,\n"
               "          p2p_latency_us: 10, nvlink_bandwidth_bytes_per_s: 300e9}\n"
               "optimizer: {bytes_per_param_step: 38}\n";
    }
    const SystemSpec s = load_system(dir + "parts/system-one-gpu.tmp.yaml");
    CHECK(s.network.nvlink_bandwidth.value == 300e9);
    CHECK(s.device.intra_node_bus_bandwidth == 300e9);
    std::remove((dir + "parts/profile-one-gpu.tmp.yaml").c_str());
    std::remove((dir + "parts/system-one-gpu.tmp.yaml").c_str());
}

TEST_CASE("check-profile: measured whole layers against the prediction from op-level entries") {
    calibrate::Profile one = sample(false);  // one GPU: the measured layer has no collectives
    const DeviceProfile d1 = round_trip(one, "strata_test_profile_check1.yaml");
    REQUIRE(d1.measured_layers.size() == 1);
    CHECK(d1.gpus_used == 1);
    CHECK(d1.measured_layers[0].tensor == 8);
    // Prediction without collectives: the sum of the compute steps.
    ModelSpec m{"measured", 64, 6144, 1, 2048, 51200, 4 * 6144, true};
    const LayerPlan plan = build_layer({&m, 8, false, Recompute::none, 4});
    const CostModel cost(d1);
    Time fwd = Time::zero();
    for (const auto& s : plan.forward)
        if (s.kind == Step::Kind::compute) fwd += cost.compute_step(s);
    std::ostringstream out;
    const double worst = print_profile_check(out, d1);
    CHECK_THAT(out.str(), Catch::Contains("(compute only)"));
    CHECK_THAT(out.str(), Catch::Contains(fmt::format("{:.3f}", fwd.ms())));
    CHECK(worst >= std::abs(fwd.ms() / 3.1 - 1) - 1e-9);
    // The measured slowdown with SMs held, beside the share of the SMs it replaces (2 of 132: 1.015x).
    CHECK_THAT(out.str(), Catch::Contains("a GEMM with SMs held (measured.sms_held) of 132: 2 -> 1.100x (share 1.015x) "
                                          "16 -> 1.250x (share 1.138x)"));

    // With eight GPUs the measurement includes the collectives, and so does the prediction.
    calibrate::Profile eight = sample(true);
    const DeviceProfile d8 = round_trip(eight, "strata_test_profile_check8.yaml");
    std::ostringstream out8;
    print_profile_check(out8, d8);
    CHECK_THAT(out8.str(), !Catch::Contains("(compute only)"));
    CHECK_THAT(out8.str(), Catch::Contains(fmt::format("{:.3f}", CostModel(d8).pass_time(plan.forward, 8).ms())));
    // A profile without intra-node figures cannot cost a tensor-parallel collective: a clear error.
    CHECK_THROWS_WITH(cost.tp_collective(CollectiveKind::all_gather, 8, Bytes(1000)),
                      Catch::Contains("no intra-node bus bandwidth"));
}
