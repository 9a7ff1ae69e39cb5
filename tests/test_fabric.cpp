// Tests of the cluster fabric (topology, routes, ECMP) and of the collective planner.
//
// Link names and bandwidths are not exposed by the engine, so the tests read them from the fabric's own
// link plan (sim/fabric/topology.hpp), which lists links in the order Fabric registers them. The tests
// assume the engine hands out consecutive link ids (checked by a probe link before and after).
#include "../sim/fabric/topology.hpp"
#include "strata/engine.hpp"
#include "strata/errors.hpp"
#include "strata/fabric.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace strata;
using namespace strata::fabric;

namespace {

/// 4 DGX-like nodes, 2 per leaf group: 2 leaves and (derived) 2 spines per rail.
FabricSpec small_spec(int nodes = 4) {
    FabricSpec s;
    s.nodes = nodes;
    s.gpus_per_node = 8;
    s.network.nvlink_bandwidth = BytesPerSecond{300e9};
    s.network.nvlink_latency = Time::from_ns(700);
    s.network.rails = 8;
    s.network.nic_bandwidth = BytesPerSecond{25e9};
    s.network.nic_latency = Time::from_ns(1000);
    s.network.nodes_per_leaf = 2;
    s.network.switch_latency = Time::from_ns(100);
    return s;
}

/// Selene-like: scalable units of 20 nodes, full bisection.
FabricSpec selene_spec(int nodes) {
    FabricSpec s = small_spec(nodes);
    s.network.nodes_per_leaf = 20;
    return s;
}

/// A fabric on its own simulator, with the link plan to turn link ids back into names.
struct Built {
    engine::Simulator sim;
    engine::LinkId base = 0;
    std::vector<detail::PlannedLink> plan;
    std::unique_ptr<Fabric> fabric;

    explicit Built(const FabricSpec& spec) {
        base = sim.add_link("probe-before", BytesPerSecond{1.0}) + 1;
        fabric = std::make_unique<Fabric>(spec, sim);
        plan = detail::plan_links(detail::make_layout(spec));
    }
    [[nodiscard]] const detail::PlannedLink& link(engine::LinkId id) const { return plan.at(id - base); }
    [[nodiscard]] std::vector<std::string> names(const Route& r) const {
        std::vector<std::string> out;
        for (const engine::LinkUse& u : r.links)
            out.push_back(link(u.link).name);
        return out;
    }
    [[nodiscard]] engine::LinkId id_of(const std::string& name) const {
        for (std::size_t i = 0; i < plan.size(); ++i) {
            if (plan[i].name == name) return base + static_cast<engine::LinkId>(i);
        }
        FAIL("no link named " << name);
        return 0;
    }
};

int gpu(int node, int local) {
    return node * 8 + local;
}

const Time kNv = Time::from_ns(700);
const Time kNic = Time::from_ns(1000);
const Time kSw = Time::from_ns(100);

}  // namespace

TEST_CASE("small fabric has the hand-counted links and switches", "[fabric]") {
    Built b(small_spec());
    // GPU<->NVSwitch: 32 GPUs x 2 directions = 64; NIC<->leaf: 4 nodes x 8 rails x 2 = 64;
    // leaf<->spine: 2 leaves x 8 rails x 2 spines x 2 = 64.
    CHECK(b.fabric->link_count() == 192);
    CHECK(b.fabric->gpu_count() == 32);
    CHECK(b.fabric->node_of(gpu(3, 7)) == 3);
    CHECK(b.fabric->describe() == "4 nodes x 8 GPUs, 8 rails, 16 leaves, 16 spines, 2 tiers, 192 links");
    CHECK(b.fabric->spec().network.nodes_per_leaf == 2);
}

TEST_CASE("links are registered in plan order with the right names and bandwidths", "[fabric]") {
    Built b(small_spec());
    REQUIRE(b.plan.size() == b.fabric->link_count());
    // Consecutive ids: the next link after the fabric's comes right after its last one.
    CHECK(b.sim.add_link("probe-after", BytesPerSecond{1.0}) == b.base + b.fabric->link_count());

    CHECK(b.plan[0].name == "n0.gpu0>nvs");
    CHECK(b.plan[1].name == "nvs>n0.gpu0");
    CHECK(b.plan[2 * gpu(3, 5)].name == "n3.gpu5>nvs");
    CHECK(b.plan[2 * gpu(3, 5)].bandwidth.value == 300e9);
    CHECK(b.link(b.id_of("n3.nic5>leaf1.r5")).bandwidth.value == 25e9);
    CHECK(b.link(b.id_of("leaf1.r5>n3.nic5")).bandwidth.value == 25e9);
    // Leaf uplink = 2 nodes x 25 GB/s / 1, over 2 spines: 25 GB/s each.
    CHECK(b.link(b.id_of("leaf0.r5>spine1.r5")).bandwidth.value == Approx(25e9));
    CHECK(b.link(b.id_of("spine1.r5>leaf1.r5")).bandwidth.value == Approx(25e9));

    // Oversubscription 2 with 4 explicit spines: uplink 2 x 25 / 2 = 25 GB/s over 4 links.
    FabricSpec s = small_spec();
    s.network.oversubscription = 2.0;
    s.network.spines_per_rail = 4;
    Built o(s);
    CHECK(o.link(o.id_of("leaf1.r0>spine3.r0")).bandwidth.value == Approx(6.25e9));
    CHECK(o.fabric->describe() == "4 nodes x 8 GPUs, 8 rails, 16 leaves, 32 spines, 2 tiers, 256 links");
}

TEST_CASE("intra-node route is one NVLink up and one down", "[fabric][route]") {
    Built b(small_spec());
    const Route r = b.fabric->route(gpu(1, 3), gpu(1, 5));
    CHECK(b.names(r) == std::vector<std::string>{"n1.gpu3>nvs", "nvs>n1.gpu5"});
    for (const engine::LinkUse& u : r.links) {
        CHECK(u.multiplicity == 1);
        CHECK(b.link(u.link).bandwidth.value == 300e9);
    }
    CHECK(r.latency == kNv);
}

TEST_CASE("same-rail route inside a leaf group crosses only the leaf", "[fabric][route]") {
    Built b(small_spec());
    const Route r = b.fabric->route(gpu(0, 2), gpu(1, 2));
    CHECK(b.names(r) == std::vector<std::string>{"n0.nic2>leaf0.r2", "leaf0.r2>n1.nic2"});
    CHECK(r.latency == kNic * 2 + kSw);
}

TEST_CASE("same-rail route across leaf groups goes through one spine", "[fabric][route]") {
    Built b(small_spec());
    const Route r = b.fabric->route(gpu(0, 4), gpu(3, 4));
    const std::vector<std::string> n = b.names(r);
    REQUIRE(n.size() == 4);
    CHECK(n[0] == "n0.nic4>leaf0.r4");
    CHECK(n[3] == "leaf1.r4>n3.nic4");
    const bool spine0 = n[1] == "leaf0.r4>spine0.r4" && n[2] == "spine0.r4>leaf1.r4";
    const bool spine1 = n[1] == "leaf0.r4>spine1.r4" && n[2] == "spine1.r4>leaf1.r4";
    CHECK((spine0 || spine1));
    CHECK(r.latency == kNic * 2 + kSw * 3);
}

TEST_CASE("cross-rail route starts with an NVLink hop to the destination's rail (PXN)", "[fabric][route]") {
    Built b(small_spec());
    const Route r = b.fabric->route(gpu(0, 1), gpu(1, 6));
    CHECK(b.names(r) ==
          std::vector<std::string>{"n0.gpu1>nvs", "nvs>n0.gpu6", "n0.nic6>leaf0.r6", "leaf0.r6>n1.nic6"});
    CHECK(r.latency == kNv + kNic * 2 + kSw);

    const Route far = b.fabric->route(gpu(3, 0), gpu(0, 7));
    const std::vector<std::string> n = b.names(far);
    REQUIRE(n.size() == 6);
    CHECK(n[0] == "n3.gpu0>nvs");
    CHECK(n[1] == "nvs>n3.gpu7");
    CHECK(n[2] == "n3.nic7>leaf1.r7");
    CHECK(n[5] == "leaf0.r7>n0.nic7");
    CHECK(far.latency == kNv + kNic * 2 + kSw * 3);
}

TEST_CASE("fewer rails than GPUs: GPUs share NICs and PXN only when the rail differs", "[fabric][route]") {
    FabricSpec s = small_spec();
    s.network.rails = 4;
    Built b(s);
    // GPU<->NVS 64 + NIC<->leaf 4 x 4 x 2 = 32 + leaf<->spine 2 x 4 x 2 x 2 = 32.
    CHECK(b.fabric->link_count() == 128);
    // Local 5 is on rail 1 like local 1: no NVLink hop.
    CHECK(b.names(b.fabric->route(gpu(0, 5), gpu(1, 1))) ==
          std::vector<std::string>{"n0.nic1>leaf0.r1", "leaf0.r1>n1.nic1"});
    // Local 0 (rail 0) to local 6 (rail 2): hop to local 6, which uses NIC 2.
    CHECK(b.names(b.fabric->route(gpu(0, 0), gpu(1, 6))) ==
          std::vector<std::string>{"n0.gpu0>nvs", "nvs>n0.gpu6", "n0.nic2>leaf0.r2", "leaf0.r2>n1.nic2"});
}

TEST_CASE("a GPU to itself is an empty route, bad GPU ids throw", "[fabric][route]") {
    Built b(small_spec());
    const Route r = b.fabric->route(5, 5);
    CHECK(r.links.empty());
    CHECK(r.latency == Time::zero());
    CHECK_THROWS_AS(b.fabric->route(-1, 0), InputError);
    CHECK_THROWS_AS(b.fabric->route(0, 32), InputError);
    CHECK_THROWS_AS(b.fabric->node_of(32), InputError);
}

TEST_CASE("ECMP is deterministic and spreads pairs over the spines", "[fabric][ecmp]") {
    Built b(selene_spec(40));  // 2 leaf groups of 20 nodes, 20 spines per rail
    Built again(selene_spec(40));
    std::set<std::string> spines;
    for (int src_node = 0; src_node < 20; ++src_node) {
        for (int dst_node = 20; dst_node < 40; ++dst_node) {
            const Route r = b.fabric->route(gpu(src_node, 3), gpu(dst_node, 3));
            REQUIRE(r.links.size() == 4);
            const std::vector<std::string> n = b.names(r);
            spines.insert(n[1].substr(n[1].find('>') + 1));
            // Same pair twice, and on an identically built fabric: the same links.
            CHECK(b.names(b.fabric->route(gpu(src_node, 3), gpu(dst_node, 3))) == n);
            CHECK(again.names(again.fabric->route(gpu(src_node, 3), gpu(dst_node, 3))) == n);
        }
    }
    CHECK(spines.size() >= 2);
    // 400 pairs hashed over 20 spines: nearly all of them are used.
    CHECK(spines.size() >= 15);
}

TEST_CASE("hash routing lets flows collide on an uplink, adaptive routing spreads them over all of a leaf's", "[fabric][ecmp]") {
    // Every node of leaf group 0 sends to the node at the same place in leaf group 1 (a shift: 20 flows, 20 uplinks).
    auto uplink_load = [](const Built& b) {
        std::vector<std::pair<int, int>> pairs;
        for (int n = 0; n < 20; ++n)
            pairs.emplace_back(gpu(n, 3), gpu(20 + n, 3));
        unsigned worst = 0;
        double bandwidth = 0;
        for (const engine::LinkUse& u : b.fabric->combined(pairs).links) {
            if (b.link(u.link).name.rfind("leaf0.r3>spine", 0) != 0) continue;
            if (u.multiplicity > worst) bandwidth = b.link(u.link).bandwidth.value;
            worst = std::max(worst, u.multiplicity);
        }
        return std::pair{worst, bandwidth};
    };
    Built hashed(selene_spec(40));
    const auto [hash_worst, hash_bw] = uplink_load(hashed);
    // A hash of 20 pairs onto 20 uplinks of one NIC's bandwidth each: some uplink carries two flows or more.
    CHECK(hash_worst >= 2);
    CHECK(hash_bw == Approx(25e9));

    FabricSpec s = selene_spec(40);
    s.network.routing = Routing::adaptive;
    Built adaptive(s);
    // One spine per rail; each leaf's link to it carries its 20 uplinks' bandwidth: 20 flows at a NIC's rate each.
    const auto [ad_worst, ad_bw] = uplink_load(adaptive);
    CHECK(ad_worst == 20);
    CHECK(ad_bw == Approx(20 * 25e9));
    // GPU 320 x 2 + NIC 320 x 2 + leaf<->spine 2 leaves x 8 rails x 1 spine x 2 = 1312.
    CHECK(adaptive.fabric->describe() ==
          "40 nodes x 8 GPUs, 8 rails, 16 leaves, 8 spines, 2 tiers, adaptive routing, 1312 links");
    const Route r = adaptive.fabric->route(gpu(0, 3), gpu(39, 3));
    CHECK(adaptive.names(r) ==
          std::vector<std::string>{"n0.nic3>leaf0.r3", "leaf0.r3>spine0.r3", "spine0.r3>leaf1.r3", "leaf1.r3>n39.nic3"});
    CHECK(r.latency == hashed.fabric->route(gpu(0, 3), gpu(39, 3)).latency);

    // Three tiers: one core per rail, carrying a spine group's whole downlink.
    FabricSpec t = small_spec(8);
    t.network.tiers = 3;
    t.network.leaves_per_spine_group = 2;
    t.network.routing = Routing::adaptive;
    Built three(t);
    // GPU 128 + NIC 128 + leaf<->spine 4 leaves x 8 x 1 x 2 = 64 + spine<->core 2 spines x 8 x 2 = 32.
    CHECK(three.fabric->describe() ==
          "8 nodes x 8 GPUs, 8 rails, 32 leaves, 16 spines, 8 cores, 3 tiers, adaptive routing, 352 links");
    CHECK(three.link(three.id_of("leaf0.r0>spine0.r0")).bandwidth.value == Approx(50e9));
    CHECK(three.link(three.id_of("spine1.r0>core0.r0")).bandwidth.value == Approx(100e9));
    CHECK(three.names(three.fabric->route(gpu(0, 0), gpu(7, 0))).size() == 6);
}

TEST_CASE("combined() sums multiplicities per link, sorted by link id, latency = max", "[fabric]") {
    Built b(small_spec());
    const std::vector<std::pair<int, int>> pairs{
        {gpu(0, 0), gpu(0, 1)}, {gpu(0, 0), gpu(0, 2)}, {gpu(0, 0), gpu(1, 0)}, {gpu(0, 0), gpu(0, 1)}};
    const Route r = b.fabric->combined(pairs);
    // Links: n0.gpu0>nvs (x3), nvs>n0.gpu1 (x2), nvs>n0.gpu2 (x1), n0.nic0>leaf0.r0, leaf0.r0>n1.nic0.
    REQUIRE(r.links.size() == 5);
    for (std::size_t i = 1; i < r.links.size(); ++i)
        CHECK(r.links[i - 1].link < r.links[i].link);
    auto mult = [&](const std::string& name) {
        for (const engine::LinkUse& u : r.links) {
            if (b.link(u.link).name == name) return u.multiplicity;
        }
        return 0u;
    };
    CHECK(mult("n0.gpu0>nvs") == 3);
    CHECK(mult("nvs>n0.gpu1") == 2);
    CHECK(mult("nvs>n0.gpu2") == 1);
    CHECK(mult("n0.nic0>leaf0.r0") == 1);
    CHECK(mult("leaf0.r0>n1.nic0") == 1);
    CHECK(r.latency == kNic * 2 + kSw);
    CHECK(b.fabric->combined({}).links.empty());
}

TEST_CASE("three tiers: leaves in different spine groups meet at a core", "[fabric][route]") {
    FabricSpec s = small_spec(8);  // 4 leaves per rail
    s.network.tiers = 3;
    s.network.leaves_per_spine_group = 2;  // 2 spine groups of 2 spines per rail; 2 cores per rail
    Built b(s);
    // GPU 128 + NIC 128 + leaf<->spine 4 x 8 x 2 x 2 = 128 + spine<->core 4 spines x 8 x 2 = 64.
    CHECK(b.fabric->link_count() == 448);
    CHECK(b.fabric->describe() ==
          "8 nodes x 8 GPUs, 8 rails, 32 leaves, 32 spines, 16 cores, 3 tiers, 448 links");
    // Spine->core carries a spine's whole downlink: 2 leaves x 25 GB/s.
    CHECK(b.link(b.id_of("spine2.r0>core0.r0")).bandwidth.value == Approx(50e9));

    // Same spine group (leaves 0 and 1): leaf, spine, leaf.
    CHECK(b.fabric->route(gpu(0, 0), gpu(2, 0)).links.size() == 4);
    // Leaf 0 (group 0) to leaf 3 (group 1): leaf, spine j, core j, spine j of group 1, leaf.
    const Route r = b.fabric->route(gpu(0, 0), gpu(7, 0));
    const std::vector<std::string> n = b.names(r);
    REQUIRE(n.size() == 6);
    CHECK(n[0] == "n0.nic0>leaf0.r0");
    CHECK(n[2].find(">core") != std::string::npos);
    CHECK(n[3].find("core") == 0);
    CHECK(n[5] == "leaf3.r0>n7.nic0");
    CHECK(r.latency == kNic * 2 + kSw * 5);
}

TEST_CASE("invalid specs throw InputError naming the field", "[fabric][errors]") {
    auto message_for = [](FabricSpec s) -> std::string {
        engine::Simulator sim;
        try {
            Fabric f(s, sim);
        } catch (const InputError& e) {
            return e.what();
        }
        return "no error";
    };
    auto with = [](auto change) {
        FabricSpec s = small_spec();
        change(s);
        return s;
    };
    using Catch::Matchers::Contains;
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.nodes = 0; })), Contains("nodes") && Contains("[1,"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.gpus_per_node = -2; })), Contains("gpus_per_node"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.rails = 9; })),
               Contains("rails") && Contains("[1, 8]"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.nvlink_bandwidth = BytesPerSecond{0.0}; })),
               Contains("nvlink_bandwidth") && Contains("> 0"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.nic_bandwidth = BytesPerSecond{-1.0}; })),
               Contains("nic_bandwidth"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.nic_latency = Time::from_ns(-1); })),
               Contains("nic_latency"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.nodes_per_leaf = 0; })), Contains("nodes_per_leaf"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.spines_per_rail = -1; })), Contains("spines_per_rail"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.oversubscription = 0.5; })),
               Contains("oversubscription"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.tiers = 1; })),
               Contains("tiers") && Contains("[2, 3]"));
    // Two spine groups need a core tier.
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.network.leaves_per_spine_group = 1; })),
               Contains("leaves_per_spine_group") && Contains("tiers = 3"));
    CHECK_THAT(message_for(with([](FabricSpec& s) { s.nodes = 1 << 20; })),
               Contains("nodes x gpus_per_node"));
    CHECK(message_for(small_spec()) == "no error");
}

TEST_CASE("Selene-size fabrics build (how fast is a benchmark matter, not asserted here)", "[fabric][scale]") {
    Built selene(selene_spec(280));
    // 2240 GPUs: 4480 NVLink + 4480 NIC + 14 leaves x 8 rails x 20 spines x 2 = 4480 leaf-spine links.
    CHECK(selene.fabric->describe() ==
          "280 nodes x 8 GPUs, 8 rails, 112 leaves, 160 spines, 2 tiers, 13440 links");
    CHECK(selene.fabric->gpu_count() == 2240);

    Built big(selene_spec(2048));  // 16384 GPUs, 103 leaves per rail
    CHECK(big.fabric->gpu_count() == 16384);
    CHECK(big.fabric->link_count() == 2 * (16384 + 16384 + 103 * 8 * 20));
    const Route r = big.fabric->route(gpu(0, 0), gpu(2047, 5));
    CHECK(r.links.size() == 6);  // PXN hop, NIC, spine, NIC
}

// ---------------------------------------------------------------------------------------------------
// Collectives

namespace {
const CollectiveParams kParams{Time::from_us(5), Time::from_us(20), true};
}

TEST_CASE("ring all-reduce inside one node", "[collectives]") {
    Built b(small_spec());
    const std::vector<int> ranks{0, 1, 2, 3, 4, 5, 6, 7};
    const Bytes m(1'000'001);
    const auto phases = plan_collective(*b.fabric, CollectiveKind::all_reduce, ranks, m, kParams);
    REQUIRE(phases.size() == 1);
    CHECK(phases[0].bytes.value == 1'750'002);  // ceil(2 x 7 / 8 x 1000001) = ceil(1750001.75)
    CHECK(phases[0].latency == Time::from_us(5) * 14);
    // Every GPU's NVLink up and down once.
    REQUIRE(phases[0].route.links.size() == 16);
    for (const engine::LinkUse& u : phases[0].route.links)
        CHECK(u.multiplicity == 1);

    const auto ag = plan_collective(*b.fabric, CollectiveKind::all_gather, ranks, Bytes(800), kParams);
    REQUIRE(ag.size() == 1);
    CHECK(ag[0].bytes.value == 700);
    CHECK(ag[0].latency == Time::from_us(5) * 7);
}

TEST_CASE("flat ring across nodes uses the inter-node step latency", "[collectives]") {
    Built b(small_spec());
    std::vector<int> ranks;
    for (int g = 0; g < 16; ++g)
        ranks.push_back(g);
    CollectiveParams flat = kParams;
    flat.hierarchical = false;
    const auto rs = plan_collective(*b.fabric, CollectiveKind::reduce_scatter, ranks, Bytes(1600), flat);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].bytes.value == 1500);
    CHECK(rs[0].latency == Time::from_us(20) * 15);
    const auto ar =
        plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{0, 8, 16}, Bytes(1000), flat);
    REQUIRE(ar.size() == 1);
    CHECK(ar[0].bytes.value == 1334);  // ceil(4/3 x 1000)
    CHECK(ar[0].latency == Time::from_us(20) * 4);
}

TEST_CASE("hierarchical all-reduce over 2 nodes x 8 GPUs has three phases", "[collectives]") {
    Built b(small_spec());
    std::vector<int> ranks;
    for (int g = 0; g < 16; ++g)
        ranks.push_back(g);
    const Bytes m(8 * 1024 * 1024);
    const auto p = plan_collective(*b.fabric, CollectiveKind::all_reduce, ranks, m, kParams);
    REQUIRE(p.size() == 3);
    CHECK(p[0].bytes.value == 7 * 1024 * 1024);  // intra reduce-scatter: 7/8 M
    CHECK(p[0].latency == Time::from_us(5) * 7);
    CHECK(p[1].bytes.value == 1024 * 1024);  // inter all-reduce of M/8 over 2 nodes: 2 x 1/2 x M/8
    CHECK(p[1].latency == Time::from_us(20) * 2);
    CHECK(p[2].bytes.value == 7 * 1024 * 1024);  // intra all-gather
    CHECK(p[2].latency == Time::from_us(5) * 7);
    // Intra phases: NVLink only (both nodes' rings: 16 up + 16 down links). Inter phase: 8 rails,
    // each ring n0.gK <-> n1.gK within leaf 0: NIC up + NIC down per direction, no NVLink.
    CHECK(p[0].route.links.size() == 32);
    REQUIRE(p[1].route.links.size() == 32);
    for (const engine::LinkUse& u : p[1].route.links) {
        CHECK(b.link(u.link).name.find("nic") != std::string::npos);
        CHECK(u.multiplicity == 1);
    }
}

TEST_CASE("hierarchical all-gather and reduce-scatter", "[collectives]") {
    Built b(small_spec());
    std::vector<int> ranks;
    for (int g = 0; g < 32; ++g)
        ranks.push_back(g);  // 4 nodes x 8
    const Bytes m(3200);
    const auto ag = plan_collective(*b.fabric, CollectiveKind::all_gather, ranks, m, kParams);
    REQUIRE(ag.size() == 2);
    CHECK(ag[0].bytes.value == 300);  // inter: 3/4 x 3200/8
    CHECK(ag[0].latency == Time::from_us(20) * 3);
    CHECK(ag[1].bytes.value == 2800);  // intra: 7/8 x 3200
    CHECK(ag[1].latency == Time::from_us(5) * 7);
    const auto rs = plan_collective(*b.fabric, CollectiveKind::reduce_scatter, ranks, m, kParams);
    REQUIRE(rs.size() == 2);
    CHECK(rs[0].bytes.value == 2800);
    CHECK(rs[1].bytes.value == 300);
    CHECK(rs[1].latency == Time::from_us(20) * 3);
}

TEST_CASE("hierarchical falls back to a flat ring when it does not apply", "[collectives]") {
    Built b(small_spec());
    // Uneven: 8 ranks on node 0 and 1 on node 1.
    std::vector<int> uneven{0, 1, 2, 3, 4, 5, 6, 7, 8};
    auto p = plan_collective(*b.fabric, CollectiveKind::all_reduce, uneven, Bytes(900), kParams);
    REQUIRE(p.size() == 1);
    CHECK(p[0].bytes.value == 1600);  // 2 x 8 / 9 x 900
    CHECK(p[0].latency == Time::from_us(20) * 16);
    // One rank per node.
    p = plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{0, 8, 16, 24}, Bytes(400),
                        kParams);
    REQUIRE(p.size() == 1);
    CHECK(p[0].bytes.value == 600);
}

TEST_CASE("degenerate collectives and bad ranks", "[collectives][errors]") {
    Built b(small_spec());
    CHECK(plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{3}, Bytes(100), kParams)
              .empty());
    CHECK(plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{}, Bytes(100), kParams)
              .empty());
    CHECK(plan_collective(*b.fabric, CollectiveKind::all_gather, std::vector<int>{0, 1}, Bytes(0), kParams)
              .empty());
    CHECK_THROWS_AS(
        plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{0, 32}, Bytes(1), kParams),
        InputError);
    CHECK_THROWS_AS(
        plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{-1, 0}, Bytes(1), kParams),
        InputError);
    CHECK_THROWS_AS(
        plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{1, 2, 1}, Bytes(1), kParams),
        InputError);
    CHECK_THROWS_AS(
        plan_collective(*b.fabric, CollectiveKind::all_reduce, std::vector<int>{0, 1}, Bytes(-1), kParams),
        InputError);
}

TEST_CASE("concurrent collectives: one flow per phase over all groups' links", "[collectives]") {
    Built b(small_spec());
    // Data-parallel rings of tensor ranks 0 and 1 over nodes 0, 1, 2: rails 0 and 1, disjoint links.
    const std::vector<std::vector<int>> rings = {{gpu(0, 0), gpu(1, 0), gpu(2, 0)}, {gpu(0, 1), gpu(1, 1), gpu(2, 1)}};
    const auto one = plan_collective(*b.fabric, CollectiveKind::all_reduce, rings[0], Bytes(3000), kParams);
    const auto both = plan_concurrent_collectives(*b.fabric, CollectiveKind::all_reduce, rings, Bytes(3000), kParams);
    REQUIRE(both.size() == one.size());
    REQUIRE(both.size() == 1);
    CHECK(both[0].bytes == one[0].bytes);
    CHECK(both[0].latency == one[0].latency);
    CHECK(both[0].route.links.size() == 2 * one[0].route.links.size());
    for (const auto& u : both[0].route.links) CHECK(u.multiplicity == 1);
    // The same ring twice doubles each link's multiplicity.
    const std::vector<std::vector<int>> same = {rings[0], rings[0]};
    const auto twice = plan_concurrent_collectives(*b.fabric, CollectiveKind::all_reduce, same, Bytes(3000), kParams);
    REQUIRE(twice[0].route.links.size() == one[0].route.links.size());
    for (const auto& u : twice[0].route.links) CHECK(u.multiplicity == 2);
}

TEST_CASE("merge_routes sums multiplicities and keeps the largest latency", "[fabric]") {
    Route a{{{3, 1}, {1, 1}}, Time::from_ns(5)};
    Route c{{{1, 2}, {7, 1}}, Time::from_ns(9)};
    const Route both[] = {a, c};
    const Route m = merge_routes(both);
    REQUIRE(m.links.size() == 3);
    CHECK(m.links[0].link == 1);
    CHECK(m.links[0].multiplicity == 3);
    CHECK(m.links[1].link == 3);
    CHECK(m.links[2].link == 7);
    CHECK(m.latency == Time::from_ns(9));
}

TEST_CASE("NVLS: an all-reduce inside one node moves the ring's bytes divided by the NVLS speed-up", "[fabric]") {
    Built b(small_spec());
    const std::vector<int> node0 = {0, 1, 2, 3, 4, 5, 6, 7};
    CollectiveParams ring{Time::from_us(1), Time::from_us(5), true};
    CollectiveParams nvls = ring;
    nvls.nvls_speedup = 480.0 / 360.0;
    const auto a = plan_collective(*b.fabric, CollectiveKind::all_reduce, node0, Bytes(1 << 28), ring);
    const auto c = plan_collective(*b.fabric, CollectiveKind::all_reduce, node0, Bytes(1 << 28), nvls);
    REQUIRE(a.size() == 1);
    REQUIRE(c.size() == 1);
    CHECK(double(c[0].bytes.value) == Approx(double(a[0].bytes.value) * 360.0 / 480.0).epsilon(1e-9));
    CHECK(c[0].latency == a[0].latency);
    // All-gather and reduce-scatter, and all-reduces across nodes, keep the ring.
    CHECK(plan_collective(*b.fabric, CollectiveKind::all_gather, node0, Bytes(1 << 28), nvls)[0].bytes ==
          plan_collective(*b.fabric, CollectiveKind::all_gather, node0, Bytes(1 << 28), ring)[0].bytes);
    const std::vector<int> two_nodes = {0, 8};
    CHECK(plan_collective(*b.fabric, CollectiveKind::all_reduce, two_nodes, Bytes(1 << 28), nvls)[0].bytes ==
          plan_collective(*b.fabric, CollectiveKind::all_reduce, two_nodes, Bytes(1 << 28), ring)[0].bytes);
}

TEST_CASE("measured collectives: a collective inside one node takes its measured time on the ring's links", "[fabric]") {
    Built b(small_spec());
    const std::vector<int> node0 = {0, 1, 2, 3, 4, 5, 6, 7};
    CollectiveParams ring{Time::from_us(1), Time::from_us(5), true};
    CollectiveParams measured = ring;
    measured.measured = [](CollectiveKind kind, int ranks, Bytes message) -> std::optional<Time> {
        if (kind != CollectiveKind::all_gather || ranks != 8) return std::nullopt;
        return Time::from_us(100) + Time::from_seconds(double(message.value) / 150e9);
    };
    measured.intra_link_bandwidth = 200e9;
    const Bytes m(1 << 26);
    const auto a = plan_collective(*b.fabric, CollectiveKind::all_gather, node0, m, measured);
    REQUIRE(a.size() == 1);
    // The bytes that take the measured time at 200 GB/s, no step latency, over the ring's route.
    const double t = 100e-6 + double(m.value) / 150e9;
    CHECK(double(a[0].bytes.value) == Approx(t * 200e9).margin(1.0));  // picoseconds, then whole bytes
    CHECK(a[0].latency == Time::zero());
    CHECK(a[0].route.links.size() == plan_collective(*b.fabric, CollectiveKind::all_gather, node0, m, ring)[0].route.links.size());
    // Not measured (another op), or across nodes: the ring as before.
    CHECK(plan_collective(*b.fabric, CollectiveKind::reduce_scatter, node0, m, measured)[0].bytes ==
          plan_collective(*b.fabric, CollectiveKind::reduce_scatter, node0, m, ring)[0].bytes);
    const std::vector<int> two_nodes = {0, 1, 2, 3, 8, 9, 10, 11};
    const auto x = plan_collective(*b.fabric, CollectiveKind::all_gather, two_nodes, m, measured);
    const auto y = plan_collective(*b.fabric, CollectiveKind::all_gather, two_nodes, m, ring);
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(x[i].bytes == y[i].bytes);
}

TEST_CASE("with PCIe links, inter-node routes cross the sending and receiving GPUs' PCIe links, copies their own",
          "[fabric][route]") {
    FabricSpec spec = small_spec();
    spec.network.pcie_bandwidth = BytesPerSecond{57e9};
    spec.network.device_to_host_bandwidth = BytesPerSecond{52e9};
    spec.network.host_to_device_bandwidth = BytesPerSecond{55e9};
    const Built plain(small_spec());
    CHECK(plain.fabric->host_copy_route(gpu(0, 2), true).empty());
    spec.pcie_links = true;
    engine::Simulator sim;
    const engine::LinkId base = static_cast<engine::LinkId>(plain.fabric->link_count());
    const Fabric f(spec, sim);
    CHECK(f.link_count() == plain.fabric->link_count() + 4 * 32);
    // Every link of the fabric without them keeps its id; each GPU's four follow, in GPU order.
    const auto id = [&](int g, int k) { return base + static_cast<engine::LinkId>(4 * g + k); };
    const Route same_rail = f.route(gpu(0, 2), gpu(1, 2));
    REQUIRE(same_rail.links.size() == 4);
    CHECK(same_rail.links.front().link == id(gpu(0, 2), 0));  // n0.gpu2>pcie
    CHECK(same_rail.links.back().link == id(gpu(1, 2), 1));   // pcie>n1.gpu2
    CHECK(same_rail.links[1].link == plain.fabric->route(gpu(0, 2), gpu(1, 2)).links[0].link - plain.base);  // the NIC's
    // PXN: the proxy on the destination's rail sends through its own PCIe link.
    const Route pxn = f.route(gpu(0, 3), gpu(1, 5));
    const auto crosses = [&](const Route& r, engine::LinkId l) {
        return std::any_of(r.links.begin(), r.links.end(), [&](const engine::LinkUse& u) { return u.link == l; });
    };
    CHECK(crosses(pxn, id(gpu(0, 5), 0)));
    CHECK_FALSE(crosses(pxn, id(gpu(0, 3), 0)));
    CHECK(crosses(pxn, id(gpu(1, 5), 1)));
    // Inside a node nothing crosses PCIe.
    const Route nv = f.route(gpu(0, 1), gpu(0, 4));
    for (int g = 0; g < 32; ++g)
        for (int k = 0; k < 4; ++k) CHECK_FALSE(crosses(nv, id(g, k)));
    // A copy to the host: the GPU's PCIe link up, then its path to host memory; back: the path in, then PCIe down.
    const std::vector<engine::LinkUse> out = f.host_copy_route(gpu(2, 6), true), in = f.host_copy_route(gpu(2, 6), false);
    REQUIRE(out.size() == 2);
    REQUIRE(in.size() == 2);
    CHECK((out[0].link == id(gpu(2, 6), 0) && out[1].link == id(gpu(2, 6), 2)));
    CHECK((in[0].link == id(gpu(2, 6), 3) && in[1].link == id(gpu(2, 6), 1)));
}
