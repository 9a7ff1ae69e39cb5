// Private to sim/fabric (and its tests): the validated shape of a fabric and the list of links it
// registers with the engine, in registration order. Kept apart from Fabric so that tests can check link
// names and bandwidths without the engine having to expose them. No Boost types here.
#pragma once

#include "strata/fabric.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace strata::fabric::detail {

/// Counts derived from a FabricSpec, and the numbering of the topology's vertices:
/// [GPUs | NVSwitches | NICs | leaves | spines | cores]. Switch vertices (leaf, spine, core) come last so
/// that "is a switch" is `v >= first_leaf`.
struct Layout {
    FabricSpec spec;
    int gpus = 0;                       ///< nodes x gpus_per_node
    int leaf_groups = 0;                ///< leaves per rail: ceil(nodes / nodes_per_leaf)
    int leaves_per_group = 0;           ///< leaves sharing one spine group (= leaf_groups when not split)
    int spine_groups = 0;               ///< spine groups per rail: ceil(leaf_groups / leaves_per_group)
    int spines_per_group = 0;           ///< spines one leaf reaches (spines_per_rail, or derived)
    int cores_per_rail = 0;             ///< tiers = 3: one core per spine index (plane); else 0
    double leaf_spine_bandwidth = 0.0;  ///< one leaf<->spine link, bytes/s per direction
    double spine_core_bandwidth = 0.0;  ///< one spine<->core link, bytes/s per direction

    std::size_t first_nvs = 0;
    std::size_t first_nic = 0;
    std::size_t first_leaf = 0;
    std::size_t first_spine = 0;
    std::size_t first_core = 0;
    std::size_t vertex_count = 0;

    [[nodiscard]] int spines_per_rail() const { return spine_groups * spines_per_group; }
    [[nodiscard]] int rail_of_local(int local) const { return local % spec.network.rails; }

    [[nodiscard]] std::size_t gpu(int g) const { return static_cast<std::size_t>(g); }
    [[nodiscard]] std::size_t nvs(int node) const { return first_nvs + static_cast<std::size_t>(node); }
    [[nodiscard]] std::size_t nic(int node, int rail) const {
        return first_nic + static_cast<std::size_t>(node) * static_cast<std::size_t>(spec.network.rails) +
               static_cast<std::size_t>(rail);
    }
    /// Leaf `lg` (leaf group) of `rail`; leaves are numbered rail-major.
    [[nodiscard]] std::size_t leaf(int lg, int rail) const {
        return first_leaf + static_cast<std::size_t>(rail) * static_cast<std::size_t>(leaf_groups) +
               static_cast<std::size_t>(lg);
    }
    /// Spine `s` of `rail`, s = spine_group * spines_per_group + index in the group.
    [[nodiscard]] std::size_t spine(int s, int rail) const {
        return first_spine + static_cast<std::size_t>(rail) * static_cast<std::size_t>(spines_per_rail()) +
               static_cast<std::size_t>(s);
    }
    [[nodiscard]] std::size_t core(int c, int rail) const {
        return first_core + static_cast<std::size_t>(rail) * static_cast<std::size_t>(cores_per_rail) +
               static_cast<std::size_t>(c);
    }
};

/// One directed engine link: from vertex, to vertex, name ("n3.gpu5>nvs"), bandwidth.
struct PlannedLink {
    std::size_t from = 0;
    std::size_t to = 0;
    std::string name;
    BytesPerSecond bandwidth{};
};

/// Validates `spec` (throws InputError naming the field and its valid range) and derives the layout.
Layout make_layout(const FabricSpec& spec);

/// Every engine link of the fabric, in the order Fabric registers them with the simulator:
///  1. per GPU g (global id order): "n.gpuI>nvs", "nvs>n.gpuI"
///  2. per (node, rail): "nN.nicR>leafL.rR", "leafL.rR>nN.nicR"
///  3. per rail, per leaf, per spine of the leaf's group: "leafL.rR>spineS.rR", "spineS.rR>leafL.rR"
///  4. tiers = 3, per rail, per spine: "spineS.rR>coreC.rR", "coreC.rR>spineS.rR"
std::vector<PlannedLink> plan_links(const Layout& layout);

}  // namespace strata::fabric::detail
