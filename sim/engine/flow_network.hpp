// Max-min fair bandwidth sharing between the flows that are active on a set of links (private to the
// engine; simulator.cpp drives it from its event loop).
//
// Model. Link l has capacity C_l (bytes/s). An active flow f crosses link l with multiplicity m_fl >= 1
// and moves at one rate r_f; on link l it consumes m_fl * r_f. The rates are the max-min fair allocation:
// no flow's rate can be raised without lowering the rate of a flow whose rate is not larger. Equivalently
// (bottleneck characterisation), the allocation is feasible and every flow f has a bottleneck link b(f)
// on its route that is saturated and on which no flow is faster than f.
//
// Water-filling (progressive filling). All unfrozen flows rise together at a common rate. Link l saturates
// when used_l + level * W_l = C_l, where used_l is taken by frozen flows and W_l is the sum of the
// multiplicities of the unfrozen flows on l; its fair level is (C_l - used_l) / W_l. Repeatedly take the
// link with the smallest level, freeze every unfrozen flow on it at that level (that link becomes the
// flows' bottleneck), and charge those flows to the other links of their routes. Freezing flows at a level
// not above a link's level never lowers that link's level, so links sit in a lazy min-heap keyed by level
// (a popped link whose key is stale goes back with its current level); ties break by link id. Cost:
// O(E log L) for E (flow, link) incidences and L links.
//
// What gets recomputed. Starting or ending a flow marks its links dirty, and the simulator calls
// `recompute()` once per instant of simulated time at which something changed. Only flows connected to a
// dirty link through shared links (transitively: its connected component) can change rate. Two modes:
//  - full: water-fill the whole connected component of the dirty links, found by breadth-first search
//    over link -> active flows -> links;
//  - repair (default): big components (thousands of flows over a fat tree) are common, so recompute a
//    subset A of the component and keep every other flow's rate fixed. A starts with the new flows, the
//    flows whose bottleneck is a dirty link, and all flows on dirty links that were saturated when a flow
//    joined them. A is water-filled over the capacity that the fixed flows leave; then every link touched
//    by A is checked against the bottleneck characterisation: a fixed flow whose bottleneck link is no
//    longer saturated or now carries a faster flow of A, a fixed flow faster than a flow of A bottlenecked
//    on the same link, and the flows on an overloaded link all join A, and A is water-filled again. When
//    no check fails the allocation is max-min fair (every flow has a valid bottleneck: the fixed ones
//    because their bottleneck links are untouched or were checked, those of A by construction and by the
//    check). After a few rounds without convergence the whole component is recomputed. Comparisons use a
//    relative tolerance of 1e-12, so a repair agrees with a full recomputation to about that precision.
//
// Flow progress. Each flow keeps its remaining bytes (double) and the time they were last brought up to
// date. Only flows whose rate actually changes are touched: their remaining bytes are advanced to `now`
// at the old rate, the new rate is stored, their version is bumped (events carrying an older version are
// stale) and their completion time becomes now + ceil(remaining / rate) picoseconds.
//
// Everything is deterministic: no container is keyed or ordered by address, and the order of every
// floating-point operation depends only on the sequence of calls.
#pragma once

#include "strata/engine.hpp"

#include "huge_pages.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace strata::engine::detail {

class FlowNetwork {
public:
    /// Adds a link; `bandwidth` must be finite and > 0 (the simulator validates it).
    LinkId add_link(double bandwidth);
    [[nodiscard]] std::size_t link_count() const { return links_.size(); }

    /// Interns a route: `route` must be non-empty and name valid links, each at most once, with
    /// multiplicity >= 1. Flows name routes by id, so that the many transfers over one route share it.
    std::uint32_t add_route(std::span<const LinkUse> route);
    [[nodiscard]] std::size_t route_count() const { return routes_.size(); }
    [[nodiscard]] std::uint32_t route_length(std::uint32_t route) const { return routes_[route].second; }
    [[nodiscard]] std::span<const LinkUse> route(std::uint32_t r) const {
        return {route_.data() + routes_[r].first, routes_[r].second};
    }

    /// Bundles equivalent links (before any flow opens): links of the same bandwidth that every route uses
    /// together, with the same multiplicity, carry the same flows at the same rates, so they saturate together and
    /// the max-min rates are those of one of them alone. Each route keeps only the lowest-numbered link of each
    /// bundle (the one the water-filling's ties would pick), which is exact. Returns the link uses removed.
    std::size_t bundle_links();

    /// Picoseconds a flow of `bytes` > 0 over `route` takes when no other flow shares its links: its rate is its
    /// lowest link bandwidth over multiplicity, rounded to whole picoseconds as a flow's completion is.
    [[nodiscard]] std::int64_t alone_ps(std::uint32_t route, double bytes) const;

    /// A flow of `bytes` > 0 over an interned route, not active yet: its state exists from here until
    /// `close()`, which hands its slot to the next `open()`. Returns the flow's index (its slot).
    std::uint32_t open(std::uint32_t route, double bytes);
    /// Gives an inactive flow's slot back. Its version keeps counting, so that events scheduled for the
    /// slot's earlier flows stay stale.
    void close(std::uint32_t flow);
    /// Flow slots in existence (open or free): the most flows that were open at once.
    [[nodiscard]] std::size_t flow_slots() const { return flows_.size(); }

    /// Hints for the event loop: asks the memory system for a route's link records, a flow's record, or the link
    /// records of a flow's route (no effect on results).
    void prefetch_route(std::uint32_t r) const {
        for (const LinkUse& use : route(r)) __builtin_prefetch(&links_[use.link]);
    }
    void prefetch_flow(std::uint32_t flow) const { __builtin_prefetch(&flows_[flow]); }
    void prefetch_flow_links(std::uint32_t flow) const {
        const Flow& f = flows_[flow];
        for (std::uint32_t j = 0; j < f.route_length; ++j) __builtin_prefetch(&links_[route_[f.route_offset + j].link]);
        __builtin_prefetch(positions(flow));
    }
    /// Once the link records have arrived: the place in each link's flow list that joining (a route about to open a
    /// flow) or leaving (an active flow) will write.
    void prefetch_route_lists(std::uint32_t r) const {
        for (const LinkUse& use : route(r)) {
            const auto& on = links_[use.link].on;
            __builtin_prefetch(on.data() + on.size(), 1);
        }
    }
    void prefetch_flow_lists(std::uint32_t flow) const {
        const Flow& f = flows_[flow];
        const std::uint32_t* pos = positions(flow);
        for (std::uint32_t j = 0; j < f.route_length; ++j) {
            const auto& on = links_[route_[f.route_offset + j].link].on;
            if (pos[j] < on.size()) __builtin_prefetch(on.data() + pos[j], 1);  // a stale event's flow may have left
            if (!on.empty()) __builtin_prefetch(on.data() + on.size() - 1);     // the entry that moves into its place
        }
    }

    /// The flow begins (after deactivate(): resumes) to move its remaining bytes at `now`; its rate is set by the next
    /// `recompute()`.
    void activate(std::uint32_t flow, std::int64_t now);
    /// The flow has finished and leaves its links.
    void deactivate(std::uint32_t flow);

    /// Whether some flow started or ended since the last `recompute()`.
    [[nodiscard]] bool dirty() const { return !dirty_links_.empty(); }

    /// Recomputes the rates affected by the flows started or ended since the last call, at time `now`
    /// (picoseconds). Returns the flows whose rate changed, in a deterministic order; for each,
    /// `completion_ps()` and `version()` are new.
    std::span<const std::uint32_t> recompute(std::int64_t now);

    /// Full mode: always water-fill whole connected components (the reference; slower on big ones).
    void set_full_recompute(bool full) { full_ = full; }

    [[nodiscard]] std::uint32_t version(std::uint32_t flow) const { return flows_[flow].version; }
    [[nodiscard]] std::int64_t completion_ps(std::uint32_t flow) const { return flows_[flow].end_ps; }
    /// Current rate in bytes per second (0 before the first recompute after activation).
    [[nodiscard]] double rate(std::uint32_t flow) const { return flows_[flow].rate; }

    /// Work counters: flows water-filled, and recomputations that fell back to a whole component.
    [[nodiscard]] std::uint64_t flows_filled() const { return flows_filled_; }
    [[nodiscard]] std::uint64_t fallbacks() const { return fallbacks_; }

    /// A link's fair level in the water-filling heap.
    struct Level {
        double key;
        LinkId link;
    };

private:
    static constexpr LinkId kNoLink = 0xffffffffu;

    /// A flow's record: one cache line (its size's rounding threshold lives apart, in residual_).
    struct alignas(64) Flow {
        std::uint32_t route_offset = 0;  ///< into route_
        std::uint32_t route_length = 0;
        std::uint32_t version = 0;        ///< bumped on every reschedule and on deactivation
        std::uint32_t mark = 0;           ///< == epoch_ while the flow is in the recomputed set
        LinkId bottleneck = kNoLink;      ///< link it froze on; kNoLink until first rated
        LinkId new_bottleneck = kNoLink;  ///< water-filling scratch
        double remaining = 0.0;
        double rate = 0.0;         ///< bytes per second; 0 until the first recompute
        double new_rate = 0.0;     ///< water-filling scratch; < 0 while unfrozen
        std::int64_t last_ps = 0;  ///< `remaining` is exact at this time
        std::int64_t end_ps = 0;   ///< scheduled completion
    };
    /// One active flow on a link.
    struct LinkEntry {
        std::uint32_t flow;
        std::uint32_t multiplicity;
        std::uint32_t hop;  ///< the link's index on the flow's route (to update its position in O(1))
    };

    /// Brings `remaining` up to `now`; below `residual` bytes (rounding residue) the flow is done.
    static void advance(Flow& f, double residual, std::int64_t now);
    [[nodiscard]] static std::int64_t completion(const Flow& f, std::int64_t now);
    void mark_dirty(LinkId link);
    void touch(LinkId link);
    void include(std::uint32_t flow);
    void include_component();
    void water_fill();
    void fill_one(std::uint32_t flow);
    /// The lowest link level of a route, max(cap_of(link record), 0) / multiplicity, and its link (ties:
    /// smaller link id; kNoLink for an empty route).
    template <class CapOf>
    std::pair<double, LinkId> lowest_level(std::uint32_t offset, std::uint32_t length, CapOf cap_of) const;
    /// Freezes `flow` at its route's lowest level with cap_of (never at a zero rate).
    template <class CapOf>
    void freeze_at_lowest(std::uint32_t flow, CapOf cap_of);
    bool check_and_grow();

    bool full_ = false;

    // Links: one record each, so that the water-filling finds a link's state in one cache line.
    struct alignas(64) Link {
        double bandwidth = 0;
        double cap = 0;              ///< water-filling scratch: capacity left
        std::uint64_t weight = 0;    ///< water-filling scratch: unfrozen multiplicity
        std::uint32_t mark = 0;      ///< == epoch_ when touched by the recomputed set
        std::uint8_t dirty = 0;
        std::vector<LinkEntry> on;   ///< active flows on it (unordered; swap-removed)
    };
    BigVector<Link> links_;
    static_assert(sizeof(Link) == 64);

    // Routes, interned: route r is route_[routes_[r].first .. + routes_[r].second].
    BigVector<LinkUse> route_;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> routes_;

    // Flows, by slot (reused after close()).
    static_assert(sizeof(Flow) == 64);
    BigVector<Flow> flows_;
    BigVector<double> residual_;  ///< per slot: the flow's bytes x kResidualFraction (read only when it advances)
    /// Per slot, pos_stride_ entries: the flow's index in its j-th link's list (one array, so that updating a moved
    /// flow's entry costs one cache line, not a vector header and then its data).
    BigVector<std::uint32_t> route_pos_;
    std::uint32_t pos_stride_ = 0;  ///< the longest route so far
    [[nodiscard]] std::uint32_t* positions(std::uint32_t flow) { return route_pos_.data() + std::size_t{flow} * pos_stride_; }
    [[nodiscard]] const std::uint32_t* positions(std::uint32_t flow) const {
        return route_pos_.data() + std::size_t{flow} * pos_stride_;
    }
    void restride(std::uint32_t stride);
    std::vector<std::uint32_t> free_flows_;

    // Scratch, reused across recomputations.
    std::uint32_t epoch_ = 0;
    std::vector<LinkId> dirty_links_;
    std::vector<LinkId> touched_;     ///< links crossed by the recomputed set
    std::vector<std::uint32_t> set_;  ///< the recomputed set A
    std::vector<std::uint32_t> changed_;
    std::vector<Level> heap_;

    std::uint64_t flows_filled_ = 0;
    std::uint64_t fallbacks_ = 0;
};

template <class CapOf>
inline std::pair<double, LinkId> FlowNetwork::lowest_level(std::uint32_t offset, std::uint32_t length,
                                                           CapOf cap_of) const {
    double best = 0.0;
    LinkId best_link = kNoLink;
    for (std::uint32_t j = 0; j < length; ++j) {
        const LinkUse& use = route_[offset + j];
        const double level = std::max(cap_of(links_[use.link]), 0.0) / static_cast<double>(use.multiplicity);
        if (best_link == kNoLink || level < best || (level == best && use.link < best_link)) {
            best = level;
            best_link = use.link;
        }
    }
    return {best, best_link};
}

template <class CapOf>
inline void FlowNetwork::freeze_at_lowest(std::uint32_t flow, CapOf cap_of) {
    Flow& f = flows_[flow];
    ++flows_filled_;
    const auto [best, best_link] = lowest_level(f.route_offset, f.route_length, cap_of);
    f.new_rate = std::max(best, links_[best_link].bandwidth * 1e-12);
    f.new_bottleneck = best_link;
}

}  // namespace strata::engine::detail
