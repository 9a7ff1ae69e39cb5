// A GPU memory pool of the engine (internal to sim/engine): bytes in use by category, the peak and its
// breakdown, the first instant over capacity, and optionally every change of the total over time.
#pragma once

#include "strata/engine.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::engine::detail {

class MemoryPool {
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

    [[nodiscard]] PoolReport report() const;
    [[nodiscard]] const std::vector<MemorySample>& timeline() const { return timeline_; }

private:
    std::string name_;
    std::int64_t capacity_ = 0;
    std::vector<std::string> categories_;
    bool keep_timeline_ = false;
    std::int64_t in_use_ = 0;
    std::vector<std::int64_t> by_category_;
    std::int64_t peak_ = 0;
    std::int64_t peak_time_ = 0;
    std::vector<std::int64_t> peak_breakdown_;
    bool over_ = false;
    std::int64_t first_over_ = 0;
    std::vector<MemorySample> timeline_;
};

}  // namespace strata::engine::detail
