// GPU-to-GPU and run-to-run variation of kernel times: see variation.hpp.
#include "variation.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <numeric>

namespace strata::workload {

namespace {

/// SplitMix64: a well-mixed 64-bit hash (Steele, Lea, Flood 2014).
std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

double normal_quantile(double p) {
    return boost::math::quantile(boost::math::normal_distribution<double>(), p);
}

}  // namespace

double Variation::slowest_of(int n) {
    return n <= 1 ? 0.0 : normal_quantile(1.0 - 0.5 / n);
}

double Variation::expected_max_normal(int n) {
    if (n <= 1) return 0.0;
    // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, Simpson's rule on [-10, 10] (the tails beyond are < 1e-20).
    const boost::math::normal_distribution<double> normal;
    constexpr int kSteps = 4000;
    constexpr double lo = -10.0, hi = 10.0, h = (hi - lo) / kSteps;
    double sum = 0;
    for (int i = 0; i <= kSteps; ++i) {
        const double x = lo + i * h;
        const double f = x * n * boost::math::pdf(normal, x) * std::pow(boost::math::cdf(normal, x), n - 1);
        sum += f * (i == 0 || i == kSteps ? 1.0 : (i % 2 ? 4.0 : 2.0));
    }
    return sum * h / 3.0;
}

Variation::Variation(const VariationSpec& spec, int reference_gpus, int gpus) : spec_(spec) {
    if (reference_gpus < 1) throw SimulationError("variation: reference GPUs must be >= 1");
    z_ref_ = slowest_of(reference_gpus);
    if (span_active()) span_ref_ = expected_max_normal(reference_gpus);
    if (!gpu_active() || gpus <= 0) return;
    // Deal the N quantiles to the ranks in an order drawn from the seed (ties broken by rank).
    std::vector<std::pair<std::uint64_t, int>> order(static_cast<std::size_t>(gpus));
    for (int r = 0; r < gpus; ++r)
        order[static_cast<std::size_t>(r)] = {
            mix(spec_.seed * 0x100000001b3ULL ^ mix(static_cast<std::uint64_t>(r))), r};
    std::sort(order.begin(), order.end());
    z_.assign(static_cast<std::size_t>(gpus), 0.0);
    for (int k = 0; k < gpus; ++k) {
        z_[static_cast<std::size_t>(order[static_cast<std::size_t>(k)].second)] =
            gpus == 1 ? 0.0 : normal_quantile((k + 0.5) / gpus);
    }
}

double Variation::group_factor(std::span<const int> ranks) const {
    if (!gpu_active() || ranks.empty()) return 1.0;
    double worst = z(ranks.front());
    for (int r : ranks)
        worst = std::max(worst, z(r));
    return std::max(0.5, 1.0 + spec_.gpu_sigma * (worst - z_ref_));
}

double Variation::span_factor(std::span<const int> ranks, std::uint64_t span) const {
    if (!span_active() || ranks.empty()) return 1.0;
    double worst = -1e300;
    for (int r : ranks) {
        const std::uint64_t h =
            mix(mix(spec_.seed ^ 0x5bd1e995ULL) ^ mix(static_cast<std::uint64_t>(r) << 32 ^ span));
        const double u = (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;  // in (0, 1)
        worst = std::max(worst, normal_quantile(u));
    }
    return std::max(0.5, 1.0 + spec_.span_sigma * (worst - span_ref_));
}

Time scaled(Time t, double factor) {
    if (factor == 1.0) return t;
    return Time::from_ps(std::llround(static_cast<double>(t.ps()) * factor));
}

}  // namespace strata::workload
