// A GPU memory pool of the engine (internal to sim/engine): bytes in use by category, the peak and its
// breakdown, the first instant over capacity, and optionally every change of the total over time.
#pragma once

#include "strata/engine.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::engine::detail {

class alignas(64) MemoryPool {
public:
    MemoryPool(std::string name, Bytes capacity, std::vector<std::string> categories, bool keep_timeline);

    [[nodiscard]] const std::string& name() const { return name_; }
    /// Throws SimulationError (naming `what`) unless `category` is one of the pool's.
    void check_category(std::uint32_t category, const char* what) const;
    /// Memory held from time zero (before start()).
    void add_static(std::uint32_t category, Bytes bytes);
    /// Time zero: the static holdings are the first peak (and the first timeline sample).
    void start();
    /// A change of `delta` bytes in `category` at simulated time `now_ps`.
    void change(std::uint32_t category, std::int64_t delta, std::int64_t now_ps);
    /// Asks the memory system for what change() reads (no effect on results).
    void prefetch() const {
        __builtin_prefetch(this, 1);
        if (by_category_.empty()) return;
        __builtin_prefetch(by_category_.data(), 1);
        __builtin_prefetch(by_category_.data() + by_category_.size() - 1, 1);
    }

    [[nodiscard]] PoolReport report() const;
    [[nodiscard]] const std::vector<MemorySample>& timeline() const { return timeline_; }

private:
    // What every change() reads and writes, in the record's first cache line.
    std::int64_t in_use_ = 0;
    std::int64_t peak_ = 0;
    std::int64_t capacity_ = 0;
    std::vector<std::int64_t> by_category_;
    std::uint32_t category_count_ = 0;
    bool keep_timeline_ = false;
    bool over_ = false;
    // The rest: names, the peak's breakdown and time, the timeline.
    std::string name_;
    std::vector<std::string> categories_;
    std::int64_t peak_time_ = 0;
    std::vector<std::int64_t> peak_breakdown_;
    std::int64_t first_over_ = 0;
    std::vector<MemorySample> timeline_;
};

}  // namespace strata::engine::detail
