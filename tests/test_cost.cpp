// The analytical cost model: GEMM wave quantization and small-K penalty, bandwidth-bound elementwise
// kernels, alpha-beta collectives, measured entries taking precedence, overlap in a pass.
#include "strata/cost.hpp"
#include "strata/scenario.hpp"

#include <catch2/catch.hpp>

using namespace strata;

namespace {
DeviceProfile test_profile() {
    DeviceProfile p;
    p.name = "test";
    p.kind = "analytical";
    p.peak_flops = 100e12;
    p.hbm_bandwidth = 1e12;
    p.memory_capacity_bytes = 1LL << 34;
    p.sm_count = 100;
    p.kernel_launch_us = 5;
    p.gemm_tile_m = 128;
    p.gemm_tile_n = 128;
    p.gemm_efficiency_ceiling = 0.8;
    p.gemm_k_half = 0;
    p.elementwise_bandwidth_efficiency = 0.5;
    p.intra_node_bus_bandwidth = 100e9;
    p.intra_node_step_latency_us = 2;
    return p;
}
Kernel gemm(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch = 1) {
    Kernel kr;
    kr.name = "g";
    kr.kind = batch > 1 ? KernelKind::batched_gemm : KernelKind::gemm;
    kr.gemm = {m, n, k, batch};
    return kr;
}
}  // namespace

TEST_CASE("GEMM: a full last wave reaches the ceiling, a partial last wave wastes its idle SMs") {
    CostModel c(test_profile());
    // 10 x 10 tiles of 128 x 128 = 100 tiles = exactly one wave on 100 SMs.
    CHECK(c.gemm_efficiency({1280, 1280, 4096, 1}) == Approx(0.8));
    // One more row of tiles: 110 tiles of 128 x 128 need two waves (55% useful); half-height 64 x 128
    // tiles give 220 tiles in three waves (73% useful), which the model picks.
    const double eff = c.gemm_efficiency({1280 + 128, 1280, 4096, 1});
    CHECK(eff == Approx(0.8 * 1408.0 * 1280.0 / (3 * 100 * 64 * 128)));
    // Time = launch + flops / (peak * eff), compute-bound here.
    const double flops = 2.0 * 1280 * 1280 * 4096;
    CHECK(c.kernel(gemm(1280, 1280, 4096)).time.seconds() == Approx(5e-6 + flops / (100e12 * 0.8)).epsilon(1e-9));
}

TEST_CASE("GEMM: small reduction dimension is penalised by k / (k + k_half)") {
    DeviceProfile p = test_profile();
    p.gemm_k_half = 64;
    CostModel c(p);
    CHECK(c.gemm_efficiency({1280, 1280, 64, 1}) == Approx(0.4));
    CHECK(c.gemm_efficiency({1280, 1280, 192, 1}) == Approx(0.6));
}

TEST_CASE("elementwise kernels are bandwidth-bound: launch + bytes / (HBM x efficiency)") {
    CostModel c(test_profile());
    Kernel k;
    k.kind = KernelKind::elementwise;
    k.bytes = Bytes(1'000'000'000);
    k.op_class = "layernorm_fwd";
    const KernelCost cost = c.kernel(k);
    CHECK(cost.time == Time::from_us(5) + Time::from_seconds(2e-3));
    CHECK(cost.source == CostSource::analytical);
}

TEST_CASE("measured entries replace the analytical model and say so") {
    DeviceProfile p = test_profile();
    p.measured_gemms.push_back({1280, 1280, 4096, 1, 250.0});
    p.measured_elementwise.push_back({"layernorm_fwd", 1'000'000, 1.0});  // 1 TB/s measured
    CostModel c(p);
    const KernelCost g = c.kernel(gemm(1280, 1280, 4096));
    CHECK(g.source == CostSource::measured);
    CHECK(g.time == Time::from_us(250));
    CHECK(c.kernel(gemm(1280, 1280, 2048)).source == CostSource::analytical);
    // A transposed product (C^T = B^T A^T) is the same measurement.
    DeviceProfile q = test_profile();
    q.measured_gemms.push_back({6144, 2304, 8192, 1, 900.0});
    CHECK(CostModel(q).kernel(gemm(2304, 6144, 8192)).source == CostSource::measured);
    CHECK(CostModel(q).kernel(gemm(2304, 6144, 8192)).time == Time::from_us(900));
    CHECK(CostModel(q).kernel(gemm(2304, 8192, 6144)).source == CostSource::analytical);
    Kernel k;
    k.kind = KernelKind::elementwise;
    k.bytes = Bytes(2'000'000);
    k.op_class = "layernorm_fwd";
    CHECK(c.kernel(k).source == CostSource::measured);
    CHECK(c.kernel(k).time == Time::from_us(5) + Time::from_us(2));
}

TEST_CASE("tensor-parallel collectives: ring alpha-beta") {
    CostModel c(test_profile());
    const Bytes msg(800'000'000);
    // all-reduce over 8: 14 steps of 2 us, 2*7/8 * 800 MB = 1.4 GB at 100 GB/s = 14 ms
    CHECK(c.tp_collective(CollectiveKind::all_reduce, 8, msg) == Time::from_us(28) + Time::from_ms(14));
    // all-gather over 8: 7 steps, 7/8 * 800 MB = 700 MB = 7 ms
    CHECK(c.tp_collective(CollectiveKind::all_gather, 8, msg) == Time::from_us(14) + Time::from_ms(7));
    CHECK(c.tp_collective(CollectiveKind::reduce_scatter, 1, msg) == Time::zero());
    // a measured alpha-beta fit wins
    DeviceProfile p = test_profile();
    p.measured_collectives.push_back({"all_reduce", 8, 10.0, 200e9});
    CHECK(CostModel(p).tp_collective(CollectiveKind::all_reduce, 8, msg) == Time::from_us(10) + Time::from_ms(4));
}

TEST_CASE("pass time: an overlapped collective and the next compute step take the longer of the two") {
    CostModel c(test_profile());
    Step comm;
    comm.kind = Step::Kind::collective;
    comm.collective = {"ar", CollectiveKind::all_reduce, Bytes(800'000'000)};  // 14.028 ms
    Step work;
    work.kind = Step::Kind::compute;
    Kernel k;
    k.kind = KernelKind::elementwise;
    k.bytes = Bytes(5'000'000'000);  // 10 ms + 5 us
    work.kernels = {k};
    const Time tc = c.tp_collective(CollectiveKind::all_reduce, 8, comm.collective.message);
    const Time tw = c.compute_step(work);
    CHECK(c.pass_time({comm, work}, 8) == tc + tw);
    comm.overlapped = true;
    CHECK(c.pass_time({comm, work}, 8) == std::max(tc, tw));
}

TEST_CASE("NVLS: the intra-node all-reduce uses the NVLS bus bandwidth, the other collectives the ring's") {
    DeviceProfile p = load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml");
    REQUIRE(p.intra_node_nvls_bus_bandwidth == Approx(480e9));
    const CostModel with(p);
    p.intra_node_nvls_bus_bandwidth = 0;
    const CostModel without(p);
    const Bytes m(1LL << 28);
    const double bytes = 2.0 * 7 / 8 * double(m.value);
    CHECK((with.tp_collective(CollectiveKind::all_reduce, 8, m) - without.tp_collective(CollectiveKind::all_reduce, 8, m)).seconds() ==
          Approx(bytes / 480e9 - bytes / 360e9).epsilon(1e-6));
    CHECK(with.tp_collective(CollectiveKind::all_gather, 8, m) == without.tp_collective(CollectiveKind::all_gather, 8, m));
}
