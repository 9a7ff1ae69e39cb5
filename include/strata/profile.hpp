// Device profiles: what one GPU can do. Analytical (public specs + a few efficiency parameters) or
// calibrated (adds measured tables written by strata-calibrate). Format: docs/device-profile.md.
#pragma once

#include "strata/units.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace strata {

struct MeasuredGemm {
    std::int64_t m = 0, n = 0, k = 0, batch = 1;
    double time_us = 0;
};

struct MeasuredElementwise {
    std::string op;
    std::int64_t bytes = 0;
    double time_us = 0;
};

/// One measured collective (nccl-tests' out-of-place time): `bytes` is nccl-tests' size (the all-reduce buffer, the
/// all-gather output, the reduce-scatter input), `ranks` GPUs on one node.
struct MeasuredCollective {
    std::string op;
    int ranks = 0;
    std::int64_t bytes = 0;
    double time_us = 0;
};

struct MeasuredCollectiveFit {
    std::string op;
    int ranks = 0;
    double alpha_us = 0;
    double beta_bytes_per_s = 0;
};

/// A whole transformer layer measured by strata-calibrate, as one GPU of a t-way group sees it.
struct MeasuredLayer {
    int heads = 0, hidden = 0, seq_len = 0, microbatch = 0, tensor = 1;
    bool sequence_parallel = false;
    std::string recompute;  ///< none | selective | full
    double forward_ms = 0, backward_ms = 0;
    std::int64_t activation_bytes = 0, formula_bytes = 0;
};

/// A fused (FlashAttention-style) attention kernel measured at one shape: causal, BF16, on one GPU of a
/// tensor-parallel group (heads = that GPU's heads). Times are the GPU's alone (no launch cost).
struct MeasuredFlashAttention {
    std::int64_t batch = 1, heads = 0, seq_len = 0, head_dim = 0;
    double forward_us = 0, backward_us = 0;
};

/// A GEMM's time while another kernel holds `sms` of the SMs for the whole GEMM (an NCCL collective's channels,
/// one SM each), over its time alone: the median over several GEMMs (strata-calibrate's SMs-held stage, or
/// calibrate/torch_tp_overlap.py --sweep). Optionally by the GEMM's waves w (its output tiles per SM): base +
/// per_wave / w, a least-squares line over the same GEMMs (a GEMM with few tiles per SM loses more to held SMs).
struct MeasuredSmsHeld {
    int sms = 0;
    double slowdown = 1;
    double base = 0;      ///< with per_wave > 0: the slowdown of a GEMM with many waves
    double per_wave = 0;  ///< 0: the median `slowdown` for every GEMM
    /// The slowdown of a GEMM of `waves` output tiles per SM (<= 0: not a GEMM, or unknown: the median).
    [[nodiscard]] double at(double waves) const { return per_wave > 0 && waves > 0 ? base + per_wave / waves : slowdown; }
};

/// A GEMM's speed and power at one SM clock the board's power limit set (calibrate/torch_power.py: 8192^3 GEMMs
/// interleaved with copies, each mix held until the clock settles; the GEMMs' own watts from the mix's mean power less
/// the copies' share at the copy-only phase's power).
struct MeasuredGemmPower {
    double clock_mhz = 0;  ///< the SM clock NVML read
    double speed = 1;      ///< the GEMM's rate over its rate at the boost clock (0, 1]
    double watts = 0;      ///< the board's power while GEMMs alone run at that clock
};

/// The board's power limit and what kernels draw under it (limit_w 0: not modelled). A GEMM-bound loop draws more than
/// the limit at the boost clock, so the clock falls until the mean power meets it; bandwidth-bound kernels draw less,
/// so a layer's kernels settle at the clock where their mix meets the limit (sustained_clock in cost.hpp).
struct PowerLimit {
    double limit_w = 0;          ///< the board's power limit (nvidia-smi power.limit)
    double boost_clock_mhz = 0;  ///< the SM clock with power to spare (nvidia-smi clocks.max.sm): speed 1
    double memory_bound_w = 0;   ///< the board's power while a device-to-device copy runs (bandwidth-bound kernels)
    double attention_w = 0;      ///< fused attention (forward + backward) alone at the boost clock
    /// The SM clock at which the profile's own GEMM and fused-attention rates hold: its figures come from runs
    /// neither cold nor at a layer's steady state (fixed from one GPU's layers measured at their steady state,
    /// scripts/power-profile.py). The boost clock where not given.
    double reference_clock_mhz = 0;
    /// Rest: the energy above limit_w a rested board spends before its clock settles (GEMMs after an idle gap run
    /// above their sustained clock until it is spent), in joules; 0: not measured (no headroom after idling).
    double headroom_j = 0;
    double idle_w = 0;  ///< the board's power while it waits, idle at the boost clock: what the rest refills by
    std::vector<MeasuredGemmPower> gemm;      ///< BF16 / FP16 GEMMs, by clock descending (at least one point)
    std::vector<MeasuredGemmPower> gemm_fp8;  ///< FP8 GEMMs (empty: as `gemm`)
    [[nodiscard]] bool present() const { return limit_w > 0; }
};

/// The head_dim with the most measured fused-attention entries (ties: the larger): the grid the cost model
/// interpolates in. Other head dims scale it by their own measured ratio (CostModel). 0 for an empty table.
[[nodiscard]] inline std::int64_t flash_grid_head_dim(const std::vector<MeasuredFlashAttention>& table) {
    std::int64_t best = 0;
    std::size_t best_count = 0;
    for (const auto& a : table) {
        std::size_t n = 0;
        for (const auto& b : table) n += b.head_dim == a.head_dim ? 1 : 0;
        if (n > best_count || (n == best_count && a.head_dim > best)) best = a.head_dim, best_count = n;
    }
    return best;
}

/// The grid's axes: its head_dim, and the distinct batch x heads and seq_len values of its entries, ascending.
struct FlashGridAxes {
    std::int64_t head_dim = 0;
    std::vector<std::int64_t> batch_heads, seq_lens;
};
[[nodiscard]] inline FlashGridAxes flash_grid_axes(const std::vector<MeasuredFlashAttention>& table) {
    FlashGridAxes g;
    g.head_dim = flash_grid_head_dim(table);
    for (const auto& a : table)
        if (a.head_dim == g.head_dim) g.batch_heads.push_back(a.batch * a.heads), g.seq_lens.push_back(a.seq_len);
    for (auto* axis : {&g.batch_heads, &g.seq_lens}) {
        std::sort(axis->begin(), axis->end());
        axis->erase(std::unique(axis->begin(), axis->end()), axis->end());
    }
    return g;
}

struct DeviceProfile {
    std::string file;                 ///< where it was loaded from
    std::string name;
    std::string kind;                 ///< analytical | calibrated
    double peak_flops = 0;
    double hbm_bandwidth = 0;         ///< bytes/s
    std::int64_t memory_capacity_bytes = 0;
    int sm_count = 0;
    double kernel_launch_us = 0;
    int gemm_tile_m = 256;
    int gemm_tile_n = 128;
    double gemm_efficiency_ceiling = 0;
    double gemm_k_half = 0;
    /// A stream-K (or split-K) decomposition's rate relative to the data-parallel tiles' (0: none). cuBLAS on Hopper
    /// spreads a GEMM whose output tiles fill the SMs badly over all of them at this share of the tiles' rate, so
    /// the model takes the better of the wave-quantized tiles and this (cost.hpp, CostModel::gemm_efficiency).
    double gemm_stream_k_efficiency = 0;
    /// With stream-K: the rate lost to the partial sums' fixup per further SM sharing an output tile, the rate being
    /// stream_k_efficiency / (1 + fixup x (SMs / tiles - 1)) when there are fewer tiles than SMs.
    double gemm_stream_k_fixup = 0;
    double elementwise_bandwidth_efficiency = 0;
    double intra_node_bus_bandwidth = 0;   ///< bytes/s
    double intra_node_step_latency_us = 0;
    /// NCCL's NVLink SHARP (NVLS) all-reduce inside a node (NVSwitch 3 reduces in the switch): its bus bandwidth
    /// (bytes/s); 0 where the node has none. Used for all-reduces within one node instead of the ring's.
    double intra_node_nvls_bus_bandwidth = 0;
    /// CUDA blocks (one SM each) an NCCL collective occupies; a kernel overlapped with a collective runs slower
    /// while the collective runs: by that share of the SMs, or as measured_sms_held says.
    int nccl_channels = 0;
    /// Measured slowdown of a GEMM while SMs are held (sorted by sms, unique). Where present it replaces the held
    /// share of the SMs in the interference of overlapped collectives (speed_with_sms_held).
    std::vector<MeasuredSmsHeld> measured_sms_held;
    /// Measured slowdown of cuDNN's fused attention while SMs are held (sorted by sms, unique; slowdown only): where
    /// present it replaces the held share for fused attention (not FlashAttention-2's kernels) beside a collective.
    std::vector<MeasuredSmsHeld> measured_attention_sms_held;
    /// The power limit (power.*, measured.gemm_power, measured.gemm_power_fp8): where present, GEMMs and fused
    /// attention run at the clock the limit leaves a layer's mix of kernels (CostModel::sustain); absent (the A100's),
    /// at the profile's rates.
    PowerLimit power;
    /// FlashAttention kernels' achieved share of peak_flops, forward and backward (0: none given).
    double peak_flops_fp8 = 0;             ///< dense FP8 tensor-core FLOP/s (0: no FP8)
    double gemm_efficiency_ceiling_fp8 = 0;  ///< the GEMM ceiling for FP8 GEMMs
    double flash_forward_efficiency = 0;
    double flash_backward_efficiency = 0;
    /// FlashAttention-2's kernels' speed against the fused attention above (and the measured grid), forward and
    /// backward (attention: flash2; 0: not given).
    double flash2_forward_ratio = 0;
    double flash2_backward_ratio = 0;
    /// A fused-attention kernel's time with dropout on the probabilities against without (its random numbers drawn
    /// in the forward and again in the backward), forward and backward alike; 1: not charged.
    double flash_dropout_time_factor = 1.0;
    std::vector<MeasuredGemm> measured_gemms;
    std::vector<MeasuredElementwise> measured_elementwise;
    std::vector<MeasuredCollectiveFit> measured_collectives;
    /// Measured collectives inside one node (measured.collectives): a collective of that op over that many ranks of
    /// one node takes the time interpolated between them (measured_collective_time in cost.hpp).
    std::vector<MeasuredCollective> measured_collective_points;
    std::vector<MeasuredLayer> measured_layers;
    /// Fused attention measured over a grid of (batch x heads, sequence length): where present, a FlashAttention
    /// kernel's efficiency is interpolated in it (see CostModel) instead of the flat efficiencies above.
    std::vector<MeasuredFlashAttention> measured_flash_attention;
    [[nodiscard]] bool has_flash_attention() const {
        return flash_forward_efficiency > 0 || !measured_flash_attention.empty();
    }
    [[nodiscard]] bool has_flash2() const { return has_flash_attention() && flash2_forward_ratio > 0; }
    int gpus_used = 0;                ///< provenance: GPUs the calibration ran on (0 if not given)
    /// The profile's kernel times are those of the slowest of this many GPUs running in step (1: one GPU's
    /// microbenchmarks; 8: layer times measured on a tensor-parallel group of 8). See VariationSpec.
    int timing_reference_gpus = 1;
};

}  // namespace strata
