// Pure C++ (no CUDA) part of strata-calibrate: plain structs for a calibrated device profile, the YAML
// writer for docs/device-profile.md (format strata-device-profile/1, kind calibrated), and the small
// formulas the measurements need (nccl-tests bus-bandwidth factors, alpha-beta least-squares fit, the
// paper's Table 2 activation-memory formula, known-GPU peak FLOP/s and HBM bandwidth). Kept free of
// CUDA so the simulator's CPU test binary can link it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace strata::calibrate {

struct Provenance {
    std::string gpu;              // cudaDeviceProp::name
    int sm_count = 0;
    std::uint64_t memory_bytes = 0;
    std::string driver;           // driver release (or CUDA driver API version)
    std::string cuda_runtime;     // "13.0"
    std::string cublas;           // "13.0.0"
    std::string nccl;             // "2.28.9"
    int gpus_used = 0;
    std::string command;
    std::string date;             // UTC ISO 8601
    std::string host;
};

struct DeviceBlock {
    double peak_flops = 0;
    std::string peak_flops_source;     // written as the comment after peak_flops
    double hbm_bandwidth_bytes_per_s = 0;
    std::string hbm_source;
    std::uint64_t memory_capacity_bytes = 0;
    int sm_count = 0;
    double kernel_launch_us = 0;
};

struct GemmBlock {                    // tile sizes and k_half are not fitted: documented defaults
    int tile_m = 256;
    int tile_n = 128;
    double efficiency_ceiling = 0;
    double k_half = 192;              // as the A100 fit (scripts/fit-table4) and the analytical Hopper profiles
    double stream_k_efficiency = 0;   // kStreamKEfficiencySm90 on Hopper (sm90), else none (not measured)
    double stream_k_fixup = 0;        // kStreamKFixupSm90 with it
    std::string comment;
};

struct IntraNodeBlock {
    double bus_bandwidth_bytes_per_s = 0;
    double step_latency_us = 0;
    std::string comment;
};

struct GemmResult {
    std::string name;                 // e.g. "qkv_fwd"; written as a comment (not a profile key)
    std::int64_t m = 0, n = 0, k = 0, batch = 1;
    std::string dtype = "bf16";
    double time_us = 0, tflops = 0;
};

struct ElementwiseResult {
    std::string op;                   // one of the documented op names
    std::int64_t elements = 0, bytes = 0;
    double time_us = 0, gbps = 0;
};

struct CollectiveResult {
    std::string op;                   // all_reduce | all_gather | reduce_scatter | send_recv
    int ranks = 0;
    std::int64_t bytes = 0;
    double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
};

struct CollectiveFit {
    std::string op;
    int ranks = 0;
    double alpha_us = 0, beta_bytes_per_s = 0;
};

struct LayerResult {
    int heads = 0, hidden = 0, seq_len = 0, microbatch = 0, tensor = 1;
    bool sequence_parallel = false;
    std::string recompute = "none";   // none | selective | full
    double forward_ms = 0, backward_ms = 0;
    std::int64_t activation_bytes = 0, formula_bytes = 0;
    std::string note;
};

/// A GEMM's time while another kernel holds `sms` SMs (as an NCCL collective's blocks do), over its time alone:
/// the median over the measured GEMMs (strata's measured.sms_held).
struct SmsHeldResult {
    int sms = 0;
    double slowdown = 1;
    std::string note;
};

struct Profile {
    std::string name;                 // free text, e.g. "nvidia-h100-80gb-hbm3-calibrated"
    std::vector<std::string> header_comments;   // written at the top of the file
    Provenance provenance;
    DeviceBlock device;
    GemmBlock gemm;
    double elementwise_bandwidth_efficiency = 0;
    std::string elementwise_comment;
    std::optional<IntraNodeBlock> intra_node;   // absent with one GPU
    std::string intra_node_missing_comment;     // why intra_node is absent
    double copy_bandwidth_bytes_per_s = 0;
    std::vector<GemmResult> gemms;
    std::vector<ElementwiseResult> elementwise;
    std::vector<CollectiveResult> collectives;
    std::vector<CollectiveFit> collective_fits;
    std::vector<LayerResult> layers;
    std::vector<SmsHeldResult> sms_held;
    std::vector<std::string> skipped;           // "what: why", written as comments under measured:
};

/// Writes `p` in the documented YAML format.
void write_profile(std::ostream& out, const Profile& p);

/// Shortest text that reads back (strtod) to exactly `v`; non-finite values become 0.
std::string format_number(double v);
/// Double-quoted YAML string with \" and \\ escaped (control characters dropped).
std::string quote(std::string_view s);
/// Rounds to `digits` significant digits (for readable measured values).
double round_sig(double v, int digits = 5);

// ---- nccl-tests conventions ----------------------------------------------------------------------
enum class CollOp { all_reduce, all_gather, reduce_scatter, send_recv };
const char* coll_name(CollOp op);
/// busbw = algbw * factor:  all-reduce 2(n-1)/n;  all-gather, reduce-scatter (n-1)/n;  send/recv 1.
double busbw_factor(CollOp op, int ranks);
/// algbw in GB/s (1e9 bytes/s): bytes / time. `bytes` is the full buffer (all-gather output,
/// reduce-scatter input, all-reduce buffer, send/recv message).
double algbw_gbps(double bytes, double time_us);

// ---- alpha-beta model: time_us = alpha_us + bytes / beta -----------------------------------------
struct AlphaBeta {
    bool ok = false;
    double alpha_us = 0, beta_bytes_per_s = 0;
};
/// Least squares on relative error (weights 1/time^2, so small and large messages count alike).
/// A negative intercept is clamped to 0 (then beta is refitted through the origin).
/// Needs two or more distinct sizes and a positive slope; otherwise ok = false.
AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& time_us);

// ---- paper Table 2 (Korthikanti et al.), activation bytes per layer per GPU, 16-bit activations ---
/// TP: sbh(10 + 24/t + 5as/(ht));  TP+SP: sbh(34/t + 5as/(ht));  selective drops the 5as/(ht) term;
/// full recompute keeps the layer input only: 2sbh (2sbh/t with SP).
double table2_activation_bytes(double s, double b, double h, double a, double t, bool sequence_parallel,
                               std::string_view recompute);

// ---- device facts ---------------------------------------------------------------------------------
struct KnownPeak {
    double flops = 0;                 // dense bf16/fp16 tensor-core FLOP/s
    std::string source;
};
/// Dense bf16 peak for known GPUs by cudaDeviceProp::name (A100, H100 SXM/PCIe, H200).
std::optional<KnownPeak> known_peak_flops(std::string_view gpu_name);
/// HBM bandwidth from the memory clock (kHz) and bus width (bits), double data rate: 2*clk*width/8.
double hbm_bandwidth_from_clock(double memory_clock_khz, double bus_width_bits);
/// Fallback table of datasheet HBM bandwidth by GPU name.
std::optional<KnownPeak> known_hbm_bandwidth(std::string_view gpu_name);

/// The median of `v` (the mean of the middle two for an even count); 0 for an empty vector.
double median(std::vector<double> v);

/// The simulator's GEMM shape factor (sim/cost/cost_model.cpp, CostModel::gemm_efficiency without the ceiling):
/// the best of three tile shapes' wave quantization on `sm_count` SMs (or, with stream_k > 0, their work spread over
/// every SM at that share of the rate), times k / (k + k_half).
double gemm_shape_factor(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, int sm_count,
                         int tile_m, int tile_n, double k_half, double stream_k = 0, double stream_k_fixup = 0);

/// The analytical Hopper profiles' gemm.stream_k_efficiency and gemm.stream_k_fixup (scenarios/devices/
/// h100-sxm5-80gb.yaml: from H100 GEMM microbenchmarks of Transformer Engine's chunked GEMMs), written into profiles
/// calibrated on sm90 (Hopper) GPUs.
inline constexpr double kStreamKEfficiencySm90 = 0.90;
inline constexpr double kStreamKFixupSm90 = 0.20;

/// gemm.efficiency_ceiling fitted to the measured GEMMs: the median over the entries named in `names` (the
/// layer's GEMMs) of (measured FLOP/s / peak) / shape factor, so that the simulator's model gives the median layer
/// GEMM its measured time. Not the best single GEMM: that one is the most exposed to the clock (a cold GPU's
/// boost clock, measured 790 against 660-720 TF/s at the power limit on an H100). 0 when nothing matches.
double fit_gemm_ceiling(const std::vector<GemmResult>& gemms, const std::vector<std::string>& names, double peak_flops,
                        int sm_count, const GemmBlock& block);

}  // namespace strata::calibrate
