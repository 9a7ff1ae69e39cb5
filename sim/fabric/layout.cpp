// The fabric's shape, checked: FabricSpec -> Layout (counts and vertex numbering, topology.hpp) -> the links
// it registers with the engine, in order (plan_links). fabric.cpp builds the graph and the routes on it.
//
// Graph (a Boost.Graph bidirectional adjacency_list; every physical link is two directed edges, each an
// engine link registered with Simulator::add_link):
//  - one vertex per GPU and one per node for its NVSwitch fabric (the 6 NVSwitches act as one
//    non-blocking crossbar). GPU <-> NVSwitch links carry nvlink_bandwidth per direction:
//    "n3.gpu5>nvs", "nvs>n3.gpu5".
//  - one vertex per NIC (node, rail). Local GPU i is attached to NIC (node, i % rails) by a graph edge with
//    no engine link: the PCIe hop GPU -> NIC is folded into the NIC link. NIC <-> leaf links carry
//    nic_bandwidth: "n3.nic5>leaf0.r5", "leaf0.r5>n3.nic5".
//  - leaves: one per (leaf group, rail); a leaf group is `nodes_per_leaf` consecutive nodes (an SU), so a
//    rail has leaf_groups = ceil(nodes / nodes_per_leaf) leaves. Name "leafL.rR".
//  - spines, per rail. The leaves of a rail are split into spine groups of `leaves_per_spine_group`
//    consecutive leaves (0: one group holding every leaf). Each spine group has S spines per rail and each
//    of its leaves is linked once to each of them ("leafL.rR>spineS.rR"), spines numbered
//    group * S + index across the rail. S = spines_per_rail, or when 0 the number of uplinks a leaf
//    needs: S = max(1, ceil(nodes_per_leaf / oversubscription)) (Selene: 20). A leaf's uplink bandwidth is
//    nodes_per_leaf x nic_bandwidth / oversubscription, split evenly over its S spine links, so one
//    leaf->spine link carries that / S (with the derived S and oversubscription 1: exactly one HDR link).
//    A leaf's uplinks are sized for a full leaf group even when the last group is partial.
//  - tiers = 3 adds a core tier per rail, built as S planes: core c of a rail is linked to spine c of every
//    spine group of that rail ("spineS.rR>coreC.rR"), with the spine's full downlink bandwidth
//    (leaves_per_spine_group x leaf->spine bandwidth), so the core adds no oversubscription. With tiers = 2
//    every leaf must share one spine group (leaves_per_spine_group 0 or >= leaf_groups).
//  - routing: adaptive builds one spine per rail and spine group (S = 1: each leaf's link to it carries the leaf's whole
//   uplink bandwidth) and one core per rail: adaptive routing spreads each flow over every equal-cost uplink by load,
//   which a fluid model sees as one link of their summed bandwidth; switches traversed and latency are the same.

#include "strata/errors.hpp"
#include "topology.hpp"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace strata::fabric {

namespace detail {
namespace {

template <typename T>
std::string str(T v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

[[noreturn]] void bad_field(const std::string& field, const std::string& range, const std::string& got) {
    throw InputError("fabric: " + field + " must be " + range + " (got " + got + ")");
}

void check_count(const char* field, int value, int lo, int hi) {
    if (value < lo || value > hi) bad_field(field, "an integer in [" + str(lo) + ", " + str(hi) + "]", str(value));
}

void check_bandwidth(const char* field, BytesPerSecond bw) {
    if (!std::isfinite(bw.value) || bw.value <= 0.0)
        bad_field(field, "a finite bandwidth > 0 bytes/s", str(bw.value));
}

void check_latency(const char* field, Time t) {
    if (t < Time::zero()) bad_field(field, "a latency >= 0", str(t.ps()) + " ps");
}

constexpr int kMaxGpus = 1 << 20;              // far beyond any real system; guards against typos
constexpr std::uint64_t kMaxLinks = 1u << 26;  // engine links; keeps memory bounded

}  // namespace

Layout make_layout(const FabricSpec& spec) {
    constexpr int kBig = std::numeric_limits<int>::max();
    check_count("nodes", spec.nodes, 1, kMaxGpus);
    check_count("gpus_per_node", spec.gpus_per_node, 1, kMaxGpus);
    if (static_cast<std::int64_t>(spec.nodes) * spec.gpus_per_node > kMaxGpus) {
        bad_field("nodes x gpus_per_node", "<= " + str(kMaxGpus),
                  str(static_cast<std::int64_t>(spec.nodes) * spec.gpus_per_node));
    }
    check_count("rails", spec.network.rails, 1, spec.gpus_per_node);
    check_bandwidth("nvlink_bandwidth", spec.network.nvlink_bandwidth);
    check_bandwidth("nic_bandwidth", spec.network.nic_bandwidth);
    check_latency("nvlink_latency", spec.network.nvlink_latency);
    check_latency("nic_latency", spec.network.nic_latency);
    check_latency("switch_latency", spec.network.switch_latency);
    check_count("nodes_per_leaf", spec.network.nodes_per_leaf, 1, kBig);
    check_count("leaves_per_spine_group", spec.network.leaves_per_spine_group, 0, kBig);
    check_count("spines_per_rail", spec.network.spines_per_rail, 0, kBig);
    if (!std::isfinite(spec.network.oversubscription) || spec.network.oversubscription < 1.0)
        bad_field("oversubscription", "a finite ratio >= 1 (leaf downlink : uplink)", str(spec.network.oversubscription));
    check_count("tiers", spec.network.tiers, 2, 3);

    Layout l;
    l.spec = spec;
    l.gpus = spec.nodes * spec.gpus_per_node;
    l.leaf_groups = (spec.nodes + spec.network.nodes_per_leaf - 1) / spec.network.nodes_per_leaf;
    l.leaves_per_group = spec.network.leaves_per_spine_group == 0
                             ? l.leaf_groups
                             : std::min(spec.network.leaves_per_spine_group, l.leaf_groups);
    l.spine_groups = (l.leaf_groups + l.leaves_per_group - 1) / l.leaves_per_group;
    if (spec.network.tiers == 2 && l.spine_groups > 1) {
        bad_field("leaves_per_spine_group",
                  "0 or >= the number of leaves per rail (" + str(l.leaf_groups) +
                      ") with tiers = 2, since leaves in different spine groups are joined only by a core tier (tiers = 3)",
                  str(spec.network.leaves_per_spine_group));
    }
    if (spec.network.routing == Routing::adaptive) {
        l.spines_per_group = 1;  // every flow spread over all of a leaf's uplinks: one link of their summed bandwidth
    } else if (spec.network.spines_per_rail > 0) {
        l.spines_per_group = spec.network.spines_per_rail;
    } else {
        const double uplinks = std::ceil(spec.network.nodes_per_leaf / spec.network.oversubscription - 1e-9);
        l.spines_per_group = static_cast<int>(std::clamp(uplinks, 1.0, static_cast<double>(kMaxGpus)));
    }
    l.cores_per_rail = spec.network.tiers == 3 ? l.spines_per_group : 0;

    // Size check before anything is allocated.
    const auto rails = static_cast<std::uint64_t>(spec.network.rails);
    const std::uint64_t physical =
        static_cast<std::uint64_t>(l.gpus) + static_cast<std::uint64_t>(spec.nodes) * rails +
        rails * static_cast<std::uint64_t>(l.leaf_groups) * static_cast<std::uint64_t>(l.spines_per_group) +
        rails * static_cast<std::uint64_t>(l.spine_groups) * static_cast<std::uint64_t>(l.cores_per_rail);
    if (2 * physical > kMaxLinks) {
        bad_field("the fabric size (nodes, nodes_per_leaf, spines_per_rail)",
                  "at most " + str(kMaxLinks) + " directed links", str(2 * physical));
    }

    const double leaf_uplink = spec.network.nodes_per_leaf * spec.network.nic_bandwidth.value / spec.network.oversubscription;
    l.leaf_spine_bandwidth = leaf_uplink / l.spines_per_group;
    l.spine_core_bandwidth = l.leaves_per_group * l.leaf_spine_bandwidth;

    l.first_nvs = static_cast<std::size_t>(l.gpus);
    l.first_nic = l.first_nvs + static_cast<std::size_t>(spec.nodes);
    l.first_leaf = l.first_nic + static_cast<std::size_t>(spec.nodes) * rails;
    l.first_spine = l.first_leaf + rails * static_cast<std::size_t>(l.leaf_groups);
    l.first_core = l.first_spine + rails * static_cast<std::size_t>(l.spines_per_rail());
    l.vertex_count = l.first_core + rails * static_cast<std::size_t>(l.cores_per_rail);
    return l;
}

std::vector<PlannedLink> plan_links(const Layout& l) {
    const FabricSpec& s = l.spec;
    std::vector<PlannedLink> out;
    auto both = [&out](std::size_t a, std::size_t b, const std::string& an, const std::string& bn,
                       double bw) {
        out.push_back({a, b, an + ">" + bn, BytesPerSecond{bw}});
        out.push_back({b, a, bn + ">" + an, BytesPerSecond{bw}});
    };
    auto node_name = [](int n) { return "n" + std::to_string(n); };
    auto rail_suffix = [](int r) { return ".r" + std::to_string(r); };

    for (int n = 0; n < s.nodes; ++n) {
        for (int i = 0; i < s.gpus_per_node; ++i) {
            const int g = n * s.gpus_per_node + i;
            both(l.gpu(g), l.nvs(n), node_name(n) + ".gpu" + std::to_string(i), "nvs",
                 s.network.nvlink_bandwidth.value);
        }
    }
    for (int n = 0; n < s.nodes; ++n) {
        const int lg = n / s.network.nodes_per_leaf;
        for (int r = 0; r < s.network.rails; ++r) {
            both(l.nic(n, r), l.leaf(lg, r), node_name(n) + ".nic" + std::to_string(r),
                 "leaf" + std::to_string(lg) + rail_suffix(r), s.network.nic_bandwidth.value);
        }
    }
    for (int r = 0; r < s.network.rails; ++r) {
        for (int lg = 0; lg < l.leaf_groups; ++lg) {
            const int group = lg / l.leaves_per_group;
            for (int j = 0; j < l.spines_per_group; ++j) {
                const int sp = group * l.spines_per_group + j;
                both(l.leaf(lg, r), l.spine(sp, r), "leaf" + std::to_string(lg) + rail_suffix(r),
                     "spine" + std::to_string(sp) + rail_suffix(r), l.leaf_spine_bandwidth);
            }
        }
    }
    for (int r = 0; r < s.network.rails; ++r) {
        for (int sp = 0; sp < l.spines_per_rail() && l.cores_per_rail > 0; ++sp) {
            const int c = sp % l.spines_per_group;
            both(l.spine(sp, r), l.core(c, r), "spine" + std::to_string(sp) + rail_suffix(r),
                 "core" + std::to_string(c) + rail_suffix(r), l.spine_core_bandwidth);
        }
    }
    return out;
}

}  // namespace detail

}  // namespace strata::fabric
