// The cluster fabric: DGX-style nodes (GPUs on an NVSwitch) joined by rail-optimized InfiniBand in a
// fat tree; routes between GPUs and the flows that collective algorithms put on them.
#pragma once

#include "strata/collective.hpp"
#include "strata/engine.hpp"
#include "strata/spec.hpp"
#include "strata/units.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata::fabric {

/// The fabric of one simulation: how many nodes, GPUs per node, and the system's network spec as given
/// (NVLink, NICs and rails, fat-tree tiers, bandwidths and latencies; see NetworkSpec).
struct FabricSpec {
    int nodes = 1;
    int gpus_per_node = 8;
    NetworkSpec network;
    /// Each GPU's PCIe link (network.pcie_bandwidth) as links of its own, which inter-node routes cross (the sending
    /// GPU's way up, the receiving GPU's way down) and copies to and from host memory too (host_copy_route); off: the
    /// PCIe hop is folded into the NIC link. On only for activation offloading (its copies are what would share it).
    bool pcie_links = false;
};

/// A path for one flow: the links it crosses (with multiplicity) and its total fixed latency.
struct Route {
    std::vector<engine::LinkUse> links;
    Time latency;
};

class Fabric {
public:
    /// Builds the topology and registers every link with `sim`.
    Fabric(const FabricSpec& spec, engine::Simulator& sim);
    ~Fabric();
    Fabric(const Fabric&) = delete;
    Fabric& operator=(const Fabric&) = delete;

    [[nodiscard]] const FabricSpec& spec() const;
    [[nodiscard]] int gpu_count() const;
    [[nodiscard]] int node_of(int gpu) const;
    /// Shortest path; among equal-cost paths a deterministic hash of (src, dst) picks one (ECMP; with adaptive
    /// routing each spine group's uplinks are one link, so there is no choice to make).
    /// Same node: src NVLink up, dst NVLink down. Different nodes, same rail: NIC, leaf(, spine, leaf), NIC.
    /// Different rails: first an NVLink hop to the local GPU on the destination's rail (PXN).
    [[nodiscard]] Route route(int src_gpu, int dst_gpu) const;
    /// Union of routes src->dst for every pair, multiplicities summed; latency = the largest.
    [[nodiscard]] Route combined(std::span<const std::pair<int, int>> pairs) const;
    /// With pcie_links: the links a copy between `gpu` and host memory crosses, to the host (`to_host`) or from it:
    /// the GPU's PCIe link that way and its path to the host's memory (network.device_to_host_bandwidth /
    /// host_to_device_bandwidth); without: empty.
    [[nodiscard]] std::vector<engine::LinkUse> host_copy_route(int gpu, bool to_host) const;
    [[nodiscard]] std::size_t link_count() const;
    [[nodiscard]] std::string describe() const;   ///< one line: nodes, leaves, spines, links

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Union of routes, multiplicities of shared links summed (sorted by link id); latency = the largest.
Route merge_routes(std::span<const Route> routes);

struct CollectiveParams {
    Time step_latency_intra;   ///< NCCL per-step latency inside a node
    Time step_latency_inter;   ///< NCCL per-step latency across nodes
    bool hierarchical = true;  ///< intra-node phase, inter-node phase, intra-node phase
    /// NVLS all-reduce inside one node: its bus bandwidth over the ring's (NVLink's); 0 for none. The ring's bytes
    /// move divided by it, so the phase takes the time of the NVLS bus bandwidth over the same links.
    double nvls_speedup = 0;
    /// A collective over the ranks of one node: its measured time, where the device profile has one for its kind,
    /// rank count and size (measured_collective_time); the ring's bytes are then scaled to take that time over
    /// links of `intra_link_bandwidth`, without the per-step latency (the measurement holds it).
    std::function<std::optional<Time>(CollectiveKind, int, Bytes)> measured{};
    double intra_link_bandwidth = 0;  ///< bytes/s per GPU and direction inside a node (NVLink)
};

/// One phase of a collective: a flow that moves `bytes` over `route` (ring edges taken together,
/// so the phase goes as fast as its slowest edge), after a fixed `latency` (steps x step latency).
struct CollectivePhase {
    Route route;
    Bytes bytes;
    Time latency;
};

/// Plans a collective over `ranks` (GPU ids, in ring order) for a buffer of `message` bytes
/// (the full, unsharded size). Ring: all-reduce moves 2(n-1)/n x message per edge in 2(n-1) steps,
/// all-gather / reduce-scatter (n-1)/n x message in n-1 steps. Hierarchical, when ranks span several
/// nodes with several ranks per node: reduce-scatter in the node, the inter-node collective on
/// message / local-ranks, all-gather in the node. A single rank gives no phase.
std::vector<CollectivePhase> plan_collective(const Fabric& fabric, CollectiveKind kind,
                                             std::span<const int> ranks, Bytes message,
                                             const CollectiveParams& params);

/// Several collectives of the same shape running at once (e.g. the data-parallel all-reduce of each tensor
/// rank, each on its own rail): phase by phase, the groups' flows merged into one flow, so the phase goes
/// as fast as the slowest group.
std::vector<CollectivePhase> plan_concurrent_collectives(const Fabric& fabric, CollectiveKind kind,
                                                         std::span<const std::vector<int>> groups, Bytes message,
                                                         const CollectiveParams& params);

}  // namespace strata::fabric
