// The analytical cost model: GEMM wave quantization and small-K penalty, bandwidth-bound elementwise
// kernels, alpha-beta collectives, measured entries taking precedence, overlap in a pass.
#include "strata/cost.hpp"
#include "strata/scenario.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <utility>

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

TEST_CASE("tensor-parallel collectives: measured times inside a node, interpolated by size") {
    DeviceProfile p = test_profile();
    p.measured_collective_points = {{"all_gather", 8, 1 << 20, 70.0}, {"all_gather", 8, 64 << 20, 380.0},
                                    {"all_gather", 8, 128 << 20, 700.0}};
    const CostModel c(p);
    // At a measured size its time; between two, on the line joining them; below the smallest, the smallest's time;
    // above the largest, the largest's bus bandwidth.
    CHECK(c.tp_collective(CollectiveKind::all_gather, 8, Bytes(64 << 20)) == Time::from_us(380));
    CHECK(c.tp_collective(CollectiveKind::all_gather, 8, Bytes(96 << 20)) == Time::from_us(540));
    CHECK(c.tp_collective(CollectiveKind::all_gather, 8, Bytes(1000)) == Time::from_us(70));
    CHECK(c.tp_collective(CollectiveKind::all_gather, 8, Bytes(256 << 20)) == Time::from_us(1400));
    // Another op or rank count keeps the ring model.
    const Bytes msg(800'000'000);
    CHECK(c.tp_collective(CollectiveKind::all_reduce, 8, msg) == Time::from_us(28) + Time::from_ms(14));
    CHECK(c.tp_collective(CollectiveKind::all_gather, 4, Bytes(700'000'000)) == Time::from_us(6) + Time::from_us(5250));
    // measured_collective_time says the same, and nothing where nothing was measured.
    CHECK(measured_collective_time(p, CollectiveKind::all_gather, 8, Bytes(96 << 20)) == Time::from_us(540));
    CHECK(!measured_collective_time(p, CollectiveKind::reduce_scatter, 8, Bytes(96 << 20)));
    // An alpha-beta fit of the same op and ranks wins over the points.
    p.measured_collectives.push_back({"all_gather", 8, 10.0, 100e9});
    CHECK(measured_collective_time(p, CollectiveKind::all_gather, 8, Bytes(1'000'000'000)) ==
          Time::from_us(10) + Time::from_ms(10));
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

namespace {
Kernel flash_kernel(std::int64_t b_heads, std::int64_t s, std::int64_t d, bool forward) {
    Kernel kr;
    kr.name = "attn.flash";
    kr.kind = forward ? KernelKind::flash_attention_fwd : KernelKind::flash_attention_bwd;
    kr.gemm = {s, s, d, b_heads};
    return kr;
}
/// A 2 x 2 grid (4 and 16 heads x s = 1024 and 4096, head_dim 128) whose forward efficiencies are 0.2, 0.4 (4 heads)
/// and 0.3, 0.5 (16 heads) of the test profile's 100 TF/s, backward half of that; one head_dim 64 point at 0.8x.
DeviceProfile flash_profile() {
    DeviceProfile p = test_profile();
    p.kernel_launch_us = 0;
    auto add = [&](std::int64_t b, std::int64_t heads, std::int64_t s, std::int64_t d, double eff_fwd) {
        const double fwd_flops = 2.0 * double(s) * double(s) * double(d) * double(b * heads);   // 2 GEMMs, causal half
        p.measured_flash_attention.push_back({b, heads, s, d, fwd_flops / (100e12 * eff_fwd) * 1e6,
                                              2.5 * fwd_flops / (100e12 * eff_fwd / 2) * 1e6});
    };
    add(1, 4, 1024, 128, 0.2);
    add(1, 4, 4096, 128, 0.4);
    add(1, 16, 1024, 128, 0.3);
    add(4, 4, 1024, 128, 0.3);   // batch 4 x 4 heads is the 16-head point again: averaged with it
    add(1, 16, 4096, 128, 0.5);
    add(1, 16, 4096, 64, 0.4);   // 0.8 x the grid's 0.5 at that point
    return p;
}
}  // namespace

TEST_CASE("fused attention: measured grid, interpolated in log2(batch x heads) and log2(sequence)") {
    const CostModel c(flash_profile());
    // A measured point gives back its own time (no launch cost in this profile).
    const auto& m = c.profile().measured_flash_attention[1];
    CHECK(c.kernel(flash_kernel(4, 4096, 128, true)).time.seconds() == Approx(m.forward_us * 1e-6).epsilon(1e-9));
    CHECK(c.kernel(flash_kernel(4, 4096, 128, false)).time.seconds() == Approx(m.backward_us * 1e-6).epsilon(1e-9));
    CHECK(c.kernel(flash_kernel(4, 4096, 128, true)).source == CostSource::measured);
    CHECK(c.flash_efficiency(flash_kernel(16, 1024, 128, true)) == Approx(0.3));
    CHECK(c.flash_efficiency(flash_kernel(16, 1024, 128, false)) == Approx(0.15));
    // Midway in both logs (8 heads, s = 2048): the mean of the four corners.
    CHECK(c.flash_efficiency(flash_kernel(8, 2048, 128, true)) == Approx((0.2 + 0.4 + 0.3 + 0.5) / 4));
    // Along one axis: 16 heads, s = 2048 is halfway between 0.3 and 0.5.
    CHECK(c.flash_efficiency(flash_kernel(16, 2048, 128, true)) == Approx(0.4));
    // Clamped outside the grid, never extrapolated.
    CHECK(c.flash_efficiency(flash_kernel(64, 16384, 128, true)) == Approx(0.5));
    CHECK(c.flash_efficiency(flash_kernel(1, 256, 128, true)) == Approx(0.2));
    // Past the grid's longest sequence the further query tiles count as heads: 4 heads at s = 8192 as 8 heads at
    // 4096 (halfway in log2 between 0.4 and 0.5), at 16384 as 16 heads there.
    CHECK(c.flash_efficiency(flash_kernel(4, 8192, 128, true)) == Approx(0.45));
    CHECK(c.flash_efficiency(flash_kernel(4, 16384, 128, true)) == Approx(0.5));
    // Context parallelism: the rank's 1024 queries against the ring's 4096 keys as the square kernel of the same work
    // (2048, halfway between 0.2 and 0.4); 4096 queries against 65,536 keys as one of 16,384 tokens, folded into heads.
    Kernel ring = flash_kernel(4, 1024, 128, true);
    ring.gemm.n = 4096;
    CHECK(c.flash_efficiency(ring) == Approx(0.3));
    ring.gemm.m = 4096;
    ring.gemm.n = 65536;
    CHECK(c.flash_efficiency(ring) == Approx(0.5));
    // Another head_dim: the grid scaled by that head_dim's measured ratio; an unmeasured one: the grid as is.
    CHECK(c.flash_efficiency(flash_kernel(4, 1024, 64, true)) == Approx(0.8 * 0.2));
    CHECK(c.flash_efficiency(flash_kernel(4, 1024, 96, true)) == Approx(0.2));
    // Without the grid the flat efficiencies apply.
    DeviceProfile flat = test_profile();
    flat.flash_forward_efficiency = 0.45;
    flat.flash_backward_efficiency = 0.35;
    CHECK(CostModel(flat).flash_efficiency(flash_kernel(8, 2048, 128, true)) == Approx(0.45));
    CHECK(CostModel(flat).flash_efficiency(flash_kernel(8, 2048, 128, false)) == Approx(0.35));
    CHECK(CostModel(flat).kernel(flash_kernel(8, 2048, 128, true)).source == CostSource::analytical);
}

TEST_CASE("fused attention: the shipped Hopper grid interpolates between its measured neighbours") {
    const CostModel c(load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml"));
    REQUIRE(c.profile().measured_flash_attention.size() >= 16);
    // 12 heads at s = 4096 lies between the 8- and 16-head measurements.
    const double e8 = c.flash_efficiency(flash_kernel(8, 4096, 128, true));
    const double e12 = c.flash_efficiency(flash_kernel(12, 4096, 128, true));
    const double e16 = c.flash_efficiency(flash_kernel(16, 4096, 128, true));
    CHECK(e8 < e12);
    CHECK(e12 < e16);
}

TEST_CASE("SMs held by a collective: the held share without a table, the measured slowdown with one") {
    DeviceProfile p = test_profile();  // 100 SMs
    CHECK(speed_with_sms_held(p, 0) == 1.0);
    CHECK(speed_with_sms_held(p, 10) == Approx(0.9));
    CHECK(speed_with_sms_held(p, 99) == Approx(0.1));  // at least 0.1
    p.nccl_channels = 20;
    CHECK(CostModel(p).comm_sm_fraction() == Approx(0.2));
    // Measured: interpolated linearly in slowdown from (0, 1), past the table scaled by the share model.
    p.measured_sms_held = {{2, 1.10}, {10, 1.30}};
    CHECK(speed_with_sms_held(p, 1) == Approx(1.0 / 1.05));
    CHECK(speed_with_sms_held(p, 2) == Approx(1.0 / 1.10));
    CHECK(speed_with_sms_held(p, 6) == Approx(1.0 / 1.20));
    CHECK(speed_with_sms_held(p, 10) == Approx(1.0 / 1.30));
    CHECK(speed_with_sms_held(p, 55) == Approx((0.45 / 0.90) / 1.30));
    CHECK(speed_with_sms_held(p, 100) == Approx(0.1));
    CHECK(CostModel(p).comm_sm_fraction() == Approx(1.0 - (0.80 / 0.90) / 1.30));
    // Overlapped compute loses that fraction over the overlap.
    const Time compute = Time::from_us(1000), collective = Time::from_us(400);
    const CostModel c(p);
    CHECK(CostModel::slowed_compute(compute, collective, c.comm_sm_fraction(20)).seconds() ==
          Approx((1000 + 400 * (1.0 - (0.80 / 0.90) / 1.30)) * 1e-6));
    // ... and a shorter compute only over its own length.
    CHECK(CostModel::slowed_compute(collective, compute, c.comm_sm_fraction(10)).seconds() == Approx(400 * 1.30 * 1e-6));
    CHECK(CostModel::slowed_compute(compute, collective, c.comm_sm_fraction(0)) == compute);
}

TEST_CASE("SMs held by what moves a collective: NCCL's channels, a userbuffers kernel's CTAs, the copy engines none") {
    DeviceProfile p = test_profile();  // 100 SMs
    p.nccl_channels = 20;
    p.measured_sms_held = {{2, 1.10}, {10, 1.30}, {20, 1.50}};
    const CostModel c(p);
    TpCollective nccl{"ag", CollectiveKind::all_gather, Bytes(64 << 20)};
    CHECK(c.sms_held(nccl) == 20);
    TpCollective ub = nccl;
    ub.engine = CommEngine::userbuffers;
    ub.sms = 2;
    CHECK(c.sms_held(ub) == 2);
    TpCollective ce = nccl;
    ce.engine = CommEngine::copy_engine;
    ce.sms = 16;  // ignored: no SM moves the bytes
    CHECK(c.sms_held(ce) == 0);
    CHECK(c.comm_sm_fraction(0) == 0.0);
    CHECK(c.comm_sm_fraction(2) == Approx(1.0 - 1.0 / 1.10));
    // In a pass: the GEMMs beside each collective slow by what that collective holds (8 waves of tiles on 100 SMs,
    // more than the SMs left); a bandwidth-bound kernel beside it loses nothing (measured up to 32 SMs held).
    Step work, copy_step;
    work.kernels.push_back(gemm(8 * 1280, 1280, 4096));
    Kernel copy;
    copy.name = "e";
    copy.bytes = Bytes(400'000'000);  // elementwise
    copy_step.kernels.push_back(copy);
    const Time tw = c.compute_step(work);
    for (const auto& [coll, fraction] : {std::pair{nccl, 1.0 - 1.0 / 1.50}, std::pair{ub, 1.0 - 1.0 / 1.10}, std::pair{ce, 0.0}}) {
        Step s;
        s.kind = Step::Kind::collective;
        s.collective = coll;
        s.overlapped = true;
        const Time tc = c.tp_collective(coll.kind, 8, coll.message);
        REQUIRE(tc < tw);
        CHECK(c.pass_time({s, work}, 8).seconds() == Approx(tw.seconds() + fraction * tc.seconds()));
        REQUIRE(tc < c.compute_step(copy_step));
        CHECK(c.pass_time({s, copy_step}, 8) == c.compute_step(copy_step));
    }
}

TEST_CASE(
    "Kernels beside a collective: GEMMs at the measured table, fused attention at its own or the share, "
    "bandwidth-bound ones "
    "unslowed") {
    DeviceProfile p = test_profile();  // 100 SMs
    Kernel copy;
    copy.bytes = Bytes(1 << 20);
    Kernel attention = gemm(4096, 4096, 128, 16);
    attention.kind = KernelKind::flash_attention_fwd;
    const Kernel big = gemm(8 * 1280, 1280, 4096);  // 8 waves of 128 x 128 tiles
    const Kernel small = gemm(1280, 640, 4096);     // 50 tiles: they fit on the 80 SMs left
    // Without a measured table every kernel loses the held share.
    for (const Kernel& k : {copy, attention, big, small})
        CHECK(CostModel(p).speed_beside(k, 20) == Approx(0.8));
    p.measured_sms_held = {{2, 1.10}, {10, 1.30}, {20, 1.50}};
    const CostModel c(p);
    CHECK(c.speed_beside(big, 20) == Approx(1.0 / 1.50));
    CHECK(c.speed_beside(small, 20) == 1.0);
    CHECK(c.speed_beside(attention, 20) == Approx(0.8));
    CHECK(c.speed_beside(copy, 20) == 1.0);
    CHECK(c.speed_beside(copy, 60) == Approx(0.4 / 0.8));  // past the table's 20 SMs: the further share
    CHECK(c.speed_beside(big, 0) == 1.0);
    // Fused attention with its own measured table (cuDNN's): interpolated from (0, 1) through it, past it the further
    // share; FlashAttention-2's kernels, not measured, keep the share.
    p.measured_attention_sms_held = {{2, 1.02}, {10, 1.10}, {20, 1.20}};
    const CostModel ca(p);
    CHECK(ca.speed_beside(attention, 20) == Approx(1.0 / 1.20));
    CHECK(ca.speed_beside(attention, 6) == Approx(1.0 / 1.06));
    CHECK(ca.speed_beside(attention, 1) == Approx(1.0 / 1.01));
    CHECK(ca.speed_beside(attention, 60) == Approx((0.4 / 0.8) / 1.20));
    Kernel fa2 = attention;
    fa2.flash2 = true;
    CHECK(ca.speed_beside(fa2, 20) == Approx(0.8));
    CHECK(attention_speed_with_sms_held(p, 20, false) == Approx(1.0 / 1.20));
    CHECK(attention_speed_with_sms_held(p, 20, true) == Approx(0.8));
    // The attention table alone (no GEMM table): fused attention by it, every other kernel at the share.
    DeviceProfile only = test_profile();
    only.measured_attention_sms_held = p.measured_attention_sms_held;
    const CostModel co(only);
    CHECK(co.speed_beside(attention, 20) == Approx(1.0 / 1.20));
    CHECK(co.speed_beside(big, 20) == Approx(0.8));
    CHECK(co.speed_beside(copy, 20) == Approx(0.8));
    // A step's share lost: its kernels' losses weighted by their times.
    Step step;
    step.kernels = {big, copy};
    const double tb = c.kernel(big).time.seconds(), te = c.kernel(copy).time.seconds();
    CHECK(c.step_sm_fraction(step, 20) == Approx((tb * (1.0 - 1.0 / 1.50)) / (tb + te)));
}

TEST_CASE("Context-parallel ring: NCCL's point-to-point channels by where each GPU's neighbours sit") {
    DeviceProfile p = test_profile();  // 100 SMs
    p.nccl_channels = 32;
    const CostModel c(p);
    const Bytes small(std::int64_t{64} << 20), huge(std::int64_t{16} << 30);
    // Two ranks on two nodes: one batched kernel to the one peer, 2 channels per network peer.
    CHECK(c.context_ring_sms(std::vector<int>{0, 8}, 8, small) == 2);
    // Two ranks in a node: half the 2-rank communicator's 32 channels, all of them once each channel's part of a step
    // (here 8 GiB a step) passes 32 x 512 KiB.
    CHECK(c.context_ring_sms(std::vector<int>{0, 1}, 8, small) == 16);
    CHECK(c.context_ring_sms(std::vector<int>{0, 1}, 8, huge) == 32);
    // More ranks: a send and a receive kernel apart, each on its own 2-rank communicator; the busiest GPU counts.
    CHECK(c.context_ring_sms(std::vector<int>{0, 8, 16, 24}, 8, small) == 4);  // every neighbour remote
    CHECK(c.context_ring_sms(std::vector<int>{0, 4, 8, 12}, 8, small) == 18);  // one neighbour local, one remote
    CHECK(c.context_ring_sms(std::vector<int>{0, 2, 4, 6}, 8, small) == 32);   // both local
    CHECK(c.context_ring_sms(std::vector<int>{0}, 8, small) == 0);
    // Four ranks in one node, steps of 4 GiB: each kernel on all 32 channels, a send and a receive: 64.
    CHECK(c.context_ring_sms(std::vector<int>{0, 2, 4, 6}, 8, huge) == 64);
    // A profile that names no NCCL channels charges nothing; never all the SMs.
    DeviceProfile none = p;
    none.nccl_channels = 0;
    CHECK(CostModel(none).context_ring_sms(std::vector<int>{0, 8, 16}, 8, small) == 0);
    DeviceProfile few = p;
    few.sm_count = 20;
    CHECK(CostModel(few).context_ring_sms(std::vector<int>{0, 2, 4, 6}, 8, huge) == 19);
    // A job's rings in Megatron's order (tensor innermost, then context): t = 4, c = 4 on 8-GPU nodes.
    ExecutionSpec e;
    e.tensor = 4;
    e.context = 4;
    e.data = 2;
    CHECK(c.context_ring_sms(e, 8, small) == 18);
    e.tensor = 8;
    CHECK(c.context_ring_sms(e, 8, small) == 4);
    e.tensor = 1;
    CHECK(c.context_ring_sms(e, 8, small) == 32);
}

TEST_CASE("Context-parallel ring: across nodes its bytes pass each GPU's share of the NICs, inside a node NVLink's") {
    DeviceProfile p = test_profile();
    p.nccl_channels = 32;
    const CostModel c(p);
    SystemSpec sys;
    sys.gpus_per_node = 8;
    sys.network.rails = 8;
    sys.network.nic_bandwidth = BytesPerSecond{50e9};
    ExecutionSpec e;
    e.context = 2;
    e.data = 2;
    const Bytes buffer(std::int64_t{1} << 30);
    const Time inside = c.tp_collective(CollectiveKind::all_gather, 2, buffer);
    // t = 4, c = 2: each ring's GPUs 4 apart, in one node: the intra-node figure.
    e.tensor = 4;
    const ContextRing near = c.context_ring(e, sys);
    CHECK(near.ranks == 2);
    CHECK(near.across_nodes.value == 0);
    CHECK(c.context_collective(near, CollectiveKind::all_gather, buffer) == inside);
    // t = 8, c = 2: each ring's GPUs 8 apart, on two nodes: half the buffer through the GPU's own NIC.
    e.tensor = 8;
    const ContextRing far = c.context_ring(e, sys);
    CHECK(far.across_nodes.value == Approx(50e9));
    const Time nic = Time::from_seconds(double(buffer.value) / 2 / 50e9);
    CHECK(c.context_collective(far, CollectiveKind::all_gather, buffer) == std::max(inside, nic));
    CHECK(c.context_collective(far, CollectiveKind::all_gather, buffer) > inside);
    CHECK(far.sms(buffer) == c.context_ring_sms(e, 8, buffer));
    // Four NICs for eight GPUs: each GPU gets half of one.
    sys.network.rails = 4;
    CHECK(c.context_ring(e, sys).across_nodes.value == Approx(25e9));
    // t = 2, c = 8: each ring's GPUs 2 apart over two nodes, two of its steps crossing (6 -> 8 and 14 -> 0, and 7 -> 9,
    // 15 -> 1 for the other tensor rank), each by its destination's rail: a NIC each with 4 rails, one NIC for both
    // with one rail.
    ExecutionSpec wide;
    wide.tensor = 2;
    wide.context = 8;
    CHECK(c.context_ring(wide, sys).across_nodes.value == Approx(50e9));
    sys.network.rails = 1;
    CHECK(c.context_ring(wide, sys).across_nodes.value == Approx(25e9));
    sys.network.rails = 4;
    // pass_time takes the ring's time: the ring alone in a pass, across nodes, is that time.
    Step ring_step;
    ring_step.kind = Step::Kind::collective;
    ring_step.collective = TpCollective{"attn.cp-kv-ring", CollectiveKind::all_gather, buffer, true};
    CHECK(c.pass_time({ring_step}, 8, far) == c.context_collective(far, CollectiveKind::all_gather, buffer));
    CHECK(c.pass_time({ring_step}, 8, near) == inside);
}

TEST_CASE("GEMM with an SM margin: its waves planned on the SMs left, at their share of the peak") {
    DeviceProfile p = test_profile();  // 100 SMs, 128 x 64 tiles, ceiling 0.8
    const CostModel c(p);
    GemmShape g{1280, 1280, 4096, 1};  // 10 x 10 tiles of 128 x 128: one full wave on 100 SMs
    CHECK(c.gemm_efficiency(g) == Approx(0.8));
    g.sm_margin = 20;  // 80 SMs: best 200 tiles of 64 x 128 in 3 waves (2.5 filled), at 80% of the peak
    CHECK(c.gemm_efficiency(g) == Approx(0.8 * (200.0 / 240.0) * 0.8));
    g.sm_margin = 0;
    Kernel whole = gemm(g.m, g.n, g.k);
    Kernel carved = whole;
    carved.gemm.sm_margin = 20;
    CHECK(c.kernel(carved).time > c.kernel(whole).time);
    // A measured shape is scaled by the model's ratio.
    p.measured_gemms = {{1280, 1280, 4096, 1, 500.0}};
    const CostModel m(p);
    CHECK(m.kernel(whole).time.us() == Approx(500.0));
    CHECK(m.kernel(carved).time.us() == Approx(500.0 / ((200.0 / 240.0) * 0.8)));
    // Chunks keep the margin.
    carved.gemm.chunks = 2;
    GemmShape half = carved.gemm.chunk(640);
    CHECK(half.sm_margin == 20);
}

TEST_CASE("SMs held: the shipped Hopper profiles carry the H100 measurement, the A100 profile the share model") {
    const std::string dir = std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/";
    const DeviceProfile h100 = load_device_profile(dir + "h100-sxm5-80gb.yaml");
    REQUIRE(h100.measured_sms_held.size() == 4);
    // 2 of 132 SMs held slow a GEMM far more than their share: the GEMM's clusters and waves no longer fit.
    CHECK(1.0 / speed_with_sms_held(h100, 2) == Approx(1.100));
    CHECK(1.0 - speed_with_sms_held(h100, 2) > 4 * (2.0 / 132.0));
    const DeviceProfile a100 = load_device_profile(dir + "a100-sxm4-80gb.yaml");
    CHECK(a100.measured_sms_held.empty());
    CHECK(speed_with_sms_held(a100, 24) == Approx(1.0 - 24.0 / 108.0));
    // cuDNN's fused attention: the H100 and H200 profiles, analytical and calibrated, carry the measured run's ratios
    // (to the rounding), the A100 profile none.
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/calibrate/results/2026-11-26b/h100-kinds.json");
    REQUIRE(in);
    const nlohmann::json kinds = nlohmann::json::parse(in)["kinds"];
    const auto it = std::find_if(kinds.begin(), kinds.end(), [](const nlohmann::json& k) {
        return k["op"].get<std::string>().rfind("cuDNN attention", 0) == 0;
    });
    REQUIRE(it != kinds.end());
    const nlohmann::json& us = (*it)["us"];
    for (const char* name : {"h100-sxm5-80gb.yaml", "h200-sxm-141gb.yaml", "h100-sxm5-80gb-calibrated.yaml",
                             "h200-sxm-141gb-calibrated.yaml"}) {
        INFO(name);
        const DeviceProfile p = load_device_profile(dir + name);
        REQUIRE(p.measured_attention_sms_held.size() == 3);
        for (const MeasuredSmsHeld& e : p.measured_attention_sms_held)
            CHECK(e.slowdown == Approx(us[std::to_string(e.sms)].get<double>() / us["0"].get<double>()).margin(5e-4));
    }
    CHECK(a100.measured_attention_sms_held.empty());
}

TEST_CASE("GEMM: stream-K spreads badly quantized tiles over every SM at its own share of the rate") {
    DeviceProfile p = test_profile();
    CostModel plain(p);
    p.gemm_stream_k_efficiency = 0.8;
    CostModel streamed(p);
    // 1408 x 1280: 110 tiles of 128 x 128 in two waves on 100 SMs; half-height tiles, 220 in three (73% useful).
    const double waves = plain.gemm_efficiency({1408, 1280, 4096, 1});
    CHECK(waves == Approx(0.8 * 1408.0 * 1280.0 / (3 * 100 * 64 * 128)));
    CHECK(streamed.gemm_efficiency({1408, 1280, 4096, 1}) == Approx(0.8 * 0.8));   // no idle wave, 0.8 of the rate
    // With a fixup cost per further SM sharing a tile: 110 tiles on 100 SMs share none; 512 x 1280 fills one wave of
    // 80 half-height tiles, which beats stream-K there; 256 x 1280's 40 half-height tiles are each shared by 1.5 more
    // SMs: 0.8 / 1.3 of the rate, more than one wave on 40 of 100 SMs.
    p.gemm_stream_k_fixup = 0.2;
    CostModel fixed(p);
    CHECK(fixed.gemm_efficiency({1408, 1280, 4096, 1}) == Approx(0.8 * 0.8));
    CHECK(fixed.gemm_efficiency({512, 1280, 4096, 1}) == Approx(0.8 * 512.0 * 1280.0 / (100 * 64 * 128)));  // one wave
    CHECK(fixed.gemm_efficiency({256, 1280, 4096, 1}) == Approx(0.8 * 0.8 / (1 + 0.2 * (100.0 / 40 - 1))));
    // A full wave keeps the tiles' own rate: stream-K is only the better choice where the waves waste SMs.
    CHECK(streamed.gemm_efficiency({1280, 1280, 4096, 1}) == Approx(0.8));
    // The padding of edge tiles is still lost: 1300 rows need 21 tiles of 64 rows (1344).
    CHECK(streamed.gemm_efficiency({1300, 1280, 4096, 1}) == Approx(0.8 * 0.8 * 1300.0 / (21 * 64)));   // 64-row tiles
}

TEST_CASE("GEMM: a chunked GEMM costs its chunks back to back, and reads B once per chunk") {
    CostModel c(test_profile());
    Kernel whole = gemm(4096, 1280, 4096);
    Kernel chunked = whole;
    chunked.gemm.chunks = 8;
    const Kernel one = gemm(512, 1280, 4096);
    CHECK(c.kernel(chunked).time.ps() == 8 * c.kernel(one).time.ps());
    CHECK(chunked.gemm.flops().value == whole.gemm.flops().value);
    CHECK(chunked.gemm.bytes().value == whole.gemm.bytes().value + 7 * 2 * 4096 * 1280);
    // A 512 x 1280 chunk: 80 half-height tiles on 100 SMs, one wave 80% useful; the whole GEMM 640 in 7 waves (91%).
    CHECK(c.kernel(chunked).time > c.kernel(whole).time);
    // Rows that do not divide: 4100 = 4 x 513 + 4 x 512; fewer rows than chunks: one GEMM per row, none empty.
    chunked.gemm.m = 4100;
    CHECK(c.kernel(chunked).time.ps() == 4 * c.kernel(gemm(513, 1280, 4096)).time.ps() + 4 * c.kernel(gemm(512, 1280, 4096)).time.ps());
    chunked.gemm.m = 3;
    CHECK(c.kernel(chunked).time.ps() == 3 * c.kernel(gemm(1, 1280, 4096)).time.ps());
    // Columns (TE's pipelined reduce-scatter splits the output's features): 1280 = 4 x 320; A read per chunk.
    Kernel columns = gemm(4096, 1280, 4096);
    columns.gemm.chunks = 4;
    columns.gemm.chunk_columns = true;
    CHECK(c.kernel(columns).time.ps() == 4 * c.kernel(gemm(4096, 320, 4096)).time.ps());
    CHECK(columns.gemm.bytes().value == whole.gemm.bytes().value + 3 * 2 * 4096 * 4096);
}

namespace {
/// Mean and root mean square of log(model / measured) of the chunk-to-whole time ratio over Transformer Engine's
/// chunked GEMMs measured on an H100 (calibration data: GEMM microbenchmarks, calibrate/torch_tp_overlap.py).
std::pair<double, double> chunk_ratio_errors(double stream_k, double fixup) {
    // Read once for the test's several calls.
    static const DeviceProfile h100 =
        load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml");
    static const nlohmann::json j = [] {
        std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/calibrate/results/2026-11-26b/h100-tp-overlap-3.json");
        return nlohmann::json::parse(in);
    }();
    DeviceProfile p = h100;
    p.gemm_stream_k_efficiency = stream_k;
    p.gemm_stream_k_fixup = fixup;
    const CostModel c(p);
    double sum = 0, sq = 0;
    int n = 0;
    for (const auto& row : j.at("rows"))
        for (const auto& g : row.at("gemms")) {
            const std::string method = g.at("method");
            if (method != "ring" && method != "pipeline") continue;
            Kernel whole = gemm(g.at("m"), g.at("n"), g.at("k"));
            Kernel chunked = whole;
            chunked.gemm.chunks = g.at("parts");
            const double model = c.kernel(chunked).time.seconds() / c.kernel(whole).time.seconds();
            const double measured = g.at("split_us").get<double>() / g.at("full_us").get<double>();
            const double e = std::log(model / measured);
            sum += e, sq += e * e, ++n;
        }
    REQUIRE(n == 48);
    return {sum / n, std::sqrt(sq / n)};
}
}  // namespace

TEST_CASE("GEMM: the Hopper profiles' stream-K rate and fixup fit the measured chunk ratios without a mean bias") {
    const DeviceProfile h100 = load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml");
    const double e0 = h100.gemm_stream_k_efficiency, fixup = h100.gemm_stream_k_fixup;
    const auto [bias, rms] = chunk_ratio_errors(e0, fixup);
    CHECK(std::abs(bias) < 0.005);
    CHECK(rms < 0.06);
    // The fit: the bias changes sign within +-0.02 of the shipped rate; without the fixup term the best rate (0.80)
    // leaves an rms of 11%, without stream-K the chunks cost 14% too much (rms 26%).
    CHECK(chunk_ratio_errors(e0 - 0.02, fixup).first > 0);
    CHECK(chunk_ratio_errors(e0 + 0.02, fixup).first < 0);
    CHECK(chunk_ratio_errors(0.80, 0).second > 0.10);
    const auto [bias0, rms0] = chunk_ratio_errors(0, 0);
    CHECK(bias0 > 0.10);
    CHECK(rms0 > 0.2);
    for (const char* f : {"h200-sxm-141gb.yaml", "h100-sxm5-80gb-calibrated.yaml", "h200-sxm-141gb-calibrated.yaml"}) {
        const DeviceProfile other = load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/" + f);
        CHECK(other.gemm_stream_k_efficiency == e0);
        CHECK(other.gemm_stream_k_fixup == fixup);
    }
    // No A100 measurement: its profile keeps the tiles' waves alone (Table 4's fit, Table 5 and SC21 unchanged).
    CHECK(load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/a100-sxm4-80gb.yaml").gemm_stream_k_efficiency == 0);
}

namespace {
/// Model over measured for Transformer Engine's pipeline and bulk overlaps as emulated on an H100
/// (calibrate/torch_tp_overlap.py; calibration data, GEMM microbenchmarks): the measured chunks (`split`), slowed
/// while 16 SMs are held for as long as the collective takes at 360 GB/s (te1, TE 1.x), and with cuBLASLt told to
/// leave those 16 SMs as well (te2, TE >= 2.0's set_sm_margin).
struct OverlapFit {
    std::vector<double> te1_bulk, te1_pipeline, te2;
};
OverlapFit overlap_fit() {
    const DeviceProfile h100 = load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml");
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/calibrate/results/2026-11-26b/h100-tp-overlap-3.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    const CostModel c(h100);
    const int sms = j.at("comm_sms");
    OverlapFit fit;
    for (const auto& row : j.at("rows"))
        for (const auto& g : row.at("gemms")) {
            const std::string method = g.at("method");
            if (method != "pipeline" && method != "bulk") continue;
            const double t = row.at("tensor"), msg = 2.0 * double(j.at("tokens")) * double(row.at("hidden"));
            const Time hold = Time::from_seconds(msg * (t - 1) / t / 360e9 * (method == "pipeline" ? 0.75 : 1.0));
            const Time split = Time::from_us(g.at("split_us").get<double>());
            Kernel chunked = gemm(g.at("m"), g.at("n"), g.at("k"));
            chunked.gemm.chunks = g.at("parts");
            Kernel carved = chunked;
            carved.gemm.sm_margin = sms;
            const Time split_carved = Time::from_seconds(split.seconds() * c.kernel(carved).time.seconds() /
                                                         c.kernel(chunked).time.seconds());
            // The chunks' own waves (the emulation split rows) pick the slowdown while SMs are held.
            Step step;
            step.kernels.push_back(chunked);
            Step step_carved;
            step_carved.kernels.push_back(carved);
            (method == "bulk" ? fit.te1_bulk : fit.te1_pipeline)
                .push_back(CostModel::slowed_compute(split, hold, c.step_sm_fraction(step, sms)).seconds() /
                           (g.at("te1_us").get<double>() * 1e-6));
            fit.te2.push_back(CostModel::slowed_compute(split_carved, hold, c.step_sm_fraction(step_carved, sms)).seconds() /
                              (g.at("te2_us").get<double>() * 1e-6));
        }
    return fit;
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
}  // namespace

TEST_CASE("TE overlap SMs: the measured slowdown with SMs held and the margin's SMs reproduce the emulated overlaps") {
    const OverlapFit fit = overlap_fit();
    REQUIRE(fit.te1_bulk.size() == 32);
    REQUIRE(fit.te1_pipeline.size() == 16);
    REQUIRE(fit.te2.size() == 48);
    // Bulk (one GEMM beside the 16-SM kernel): median model / measured 0.987, every shape within 8%.
    CHECK(median(fit.te1_bulk) == Approx(1.0).margin(0.02));
    for (double r : fit.te1_bulk) CHECK(std::abs(r - 1.0) < 0.08);
    // With the margin (TE >= 2.0): the GEMM's waves on 116 SMs, then the held SMs as without: median 1.021.
    CHECK(median(fit.te2) == Approx(1.0).margin(0.03));
    // The pipelined chunks (few tiles per SM) at their own waves' slowdown: median 0.948, every one within 12% (with
    // the median table alone 0.874: the chunks lose more to held SMs than whole GEMMs, as the per-wave line says).
    CHECK(median(fit.te1_pipeline) == Approx(0.95).margin(0.03));
    for (double r : fit.te1_pipeline) CHECK(std::abs(r - 1.0) < 0.12);
}

TEST_CASE("TE overlap SMs: a margin of 16 SMs on whole GEMMs costs what the shape model says, within 5% on average") {
    // calibrate/torch_tp_overlap.py --sweep: ten GEMMs through cuBLASLt with 16 SMs carved out, over without.
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/calibrate/results/2026-11-26b/h100-sm-sweep-3.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    const CostModel c(load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml"));
    double sum = 0;
    int n = 0;
    for (const auto& g : j.at("sweep")) {
        Kernel whole = gemm(g.at("m"), g.at("n"), g.at("k"));
        Kernel carved = whole;
        carved.gemm.sm_margin = 16;
        const double model = c.kernel(carved).time.seconds() / c.kernel(whole).time.seconds();
        const double measured = g.at("us").at("lt_carve16").get<double>() / g.at("us").at("lt").get<double>();
        CHECK(model > 1.0);
        sum += std::log(model / measured), ++n;
    }
    REQUIRE(n == 10);
    CHECK(std::abs(sum / n) < 0.05);  // today +2.2%: the model a little dearer than the carve-out measured
}

TEST_CASE("Ring exchange: the last GEMM chunk waits for the last transfer, so the pair takes the collective plus a chunk") {
    const CostModel c(test_profile());  // 100 SMs, 100 GB/s bus bandwidth
    TpCollective ring{"ag", CollectiveKind::all_gather, Bytes(400'000'000)};
    ring.engine = CommEngine::copy_engine;
    Step coll;
    coll.kind = Step::Kind::collective;
    coll.collective = ring;
    coll.overlapped = true;
    Step work;
    Kernel k = gemm(1280, 1280, 4096);
    k.gemm.chunks = 8;
    work.kernels.push_back(k);
    const Time tc = c.tp_collective(ring.kind, 8, ring.message), tw = c.compute_step(work);
    const Time chunk = c.ring_tail(ring, work);
    CHECK(chunk.ps() == tw.ps() / 8);
    REQUIRE(tc > tw);  // transfer-bound: 3.5 ms of transfers against 8 small chunks
    CHECK(c.pass_time({coll, work}, 8) == tc + chunk);
    // Compute-bound (a slower GEMM): the chunks' own time.
    work.kernels[0].gemm.k = 4096 * 64;
    const Time slow = c.compute_step(work);
    REQUIRE(slow > tc + c.ring_tail(ring, work));
    CHECK(c.pass_time({coll, work}, 8) == slow);
    // Not a ring exchange (NCCL, a userbuffers kernel) or no chunked GEMM: no tail.
    coll.collective.engine = CommEngine::nccl;
    CHECK(c.ring_tail(coll.collective, work) == Time::zero());
    work.kernels[0].gemm.chunks = 1;
    CHECK(c.ring_tail(ring, work) == Time::zero());
}

TEST_CASE("SMs held: the Hopper profiles' per-wave slowdowns are the sweep's least-squares lines") {
    // calibrate/torch_tp_overlap.py --sweep: ten GEMMs with 2 / 4 / 16 / 32 SMs held (clusters of 2 for 2 SMs, of 4
    // for more, as the medians). slowdown = base + per_wave / w, w = the GEMM's 256 x 128 output tiles per SM.
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/calibrate/results/2026-11-26b/h100-sm-sweep-3.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    const DeviceProfile h100 = load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h100-sxm5-80gb.yaml");
    const CostModel c(h100);
    REQUIRE(h100.measured_sms_held.size() == 4);
    const std::map<int, std::string> keys = {{2, "held2_c2"}, {4, "held4_c4"}, {16, "held16_c4"}, {32, "held32_c4"}};
    for (const MeasuredSmsHeld& e : h100.measured_sms_held) {
        INFO(e.sms);
        std::vector<double> x, y;
        for (const auto& g : j.at("sweep")) {
            x.push_back(1.0 / c.gemm_waves(GemmShape{g.at("m"), g.at("n"), g.at("k"), 1}));
            y.push_back(g.at("us").at(keys.at(e.sms)).get<double>() / g.at("us").at("held0").get<double>());
        }
        const double mx = std::accumulate(x.begin(), x.end(), 0.0) / double(x.size());
        const double my = std::accumulate(y.begin(), y.end(), 0.0) / double(y.size());
        double sxy = 0, sxx = 0;
        for (std::size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
        const double slope = sxy / sxx;
        CHECK(e.per_wave == Approx(slope).margin(0.001));
        CHECK(e.base == Approx(my - slope * mx).margin(0.001));
        CHECK(e.slowdown == Approx(median(y)).margin(0.001));
        // The line against the median: rms of model / measured - 1 over the shapes.
        double line = 0, flat = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            line += std::pow(e.at(1.0 / x[i]) / y[i] - 1, 2);
            flat += std::pow(e.slowdown / y[i] - 1, 2);
        }
        line = std::sqrt(line / double(x.size())), flat = std::sqrt(flat / double(x.size()));
        if (e.sms >= 4) CHECK(line < 0.6 * flat);
        CHECK(line < flat + 0.005);
    }
    // The H200 profile carries the same table (same die).
    const DeviceProfile h200 = load_device_profile(std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/h200-sxm-141gb.yaml");
    REQUIRE(h200.measured_sms_held.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(h200.measured_sms_held[i].base == h100.measured_sms_held[i].base);
        CHECK(h200.measured_sms_held[i].per_wave == h100.measured_sms_held[i].per_wave);
    }
    // Without waves (not a GEMM) the median.
    CHECK(speed_with_sms_held(h100, 16) == Approx(1.0 / 1.216));
    CHECK(speed_with_sms_held(h100, 16, 2.0) == Approx(1.0 / (h100.measured_sms_held[2].base + h100.measured_sms_held[2].per_wave / 2)));
}
