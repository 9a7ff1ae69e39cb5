// GPU-to-GPU and run-to-run variation of kernel times (internal to sim/workload).
//
// A synchronous job runs at the pace of its slowest members: every tensor-parallel collective waits for the
// slowest GPU of its group, a pipeline for its slowest stage, the data-parallel reduction for the slowest
// replica. Identical GPUs are not equally fast (power management and manufacturing spread), so the larger the
// job, the slower its slowest GPU. Model (see docs/fidelity.md, "GPU-to-GPU variation"):
//
//  * GPU-to-GPU: GPU i runs its kernels at (1 + gpu_sigma * (z_i - z_ref)) times the profile's times. The
//    job's N GPUs are a stratified sample of a normal distribution: z values are the N quantiles
//    Phi^-1((k + 0.5) / N), k = 0..N-1, dealt to the ranks in an order drawn from `seed`. So a job's slowest
//    GPU is exactly as slow as a typical job of its size has (no luck of the draw), and the seed only decides
//    where it sits. z_ref = Phi^-1(1 - 0.5 / R), R = the profile's timing_reference_gpus: the profile's times
//    are those of the slowest of R GPUs measured in step (Table 4: a tensor-parallel group of 8), so a job of
//    R GPUs in step runs at exactly the profile's times.
//  * Run-to-run: each compute span (the kernels between two synchronisations) of each GPU is further scaled
//    by (1 + span_sigma * (z - e_ref)), z drawn from the seed, the GPU and the span's index; a group takes its
//    slowest member's z. e_ref = E[max of R independent standard normals]: a profile timed on R GPUs in step
//    (Table 4: 8) already holds the mean of their slowest member's jitter, so a group of R runs at the profile's
//    times on average; a one-GPU profile (R = 1) has e_ref = 0.
//
// A group of GPUs simulated as one entity (a tensor-parallel group in lockstep) takes its slowest member's
// factor. Everything is a pure function of (seed, rank, index): byte-identical whatever the thread count.
#pragma once

#include "strata/spec.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace strata::workload {

class Variation {
public:
    /// `reference_gpus`: how many GPUs in step the profile's times describe the slowest of (>= 1).
    Variation(const VariationSpec& spec, int reference_gpus, int gpus);

    [[nodiscard]] bool gpu_active() const { return spec_.gpu_sigma > 0; }
    [[nodiscard]] bool span_active() const { return spec_.span_sigma > 0; }
    /// The standard-normal score of a GPU's persistent speed (higher: slower).
    [[nodiscard]] double z(int rank) const { return z_.empty() ? 0.0 : z_[static_cast<std::size_t>(rank)]; }
    /// Persistent speed factor of a group of GPUs that run in step: its slowest member's.
    [[nodiscard]] double group_factor(std::span<const int> ranks) const;
    /// Run-to-run factor of the group's `span`-th compute span (its slowest member's draw).
    [[nodiscard]] double span_factor(std::span<const int> ranks, std::uint64_t span) const;
    /// The z of the slowest of `n` GPUs in the stratified convention: Phi^-1(1 - 0.5 / n).
    [[nodiscard]] static double slowest_of(int n);
    /// E[max of n independent standard normals] (0 for n = 1; 1.4236 for n = 8), by quadrature.
    [[nodiscard]] static double expected_max_normal(int n);

private:
    VariationSpec spec_;
    double z_ref_ = 0;
    double span_ref_ = 0;
    std::vector<double> z_;
};

/// `t` scaled by `factor` (exactly `t` when the factor is 1).
[[nodiscard]] Time scaled(Time t, double factor);

}  // namespace strata::workload
