// The cluster fabric: DGX A100-style nodes joined by a rail-optimized InfiniBand fat tree, as on NVIDIA
// Selene / DGX SuperPOD.
//
// Hardware modelled (public sources):
//  - NVIDIA DGX A100 System Architecture white paper (WP-10083-001) and DGX A100 User Guide: 8 A100 GPUs
//    per node; each GPU has 12 third-generation NVLinks (600 GB/s total, i.e. 300 GB/s per direction)
//    spread over 6 NVSwitches, so any GPU can talk to any other at full NVLink rate; 8 single-port
//    ConnectX-6 HDR InfiniBand NICs (200 Gb/s = 25 GB/s per direction) for the compute fabric, one per
//    GPU, each on the GPU's PCIe switch.
//  - NVIDIA DGX SuperPOD Reference Architecture with DGX A100 (RA-10425-001): scalable unit (SU) of 20
//    nodes; rail-optimized compute fabric: NIC i of every node of an SU goes to leaf switch i of that SU
//    (8 leaves per SU, one per rail); leaves are 40-port QM8790 HDR switches, 20 ports down to nodes and
//    20 up to the spine tier; the fat tree is full bisection (no oversubscription). Larger systems add
//    spine groups and a core tier.
//  - Selene (TOP500, June 2020): 280 DGX A100 nodes = 2240 A100 GPUs on this design.
//  - NCCL 2.12 "PXN" (PCI x NVLink, NVIDIA technical blog "Doubling all2all Performance with NVIDIA
//    Collective Communication Library 2.12"): a GPU sends to a remote GPU on another rail by first moving
//    the data over NVLink to the local GPU on the destination's rail, whose NIC then sends it, so traffic
//    stays on one rail of the fat tree.
//
// Graph: the vertices, links and bandwidths of sim/fabric/layout.cpp (its opening comment), built here as a
// Boost.Graph bidirectional adjacency_list; every physical link is two directed edges, each an engine link registered
// with Simulator::add_link.
//
// Routing (Fabric::route):
//  - same GPU: empty route, zero latency.
//  - same node: [src GPU -> NVSwitch, NVSwitch -> dst GPU], latency nvlink_latency.
//  - other node: the rail is the destination's, r = dst_local % rails. If the source's rail differs, the
//    route starts with the NVLink hop src -> NVSwitch -> the source node's GPU with the destination's local
//    index (on rail r) (PXN), adding nvlink_latency. Then NIC(src node, r) -> its leaf -> ... -> the
//    destination's leaf -> NIC(dst node, r). The switch part is a shortest path in the rail's switch
//    graph: a breadth-first search (boost::breadth_first_search over a graph of the switches alone, links
//    reversed, built once) from the destination leaf gives every switch its hop distance to it (computed once per
//    destination leaf, then cached); the route walks from the source leaf, at each switch taking an
//    outgoing link whose far end is one hop closer. When several qualify (ECMP), candidates are taken in
//    the graph's edge order (deterministic) and the k-th branching picks index
//    splitmix64(splitmix64(src * gpus + dst) + k) mod count. Latency: 2 x nic_latency + switch_latency x
//    switches traversed (1 inside a leaf group, 3 via a spine, 5 via a core).
//  - routes are cached per (src, dst) under a mutex, so const calls are safe from several threads.

#include "strata/fabric.hpp"

#include "strata/errors.hpp"
#include "topology.hpp"

#include <fmt/format.h>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace strata::fabric {

namespace {

constexpr engine::LinkId kNoLink = std::numeric_limits<engine::LinkId>::max();

struct EdgeProps {
    engine::LinkId link = kNoLink;  ///< kNoLink: an attachment with no engine link (GPU <-> NIC over PCIe)
};

using Graph =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, EdgeProps>;

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// Records BFS hop distances into a table indexed by vertex (of a rail's switch graph).
struct DistanceRecorder : boost::default_bfs_visitor {
    std::vector<int>* dist = nullptr;
    template <typename Edge, typename G>
    void tree_edge(Edge e, const G& g) const {
        (*dist)[boost::target(e, g)] = (*dist)[boost::source(e, g)] + 1;
    }
};

}  // namespace

struct Fabric::Impl {
    detail::Layout layout;
    Graph graph;
    std::size_t links = 0;
    /// With pcie_links, per GPU: its PCIe link up and down, its path to host memory and back.
    std::vector<engine::LinkId> pcie_up, pcie_down, host_out, host_in;

    mutable std::mutex mutex;
    mutable std::unordered_map<std::uint64_t, Route> routes;
    /// Per destination leaf (index leaf - first_leaf): hop distance of every switch of its rail to it (index rail_local), -1 if none.
    mutable std::vector<std::vector<int>> dist_to_leaf;
    /// Per rail: its switches alone (vertex numbered by rail_local), links reversed; made on first use by distances_to.
    mutable std::vector<Graph> rail_reversed;

    /// A switch's index among its rail's switches: [leaves | spines | cores] of that rail (rails share no switch).
    /// A switch's rail and its index among that rail's switches (rail_local).
    [[nodiscard]] std::pair<std::size_t, std::size_t> rail_place(std::size_t v) const {
        const auto leaves = static_cast<std::size_t>(layout.leaf_groups);
        const auto spines = static_cast<std::size_t>(layout.spines_per_rail());
        const auto cores = static_cast<std::size_t>(layout.cores_per_rail);
        if (v < layout.first_spine) return {(v - layout.first_leaf) / leaves, (v - layout.first_leaf) % leaves};
        if (v < layout.first_core) return {(v - layout.first_spine) / spines, leaves + (v - layout.first_spine) % spines};
        return {(v - layout.first_core) / cores, leaves + spines + (v - layout.first_core) % cores};
    }
    [[nodiscard]] std::size_t rail_local(std::size_t v) const { return rail_place(v).second; }
    /// Per switch (index vertex - first_leaf): its out-edges as (target, edge), sorted by target and in the graph's
    /// edge order among equal targets; made on first use, so that the last hop down to the destination leaf is
    /// found without scanning a spine's hundreds of downlinks.
    using TargetEdge = std::pair<std::size_t, Graph::edge_descriptor>;
    mutable std::vector<std::vector<TargetEdge>> out_by_target;
    [[nodiscard]] const std::vector<TargetEdge>& edges_by_target(std::size_t v) const {
        if (out_by_target.empty()) out_by_target.resize(boost::num_vertices(graph) - layout.first_leaf);
        std::vector<TargetEdge>& list = out_by_target[v - layout.first_leaf];
        if (list.empty()) {
            for (const auto e : boost::make_iterator_range(boost::out_edges(v, graph))) list.emplace_back(boost::target(e, graph), e);
            std::stable_sort(list.begin(), list.end(), [](const TargetEdge& a, const TargetEdge& b) { return a.first < b.first; });
        }
        return list;
    }

    [[nodiscard]] engine::LinkId link(std::size_t a, std::size_t b) const {
        const auto [e, found] = boost::edge(a, b, graph);
        if (!found || graph[e].link == kNoLink) {
            throw Error("fabric: internal error: no link between vertices " + std::to_string(a) + " and " +
                        std::to_string(b));
        }
        return graph[e].link;
    }

    void check_gpu(int gpu) const {
        if (gpu < 0 || gpu >= layout.gpus) {
            throw InputError("fabric: GPU id " + std::to_string(gpu) + " out of range [0, " +
                             std::to_string(layout.gpus) + ")");
        }
    }

    /// Hop distances to `leaf_vertex` (of `rail`) over its rail's switches (BFS on the rail's switch graph, links reversed).
    const std::vector<int>& distances_to(std::size_t leaf_vertex, int rail) const {
        std::vector<int>& d = dist_to_leaf[leaf_vertex - layout.first_leaf];
        if (!d.empty()) return d;
        const std::size_t per_rail = static_cast<std::size_t>(layout.leaf_groups + layout.spines_per_rail() + layout.cores_per_rail);
        if (rail_reversed.empty()) {
            // The switches alone, a graph per rail, every link between two switches reversed: a search's set-up is
            // then over one rail's switches, not the hundreds of thousands of GPU and NIC vertices.
            const auto rails = static_cast<std::size_t>(layout.spec.network.rails);
            rail_reversed.assign(rails, Graph(per_rail));
            for (const auto e : boost::make_iterator_range(boost::edges(graph))) {
                const std::size_t a = boost::source(e, graph), b = boost::target(e, graph);
                if (a < layout.first_leaf || b < layout.first_leaf) continue;
                const auto [rail_of_a, from] = rail_place(a);
                boost::add_edge(rail_local(b), from, rail_reversed[rail_of_a]);
            }
        }
        d.assign(per_rail, -1);
        d[rail_local(leaf_vertex)] = 0;
        DistanceRecorder recorder;
        recorder.dist = &d;
        boost::breadth_first_search(rail_reversed[static_cast<std::size_t>(rail)], rail_local(leaf_vertex),
                                    boost::visitor(recorder));
        return d;
    }

    [[nodiscard]] Route compute(int src, int dst) const {
        const FabricSpec& s = layout.spec;
        Route r;
        if (src == dst) return r;
        const int sn = src / s.gpus_per_node;
        const int dn = dst / s.gpus_per_node;
        const int sl = src % s.gpus_per_node;
        const int dl = dst % s.gpus_per_node;
        auto use = [&r](engine::LinkId id) { r.links.push_back(engine::LinkUse{id, 1}); };

        if (sn == dn) {
            use(link(layout.gpu(src), layout.nvs(sn)));
            use(link(layout.nvs(sn), layout.gpu(dst)));
            r.latency = s.network.nvlink_latency;
            return r;
        }

        const int rail = layout.rail_of_local(dl);
        int sender = src;  // the GPU whose PCIe link reaches the NIC
        if (layout.rail_of_local(sl) != rail) {
            // PXN: over NVLink to the local GPU with the destination's local index, which is on `rail`.
            const int proxy = sn * s.gpus_per_node + dl;
            use(link(layout.gpu(src), layout.nvs(sn)));
            use(link(layout.nvs(sn), layout.gpu(proxy)));
            r.latency += s.network.nvlink_latency;
            sender = proxy;
        }
        if (!pcie_up.empty()) use(pcie_up[static_cast<std::size_t>(sender)]);

        const std::size_t src_leaf = layout.leaf(sn / s.network.nodes_per_leaf, rail);
        const std::size_t dst_leaf = layout.leaf(dn / s.network.nodes_per_leaf, rail);
        use(link(layout.nic(sn, rail), src_leaf));
        std::int64_t switches = 1;

        const std::vector<int>& dist = distances_to(dst_leaf, rail);
        const std::size_t base = layout.first_leaf;
        const std::uint64_t hash =
            splitmix64(static_cast<std::uint64_t>(src) * static_cast<std::uint64_t>(layout.gpus) +
                       static_cast<std::uint64_t>(dst));
        std::uint64_t branching = 0;
        std::vector<Graph::edge_descriptor> next;
        std::size_t at = src_leaf;
        if (dist[rail_local(at)] < 0) {
            throw Error("fabric: internal error: leaf vertex " + std::to_string(at) + " cannot reach " +
                        std::to_string(dst_leaf));
        }
        while (at != dst_leaf) {
            next.clear();
            const int here = dist[rail_local(at)];
            if (here == 1) {
                // One hop from the destination leaf: the candidates are the links to it (the only switch at 0).
                const std::vector<TargetEdge>& list = edges_by_target(at);
                const auto lo = std::lower_bound(list.begin(), list.end(), dst_leaf,
                                                 [](const TargetEdge& a, std::size_t t) { return a.first < t; });
                for (auto it = lo; it != list.end() && it->first == dst_leaf; ++it) next.push_back(it->second);
            } else {
                for (const auto e : boost::make_iterator_range(boost::out_edges(at, graph))) {
                    const std::size_t t = boost::target(e, graph);
                    if (t >= base && dist[rail_local(t)] == here - 1) next.push_back(e);
                }
            }
            std::size_t pick = 0;
            if (next.size() > 1) pick = splitmix64(hash + branching++) % next.size();
            use(graph[next[pick]].link);
            at = boost::target(next[pick], graph);
            ++switches;
        }

        use(link(dst_leaf, layout.nic(dn, rail)));
        if (!pcie_down.empty()) use(pcie_down[static_cast<std::size_t>(dst)]);
        r.latency += s.network.nic_latency * 2 + s.network.switch_latency * switches;
        return r;
    }
};

Fabric::Fabric(const FabricSpec& spec, engine::Simulator& sim) : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.layout = detail::make_layout(spec);
    const detail::Layout& l = m.layout;
    std::vector<detail::PlannedLink> plan = detail::plan_links(l);

    m.graph = Graph(l.vertex_count);
    for (detail::PlannedLink& pl : plan) {
        const engine::LinkId id = sim.add_link(std::move(pl.name), pl.bandwidth);
        boost::add_edge(pl.from, pl.to, EdgeProps{id}, m.graph);
    }
    // GPU <-> NIC attachments (PCIe, folded into the NIC link): graph edges without an engine link.
    for (int g = 0; g < l.gpus; ++g) {
        const int node = g / spec.gpus_per_node;
        const std::size_t nic = l.nic(node, l.rail_of_local(g % spec.gpus_per_node));
        boost::add_edge(l.gpu(g), nic, EdgeProps{}, m.graph);
        boost::add_edge(nic, l.gpu(g), EdgeProps{}, m.graph);
    }
    if (spec.pcie_links) {
        // After every other link (their ids stay as without): per GPU its PCIe link each way and its path to host memory.
        const NetworkSpec& n = spec.network;
        if (n.pcie_bandwidth.value <= 0 || n.device_to_host_bandwidth.value <= 0 || n.host_to_device_bandwidth.value <= 0)
            throw Error("fabric: PCIe links need network.pcie_bandwidth_bytes_per_s and the host link's bandwidths");
        for (int g = 0; g < l.gpus; ++g) {
            const std::string gpu = fmt::format("n{}.gpu{}", g / spec.gpus_per_node, g % spec.gpus_per_node);
            m.pcie_up.push_back(sim.add_link(gpu + ">pcie", n.pcie_bandwidth));
            m.pcie_down.push_back(sim.add_link("pcie>" + gpu, n.pcie_bandwidth));
            m.host_out.push_back(sim.add_link(gpu + ">host", n.device_to_host_bandwidth));
            m.host_in.push_back(sim.add_link("host>" + gpu, n.host_to_device_bandwidth));
        }
    }
    m.links = plan.size() + 4 * m.pcie_up.size();
    m.dist_to_leaf.resize(static_cast<std::size_t>(spec.network.rails) * static_cast<std::size_t>(l.leaf_groups));
}

Fabric::~Fabric() = default;

const FabricSpec& Fabric::spec() const {
    return impl_->layout.spec;
}

int Fabric::gpu_count() const {
    return impl_->layout.gpus;
}

int Fabric::node_of(int gpu) const {
    impl_->check_gpu(gpu);
    return gpu / impl_->layout.spec.gpus_per_node;
}

Route Fabric::route(int src_gpu, int dst_gpu) const {
    impl_->check_gpu(src_gpu);
    impl_->check_gpu(dst_gpu);
    const std::uint64_t key =
        static_cast<std::uint64_t>(src_gpu) * static_cast<std::uint64_t>(impl_->layout.gpus) +
        static_cast<std::uint64_t>(dst_gpu);
    const std::lock_guard lock(impl_->mutex);
    auto it = impl_->routes.find(key);
    if (it == impl_->routes.end()) it = impl_->routes.emplace(key, impl_->compute(src_gpu, dst_gpu)).first;
    return it->second;
}

Route merge_routes(std::span<const Route> routes) {
    Route out;
    std::vector<engine::LinkUse> all;
    for (const Route& r : routes) {
        out.latency = std::max(out.latency, r.latency);
        all.insert(all.end(), r.links.begin(), r.links.end());
    }
    std::sort(all.begin(), all.end(),
              [](const engine::LinkUse& a, const engine::LinkUse& b) { return a.link < b.link; });
    for (const engine::LinkUse& u : all) {
        if (!out.links.empty() && out.links.back().link == u.link) {
            out.links.back().multiplicity += u.multiplicity;
        } else {
            out.links.push_back(u);
        }
    }
    return out;
}

Route Fabric::combined(std::span<const std::pair<int, int>> pairs) const {
    std::vector<Route> routes;
    routes.reserve(pairs.size());
    for (const auto& [src, dst] : pairs) routes.push_back(route(src, dst));
    return merge_routes(routes);
}

std::vector<engine::LinkUse> Fabric::host_copy_route(int gpu, bool to_host) const {
    const Impl& m = *impl_;
    if (m.pcie_up.empty()) return {};
    const auto g = static_cast<std::size_t>(gpu);
    if (to_host) return {{m.pcie_up.at(g), 1}, {m.host_out.at(g), 1}};
    return {{m.host_in.at(g), 1}, {m.pcie_down.at(g), 1}};
}

std::size_t Fabric::link_count() const {
    return impl_->links;
}

std::string Fabric::describe() const {
    const detail::Layout& l = impl_->layout;
    const FabricSpec& s = l.spec;
    std::ostringstream os;
    os << s.nodes << " nodes x " << s.gpus_per_node << " GPUs, " << s.network.rails << " rails, "
       << s.network.rails * l.leaf_groups << " leaves, " << s.network.rails * l.spines_per_rail() << " spines, ";
    if (s.network.tiers == 3) os << s.network.rails * l.cores_per_rail << " cores, ";
    os << s.network.tiers << " tiers, ";
    if (s.network.routing == Routing::adaptive) os << "adaptive routing, ";
    os << impl_->links << " links";
    return os.str();
}

}  // namespace strata::fabric
