// Max-min fair sharing of link bandwidth between active flows: progressive filling over the connected
// components touched since the last recomputation. The algorithm is described in flow_network.hpp.
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

}  // namespace

LinkId FlowNetwork::add_link(double bandwidth) {
    const auto id = static_cast<LinkId>(bandwidth_.size());
    bandwidth_.push_back(bandwidth);
    on_link_.emplace_back();
    link_mark_.push_back(0);
    link_dirty_.push_back(0);
    cap_.push_back(0.0);
    weight_.push_back(0);
    return id;
}

std::uint32_t FlowNetwork::add_flow(std::span<const LinkUse> route, double bytes) {
    Flow f;
    f.route_offset = static_cast<std::uint32_t>(route_.size());
    f.route_length = static_cast<std::uint32_t>(route.size());
    f.bytes = bytes;
    f.remaining = bytes;
    route_.insert(route_.end(), route.begin(), route.end());
    route_pos_.resize(route_.size(), 0);
    flows_.push_back(f);
    return static_cast<std::uint32_t>(flows_.size() - 1);
}

void FlowNetwork::mark_dirty(LinkId link) {
    if (!link_dirty_[link]) {
        link_dirty_[link] = 1;
        dirty_links_.push_back(link);
    }
}

void FlowNetwork::activate(std::uint32_t flow, std::int64_t now) {
    Flow& f = flows_[flow];
    f.remaining = f.bytes;
    f.rate = 0.0;
    f.last_ps = now;
    ++f.version;
    for (std::uint32_t j = 0; j < f.route_length; ++j) {
        const LinkUse& use = route_[f.route_offset + j];
        auto& list = on_link_[use.link];
        route_pos_[f.route_offset + j] = static_cast<std::uint32_t>(list.size());
        list.push_back(LinkEntry{flow, use.multiplicity});
        mark_dirty(use.link);
    }
}

void FlowNetwork::deactivate(std::uint32_t flow) {
    Flow& f = flows_[flow];
    ++f.version;
    f.rate = 0.0;
    for (std::uint32_t j = 0; j < f.route_length; ++j) {
        const LinkId link = route_[f.route_offset + j].link;
        auto& list = on_link_[link];
        const std::uint32_t pos = route_pos_[f.route_offset + j];
        const LinkEntry moved = list.back();
        list[pos] = moved;
        list.pop_back();
        if (moved.flow != flow) {
            // Tell the moved flow where its entry for this link now lives.
            const Flow& g = flows_[moved.flow];
            for (std::uint32_t k = 0; k < g.route_length; ++k) {
                if (route_[g.route_offset + k].link == link) {
                    route_pos_[g.route_offset + k] = pos;
                    break;
                }
            }
        }
        mark_dirty(link);
    }
}

void FlowNetwork::advance(Flow& f, std::int64_t now) {
    if (f.rate > 0.0 && now > f.last_ps) {
        f.remaining -= f.rate * static_cast<double>(now - f.last_ps) / 1e12;
        if (f.remaining <= f.bytes * kResidualFraction) f.remaining = 0.0;
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

std::span<const std::uint32_t> FlowNetwork::recompute(std::int64_t now) {
    changed_.clear();
    comp_links_.clear();
    comp_flows_.clear();
    if (++epoch_ == 0) {  // wrapped: clear stale marks so that no old epoch can match
        std::fill(link_mark_.begin(), link_mark_.end(), 0);
        for (Flow& f : flows_) f.mark = 0;
        epoch_ = 1;
    }

    // Connected components of the dirty links: links -> active flows -> their links, breadth first.
    for (LinkId link : dirty_links_) {
        link_dirty_[link] = 0;
        if (link_mark_[link] != epoch_) {
            link_mark_[link] = epoch_;
            comp_links_.push_back(link);
        }
    }
    dirty_links_.clear();
    for (std::size_t i = 0; i < comp_links_.size(); ++i) {
        for (const LinkEntry& e : on_link_[comp_links_[i]]) {
            Flow& f = flows_[e.flow];
            if (f.mark == epoch_) continue;
            f.mark = epoch_;
            f.new_rate = -1.0;
            comp_flows_.push_back(e.flow);
            for (std::uint32_t j = 0; j < f.route_length; ++j) {
                const LinkId other = route_[f.route_offset + j].link;
                if (link_mark_[other] != epoch_) {
                    link_mark_[other] = epoch_;
                    comp_links_.push_back(other);
                }
            }
        }
    }
    if (comp_flows_.empty()) return {};

    // Progressive filling with a lazy min-heap of link fair levels (ties: smaller link id first).
    heap_.clear();
    for (LinkId link : comp_links_) {
        std::uint64_t weight = 0;
        for (const LinkEntry& e : on_link_[link]) weight += e.multiplicity;
        cap_[link] = bandwidth_[link];
        weight_[link] = weight;
        if (weight > 0) heap_.emplace_back(bandwidth_[link] / static_cast<double>(weight), link);
    }
    const auto later = std::greater<std::pair<double, LinkId>>();
    std::make_heap(heap_.begin(), heap_.end(), later);
    while (!heap_.empty()) {
        std::pop_heap(heap_.begin(), heap_.end(), later);
        const auto [key, link] = heap_.back();
        heap_.pop_back();
        if (weight_[link] == 0) continue;  // every flow on it is frozen already
        const double level = std::max(cap_[link], 0.0) / static_cast<double>(weight_[link]);
        if (level != key) {  // stale key: re-queue at the current level
            heap_.emplace_back(level, link);
            std::push_heap(heap_.begin(), heap_.end(), later);
            continue;
        }
        // This link is the bottleneck of its unfrozen flows. Guard against a zero rate caused by
        // floating-point cancellation: a link with capacity always gives its flows something.
        const double rate = std::max(level, bandwidth_[link] * 1e-12);
        for (const LinkEntry& e : on_link_[link]) {
            Flow& f = flows_[e.flow];
            if (f.new_rate >= 0.0) continue;
            f.new_rate = rate;
            for (std::uint32_t j = 0; j < f.route_length; ++j) {
                const LinkUse& use = route_[f.route_offset + j];
                cap_[use.link] -= static_cast<double>(use.multiplicity) * rate;
                weight_[use.link] -= use.multiplicity;
            }
        }
    }

    // Apply: only flows whose rate changed are advanced and rescheduled.
    for (std::uint32_t id : comp_flows_) {
        Flow& f = flows_[id];
        if (f.new_rate == f.rate) continue;
        advance(f, now);
        f.rate = f.new_rate;
        ++f.version;
        f.end_ps = completion(f, now);
        changed_.push_back(id);
    }
    return changed_;
}

}  // namespace strata::engine::detail
