// Max-min fair bandwidth sharing between the flows that are active on a set of links (private to the
// engine; see simulator.cpp for the event loop that drives it).
//
// Model. Link l has capacity C_l (bytes/s). An active flow f crosses link l with multiplicity m_fl >= 1
// and moves at one rate r_f; on link l it consumes m_fl * r_f. The rates are the (weighted) max-min fair
// allocation: no flow's rate can be raised without lowering the rate of a flow whose rate is not larger.
//
// Algorithm: progressive filling ("water-filling"). All unfrozen flows rise together at a common rate r.
// Link l saturates when used_l + r * W_l = C_l, where used_l is the bandwidth taken by frozen flows and
// W_l is the sum of the multiplicities of the unfrozen flows on l; its fair level is (C_l - used_l) / W_l.
// Repeatedly take the link with the smallest level, freeze every unfrozen flow on it at that level, and
// charge those flows to every other link of their routes. Freezing a flow at a level not above a link's
// level never lowers that link's level, so the links sit in a lazy min-heap keyed by level: a popped link
// whose key is stale is pushed back with its current level. Ties break by link id, so the result depends
// only on the order of operations, which is itself deterministic. Cost: O(E log L) for E (flow, link)
// incidences and L links.
//
// Component recomputation. When a flow starts or ends, only the flows connected to it through shared links
// (transitively) can change rate. Starting or ending a flow marks its links dirty; `recompute()` collects
// the connected component(s) of the dirty links by breadth-first search over the link -> active flows
// lists and water-fills only those. The simulator defers `recompute()` until simulated time is about to
// advance, so a burst of flows that start or end at the same instant costs one recomputation.
//
// Flow progress. Each flow keeps its remaining bytes (double) and the time they were last brought up to
// date. Only flows whose rate actually changes are touched: their remaining bytes are advanced to `now`
// at the old rate, the new rate is stored, their version is bumped (events carrying an older version are
// stale) and their completion time is now + ceil(remaining / rate) picoseconds.
#pragma once

#include "strata/engine.hpp"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace strata::engine::detail {

class FlowNetwork {
public:
    /// Adds a link; `bandwidth` must be finite and > 0 (the simulator validates it).
    LinkId add_link(double bandwidth);
    [[nodiscard]] std::size_t link_count() const { return bandwidth_.size(); }

    /// Registers a flow that is not active yet. `route` must be non-empty, name valid links at most once
    /// each with multiplicity >= 1; `bytes` > 0. Returns the flow's index.
    std::uint32_t add_flow(std::span<const LinkUse> route, double bytes);
    [[nodiscard]] std::size_t flow_count() const { return flows_.size(); }

    /// The flow begins to move bytes at `now`; its rate is set by the next `recompute()`.
    void activate(std::uint32_t flow, std::int64_t now);
    /// The flow has finished and leaves its links.
    void deactivate(std::uint32_t flow);

    /// Whether some flow started or ended since the last `recompute()`.
    [[nodiscard]] bool dirty() const { return !dirty_links_.empty(); }

    /// Water-fills the components of the dirty links at time `now` (picoseconds). Returns the flows whose
    /// rate changed, in a deterministic order; for each, `completion_ps()` and `version()` are new.
    std::span<const std::uint32_t> recompute(std::int64_t now);

    [[nodiscard]] std::uint32_t version(std::uint32_t flow) const { return flows_[flow].version; }
    [[nodiscard]] std::int64_t completion_ps(std::uint32_t flow) const { return flows_[flow].end_ps; }
    [[nodiscard]] double rate(std::uint32_t flow) const { return flows_[flow].rate; }

private:
    struct Flow {
        std::uint32_t route_offset = 0;  ///< into route_ / route_pos_
        std::uint32_t route_length = 0;
        std::uint32_t version = 0;       ///< bumped on every reschedule and on deactivation
        std::uint32_t mark = 0;          ///< BFS epoch
        double bytes = 0.0;
        double remaining = 0.0;
        double rate = 0.0;               ///< bytes per second; 0 until the first recompute
        double new_rate = 0.0;           ///< water-filling scratch; < 0 while unfrozen
        std::int64_t last_ps = 0;        ///< `remaining` is exact at this time
        std::int64_t end_ps = 0;         ///< scheduled completion
    };
    /// One active flow on a link.
    struct LinkEntry {
        std::uint32_t flow;
        std::uint32_t multiplicity;
    };

    static void advance(Flow& f, std::int64_t now);
    [[nodiscard]] static std::int64_t completion(const Flow& f, std::int64_t now);
    void mark_dirty(LinkId link);

    // Links.
    std::vector<double> bandwidth_;
    std::vector<std::vector<LinkEntry>> on_link_;   ///< active flows per link (unordered; swap-removed)
    std::vector<std::uint32_t> link_mark_;           ///< BFS epoch
    std::vector<std::uint8_t> link_dirty_;
    std::vector<double> cap_;                        ///< water-filling scratch: capacity left
    std::vector<std::uint64_t> weight_;              ///< water-filling scratch: unfrozen multiplicity

    // Flows.
    std::vector<Flow> flows_;
    std::vector<LinkUse> route_;                     ///< all routes, back to back
    std::vector<std::uint32_t> route_pos_;           ///< index of the flow in on_link_[route_[i].link]

    // Scratch, reused across recomputations.
    std::uint32_t epoch_ = 0;
    std::vector<LinkId> dirty_links_;
    std::vector<LinkId> comp_links_;
    std::vector<std::uint32_t> comp_flows_;
    std::vector<std::uint32_t> changed_;
    std::vector<std::pair<double, LinkId>> heap_;
};

}  // namespace strata::engine::detail
