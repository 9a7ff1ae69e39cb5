// The power limit: the SM clock a layer's mix of kernels settles at (sustained_clock), the cost model's use of it,
// the profile and system keys, and the Hopper profiles against one GPU's layers measured at their steady state.
#include "strata/cost.hpp"
#include "strata/errors.hpp"
#include "strata/layer.hpp"
#include "strata/power.hpp"
#include "strata/scenario.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

using namespace strata;

namespace {
/// The H100 curve as measured (calibrate/results/2026-11-27c/h100-power.json): 700 W, copies 395.4 W.
PowerLimit h100_power() {
    PowerLimit p;
    p.limit_w = 700;
    p.boost_clock_mhz = 1980;
    p.memory_bound_w = 395.4;
    p.attention_w = 658.6;
    p.reference_clock_mhz = 1980;
    p.gemm = {{1905, 0.9896, 965.9}, {1530, 0.8977, 782.0}, {1380, 0.8619, 698.3}};
    return p;
}

/// The mean power of `mix` (seconds at the boost clock's rates) at clock f on the BF16 curve of `p` (no FP8, no
/// reference other than the boost clock): the same arithmetic as the header's description, written out.
double mean_w_at(const PowerLimit& p, const PowerMix& mix, double f) {
    std::size_t i = 0;
    while (i + 2 < p.gemm.size() && f < p.gemm[i + 1].clock_mhz) ++i;
    const MeasuredGemmPower &hi = p.gemm[i], &lo = p.gemm[i + 1];
    const double t = (f - lo.clock_mhz) / (hi.clock_mhz - lo.clock_mhz);
    const double speed = lo.speed + t * (hi.speed - lo.speed), watts = lo.watts + t * (hi.watts - lo.watts);
    const double boost_w = p.gemm[0].watts + (p.gemm[0].watts - p.gemm[1].watts) /
                                                 (p.gemm[0].clock_mhz - p.gemm[1].clock_mhz) *
                                                 (p.boost_clock_mhz - p.gemm[0].clock_mhz);
    const double g = mix.gemm_s / speed, a = mix.attention_s / speed;
    return (g * watts + a * p.attention_w * watts / boost_w + mix.other_s * p.memory_bound_w) / (g + a + mix.other_s);
}

const std::string kDevices = std::string(STRATA_SOURCE_DIR) + "/scenarios/devices/";

/// A case of the Megatron-LM H100 weak-scaling file (its layer shapes and configuration).
Scenario megatron_case(const std::string& name) {
    static const Experiment ex = load_experiment(std::string(STRATA_SOURCE_DIR) + "/scenarios/validation/megatron-h100.yaml");
    for (const Scenario& sc : ex.cases)
        if (sc.name == name) return sc;
    FAIL("no case " << name);
    return {};
}
}  // namespace

TEST_CASE("power: without a limit, or under it, kernels keep the profile's rates") {
    const PowerMix mix{1.0, 0, 0.1, 0.2};
    const SustainedClock none = sustained_clock(PowerLimit{}, mix);
    CHECK(none.speed == 1.0);
    CHECK(none.clock_mhz == 0.0);
    // Bandwidth-bound work alone draws 395 W: the boost clock, and with the reference at the boost clock speed 1.
    const SustainedClock light = sustained_clock(h100_power(), PowerMix{0.01, 0, 0, 1.0});
    CHECK(light.clock_mhz == 1980.0);
    CHECK(light.speed == Approx(1.0));
    CHECK(light.boost_w < 700);
}

TEST_CASE("power: a GEMM-only loop settles where the curve meets the limit, a mix where its mean power does") {
    const PowerLimit p = h100_power();
    // GEMMs alone: 698.3 W at 1380 MHz, 782 W at 1530: the limit is met 1.7 / 83.7 of the way up.
    const SustainedClock gemm = sustained_clock(p, PowerMix{1.0, 0, 0, 0});
    CHECK(gemm.clock_mhz == Approx(1380 + 150 * 1.7 / 83.7).epsilon(1e-6));
    CHECK(gemm.speed == Approx(0.8619 + (0.8977 - 0.8619) * 1.7 / 83.7).epsilon(1e-6));
    CHECK_FALSE(gemm.extrapolated);
    // A layer-like mix: its mean power at the clock found is the limit, and the clock lies between the extremes.
    const PowerMix layer{0.8, 0, 0.06, 0.14};
    const SustainedClock c = sustained_clock(p, layer);
    CHECK(c.clock_mhz > gemm.clock_mhz);
    CHECK(c.clock_mhz < 1980);
    CHECK(mean_w_at(p, layer, c.clock_mhz) == Approx(700).epsilon(1e-6));
    CHECK(c.boost_w > 700);
    // More bandwidth-bound work keeps a higher clock.
    CHECK(sustained_clock(p, PowerMix{0.6, 0, 0.06, 0.34}).clock_mhz > c.clock_mhz);
}

TEST_CASE("power: the profile's reference clock rescales the speed, a lower limit extrapolates the curve") {
    PowerLimit p = h100_power();
    const PowerMix layer{0.8, 0, 0.06, 0.14};
    const SustainedClock at_boost = sustained_clock(p, layer);
    p.reference_clock_mhz = 1530;  // the profile's rates hold at 1,530 MHz (speed 0.8977)
    const SustainedClock at_ref = sustained_clock(p, layer);
    // The mix's seconds are the profile's, at 1,530 MHz: at the boost clock its GEMMs and attention take 0.8977 of
    // them, a smaller share beside the bandwidth-bound rest, so the mix draws less and keeps a higher clock.
    CHECK(at_ref.boost_w < at_boost.boost_w);
    CHECK(at_ref.clock_mhz > at_boost.clock_mhz);
    // Its speed is over the rate at 1,530 MHz: the curve's speed at the clock found (1,380-1,530) over 0.8977.
    REQUIRE(at_ref.clock_mhz < 1530);
    const double t = (at_ref.clock_mhz - 1380) / 150;
    CHECK(at_ref.speed == Approx((0.8619 + t * (0.8977 - 0.8619)) / 0.8977).epsilon(1e-9));
    // A capped board (500 W, under the curve's 698 W): extrapolated below 1,380 MHz, slower still, flagged.
    p.reference_clock_mhz = 1980;
    p.limit_w = 500;
    const SustainedClock capped = sustained_clock(p, layer);
    CHECK(capped.extrapolated);
    CHECK(capped.clock_mhz < 1380);
    CHECK(capped.speed < at_boost.speed);
    // GEMMs alone at 396 W: the extended curve's 396 W, just above where GEMMs would draw what copies do.
    p.limit_w = 396;
    const double per_mhz = (782.0 - 698.3) / 150;
    CHECK(sustained_clock(p, PowerMix{1.0, 0, 0, 0}).clock_mhz == Approx(1380 - (698.3 - 396) / per_mhz).epsilon(1e-9));
    p.limit_w = 395.5;  // under the floor's 395.4 W + a rounding: the floor itself
    CHECK(sustained_clock(p, PowerMix{1.0, 0, 0, 0}).clock_mhz >= 1380 - (698.3 - 395.4) / per_mhz);
}

TEST_CASE("power: FP8 GEMMs follow their own curve") {
    PowerLimit p = h100_power();
    p.gemm_fp8 = {{1830, 0.9856, 953.6}, {1440, 0.8798, 780.8}, {1245, 0.8325, 698.1}};
    const SustainedClock c = sustained_clock(p, PowerMix{0, 1.0, 0, 0});  // FP8 GEMMs alone
    CHECK(c.clock_mhz == Approx(1245 + 195 * 1.9 / 82.7).epsilon(1e-6));
    CHECK(c.speed_fp8 == Approx(0.8325 + (0.8798 - 0.8325) * 1.9 / 82.7).epsilon(1e-6));
    // The BF16 curve's speed at that clock, for the BF16 kernels beside them.
    CHECK(c.speed == Approx(0.8619 - (0.8977 - 0.8619) / 150 * (1380 - c.clock_mhz)).epsilon(1e-6));
}

TEST_CASE("power: the cost model slows GEMMs and fused attention by the sustained speed, not bandwidth-bound kernels") {
    DeviceProfile d = load_device_profile(kDevices + "h100-sxm5-80gb.yaml");
    REQUIRE(d.power.present());
    const CostModel boost_free = [&] {
        DeviceProfile off = d;
        off.power = PowerLimit{};
        return CostModel(off);
    }();
    CostModel c(d);
    const Scenario sc = megatron_case("177B on 2304");
    const LayerPlan plan = build_layer(layer_config(sc.model, sc.execution));
    const SustainedClock clock = sustain_for(c, sc.model, sc.execution);
    REQUIRE(clock.speed < 1.0);
    CHECK(c.sustained().clock_mhz == clock.clock_mhz);
    for (const auto* pass : {&plan.forward, &plan.backward})
        for (const Step& s : *pass)
            for (const Kernel& k : s.kernels) {
                const double with = c.kernel(k).time.seconds(), without = boost_free.kernel(k).time.seconds();
                if (k.kind == KernelKind::elementwise)
                    CHECK(with == Approx(without));
                else
                    CHECK(with > without);
            }
    // The mix: the passes' kernel times by kind at the profile's rates (computed before slowing).
    const PowerMix mix = boost_free.power_mix({&plan.forward, &plan.backward}, 8);
    CHECK(layer_power_mix(CostModel(d), sc.model, sc.execution).gemm_s == Approx(mix.gemm_s));
    CHECK(mix.gemm_s > 0);
    CHECK(mix.attention_s > 0);
    CHECK(mix.gemm_fp8_s == 0);
    CHECK(sustained_clock(d.power, mix).clock_mhz == Approx(clock.clock_mhz));
}

TEST_CASE("power: the Hopper profiles predict one GPU's layers at their steady state within 3%") {
    // Calibration data, not validation: calibrate/torch_power.py's layers (torch_common.gpt_layer, no sequence
    // parallelism, no communication) after the clock settled, against strata's same layers with the profile's power
    // model, as scripts/power-profile.py fits the reference clock: the clock from the layer's kernels alone (no
    // collectives ran), and the bandwidth-bound kernels at PyTorch's eager 0.58 of the copy bandwidth
    // (calibrate/torch_elementwise.py), in the mix and in the time alike.
    for (const auto& [profile, run] : {std::pair{"h100-sxm5-80gb.yaml", "h100-power.json"},
                                       std::pair{"h100-sxm5-80gb-calibrated.yaml", "h100-power.json"},
                                       std::pair{"h200-sxm-141gb.yaml", "h200-power.json"},
                                       std::pair{"h200-sxm-141gb-calibrated.yaml", "h200-power.json"}}) {
        DeviceProfile d = load_device_profile(kDevices + profile);
        d.elementwise_bandwidth_efficiency = 0.58;
        d.measured_elementwise.clear();
        std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/calibrate/results/2026-11-27c/" + run);
        const nlohmann::json j = nlohmann::json::parse(in);
        int n = 0;
        for (const auto& row : j.at("layers")) {
            const std::string model = row.at("model");
            if (model == "177B long") continue;
            Scenario sc = megatron_case(model == "1.7B"   ? "1.7B on 48"
                                        : model == "7.1B" ? "7.1B on 96"
                                        : model == "70B"  ? "70B on 768"
                                                          : "177B on 2304");
            REQUIRE(sc.model.hidden == row.at("hidden").get<int>());
            sc.execution.sequence_parallel = false;  // as the measured layers ran: no SP, no communication
            sc.execution.tp_comm_overlap = false;
            const LayerPlan plan = build_layer(layer_config(sc.model, sc.execution));
            CostModel c(d);
            (void)sustain_for(c, sc.model, sc.execution, false);
            double ms = 0;
            for (const auto* pass : {&plan.forward, &plan.backward})
                for (const Step& st : *pass)
                    for (const Kernel& k : st.kernels)
                        ms += c.kernel(k).time.seconds() * 1e3;
            const double measured = row.at("sustained_ms_per_layer");
            INFO(profile << " " << row.at("model").get<std::string>() << ": strata " << ms << " ms, measured " << measured);
            CHECK(std::abs(ms / measured - 1) < 0.03);
            ++n;
        }
        CHECK(n == 4);
    }
}

TEST_CASE("power: bad power blocks and limits are clear errors") {
    const std::string head = "format: strata-device-profile/1\nname: p\nkind: analytical\n"
                             "device: {peak_flops: 1e15, hbm_bandwidth_bytes_per_s: 3e12, memory_capacity_bytes: 8e10,"
                             " sm_count: 132, kernel_launch_us: 2}\n"
                             "gemm: {efficiency_ceiling: 0.7, k_half: 100}\nelementwise: {bandwidth_efficiency: 0.7}\n";
    const std::string power = "power: {limit_w: 700, boost_clock_mhz: 1980, memory_bound_w: 395, attention_w: 650}\n";
    const auto message = [&](const std::string& text) {
        try {
            (void)load_device_profile_text(text, "p.yaml");
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string("(loaded)");
    };
    const std::string two = "    - {clock_mhz: 1500, speed: 0.9, watts: 780}\n    - {clock_mhz: 1400, speed: 0.86, watts: 698}\n";
    CHECK_THAT(message(head + power), Catch::Contains("measured.gemm_power is missing"));
    CHECK_THAT(message(head + "measured:\n  gemm_power:\n" + two), Catch::Contains("the power block is missing"));
    CHECK_THAT(message(head + power + "measured:\n  gemm_power:\n    - {clock_mhz: 1400, speed: 0.86, watts: 698}\n"),
               Catch::Contains("at least two points"));
    CHECK_THAT(message(head + "power: {limit_w: 700, boost_clock_mhz: 1980, memory_bound_w: 395, attention_w: 650,"
                              " reference_clock_mhz: 1000}\nmeasured:\n  gemm_power:\n" + two),
               Catch::Contains("at least measured.gemm_power's slowest clock"));
    CHECK_THAT(message(head + power + "measured:\n  gemm_power:\n    - {clock_mhz: 1400, speed: 0.86, watts: 698}\n"
                                      "    - {clock_mhz: 1500, speed: 0.9, watts: 780}\n"),
               Catch::Contains("decreasing order of clock_mhz"));
    CHECK_THAT(message(head + power + "measured:\n  gemm_power:\n    - {clock_mhz: 1500, speed: 0.9, watts: 780}\n"
                                      "    - {clock_mhz: 1400, speed: 0.86, watts: 790}\n"),
               Catch::Contains("must fall with the clock"));
    CHECK_THAT(message(head + power + "measured:\n  gemm_power:\n    - {clock_mhz: 1600, speed: 0.92, watts: 800}\n"
                                      "    - {clock_mhz: 1500, speed: 0.9, watts: 780}\n"),
               Catch::Contains("above power.limit_w"));
    CHECK_THAT(message(head + power + "measured:\n  gemm_power:\n    - {clock_mhz: 2500, speed: 0.9, watts: 690}\n"),
               Catch::Contains("at most power.boost_clock_mhz"));
    CHECK_THAT(message(head + "power: {limit_w: 700, boost_clock_mhz: 1980, memory_bound_w: 800, attention_w: 650}\n"),
               Catch::Contains("must be below power.limit_w"));
    CHECK(message(head + power + "measured:\n  gemm_power:\n" + two) == "(loaded)");

    // The system's override: only over a profile with a power block, only above what copies draw.
    SystemSpec s;
    s.name = "sys";
    s.device = load_device_profile(kDevices + "h100-sxm5-80gb.yaml");
    s.power_limit_w = 350;
    CHECK_THROWS_WITH(s.apply_power_limit(), Catch::Contains("power.memory_bound_w"));
    s.power_limit_w = 550;
    s.apply_power_limit();
    CHECK(s.device.power.limit_w == 550);
    s.power_limit_w = 0;
    s.apply_power_limit();
    CHECK_FALSE(s.device.power.present());
    SystemSpec a100;
    a100.name = "a";
    a100.device = load_device_profile(kDevices + "a100-sxm4-80gb.yaml");
    a100.power_limit_w = 400;
    CHECK_THROWS_WITH(a100.apply_power_limit(), Catch::Contains("needs a device profile with a power block"));
}

TEST_CASE("power: block recompute weighs the recomputing and the plain layers by their counts") {
    Scenario sc = megatron_case("177B on 2304");
    const DeviceProfile d = load_device_profile(kDevices + "h100-sxm5-80gb.yaml");
    const CostModel c(d);
    sc.execution.recompute = Recompute::full;
    const PowerMix full = layer_power_mix(c, sc.model, sc.execution);
    const LayerConfig lc = layer_config(sc.model, sc.execution);
    const LayerPlan kept = build_layer_left_alone(lc);
    const PowerMix alone = c.power_mix({&kept.forward, &kept.backward}, sc.execution.tensor, sc.execution.context);
    const LayerPlan rec = build_layer(lc);
    const PowerMix all = c.power_mix({&rec.forward, &rec.backward}, sc.execution.tensor, sc.execution.context);
    CHECK(full.gemm_s == Approx(all.gemm_s));  // every layer recomputes
    REQUIRE(all.gemm_s > alone.gemm_s);         // the rerun forward's GEMMs
    const int layers = sc.execution.layers_in_chunk(sc.model.layers, 0);
    sc.execution.recompute_layers = 4;
    sc.execution.recompute_method = RecomputeMethod::block;
    const int recomputed = sc.execution.recomputed_layers(layers);
    REQUIRE(recomputed == 4);
    const PowerMix block = layer_power_mix(c, sc.model, sc.execution);
    CHECK(block.gemm_s == Approx((recomputed * all.gemm_s + (layers - recomputed) * alone.gemm_s) / layers));
    CHECK(block.other_s == Approx((recomputed * all.other_s + (layers - recomputed) * alone.other_s) / layers));
}

TEST_CASE("power: headroom after rest: boost seconds from the energy above the limit, refilled by idle time") {
    PowerLimit p = h100_power();
    const PowerMix layer{0.8, 0, 0.06, 0.14};
    CHECK(sustained_clock(p, layer).headroom_s == 0);  // not measured: none
    p.headroom_j = 46.7;
    p.idle_w = 134.8;
    const SustainedClock c = sustained_clock(p, layer);
    // The mix's seconds at clock f (boost-clock seconds over the curve's speed there; the rest unchanged).
    const auto speed = [&](double f) {
        std::size_t i = 0;
        while (i + 2 < p.gemm.size() && f < p.gemm[i + 1].clock_mhz) ++i;
        const double t = (f - p.gemm[i + 1].clock_mhz) / (p.gemm[i].clock_mhz - p.gemm[i + 1].clock_mhz);
        return p.gemm[i + 1].speed + t * (p.gemm[i].speed - p.gemm[i + 1].speed);
    };
    const double at_clock = (layer.gemm_s + layer.attention_s) / speed(c.clock_mhz) + layer.other_s;
    const double at_boost = layer.gemm_s + layer.attention_s + layer.other_s;  // speed 1 at the boost clock
    const double gain = at_clock / at_boost - 1;
    CHECK(c.saving_fraction == Approx(1 - at_boost / at_clock).epsilon(1e-9));
    CHECK(c.headroom_s == Approx(46.7 / (c.boost_w - 700) * gain).epsilon(1e-9));
    CHECK(c.headroom_accrual == Approx((700 - 134.8) / (c.boost_w - 700) * gain).epsilon(1e-9));
    // A mix under the limit at the boost clock runs there anyway: nothing to save.
    const SustainedClock light = sustained_clock(p, PowerMix{0.01, 0, 0, 1.0});
    CHECK(light.saving_fraction == 0);
    CHECK(light.headroom_s == 0);
}

TEST_CASE("power: the headroom keys go together, under the power block, idle below a copy") {
    const std::string base = "format: strata-device-profile/1\nname: p\nkind: analytical\n"
                             "device: {peak_flops: 1e15, hbm_bandwidth_bytes_per_s: 3e12, memory_capacity_bytes: 8e10,"
                             " sm_count: 132, kernel_launch_us: 2}\n"
                             "gemm: {efficiency_ceiling: 0.7, k_half: 100}\nelementwise: {bandwidth_efficiency: 0.7}\n";
    const std::string curve = "measured:\n  gemm_power:\n    - {clock_mhz: 1500, speed: 0.9, watts: 780}\n"
                              "    - {clock_mhz: 1400, speed: 0.86, watts: 698}\n";
    const auto load = [&](const std::string& extra) {
        return load_device_profile_text(
            base + "power: {limit_w: 700, boost_clock_mhz: 1980, memory_bound_w: 395, attention_w: 650" + extra + "}\n" +
                curve,
            "p.yaml");
    };
    const DeviceProfile ok = load(", headroom_j: 46.7, idle_w: 134.8");
    CHECK(ok.power.headroom_j == 46.7);
    CHECK(ok.power.idle_w == 134.8);
    CHECK(load("").power.headroom_j == 0);
    CHECK_THROWS_WITH(load(", headroom_j: 46.7"), Catch::Contains("power.idle_w") && Catch::Contains("go together"));
    CHECK_THROWS_WITH(load(", idle_w: 100"), Catch::Contains("power.headroom_j") && Catch::Contains("go together"));
    CHECK_THROWS_WITH(load(", headroom_j: 46.7, idle_w: 500"), Catch::Contains("below power.memory_bound_w"));
    CHECK_THROWS_WITH(load(", headroom_j: -1, idle_w: 100"), Catch::Contains("power.headroom_j"));
    CHECK_THROWS_WITH(load_device_profile_text(base + "power: {headroom_j: 46.7, idle_w: 100}\n", "p.yaml"),
                      Catch::Contains("p.yaml:"));
}
