// Collective algorithms as flows on the fabric (NCCL-style rings).
//
// Flat ring over n ranks in the given order: edges rank[i] -> rank[(i+1) % n]. All edges move the same
// bytes at the same time, so the collective is one phase whose route is the union of the edge routes
// (Fabric::combined: a link crossed by k edges has multiplicity k, so it is k times as loaded) and which
// goes as fast as its slowest edge. Bytes per edge, for a buffer of M bytes (the full, unsharded size):
//   all-reduce      2(n-1)/n x M   in 2(n-1) steps (reduce-scatter then all-gather around the ring)
//   all-gather       (n-1)/n x M   in n-1 steps    (M = the gathered output)
//   reduce-scatter   (n-1)/n x M   in n-1 steps    (M = the full input)
// Byte counts are rounded up to whole bytes. Phase latency = steps x step latency, using the intra-node
// step latency when every rank is on one node and the inter-node one otherwise (route latencies are not
// added: NCCL's per-step latency already includes them).
//
// Hierarchical (params.hierarchical, ranks on m >= 2 nodes with the same l >= 2 ranks on each; anything
// else falls back to the flat ring). Nodes are taken in order of first appearance in `ranks`, and the
// ranks of a node in their order in `ranks`; "position k" is the k-th rank of each node. Intra phases run
// one ring per node, all nodes at once (one phase, routes combined); inter phases run l rings at once, ring
// k joining the position-k ranks of the m nodes. Let S = ceil(M / l), the shard each position owns:
//   all-reduce:     1. intra reduce-scatter: (l-1)/l x M per edge, l-1 intra steps -> each rank holds
//                      its node's partial sum of one M/l shard;
//                   2. inter all-reduce of the shard: 2(m-1)/m x S, 2(m-1) inter steps;
//                   3. intra all-gather: (l-1)/l x M, l-1 intra steps.
//                   Inter-node bytes per rank 2(m-1)M/(ml) instead of the flat ring's ~2M (n = ml).
//   all-gather:     each rank starts with M/n. 1. inter all-gather among position-k ranks: each gathers
//                   the m pieces of shard k, (m-1)/m x S, m-1 inter steps; 2. intra all-gather of the
//                   l shards: (l-1)/l x M, l-1 intra steps. (Inter first, so no byte crosses the IB
//                   fabric twice.)
//   reduce-scatter: 1. intra reduce-scatter: (l-1)/l x M, l-1 intra steps -> each rank holds the node's
//                   partial sum of shard k; 2. inter reduce-scatter of that shard: (m-1)/m x S, m-1 inter
//                   steps -> each rank holds M/n fully reduced.
// Edge cases: fewer than two ranks, or M = 0, give no phase (NCCL returns at once for a zero count).
// A rank outside [0, gpu_count), a repeated rank, or M < 0 throws InputError.
#include "strata/errors.hpp"
#include "strata/fabric.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata::fabric {
namespace {

/// ceil(m x num / den) without overflow for num <= 2 den: m = q den + r.
Bytes scaled(Bytes m, std::int64_t num, std::int64_t den) {
    const std::int64_t q = m.value / den;
    const std::int64_t r = m.value % den;
    return Bytes(q * num + (r * num + den - 1) / den);
}

using Rings = std::vector<std::vector<int>>;

/// One phase running every ring of `rings` at once, `bytes` per edge, after `latency`.
CollectivePhase ring_phase(const Fabric& fabric, const Rings& rings, Bytes bytes, Time latency) {
    std::vector<std::pair<int, int>> edges;
    for (const std::vector<int>& ring : rings) {
        const std::size_t n = ring.size();
        for (std::size_t i = 0; i < n && n > 1; ++i)
            edges.emplace_back(ring[i], ring[(i + 1) % n]);
    }
    return CollectivePhase{fabric.combined(edges), bytes, latency};
}

}  // namespace

std::vector<CollectivePhase> plan_collective(const Fabric& fabric, CollectiveKind kind,
                                             std::span<const int> ranks, Bytes message,
                                             const CollectiveParams& params) {
    if (message.value < 0) {
        throw InputError("collective: message size must be >= 0 bytes (got " + std::to_string(message.value) +
                         ")");
    }
    for (const int r : ranks) {
        if (r < 0 || r >= fabric.gpu_count()) {
            throw InputError("collective: rank " + std::to_string(r) + " is not a GPU id in [0, " +
                             std::to_string(fabric.gpu_count()) + ")");
        }
    }
    std::vector<int> sorted(ranks.begin(), ranks.end());
    std::sort(sorted.begin(), sorted.end());
    if (const auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end()) {
        throw InputError("collective: GPU " + std::to_string(*dup) + " appears more than once in the ranks");
    }

    const auto n = static_cast<std::int64_t>(ranks.size());
    if (n < 2 || message.value == 0) return {};

    // Group ranks by node, nodes in order of first appearance.
    std::unordered_map<int, std::size_t> slot_of_node;
    Rings by_node;
    for (const int r : ranks) {
        const auto [it, added] = slot_of_node.try_emplace(fabric.node_of(r), by_node.size());
        if (added) by_node.emplace_back();
        by_node[it->second].push_back(r);
    }
    const auto m = static_cast<std::int64_t>(by_node.size());
    const auto l = static_cast<std::int64_t>(by_node.front().size());
    const bool uniform = std::all_of(by_node.begin(), by_node.end(), [l](const std::vector<int>& v) {
        return static_cast<std::int64_t>(v.size()) == l;
    });

    if (!params.hierarchical || m < 2 || l < 2 || !uniform) {
        const Rings flat{std::vector<int>(ranks.begin(), ranks.end())};
        if (m == 1 && params.measured && params.intra_link_bandwidth > 0) {
            if (const std::optional<Time> t = params.measured(kind, static_cast<int>(n), message)) {
                const Bytes bytes(static_cast<std::int64_t>(std::ceil(t->seconds() * params.intra_link_bandwidth)));
                return {ring_phase(fabric, flat, bytes, Time::zero())};
            }
        }
        const Time step = m == 1 ? params.step_latency_intra : params.step_latency_inter;
        if (kind == CollectiveKind::all_reduce) {
            if (m == 1 && params.nvls_speedup > 0) {
                const Bytes ring = scaled(message, 2 * (n - 1), n);
                const Bytes nvls(static_cast<std::int64_t>(std::llround(double(ring.value) / params.nvls_speedup)));
                return {ring_phase(fabric, flat, nvls, step * (2 * (n - 1)))};
            }
            return {ring_phase(fabric, flat, scaled(message, 2 * (n - 1), n), step * (2 * (n - 1)))};
        }
        return {ring_phase(fabric, flat, scaled(message, n - 1, n), step * (n - 1))};
    }

    Rings across(static_cast<std::size_t>(l));
    for (std::size_t k = 0; k < across.size(); ++k) {
        for (const std::vector<int>& node : by_node)
            across[k].push_back(node[k]);
    }
    const Bytes shard = scaled(message, 1, l);
    const Bytes intra_bytes = scaled(message, l - 1, l);
    const Time intra_latency = params.step_latency_intra * (l - 1);

    switch (kind) {
        case CollectiveKind::all_reduce:
            return {ring_phase(fabric, by_node, intra_bytes, intra_latency),
                    ring_phase(fabric, across, scaled(shard, 2 * (m - 1), m),
                               params.step_latency_inter * (2 * (m - 1))),
                    ring_phase(fabric, by_node, intra_bytes, intra_latency)};
        case CollectiveKind::all_gather:
            return {ring_phase(fabric, across, scaled(shard, m - 1, m), params.step_latency_inter * (m - 1)),
                    ring_phase(fabric, by_node, intra_bytes, intra_latency)};
        case CollectiveKind::reduce_scatter:
            return {ring_phase(fabric, by_node, intra_bytes, intra_latency),
                    ring_phase(fabric, across, scaled(shard, m - 1, m), params.step_latency_inter * (m - 1))};
    }
    throw InputError("collective: unknown collective kind " + std::to_string(static_cast<int>(kind)));
}

std::vector<CollectivePhase> plan_concurrent_collectives(const Fabric& fabric, CollectiveKind kind,
                                                         std::span<const std::vector<int>> groups, Bytes message,
                                                         const CollectiveParams& params) {
    std::vector<std::vector<CollectivePhase>> plans;
    for (const auto& g : groups) plans.push_back(plan_collective(fabric, kind, g, message, params));
    if (plans.empty()) return {};
    std::vector<CollectivePhase> merged = plans.front();
    for (std::size_t ph = 0; ph < merged.size(); ++ph) {
        std::vector<Route> routes;
        for (const auto& plan : plans) {
            if (plan.size() != merged.size()) {
                throw InputError("plan_concurrent_collectives: the groups differ in shape (phases " +
                                 std::to_string(plan.size()) + " vs " + std::to_string(merged.size()) + ")");
            }
            routes.push_back(plan[ph].route);
            merged[ph].latency = std::max(merged[ph].latency, plan[ph].latency);
            merged[ph].bytes = std::max(merged[ph].bytes, plan[ph].bytes);
        }
        merged[ph].route = merge_routes(routes);
    }
    return merged;
}

}  // namespace strata::fabric
