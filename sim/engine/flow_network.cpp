// Max-min fair sharing of link bandwidth between active flows: progressive filling over the flows that a
// start or end can affect, with a bottleneck check that widens the set until the allocation is max-min
// fair (or falls back to the whole connected component). The algorithm is described in flow_network.hpp.
#include "flow_network.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

namespace strata::engine::detail {

namespace {

/// Remaining bytes below this fraction of the flow's size are rounding residue: the flow is done.
constexpr double kResidualFraction = 1e-12;
/// Largest completion delay accepted, in picoseconds (about 46 days of simulated time).
constexpr double kMaxDelayPs = 4e18;
/// Relative tolerance of the saturation and rate comparisons of the repair checks.
constexpr double kTolerance = 1e-12;
/// Repair rounds before falling back to water-filling the whole component.
constexpr int kMaxRepairRounds = 16;

/// Min-heap order of link levels: smaller level first, then smaller link id (deterministic ties).
inline bool before(const FlowNetwork::Level& a, const FlowNetwork::Level& b) {
    return a.key < b.key || (a.key == b.key && a.link < b.link);
}

/// Restores the 4-ary min-heap property below position `i` (the entry there may have grown).
void sift_down(std::vector<FlowNetwork::Level>& h, std::size_t i) {
    const std::size_t n = h.size();
    const FlowNetwork::Level item = h[i];
    for (;;) {
        const std::size_t first = 4 * i + 1;
        if (first >= n) break;
        std::size_t best = first;
        const std::size_t last = std::min(first + 4, n);
        for (std::size_t c = first + 1; c < last; ++c) {
            if (before(h[c], h[best])) best = c;
        }
        if (!before(h[best], item)) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = item;
}

}  // namespace

LinkId FlowNetwork::add_link(double bandwidth) {
    const auto id = static_cast<LinkId>(links_.size());
    links_.emplace_back();
    links_.back().bandwidth = bandwidth;
    return id;
}

std::uint32_t FlowNetwork::add_route(std::span<const LinkUse> route) {
    const auto offset = static_cast<std::uint32_t>(route_.size());
    route_.insert(route_.end(), route.begin(), route.end());
    routes_.emplace_back(offset, static_cast<std::uint32_t>(route.size()));
    if (route.size() > pos_stride_) restride(static_cast<std::uint32_t>(route.size()));
    return static_cast<std::uint32_t>(routes_.size() - 1);
}

void FlowNetwork::restride(std::uint32_t stride) {
    if (!flows_.empty()) {
        BigVector<std::uint32_t> wider(flows_.size() * std::size_t{stride}, 0);
        for (std::size_t f = 0; f < flows_.size(); ++f)
            std::copy_n(route_pos_.data() + f * pos_stride_, pos_stride_, wider.data() + f * stride);
        route_pos_.swap(wider);
    }
    pos_stride_ = stride;
}

std::size_t FlowNetwork::bundle_links() {
    if (!flows_.empty()) throw SimulationError("FlowNetwork::bundle_links: flows exist already");
    const std::size_t n = links_.size();
    // Each link's uses, route by route in route order: (route, multiplicity) lists, compressed sparse rows.
    std::vector<std::uint32_t> start(n + 1, 0);
    for (const LinkUse& use : route_) ++start[use.link + 1];
    for (std::size_t l = 0; l < n; ++l) start[l + 1] += start[l];
    std::vector<std::pair<std::uint32_t, std::uint32_t>> uses(route_.size());
    std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
    std::vector<std::uint64_t> key(n, 0);  // a hash of the list, to find candidates
    for (std::uint32_t r = 0; r < routes_.size(); ++r) {
        for (std::uint32_t j = 0; j < routes_[r].second; ++j) {
            const LinkUse& use = route_[routes_[r].first + j];
            uses[fill[use.link]++] = {r, use.multiplicity};
            std::uint64_t z = key[use.link] + 0x9e3779b97f4a7c15ULL + ((std::uint64_t{r} << 32) | use.multiplicity);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            key[use.link] = z ^ (z >> 31);
        }
    }
    // Candidates in (key, bandwidth, id) order; a link joins the bundle of the first candidate whose list and
    // bandwidth equal its own exactly (a hash collision only costs a missed bundle).
    std::vector<LinkId> order;
    for (LinkId l = 0; l < n; ++l)
        if (start[l + 1] > start[l]) order.push_back(l);
    std::sort(order.begin(), order.end(), [&](LinkId a, LinkId b) {
        if (key[a] != key[b]) return key[a] < key[b];
        if (links_[a].bandwidth != links_[b].bandwidth) return links_[a].bandwidth < links_[b].bandwidth;
        return a < b;
    });
    std::vector<LinkId> rep(n);
    for (LinkId l = 0; l < n; ++l) rep[l] = l;
    auto same = [&](LinkId a, LinkId b) {
        return links_[a].bandwidth == links_[b].bandwidth && start[a + 1] - start[a] == start[b + 1] - start[b] &&
               std::equal(uses.begin() + start[a], uses.begin() + start[a + 1], uses.begin() + start[b]);
    };
    for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i + 1;
        while (j < order.size() && key[order[j]] == key[order[i]]) ++j;
        for (std::size_t a = i; a < j; ++a) {
            if (rep[order[a]] != order[a]) continue;  // joined an earlier bundle
            for (std::size_t b = a + 1; b < j; ++b)
                if (rep[order[b]] == order[b] && same(order[a], order[b])) rep[order[b]] = order[a];
        }
        i = j;
    }
    // Rewrite the routes, keeping each bundle's representative (the lowest id: `order` is by id within a key).
    std::size_t removed = 0;
    std::vector<LinkUse> kept;
    kept.reserve(route_.size());
    for (auto& [offset, length] : routes_) {
        const auto first = static_cast<std::uint32_t>(kept.size());
        for (std::uint32_t j = 0; j < length; ++j) {
            const LinkUse& use = route_[offset + j];
            if (rep[use.link] == use.link) {
                kept.push_back(use);
            } else {
                ++removed;
            }
        }
        offset = first;
        length = static_cast<std::uint32_t>(kept.size()) - first;
    }
    route_.clear();
    route_.insert(route_.end(), kept.begin(), kept.end());
    pos_stride_ = 0;  // no flow exists yet: the longest route after bundling
    for (const auto& r : routes_) pos_stride_ = std::max(pos_stride_, r.second);
    return removed;
}

std::uint32_t FlowNetwork::open(std::uint32_t route, double bytes) {
    std::uint32_t id = 0;
    if (!free_flows_.empty()) {
        id = free_flows_.back();
        free_flows_.pop_back();
    } else {
        id = static_cast<std::uint32_t>(flows_.size());
        flows_.emplace_back();
        residual_.emplace_back();
        route_pos_.resize(route_pos_.size() + pos_stride_);
    }
    Flow& f = flows_[id];
    f.route_offset = routes_[route].first;
    f.route_length = routes_[route].second;
    f.remaining = bytes;
    residual_[id] = bytes * kResidualFraction;
    f.rate = 0.0;
    f.bottleneck = kNoLink;
    return id;
}

std::int64_t FlowNetwork::alone_ps(std::uint32_t route, double bytes) const {
    // As fill_one() and completion() would give it at its start with no other flow on its links.
    const auto [best, best_link] =
        lowest_level(routes_[route].first, routes_[route].second, [](const Link& l) { return l.bandwidth; });
    if (best_link == kNoLink) return 0;
    Flow f;
    f.remaining = bytes;
    f.rate = std::max(best, links_[best_link].bandwidth * 1e-12);
    return completion(f, 0);
}

void FlowNetwork::close(std::uint32_t flow) {
    ++flows_[flow].version;
    free_flows_.push_back(flow);
}

inline void FlowNetwork::mark_dirty(LinkId link) {
    if (!links_[link].dirty) {
        links_[link].dirty = 1;
        dirty_links_.push_back(link);
    }
}

void FlowNetwork::activate(std::uint32_t flow, std::int64_t now) {
    Flow& f = flows_[flow];
    f.rate = 0.0;
    f.bottleneck = kNoLink;
    f.last_ps = now;
    ++f.version;
    std::uint32_t* pos = positions(flow);
    for (std::uint32_t j = 0; j < f.route_length; ++j) {
        const LinkUse& use = route_[f.route_offset + j];
        auto& list = links_[use.link].on;
        pos[j] = static_cast<std::uint32_t>(list.size());
        list.push_back(LinkEntry{flow, use.multiplicity, j});
        mark_dirty(use.link);
    }
}

void FlowNetwork::deactivate(std::uint32_t flow) {
    Flow& f = flows_[flow];
    ++f.version;
    f.rate = 0.0;
    f.bottleneck = kNoLink;
    const std::uint32_t* own = positions(flow);
    for (std::uint32_t j = 0; j < f.route_length; ++j) {
        const LinkId link = route_[f.route_offset + j].link;
        auto& list = links_[link].on;
        const std::uint32_t pos = own[j];
        const LinkEntry moved = list.back();
        list[pos] = moved;
        list.pop_back();
        // Tell the moved flow where its entry for this link now lives.
        if (moved.flow != flow) positions(moved.flow)[moved.hop] = pos;
        mark_dirty(link);
    }
}

void FlowNetwork::advance(Flow& f, double residual, std::int64_t now) {
    if (f.rate > 0.0 && now > f.last_ps) {
        f.remaining -= f.rate * static_cast<double>(now - f.last_ps) / 1e12;
        if (f.remaining <= residual) f.remaining = 0.0;
    }
    f.last_ps = now;
}

std::int64_t FlowNetwork::completion(const Flow& f, std::int64_t now) {
    if (f.remaining <= 0.0) return now;
    const double ps = f.remaining * 1e12 / f.rate;
    if (!(ps <= kMaxDelayPs)) {
        throw SimulationError("flow completion time overflows: " + std::to_string(f.remaining) +
                              " bytes left at " + std::to_string(f.rate) + " B/s");
    }
    // Round up to whole picoseconds, forgiving floating-point residue far below a picosecond.
    const double tolerance = 1e-9 + ps * 1e-14;
    const double rounded = std::ceil(ps - tolerance);
    return now + (rounded > 0.0 ? static_cast<std::int64_t>(rounded) : 0);
}

inline void FlowNetwork::touch(LinkId link) {
    if (links_[link].mark != epoch_) {
        links_[link].mark = epoch_;
        touched_.push_back(link);
    }
}

void FlowNetwork::include(std::uint32_t flow) {
    Flow& f = flows_[flow];
    if (f.mark == epoch_) return;
    f.mark = epoch_;
    set_.push_back(flow);
    for (std::uint32_t j = 0; j < f.route_length; ++j)
        touch(route_[f.route_offset + j].link);
}

void FlowNetwork::include_component() {
    // Breadth first: every flow on a touched link joins, touching the rest of its route in turn.
    for (std::size_t i = 0; i < touched_.size(); ++i) {
        for (const LinkEntry& e : links_[touched_[i]].on)
            include(e.flow);
    }
}

void FlowNetwork::water_fill() {
    if (set_.size() == 1) {
        fill_one(set_.front());
        return;
    }
    for (std::uint32_t id : set_) {
        flows_[id].new_rate = -1.0;
        flows_[id].new_bottleneck = kNoLink;
    }
    // Capacity left by the flows outside the set, and the set's weight, per touched link.
    heap_.clear();
    bool shared = false;  // whether some link carries two flows of the set
    for (LinkId link : touched_) {
        double cap = links_[link].bandwidth;
        std::uint64_t weight = 0;
        int members = 0;
        for (const LinkEntry& e : links_[link].on) {
            const Flow& g = flows_[e.flow];
            if (g.mark == epoch_) {
                weight += e.multiplicity;
                ++members;
            } else {
                cap -= static_cast<double>(e.multiplicity) * g.rate;
            }
        }
        shared = shared || members > 1;
        links_[link].cap = cap;
        links_[link].weight = weight;
        if (weight > 0) heap_.push_back(Level{std::max(cap, 0.0) / static_cast<double>(weight), link});
    }
    if (!shared) {
        // No link carries two flows of the set: freezing one never changes another's levels, so each freezes
        // at its own lowest link level, as fill_one finds it (the same arithmetic, the same ties): no heap. On
        // each of its links the capacity just computed is fill_one's (the same subtractions in the same order:
        // the flow is the set's only one there), so it is not computed again.
        for (std::uint32_t id : set_)
            freeze_at_lowest(id, [](const Link& l) { return l.cap; });
        return;
    }
    flows_filled_ += set_.size();
    // Progressive filling with a lazy min-heap of link fair levels (ties: smaller link id first). Levels
    // only grow, so a top entry whose level is stale is re-keyed in place and sifted down.
    // Heapify: only the internal nodes (a 4-ary heap's last one is (n - 2) / 4); leaves are heaps already.
    for (std::size_t i = heap_.size() > 1 ? (heap_.size() - 2) / 4 + 1 : 0; i-- > 0;)
        sift_down(heap_, i);
    while (!heap_.empty()) {
        const LinkId link = heap_.front().link;
        if (links_[link].weight == 0) {  // every flow of the set on it is frozen already
            heap_.front() = heap_.back();
            heap_.pop_back();
            if (!heap_.empty()) sift_down(heap_, 0);
            continue;
        }
        const double level = std::max(links_[link].cap, 0.0) / static_cast<double>(links_[link].weight);
        if (level != heap_.front().key) {
            heap_.front().key = level;
            sift_down(heap_, 0);
            continue;
        }
        heap_.front() = heap_.back();
        heap_.pop_back();
        if (!heap_.empty()) sift_down(heap_, 0);
        // This link is the bottleneck of its unfrozen flows. Never hand out a zero rate (floating-point
        // cancellation, or a link filled by fixed flows in repair mode): the flow would never finish.
        const double rate = std::max(level, links_[link].bandwidth * 1e-12);
        for (const LinkEntry& e : links_[link].on) {
            Flow& f = flows_[e.flow];
            if (f.mark != epoch_ || f.new_rate >= 0.0) continue;
            f.new_rate = rate;
            f.new_bottleneck = link;
            for (std::uint32_t j = 0; j < f.route_length; ++j) {
                const LinkUse& use = route_[f.route_offset + j];
                links_[use.link].cap -= static_cast<double>(use.multiplicity) * rate;
                links_[use.link].weight -= use.multiplicity;
            }
        }
    }
}

void FlowNetwork::fill_one(std::uint32_t flow) {
    // One flow alone on its links among the set: the progressive filling freezes it at its lowest link level
    // (ties: smaller link id), the capacity its route's fixed flows leave divided by its multiplicity there;
    // the same result without a heap.
    freeze_at_lowest(flow, [this, flow](const Link& l) {
        double cap = l.bandwidth;
        for (const LinkEntry& e : l.on) {
            if (e.flow != flow) cap -= static_cast<double>(e.multiplicity) * flows_[e.flow].rate;
        }
        return cap;
    });
}

bool FlowNetwork::check_and_grow() {
    // Checks every touched link against the bottleneck characterisation (see the header); flows outside
    // the set that violate it join the set. Returns whether any did.
    std::vector<std::uint32_t>& grow = changed_;  // free scratch until the final apply
    grow.clear();
    const std::size_t links = touched_.size();
    for (std::size_t i = 0; i < links; ++i) {
        const LinkId link = touched_[i];
        const auto& list = links_[link].on;
        double load = 0.0;
        double fastest_in_set = 0.0;        // fastest flow of the set on this link
        double bottlenecked_in_set = -1.0;  // rate of the set's flows that froze on this link, if any
        bool has_fixed = false;
        for (const LinkEntry& e : list) {
            const Flow& g = flows_[e.flow];
            if (g.mark == epoch_) {
                load += static_cast<double>(e.multiplicity) * g.new_rate;
                fastest_in_set = std::max(fastest_in_set, g.new_rate);
                if (g.new_bottleneck == link) bottlenecked_in_set = std::max(bottlenecked_in_set, g.new_rate);
            } else {
                load += static_cast<double>(e.multiplicity) * g.rate;
                has_fixed = true;
            }
        }
        if (!has_fixed) continue;
        const double cap = links_[link].bandwidth;
        const bool saturated = load >= cap * (1.0 - kTolerance);
        const bool overloaded = load > cap * (1.0 + kTolerance);
        for (const LinkEntry& e : list) {
            const Flow& g = flows_[e.flow];
            if (g.mark == epoch_) continue;
            const bool bad =
                overloaded ||
                (g.bottleneck == link && (!saturated || fastest_in_set > g.rate * (1.0 + kTolerance))) ||
                (bottlenecked_in_set >= 0.0 && g.rate > bottlenecked_in_set * (1.0 + kTolerance));
            if (bad) grow.push_back(e.flow);
        }
    }
    for (std::uint32_t id : grow)
        include(id);
    const bool grew = !grow.empty();
    grow.clear();
    return grew;
}

std::span<const std::uint32_t> FlowNetwork::recompute(std::int64_t now) {
    changed_.clear();
    set_.clear();
    touched_.clear();
    if (++epoch_ == 0) {  // wrapped: clear stale marks so that no old epoch can match
        for (Link& l : links_) l.mark = 0;
        for (Flow& f : flows_)
            f.mark = 0;
        epoch_ = 1;
    }

    // Seeds: on each dirty link, the new flows, the flows bottlenecked there, and everyone if a new flow
    // joined a link that was saturated already.
    for (LinkId link : dirty_links_) {
        links_[link].dirty = 0;
        touch(link);
    }
    dirty_links_.clear();
    const std::size_t dirty = touched_.size();
    for (std::size_t i = 0; i < dirty; ++i) {
        const LinkId link = touched_[i];
        bool joined = false;
        double load = 0.0;
        for (const LinkEntry& e : links_[link].on) {
            const Flow& g = flows_[e.flow];
            if (g.bottleneck == kNoLink) {
                joined = true;
            } else {
                load += static_cast<double>(e.multiplicity) * g.rate;
            }
        }
        const bool everyone = joined && load >= links_[link].bandwidth * (1.0 - kTolerance);
        for (const LinkEntry& e : links_[link].on) {
            const Flow& g = flows_[e.flow];
            if (everyone || g.bottleneck == kNoLink || g.bottleneck == link) include(e.flow);
        }
    }

    if (set_.empty() && !full_) {
        // Only flows ended, and no flow left on their links was bottlenecked there: every other flow is constrained
        // elsewhere as before (the repair check would find nothing), so no rate changes.
        return changed_;
    }
    if (full_) {
        include_component();
        water_fill();
    } else {
        water_fill();
        for (int round = 0; check_and_grow(); ++round) {
            if (round + 1 >= kMaxRepairRounds) {
                ++fallbacks_;
                include_component();
                water_fill();
                break;
            }
            water_fill();
        }
    }

    // Apply: flows whose rate changed are advanced to `now` and rescheduled.
    changed_.clear();
    for (std::uint32_t id : set_) {
        Flow& f = flows_[id];
        f.bottleneck = f.new_bottleneck;
        if (f.new_rate == f.rate) continue;
        advance(f, residual_[id], now);
        f.rate = f.new_rate;
        ++f.version;
        f.end_ps = completion(f, now);
        changed_.push_back(id);
    }
    return changed_;
}

}  // namespace strata::engine::detail
