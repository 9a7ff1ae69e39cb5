// Writes a calibrated device profile (docs/device-profile.md) and implements the pure-C++ formulas
// of strata-calibrate: nccl-tests busbw factors, the alpha-beta fit, the paper's Table 2 formula and
// the known-GPU tables. No CUDA here; see profile_writer.hpp.
#include "profile_writer.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace strata::calibrate {

std::string format_number(double v) {
    if (!std::isfinite(v)) v = 0;
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);   // shortest round-trip form
    return std::string(buf, res.ptr);
}

std::string quote(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) < 0x20) continue;
        out += c;
    }
    return out + "\"";
}

double round_sig(double v, int digits) {
    if (!std::isfinite(v) || v == 0) return std::isfinite(v) ? v : 0;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return std::strtod(buf, nullptr);
}

namespace {
std::string one_line(std::string_view s) {
    std::string out(s);
    std::replace(out.begin(), out.end(), '\n', ' ');
    std::replace(out.begin(), out.end(), '\r', ' ');
    return out;
}

std::string comment(std::string_view s) { return s.empty() ? "" : "  # " + one_line(s); }

const char* yes_no(bool b) { return b ? "true" : "false"; }

std::string num(double v) { return format_number(v); }
std::string num(std::int64_t v) { return std::to_string(v); }
}  // namespace

void write_profile(std::ostream& o, const Profile& p) {
    for (const auto& c : p.header_comments) o << "# " << one_line(c) << "\n";
    o << "format: strata-device-profile/1\n";
    o << "name: " << quote(p.name) << "\n";
    o << "kind: calibrated\n\n";

    const Provenance& v = p.provenance;
    o << "provenance:\n";
    o << "  gpu: " << quote(v.gpu) << "\n";
    o << "  sm_count: " << v.sm_count << "\n";
    o << "  memory_bytes: " << v.memory_bytes << "\n";
    o << "  driver: " << quote(v.driver) << "\n";
    o << "  cuda_runtime: " << quote(v.cuda_runtime) << "\n";
    o << "  cublas: " << quote(v.cublas) << "\n";
    o << "  nccl: " << quote(v.nccl) << "\n";
    o << "  gpus_used: " << v.gpus_used << "\n";
    o << "  command: " << quote(v.command) << "\n";
    o << "  date: " << quote(v.date) << "\n";
    o << "  host: " << quote(v.host) << "\n\n";

    const DeviceBlock& d = p.device;
    o << "device:\n";
    o << "  peak_flops: " << num(d.peak_flops) << comment("source: " + d.peak_flops_source) << "\n";
    o << "  hbm_bandwidth_bytes_per_s: " << num(d.hbm_bandwidth_bytes_per_s) << comment("source: " + d.hbm_source)
      << "\n";
    o << "  memory_capacity_bytes: " << d.memory_capacity_bytes << comment("source: cudaDeviceProp::totalGlobalMem")
      << "\n";
    o << "  sm_count: " << d.sm_count << comment("source: cudaDeviceProp::multiProcessorCount") << "\n";
    o << "  kernel_launch_us: " << num(d.kernel_launch_us)
      << comment("source: measured, back-to-back empty kernel launches on one stream") << "\n\n";

    o << "gemm:" << comment(p.gemm.comment) << "\n";
    o << "  tile_m: " << p.gemm.tile_m << comment("not fitted: documented default") << "\n";
    o << "  tile_n: " << p.gemm.tile_n << comment("not fitted: documented default") << "\n";
    o << "  efficiency_ceiling: " << num(p.gemm.efficiency_ceiling)
      << comment("source: measured GEMMs, see the gemm: line") << "\n";
    o << "  k_half: " << num(p.gemm.k_half) << comment("not fitted: documented default") << "\n";
    o << "  stream_k_efficiency: " << num(p.gemm.stream_k_efficiency)
      << comment(p.gemm.stream_k_efficiency > 0 ? "not fitted here: the analytical Hopper profiles' (H100 chunked-GEMM "
                                                  "microbenchmarks)"
                                                : "none: measured on Hopper (sm90) only")
      << "\n";
    o << "  stream_k_fixup: " << num(p.gemm.stream_k_fixup)
      << comment(p.gemm.stream_k_efficiency > 0 ? "not fitted here: as stream_k_efficiency" : "none") << "\n\n";

    o << "elementwise:\n";
    o << "  bandwidth_efficiency: " << num(p.elementwise_bandwidth_efficiency)
      << comment(p.elementwise_comment.empty() ? "source: median measured elementwise GB/s / hbm_bandwidth"
                                               : p.elementwise_comment)
      << "\n\n";

    if (p.intra_node) {
        o << "intra_node:" << comment(p.intra_node->comment) << "\n";
        o << "  bus_bandwidth_bytes_per_s: " << num(p.intra_node->bus_bandwidth_bytes_per_s)
          << comment("source: all_reduce fit beta * 2(n-1)/n") << "\n";
        o << "  step_latency_us: " << num(p.intra_node->step_latency_us)
          << comment("source: all_reduce fit alpha / (2(n-1)) ring steps") << "\n\n";
    } else {
        o << "# intra_node: omitted. " << one_line(p.intra_node_missing_comment) << "\n\n";
    }

    o << "measured:\n";
    o << "  copy_bandwidth_bytes_per_s: " << num(p.copy_bandwidth_bytes_per_s)
      << comment("cudaMemcpyAsync device-to-device, bytes read + written per second") << "\n";

    o << "  gemm:" << (p.gemms.empty() ? " []" : "") << "\n";
    for (const auto& g : p.gemms) {
        o << "    - {m: " << num(g.m) << ", n: " << num(g.n) << ", k: " << num(g.k) << ", batch: " << num(g.batch)
          << ", dtype: " << g.dtype << ", time_us: " << num(g.time_us) << ", tflops: " << num(g.tflops) << "}"
          << comment(g.name) << "\n";
    }
    o << "  elementwise:" << (p.elementwise.empty() ? " []" : "") << "\n";
    for (const auto& e : p.elementwise) {
        o << "    - {op: " << e.op << ", elements: " << num(e.elements) << ", bytes: " << num(e.bytes)
          << ", time_us: " << num(e.time_us) << ", gbps: " << num(e.gbps) << "}\n";
    }
    o << "  collectives:" << (p.collectives.empty() ? " []" : "") << "\n";
    for (const auto& c : p.collectives) {
        o << "    - {op: " << c.op << ", ranks: " << c.ranks << ", bytes: " << num(c.bytes)
          << ", time_us: " << num(c.time_us) << ", algbw_gbps: " << num(c.algbw_gbps)
          << ", busbw_gbps: " << num(c.busbw_gbps) << "}\n";
    }
    o << "  collective_fit:" << (p.collective_fits.empty() ? " []" : "") << "\n";
    for (const auto& f : p.collective_fits) {
        o << "    - {op: " << f.op << ", ranks: " << f.ranks << ", alpha_us: " << num(f.alpha_us)
          << ", beta_bytes_per_s: " << num(f.beta_bytes_per_s) << "}\n";
    }
    o << "  layers:" << (p.layers.empty() ? " []" : "") << "\n";
    for (const auto& l : p.layers) {
        o << "    - {heads: " << l.heads << ", hidden: " << l.hidden << ", seq_len: " << l.seq_len
          << ", microbatch: " << l.microbatch << ", tensor: " << l.tensor
          << ", sequence_parallel: " << yes_no(l.sequence_parallel) << ", recompute: " << l.recompute
          << ",\n       forward_ms: " << num(l.forward_ms) << ", backward_ms: " << num(l.backward_ms)
          << ", activation_bytes: " << num(l.activation_bytes) << ", formula_bytes: " << num(l.formula_bytes);
        if (!l.note.empty()) o << ", note: " << quote(l.note);
        o << "}\n";
    }
    if (!p.sms_held.empty()) {
        o << "  sms_held:\n";
        for (const auto& h : p.sms_held) {
            o << "    - {sms: " << h.sms << ", slowdown: " << num(h.slowdown);
            if (!h.note.empty()) o << ", note: " << quote(h.note);
            o << "}\n";
        }
    }
    for (const auto& s : p.skipped) o << "  # skipped: " << one_line(s) << "\n";
}

// ---- nccl-tests conventions ----------------------------------------------------------------------

const char* coll_name(CollOp op) {
    switch (op) {
        case CollOp::all_reduce: return "all_reduce";
        case CollOp::all_gather: return "all_gather";
        case CollOp::reduce_scatter: return "reduce_scatter";
        case CollOp::send_recv: return "send_recv";
    }
    return "?";
}

double busbw_factor(CollOp op, int n) {
    if (n < 1) return 0;
    switch (op) {
        case CollOp::all_reduce: return 2.0 * (n - 1) / n;           // reduce-scatter + all-gather
        case CollOp::all_gather:
        case CollOp::reduce_scatter: return static_cast<double>(n - 1) / n;
        case CollOp::send_recv: return 1.0;
    }
    return 0;
}

double algbw_gbps(double bytes, double time_us) { return time_us > 0 ? bytes / (time_us * 1e-6) / 1e9 : 0; }

// ---- alpha-beta fit ---------------------------------------------------------------------------------

AlphaBeta fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& time_us) {
    AlphaBeta r;
    if (bytes.size() != time_us.size() || bytes.size() < 2) return r;
    double bmax = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        if (!(time_us[i] > 0) || !(bytes[i] >= 0)) return r;
        bmax = std::max(bmax, bytes[i]);
    }
    if (bmax <= 0) return r;
    // Weighted least squares, x = bytes / bmax (conditioning), weights 1 / t^2.
    double S = 0, Sx = 0, Sy = 0, Sxx = 0, Sxy = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        double w = 1.0 / (time_us[i] * time_us[i]), x = bytes[i] / bmax, y = time_us[i];
        S += w; Sx += w * x; Sy += w * y; Sxx += w * x * x; Sxy += w * x * y;
    }
    double det = S * Sxx - Sx * Sx;
    if (!(det > 1e-12 * S * Sxx)) return r;        // all sizes equal
    double c = (S * Sxy - Sx * Sy) / det;          // us per (bmax bytes)
    double alpha = (Sy - c * Sx) / S;
    if (alpha < 0) {
        alpha = 0;
        c = Sxy / Sxx;
    }
    if (!(c > 0)) return r;
    r.ok = true;
    r.alpha_us = alpha;
    r.beta_bytes_per_s = bmax * 1e6 / c;
    return r;
}

// ---- Table 2 -----------------------------------------------------------------------------------------

double table2_activation_bytes(double s, double b, double h, double a, double t, bool sp,
                               std::string_view recompute) {
    const double sbh = s * b * h;
    if (recompute == "full") return sp ? 2 * sbh / t : 2 * sbh;
    double base = sp ? sbh * 34 / t : sbh * (10 + 24 / t);
    if (recompute == "selective") return base;
    return base + sbh * 5 * a * s / (h * t);
}

// ---- device facts ------------------------------------------------------------------------------------

namespace {
bool has(std::string_view s, std::string_view w) { return s.find(w) != std::string_view::npos; }
}  // namespace

std::optional<KnownPeak> known_peak_flops(std::string_view n) {
    if (has(n, "NVL")) return std::nullopt;   // H100 NVL differs from SXM and PCIe; not in the table
    if (has(n, "H200"))
        return KnownPeak{989.4e12, "NVIDIA H200 datasheet, BF16 1979 TFLOPS with sparsity = 989.4 dense"};
    if (has(n, "H100") && has(n, "PCIe"))
        return KnownPeak{756e12, "NVIDIA H100 PCIe datasheet, BF16 1513 TFLOPS with sparsity = 756 dense"};
    if (has(n, "H100"))
        return KnownPeak{989.4e12, "NVIDIA H100 SXM datasheet, BF16 1979 TFLOPS with sparsity = 989.4 dense"};
    if (has(n, "A100")) return KnownPeak{312e12, "NVIDIA A100 datasheet, BF16 312 TFLOPS dense"};
    return std::nullopt;
}

double hbm_bandwidth_from_clock(double memory_clock_khz, double bus_width_bits) {
    return 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8.0;
}

std::optional<KnownPeak> known_hbm_bandwidth(std::string_view n) {
    if (has(n, "H200")) return KnownPeak{4.8e12, "NVIDIA H200 datasheet, 4.8 TB/s"};
    if (has(n, "H100") && has(n, "PCIe")) return KnownPeak{2.0e12, "NVIDIA H100 PCIe datasheet, 2.0 TB/s"};
    if (has(n, "H100") && !has(n, "NVL")) return KnownPeak{3.35e12, "NVIDIA H100 SXM datasheet, 3.35 TB/s"};
    if (has(n, "A100") && has(n, "80GB") && has(n, "PCIe"))
        return KnownPeak{1.935e12, "NVIDIA A100 80GB PCIe datasheet, 1935 GB/s"};
    if (has(n, "A100") && has(n, "80GB")) return KnownPeak{2.039e12, "NVIDIA A100 80GB SXM datasheet, 2039 GB/s"};
    if (has(n, "A100")) return KnownPeak{1.555e12, "NVIDIA A100 40GB datasheet, 1555 GB/s"};
    return std::nullopt;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double gemm_shape_factor(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, int sm_count,
                         int tile_m, int tile_n, double k_half, double stream_k, double stream_k_fixup) {
    const std::int64_t tiles[3][2] = {{tile_m, tile_n}, {tile_n, tile_m}, {std::max(tile_m / 2, 1), tile_n}};
    double best = 0;
    for (const auto& t : tiles) {
        const double count = double((m + t[0] - 1) / t[0]) * double((n + t[1] - 1) / t[1]) * double(batch);
        const double waves = std::ceil(count / sm_count);
        const double useful = double(m) * double(n) * double(batch);
        best = std::max(best, useful / (waves * sm_count * double(t[0]) * double(t[1])));
        if (stream_k > 0) {
            const double rate = stream_k / (1.0 + stream_k_fixup * std::max(0.0, sm_count / count - 1.0));
            best = std::max(best, rate * useful / (count * double(t[0]) * double(t[1])));
        }
    }
    return best * (double(k) / (double(k) + k_half));
}

double fit_gemm_ceiling(const std::vector<GemmResult>& gemms, const std::vector<std::string>& names, double peak_flops,
                        int sm_count, const GemmBlock& block) {
    std::vector<double> ratios;
    for (const auto& g : gemms) {
        if (std::find(names.begin(), names.end(), g.name) == names.end() || g.time_us <= 0 || peak_flops <= 0) continue;
        const double achieved = 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch) / (g.time_us * 1e-6) / peak_flops;
        ratios.push_back(achieved / gemm_shape_factor(g.m, g.n, g.k, g.batch, sm_count, block.tile_m, block.tile_n, block.k_half,
                                                        block.stream_k_efficiency, block.stream_k_fixup));
    }
    return median(std::move(ratios));
}

}  // namespace strata::calibrate
