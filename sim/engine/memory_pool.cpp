// A GPU memory pool of the engine (see memory_pool.hpp).
#include "memory_pool.hpp"

#include "strata/errors.hpp"

namespace strata::engine::detail {

MemoryPool::MemoryPool(std::string name, Bytes capacity, std::vector<std::string> categories, bool keep_timeline)
    : capacity_(capacity.value),
      by_category_(categories.size(), 0),
      category_count_(static_cast<std::uint32_t>(categories.size())),
      keep_timeline_(keep_timeline),
      name_(std::move(name)),
      categories_(std::move(categories)),
      peak_breakdown_(categories_.size(), 0) {
    if (capacity.value < 0) throw SimulationError("Simulator::add_pool: pool '" + name_ + "' has a negative capacity");
}

void MemoryPool::check_category(std::uint32_t category, const char* what) const {
    if (category >= category_count_) {
        throw SimulationError(std::string("Simulator::") + what + ": category " + std::to_string(category) +
                              " out of range for pool '" + name_ + "'");
    }
}

void MemoryPool::add_static(std::uint32_t category, Bytes bytes) {
    check_category(category, "add_static");
    if (bytes.value < 0) throw SimulationError("Simulator::add_static: negative size for pool '" + name_ + "'");
    in_use_ += bytes.value;
    by_category_[category] += bytes.value;
}

void MemoryPool::start() {
    peak_ = in_use_;
    peak_time_ = 0;
    peak_breakdown_ = by_category_;
    if (in_use_ > capacity_) {
        over_ = true;
        first_over_ = 0;
    }
    if (keep_timeline_) timeline_.push_back(MemorySample{Time::zero(), Bytes(in_use_)});
}

void MemoryPool::change(std::uint32_t category, std::int64_t delta, std::int64_t now) {
    in_use_ += delta;
    by_category_[category] += delta;
    if (keep_timeline_) {
        // Changes at one instant coalesce into one sample holding the value after the last of them;
        // an instant whose changes cancel out leaves no sample (except the one at time zero).
        auto& tl = timeline_;
        if (!tl.empty() && tl.back().time.ps() == now) {
            tl.back().in_use = Bytes(in_use_);
            if (tl.size() >= 2 && tl[tl.size() - 2].in_use == tl.back().in_use) tl.pop_back();
        } else {
            tl.push_back(MemorySample{Time::from_ps(now), Bytes(in_use_)});
        }
    }
    if (in_use_ > peak_) {
        peak_ = in_use_;
        peak_time_ = now;
        peak_breakdown_ = by_category_;
    }
    if (!over_ && in_use_ > capacity_) {
        over_ = true;
        first_over_ = now;
    }
}

PoolReport MemoryPool::report() const {
    PoolReport r;
    r.name = name_;
    r.capacity = Bytes(capacity_);
    r.peak = Bytes(peak_);
    r.peak_time = Time::from_ps(peak_time_);
    r.peak_breakdown.reserve(peak_breakdown_.size());
    for (std::int64_t b : peak_breakdown_) r.peak_breakdown.emplace_back(b);
    r.over_capacity = over_;
    r.first_over_time = Time::from_ps(over_ ? first_over_ : 0);
    return r;
}

}  // namespace strata::engine::detail
