// The cost model: how long a kernel or a tensor-parallel collective takes on a device profile.
#pragma once

#include "strata/layer.hpp"
#include "strata/profile.hpp"
#include "strata/units.hpp"

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata {

enum class CostSource { analytical, measured };
[[nodiscard]] const char* to_string(CostSource s);

struct KernelCost {
    Time time;
    CostSource source = CostSource::analytical;
};

/// A compute kernel's speed (0, 1] while a collective's kernels hold `sms` SMs of the GPU. Without a measured
/// table, the share of the SMs left (1 - sms / sm_count, at least 0.1): the kernel loses the SMs the collective
/// holds. With the profile's measured_sms_held, 1 / slowdown interpolated linearly in sms from (0, 1) through
/// the table, past its last entry scaled by the share model from there. Measured on an H100 the loss is much
/// larger than the share at few SMs (2 SMs held: a GEMM 10-15% slower, not 1.5%): the GEMM's thread-block clusters
/// and waves no longer fit the SMs left.
/// `waves` > 0: a GEMM of that many output tiles per SM, at the table's per-wave slowdown where it has one
/// (MeasuredSmsHeld::at).
[[nodiscard]] double speed_with_sms_held(const DeviceProfile& profile, double sms, double waves = 0);
/// Fused attention's speed while a collective's kernels hold `sms` SMs: as speed_with_sms_held over the profile's
/// measured_attention_sms_held (cuDNN's kernels), the share of the SMs left without it or for FlashAttention-2's
/// kernels (`flash2`), which were not measured.
[[nodiscard]] double attention_speed_with_sms_held(const DeviceProfile& profile, double sms, bool flash2);
/// The share model alone: the speed a kernel keeps when it loses the `sms` SMs held, 1 - sms / sm_count (at
/// least 0.1; 1 without an SM count).
[[nodiscard]] double sm_share_speed(const DeviceProfile& profile, double sms);

/// The measured time of a collective over `ranks` GPUs of one node for a `message` of bytes (the full buffer, as
/// nccl-tests counts its size), if the profile measured that op over that many ranks: its collective_fit's
/// alpha + message / beta, else its measured.collectives interpolated linearly in the message size between the two
/// nearest sizes (below the smallest: the smallest's time; above the largest: the largest's bus bandwidth).
[[nodiscard]] std::optional<Time> measured_collective_time(const DeviceProfile& p, CollectiveKind kind, int ranks,
                                                           Bytes message);

/// Seconds a layer's passes spend, at the profile's rates, in BF16 / FP16 GEMMs, FP8 GEMMs, fused attention and the
/// rest (bandwidth-bound kernels, collectives the compute waits for): what sets the clock under a power limit.
struct PowerMix {
    double gemm_s = 0, gemm_fp8_s = 0, attention_s = 0, other_s = 0;
    PowerMix& operator+=(const PowerMix& o) {
        gemm_s += o.gemm_s, gemm_fp8_s += o.gemm_fp8_s, attention_s += o.attention_s, other_s += o.other_s;
        return *this;
    }
    [[nodiscard]] PowerMix times(double w) const { return {gemm_s * w, gemm_fp8_s * w, attention_s * w, other_s * w}; }
};

/// What a power limit leaves a mix of kernels: the SM clock, and the speed of its compute-bound kernels over the
/// profile's own rates (above 1: a lighter mix than the profile's reference keeps a higher clock).
struct SustainedClock {
    double clock_mhz = 0;       ///< 0 without a power limit
    double speed = 1;           ///< BF16 / FP16 GEMMs and fused attention
    double speed_fp8 = 1;       ///< FP8 GEMMs
    double boost_w = 0;         ///< the mix's mean power at the boost clock
    bool extrapolated = false;  ///< below the slowest measured clock of a curve the mix uses (a capped board)
    /// After rest (power.headroom_j): the share of the mix's time a run at the boost clock saves; the most a rested board
    /// saves (seconds of sustained-clock time: headroom_j / (boost_w - limit_w) seconds at the boost clock, times the
    /// boost's gain); and the seconds of saving each second idle gives back.
    double saving_fraction = 0;
    double headroom_s = 0;
    double headroom_accrual = 0;
};

/// The steady state of `mix` under `power`: the highest SM clock f <= boost at which the mix's mean power meets
/// power.limit_w. At clock f a GEMM runs at speed s(f) of its boost-clock rate drawing P(f) (its curve,
/// measured.gemm_power or gemm_power_fp8, linear in the clock between points, from the top point to (boost, speed
/// 1) above it with the top two points' slope in watts; below the slowest point only for a limit under that
/// point's watts, linearly from the last two points down to where GEMMs draw what bandwidth-bound kernels do);
/// fused attention at the BF16 curve's speed drawing attention_w x P(f) / P(boost); the rest at memory_bound_w,
/// unchanged. The mix's compute-bound seconds hold at reference_clock_mhz: each kind's time at f is its time there
/// x s(reference) / s(f). Without a power limit: speed 1 and clock 0. With power.headroom_j, below the boost clock:
/// a rested board runs at the boost clock until it has drawn headroom_j above the limit (boost_w - limit_w per
/// second), and each second idle at idle_w gives back limit_w - idle_w joules of it (saving_fraction, headroom_s,
/// headroom_accrual).
[[nodiscard]] SustainedClock sustained_clock(const PowerLimit& power, const PowerMix& mix);

/// A job's context-parallel ring as pass_time costs its collectives: its ranks, the SMs it holds, and where some of its
/// GPUs' neighbours sit on other nodes, the NIC bandwidth each GPU's bytes cross at (CostModel::context_ring).
struct ContextRing {
    int ranks = 1;
    /// SMs held for a collective's buffer (CostModel::context_ring_sms at the job's placement); unset: NCCL's
    /// intra-node channels.
    std::function<int(Bytes)> sms;
    /// Where a ring crosses nodes, each crossing step's share of the NIC it leaves and arrives by (the destination's
    /// rail; the busiest NIC's, as every ring steps at once); zero where every ring stays inside its nodes.
    BytesPerSecond across_nodes{};
};

/// Costs from a device profile. Analytical model:
///   GEMM: time = launch + max(flops / (peak x eff), bytes / (HBM x eta_mem)) where
///         eff = ceiling x wave_efficiency x k / (k + k_half); wave_efficiency is the fraction of the
///         last wave of output tiles that does useful work (tile quantization over the SMs), taking the
///         best of the tile shapes (tile_m x tile_n, its transpose, and half-size tiles); with the profile's
///         stream_k_efficiency e > 0 also stream-K, the tiles' work spread over every SM at
///         e / (1 + stream_k_fixup x (SMs / tiles - 1)) (the fixup only below one tile per SM), where better.
///         A chunked GEMM (GemmShape::chunks, Transformer Engine's overlap) costs its row or column chunks
///         back to back. A GEMM with an SM margin (GemmShape::sm_margin, TE's set_sm_margin) plans its waves or
///         stream-K on the SMs less the margin, at their share of the peak (a measured shape is scaled by the
///         model's ratio).
///   elementwise: time = launch + bytes / (HBM x eta_mem)
///   tensor-parallel collective inside a node (ring, alpha-beta):
///         time = steps x step_latency + per_rank_bytes / bus_bandwidth
///         all-reduce: 2(n-1) steps, 2(n-1)/n x message; all-gather / reduce-scatter: n-1 steps, (n-1)/n.
/// A calibrated profile's measured GEMM shape or elementwise op class replaces the analytical value, and a measured
/// collective inside a node (measured_collective_time) the ring.
/// Under a power limit (sustain) GEMMs and fused attention take their compute time over their sustained speed.
class CostModel {
public:
    explicit CostModel(DeviceProfile profile);

    [[nodiscard]] const DeviceProfile& profile() const { return profile_; }
    [[nodiscard]] KernelCost kernel(const Kernel& k) const;
    [[nodiscard]] double gemm_efficiency(const GemmShape& g) const;
    /// A FlashAttention kernel's share of peak_flops: interpolated in the profile's measured grid where it has one
    /// (bilinear in log2(batch x heads) and log2(sequence), clamped to the grid; another head_dim scaled by its own
    /// measured ratio to the grid), else the profile's flat forward / backward efficiency.
    [[nodiscard]] double flash_efficiency(const Kernel& k) const;
    [[nodiscard]] Time tp_collective(CollectiveKind kind, int ranks, Bytes message) const;
    /// SMs a collective's kernel holds while it runs (CommEngine): NCCL's nccl_channels, a userbuffers kernel's own
    /// CTAs, none for the copy engines.
    [[nodiscard]] int sms_held(const TpCollective& c) const;
    /// SMs Transformer Engine's context-parallel ring (a TpCollective with context_group) holds on its busiest GPU
    /// while it moves each step's keys and values: NCCL point-to-point kernels on PyTorch's communicators, by where
    /// each GPU's neighbours are. `ring_gpus`: the ring's GPUs in ring order; `message`: the collective's whole buffer
    /// (each step moves a c-th of it).
    [[nodiscard]] int context_ring_sms(std::span<const int> ring_gpus, int gpus_per_node, Bytes message) const;
    /// The same over every ring of a job (each stage, data replica and tensor rank, placed in Megatron's order): the
    /// busiest GPU's.
    [[nodiscard]] int context_ring_sms(const ExecutionSpec& e, int gpus_per_node, Bytes message) const;
    /// The same as a function of the collective's buffer, for pass_time and the simulation's units (this model and
    /// `e` must outlive it).
    [[nodiscard]] std::function<int(Bytes)> context_ring_sms(const ExecutionSpec& e, int gpus_per_node) const;
    /// The job's context-parallel ring on `system` (this model and `e` must outlive it): its SMs as above, and where
    /// any ring's neighbours sit on different nodes (Megatron's order puts them t apart) the NIC share of its steps.
    [[nodiscard]] ContextRing context_ring(const ExecutionSpec& e, const SystemSpec& system) const;
    /// A context-parallel collective's time on `ring`: the intra-node figure over its ranks, and where the ring
    /// crosses nodes at least the (c - 1) / c of the buffer a GPU sends, at its step's NIC share.
    [[nodiscard]] Time context_collective(const ContextRing& ring, CollectiveKind kind, Bytes message) const;
    /// A pass's collective as pass_time costs it: a context-parallel one on `ring` (context_collective), any other
    /// over `ranks` at the intra-node figure (tp_collective).
    [[nodiscard]] Time collective_time(const TpCollective& c, int ranks, const ContextRing& ring) const;
    /// Share of the speed compute loses while a collective holding `sms` SMs runs beside it:
    /// 1 - speed_with_sms_held(sms) (without a measured table: sms / sm_count); 0 for none.
    [[nodiscard]] double comm_sm_fraction(int sms) const;
    /// The same for an intra-node NCCL collective (nccl_channels SMs).
    [[nodiscard]] double comm_sm_fraction() const;
    /// A kernel's speed while a collective holds `sms` SMs beside it: a GEMM at the measured table's slowdown for its
    /// waves (gemm_waves, at least 1), none where its output tiles all fit on the SMs left; fused attention at the
    /// share of the SMs left (a bound: measured, it loses less); bandwidth-bound kernels at full speed up to the
    /// table's last entry (measured to 32 SMs held on an H100), past it at the further share. Without a measured table
    /// every kernel at the share of the SMs left.
    [[nodiscard]] double speed_beside(const Kernel& k, int sms) const;
    /// The share of speed a compute step's kernels lose, together, while a collective holds `sms` SMs (each at
    /// speed_beside), weighted by their times.
    [[nodiscard]] double step_sm_fraction(const Step& compute, int sms) const;
    /// The SMs a GEMM runs on: the device's, less its margin (at least one).
    [[nodiscard]] int gemm_sms(const GemmShape& g) const;
    /// A GEMM's output tiles per SM (the profile's tile_m x tile_n tiles, per chunk, on gemm_sms).
    [[nodiscard]] double gemm_waves(const GemmShape& g) const;
    /// Duration of compute that runs concurrently with a collective of the given duration, losing a share
    /// `fraction` of its speed while the collective runs: at speed 1 - fraction then, at full speed after it.
    [[nodiscard]] static Time slowed_compute(Time compute, Time collective, double fraction);
    /// A ring exchange (a collective on the copy engines, Transformer Engine's) beside `compute`: its chunked GEMM's
    /// last chunk, which waits for the last transfer (an all-gather's last chunk computes on what the last transfer
    /// brings; a reduce-scatter's first chunk is computed before its transfer can start), so the pair takes at least
    /// the collective plus one chunk. Zero for any other collective, or without a chunked GEMM.
    [[nodiscard]] Time ring_tail(const TpCollective& c, const Step& compute) const;
    /// Sum of the kernels of a compute step.
    [[nodiscard]] Time compute_step(const Step& step) const;
    /// Serial time of a pass (tensor-parallel collectives over `ranks` at the intra-node figures, context-parallel
    /// ones on `ring` by context_collective): compute steps and exposed collectives add up; an overlapped
    /// collective and the compute step after it take the longer of the two, the compute slowed by the SMs the
    /// collective occupies while both run (the ring's by ring.sms where set), the collective lengthened by a ring
    /// exchange's tail (ring_tail).
    [[nodiscard]] Time pass_time(const std::vector<Step>& pass, int ranks, const ContextRing& ring = {}) const;
    /// A layer's time by kind of work at this model's rates (call it before sustain()): compute steps' kernels as
    /// GEMMs, fused attention or the rest; with `collectives`, those the compute waits for (not overlapped) as the
    /// rest, over `ranks` (`context_ranks`).
    [[nodiscard]] PowerMix power_mix(const std::vector<const std::vector<Step>*>& passes, int ranks,
                                     int context_ranks = 1, bool collectives = true) const;
    /// Runs GEMMs and fused attention at the speed the profile's power limit leaves `mix` (sustained_clock): the
    /// steady state of a GPU running that mix over and over, as training runs a layer's passes (layer_power_mix in
    /// strata/power.hpp). A no-op without a power limit. Returns the clock.
    SustainedClock sustain(const PowerMix& mix);
    /// The clock sustain() set (speed 1: none).
    [[nodiscard]] const SustainedClock& sustained() const { return sustained_; }
    /// Bytes per collective step moved by each rank (ring algorithm).
    [[nodiscard]] static Bytes ring_bytes_per_rank(CollectiveKind kind, int ranks, Bytes message);
    [[nodiscard]] static int ring_steps(CollectiveKind kind, int ranks);

private:
    DeviceProfile profile_;
    SustainedClock sustained_;
    /// The measured fused-attention grid as efficiencies: xs = log2(batch x heads), ss = log2(seq_len), each
    /// axis ascending; eff[dir][i * ss.size() + j] at (xs[i], ss[j]), dir 0 forward, 1 backward.
    struct FlashGrid {
        std::int64_t head_dim = 0;
        std::vector<double> xs, ss;
        std::vector<double> eff[2];
        double head_dim_ratio(std::int64_t d, int dir) const;
        double at(double x, double s, int dir) const;
        std::vector<std::pair<std::int64_t, double>> ratios[2];   ///< (head_dim, measured / grid) per other head_dim
    };
    FlashGrid flash_grid_;
};

}  // namespace strata
