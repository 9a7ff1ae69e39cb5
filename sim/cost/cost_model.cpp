// Analytical and measured kernel costs (see include/strata/cost.hpp for the formulas).
#include "strata/cost.hpp"

#include "strata/errors.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace strata {

const char* to_string(CostSource s) { return s == CostSource::analytical ? "analytical" : "measured"; }

namespace {
/// A GEMM curve at SM clock f: (speed, watts). Between points linear in the clock; above the top point, to
/// (boost, speed 1) with the top two points' watts per MHz (one point: flat watts); below the slowest point, on from
/// the last two points (a capped board).
struct CurvePoint {
    double speed, watts;
};
CurvePoint curve_at(const PowerLimit& power, const std::vector<MeasuredGemmPower>& c, double f) {
    const auto lerp = [](const MeasuredGemmPower& hi, const MeasuredGemmPower& lo, double x) {
        if (hi.clock_mhz <= lo.clock_mhz) return CurvePoint{lo.speed, lo.watts};  // the loader refuses it
        const double t = (x - lo.clock_mhz) / (hi.clock_mhz - lo.clock_mhz);
        // Below the slowest point (a capped board) the line goes on, its speed kept above a twentieth.
        return CurvePoint{std::max(0.05, lo.speed + t * (hi.speed - lo.speed)), lo.watts + t * (hi.watts - lo.watts)};
    };
    const MeasuredGemmPower& top = c.front();
    if (f >= top.clock_mhz) {
        const double per_mhz =
            c.size() >= 2 ? (c[0].watts - c[1].watts) / (c[0].clock_mhz - c[1].clock_mhz) : 0.0;
        const double span = power.boost_clock_mhz - top.clock_mhz;
        const double t = span > 0 ? (f - top.clock_mhz) / span : 1.0;  // a top point at the boost clock: speed 1 there
        return {top.speed + t * (1.0 - top.speed), top.watts + per_mhz * (f - top.clock_mhz)};
    }
    if (c.size() == 1) return {top.speed, top.watts};
    std::size_t i = 0;
    while (i + 2 < c.size() && f < c[i + 1].clock_mhz) ++i;
    return lerp(c[i], c[i + 1], f);
}
}  // namespace

SustainedClock sustained_clock(const PowerLimit& power, const PowerMix& mix) {
    SustainedClock out;
    if (!power.present() || power.gemm.empty()) return out;
    const auto& bf16 = power.gemm;
    const auto& fp8 = power.gemm_fp8.empty() ? power.gemm : power.gemm_fp8;
    const double boost = power.boost_clock_mhz;
    const double ref_clock = power.reference_clock_mhz > 0 ? power.reference_clock_mhz : boost;
    const CurvePoint ref16 = curve_at(power, bf16, ref_clock), ref8 = curve_at(power, fp8, ref_clock);
    const double boost16_w = curve_at(power, bf16, boost).watts;
    // The mix's seconds at clock f.
    const auto time_at = [&](double f) {
        const double stretch16 = ref16.speed / curve_at(power, bf16, f).speed, stretch8 = ref8.speed / curve_at(power, fp8, f).speed;
        return (mix.gemm_s + mix.attention_s) * stretch16 + mix.gemm_fp8_s * stretch8 + mix.other_s;
    };
    const auto mean_w = [&](double f) {
        const CurvePoint p16 = curve_at(power, bf16, f), p8 = curve_at(power, fp8, f);
        const double stretch16 = ref16.speed / p16.speed, stretch8 = ref8.speed / p8.speed;
        const double g = mix.gemm_s * stretch16, a = mix.attention_s * stretch16, g8 = mix.gemm_fp8_s * stretch8;
        const double total = g + a + g8 + mix.other_s;
        if (total <= 0) return 0.0;
        return (g * p16.watts + a * power.attention_w * p16.watts / boost16_w + g8 * p8.watts +
                mix.other_s * power.memory_bound_w) / total;
    };
    out.boost_w = mean_w(boost);
    // The slowest clock: that of the slowest measured point of the curves the mix uses, or for a limit under a
    // curve's slowest point the clock where those GEMMs would draw what bandwidth-bound kernels do (the curve
    // extended); at least a tenth of the boost clock.
    double slowest = boost;
    double measured_slowest = 0;  // the highest slowest point among the curves in use: below it one is extrapolated
    const auto floor_of = [&](const std::vector<MeasuredGemmPower>& c) {
        measured_slowest = std::max(measured_slowest, c.back().clock_mhz);
        double f = c.back().clock_mhz;
        if (power.limit_w < c.back().watts && c.size() >= 2) {
            const MeasuredGemmPower& a = c[c.size() - 2];
            const MeasuredGemmPower& b = c.back();
            const double per_mhz = (a.watts - b.watts) / (a.clock_mhz - b.clock_mhz);
            f = std::max(0.1 * boost, b.clock_mhz - (b.watts - power.memory_bound_w) / per_mhz);
        }
        slowest = std::min(slowest, f);
    };
    if (mix.gemm_s > 0 || mix.attention_s > 0 || mix.gemm_fp8_s <= 0) floor_of(bf16);
    if (mix.gemm_fp8_s > 0) floor_of(fp8);
    double f = boost;
    if (out.boost_w > power.limit_w) {
        if (mean_w(slowest) >= power.limit_w) {
            f = slowest;
        } else {  // mean_w(slowest) < limit < mean_w(boost): the highest clock that meets the limit
            double lo = slowest, hi = boost;
            for (int i = 0; i < 60; ++i) {
                const double mid = 0.5 * (lo + hi);
                (mean_w(mid) > power.limit_w ? hi : lo) = mid;
            }
            f = lo;
        }
    }
    out.clock_mhz = f;
    out.extrapolated = f < measured_slowest;
    out.speed = curve_at(power, bf16, f).speed / ref16.speed;
    out.speed_fp8 = curve_at(power, fp8, f).speed / ref8.speed;
    if (power.headroom_j > 0 && out.boost_w > power.limit_w) {
        const double sustained_s = time_at(f), boost_s = time_at(boost);
        if (sustained_s > 0 && boost_s > 0 && boost_s < sustained_s) {
            const double gain = sustained_s / boost_s - 1;  // sustained seconds saved per second run at the boost clock
            const double excess_w = out.boost_w - power.limit_w;
            out.saving_fraction = 1 - boost_s / sustained_s;
            out.headroom_s = power.headroom_j / excess_w * gain;
            out.headroom_accrual = std::max(0.0, power.limit_w - power.idle_w) / excess_w * gain;
        }
    }
    return out;
}

namespace {
/// Matmul FLOPs of a causal fused-attention kernel (forward 2 GEMMs, backward 5, each half done).
double causal_flash_flops(double b_heads, double s_q, double s_kv, double d, bool forward) {
    return 0.5 * (forward ? 2.0 : 5.0) * 2.0 * s_q * s_kv * d * b_heads;
}
}  // namespace

CostModel::CostModel(DeviceProfile profile) : profile_(std::move(profile)) {
    const auto& table = profile_.measured_flash_attention;
    if (table.empty()) return;
    FlashGrid& g = flash_grid_;
    const FlashGridAxes axes = flash_grid_axes(table);
    g.head_dim = axes.head_dim;
    for (std::int64_t x : axes.batch_heads) g.xs.push_back(std::log2(double(x)));
    for (std::int64_t s : axes.seq_lens) g.ss.push_back(std::log2(double(s)));
    auto eff = [&](const MeasuredFlashAttention& a, int dir) {
        const double f = causal_flash_flops(double(a.batch * a.heads), double(a.seq_len), double(a.seq_len),
                                            double(a.head_dim), dir == 0);
        return f / (profile_.peak_flops * (dir == 0 ? a.forward_us : a.backward_us) * 1e-6);
    };
    // Other head dims, each scaled by its mean measured efficiency over the grid's at the same points.
    std::vector<std::int64_t> dims;
    for (const auto& a : table)
        if (a.head_dim != g.head_dim && std::find(dims.begin(), dims.end(), a.head_dim) == dims.end()) dims.push_back(a.head_dim);
    std::sort(dims.begin(), dims.end());
    // The loader checked that the grid is complete; entries at the same point (batch 2 x 8 heads and 16 heads)
    // are averaged.
    for (int dir = 0; dir < 2; ++dir) {
        g.eff[dir].assign(g.xs.size() * g.ss.size(), 0.0);
        std::vector<int> count(g.eff[dir].size(), 0);
        for (const auto& a : table) {
            if (a.head_dim != g.head_dim) continue;
            const auto i = std::size_t(std::lower_bound(axes.batch_heads.begin(), axes.batch_heads.end(), a.batch * a.heads) -
                                       axes.batch_heads.begin());
            const auto j = std::size_t(std::lower_bound(axes.seq_lens.begin(), axes.seq_lens.end(), a.seq_len) -
                                       axes.seq_lens.begin());
            g.eff[dir][i * g.ss.size() + j] += eff(a, dir);
            ++count[i * g.ss.size() + j];
        }
        for (std::size_t k = 0; k < count.size(); ++k) g.eff[dir][k] /= std::max(count[k], 1);
        for (std::int64_t d : dims) {
            double sum = 0;
            int n = 0;
            for (const auto& a : table) {
                if (a.head_dim != d) continue;
                sum += eff(a, dir) / g.at(std::log2(double(a.batch * a.heads)), std::log2(double(a.seq_len)), dir);
                ++n;
            }
            g.ratios[dir].emplace_back(d, sum / n);
        }
    }
}

double CostModel::FlashGrid::at(double x, double s, int dir) const {
    // Bilinear on the grid, clamped at its edges (no extrapolation).
    auto locate = [](const std::vector<double>& axis, double v, std::size_t& lo, double& w) {
        v = std::clamp(v, axis.front(), axis.back());
        lo = axis.size() < 2 ? 0 : std::min<std::size_t>(std::size_t(std::upper_bound(axis.begin(), axis.end(), v) - axis.begin()), axis.size() - 1) - 1;
        const std::size_t hi = std::min(lo + 1, axis.size() - 1);
        w = hi == lo ? 0.0 : (v - axis[lo]) / (axis[hi] - axis[lo]);
    };
    std::size_t i = 0, j = 0;
    double wx = 0, ws = 0;
    locate(xs, x, i, wx);
    locate(ss, s, j, ws);
    const std::size_t i1 = std::min(i + 1, xs.size() - 1), j1 = std::min(j + 1, ss.size() - 1);
    const auto e = [&](std::size_t a, std::size_t b) { return eff[dir][a * ss.size() + b]; };
    return (1 - wx) * ((1 - ws) * e(i, j) + ws * e(i, j1)) + wx * ((1 - ws) * e(i1, j) + ws * e(i1, j1));
}

double CostModel::FlashGrid::head_dim_ratio(std::int64_t d, int dir) const {
    if (d == head_dim) return 1.0;
    for (const auto& [dim, r] : ratios[dir])
        if (dim == d) return r;
    return 1.0;   // no measurement at this head_dim: the grid's (documented in docs/device-profile.md)
}

double CostModel::flash_efficiency(const Kernel& k) const {
    const bool forward = k.kind == KernelKind::flash_attention_fwd;
    const double ratio = (!k.flash2 ? 1.0 : forward ? profile_.flash2_forward_ratio : profile_.flash2_backward_ratio) /
                         (k.dropout ? profile_.flash_dropout_time_factor : 1.0);
    if (flash_grid_.xs.empty()) return ratio * (forward ? profile_.flash_forward_efficiency : profile_.flash_backward_efficiency);
    const int dir = forward ? 0 : 1;
    // Queries against keys (context parallelism: a rank's queries against the ring's keys): the geometric mean
    // stands for the sequence length of the measured square kernels (the causal square kernel of the same work;
    // Transformer Engine runs the ring's steps on two streams so that one step's last wave overlaps the next's).
    double s = 0.5 * (std::log2(double(k.gemm.m)) + std::log2(double(k.gemm.n)));
    double x = std::log2(double(k.gemm.batch));
    // Past the grid's longest sequence, the further query tiles count as further heads (as many thread blocks, each
    // as long or longer), up to the grid's widest point: nothing beyond a measured point.
    if (s > flash_grid_.ss.back()) {
        x += s - flash_grid_.ss.back();
        s = flash_grid_.ss.back();
    }
    return ratio * flash_grid_.at(x, s, dir) * flash_grid_.head_dim_ratio(k.gemm.k, dir);
}

double CostModel::gemm_efficiency(const GemmShape& g) const {
    // With an SM margin the tiles are planned for, and run on, the SMs left: a share sms / sm_count of the peak.
    const double all = profile_.sm_count;
    const double sms = profile_.sm_count > 0 ? gemm_sms(g) : all;
    const std::int64_t tm = profile_.gemm_tile_m, tn = profile_.gemm_tile_n;
    const std::array<std::pair<std::int64_t, std::int64_t>, 3> tiles = {
        std::pair{tm, tn}, std::pair{tn, tm}, std::pair{std::max<std::int64_t>(tm / 2, 1), tn}};
    double best = 0;
    for (auto [a, b] : tiles) {
        const double count = double((g.m + a - 1) / a) * double((g.n + b - 1) / b) * double(g.batch);
        const double waves = std::ceil(count / sms);
        const double useful = double(g.m) * double(g.n) * double(g.batch);
        best = std::max(best, useful / (waves * sms * double(a) * double(b)));
        // Stream-K: the tiles' work spread evenly over every SM (no idle last wave), at its own share of the rate,
        // less the fixup of partial sums where several SMs share a tile; the tiles' padding at the edges is lost.
        if (profile_.gemm_stream_k_efficiency > 0) {
            const double sharing = std::max(0.0, sms / count - 1.0);
            const double rate = profile_.gemm_stream_k_efficiency / (1.0 + profile_.gemm_stream_k_fixup * sharing);
            best = std::max(best, rate * useful / (count * double(a) * double(b)));
        }
    }
    const double k = double(g.k);
    return profile_.gemm_efficiency_ceiling * best * (sms / all) * (k / (k + profile_.gemm_k_half));
}

KernelCost CostModel::kernel(const Kernel& kr) const {
    const double launch_s = profile_.kernel_launch_us * 1e-6;
    const double mem_bw = profile_.hbm_bandwidth * profile_.elementwise_bandwidth_efficiency;
    if (kr.kind == KernelKind::elementwise) {
        for (const auto& m : profile_.measured_elementwise) {
            if (!kr.op_class.empty() && m.op == kr.op_class && m.bytes > 0) {
                // Measured bandwidth of this op class, scaled to this size.
                const double bw = double(m.bytes) / (m.time_us * 1e-6);
                return {Time::from_seconds(launch_s + double(kr.bytes.value) / bw), CostSource::measured};
            }
        }
        return {Time::from_seconds(launch_s + double(kr.bytes.value) / mem_bw), CostSource::analytical};
    }
    if (kr.is_fused_attention()) {
        const double eff = flash_efficiency(kr);
        if (eff <= 0) throw InputError(profile_.file + ": FlashAttention needs flash_attention efficiencies in the device profile");
        const double compute_s = flash_attention_flops(kr).value / (profile_.peak_flops * eff) / sustained_.speed;
        const double memory_s = double(kr.bytes.value) / mem_bw;
        const CostSource source = flash_grid_.xs.empty() ? CostSource::analytical : CostSource::measured;
        return {Time::from_seconds(launch_s + std::max(compute_s, memory_s)), source};
    }
    if (kr.gemm.chunks > 1) {
        // Transformer Engine's userbuffer overlap: the GEMM runs as `chunks` GEMMs back to back, splitting its rows
        // (or columns) as evenly as they go: r chunks one longer than the rest (none empty).
        const std::int64_t dim = kr.gemm.split_extent(), parts = kr.gemm.chunk_parts();
        const auto part = [&](std::int64_t size) {
            Kernel one = kr;
            one.gemm = kr.gemm.chunk(size);
            one.bytes = one.gemm.bytes();
            return kernel(one);
        };
        const std::int64_t q = dim / parts, r = dim % parts;
        const KernelCost base = part(q);
        Time t = base.time * (parts - r);
        if (r > 0) t += part(q + 1).time * r;
        return {t, base.source};
    }
    const double sustained_speed = kr.gemm.fp8 ? sustained_.speed_fp8 : sustained_.speed;
    for (const auto& m : profile_.measured_gemms) {
        // C = A B and its transpose C^T = B^T A^T are the same work: calibration writes weight gradients in
        // the [out, in] layout of the weights, the layer model as [in, out].
        const bool same_mn = (m.m == kr.gemm.m && m.n == kr.gemm.n) || (m.m == kr.gemm.n && m.n == kr.gemm.m);
        if (same_mn && m.k == kr.gemm.k && m.batch == kr.gemm.batch) {
            if (kr.gemm.sm_margin <= 0) return {Time::from_us(m.time_us / sustained_speed), CostSource::measured};
            // Measured on every SM: scaled by the shape model's time on the SMs the margin leaves over its time on all.
            GemmShape all = kr.gemm;
            all.sm_margin = 0;
            return {Time::from_seconds(m.time_us * 1e-6 * gemm_efficiency(all) / gemm_efficiency(kr.gemm) /
                                       sustained_speed),
                    CostSource::measured};
        }
    }
    double compute_s = kr.gemm.flops().value / (profile_.peak_flops * gemm_efficiency(kr.gemm));
    if (kr.gemm.fp8) {
        if (profile_.peak_flops_fp8 <= 0) throw InputError(profile_.file + ": an FP8 GEMM needs device.peak_flops_fp8");
        // The same shape model (tiles, waves, small k), the FP8 peak and ceiling.
        compute_s = kr.gemm.flops().value / (profile_.peak_flops_fp8 * gemm_efficiency(kr.gemm) *
                                             profile_.gemm_efficiency_ceiling_fp8 / profile_.gemm_efficiency_ceiling);
    }
    compute_s /= sustained_speed;
    const double memory_s = double(kr.gemm.bytes().value) / mem_bw;
    return {Time::from_seconds(launch_s + std::max(compute_s, memory_s)), CostSource::analytical};
}

int CostModel::ring_steps(CollectiveKind kind, int n) {
    if (n <= 1) return 0;
    return kind == CollectiveKind::all_reduce ? 2 * (n - 1) : n - 1;
}

Bytes CostModel::ring_bytes_per_rank(CollectiveKind kind, int n, Bytes message) {
    if (n <= 1) return Bytes(0);
    const std::int64_t factor = kind == CollectiveKind::all_reduce ? 2 * (n - 1) : (n - 1);
    return Bytes((message.value * factor + n - 1) / n);
}

std::optional<Time> measured_collective_time(const DeviceProfile& p, CollectiveKind kind, int ranks, Bytes message) {
    const char* op = kind == CollectiveKind::all_reduce   ? "all_reduce"
                     : kind == CollectiveKind::all_gather ? "all_gather"
                                                          : "reduce_scatter";
    for (const auto& m : p.measured_collectives) {
        if (m.op == op && m.ranks == ranks) {
            return Time::from_seconds(m.alpha_us * 1e-6 + double(message.value) / m.beta_bytes_per_s);
        }
    }
    const MeasuredCollective* below = nullptr;
    const MeasuredCollective* above = nullptr;
    for (const auto& m : p.measured_collective_points) {
        if (m.op != op || m.ranks != ranks) continue;
        if (m.bytes <= message.value && (!below || m.bytes > below->bytes)) below = &m;
        if (m.bytes >= message.value && (!above || m.bytes < above->bytes)) above = &m;
    }
    if (!below && !above) return std::nullopt;
    if (!below) return Time::from_us(above->time_us);
    if (!above) return Time::from_us(below->time_us * double(message.value) / double(below->bytes));
    if (above->bytes == below->bytes) return Time::from_us(below->time_us);
    const double f = double(message.value - below->bytes) / double(above->bytes - below->bytes);
    return Time::from_us(below->time_us + f * (above->time_us - below->time_us));
}

Time CostModel::tp_collective(CollectiveKind kind, int ranks, Bytes message) const {
    if (ranks <= 1) return Time::zero();
    if (const std::optional<Time> t = measured_collective_time(profile_, kind, ranks, message)) return *t;
    const Bytes per_rank = ring_bytes_per_rank(kind, ranks, message);
    if (profile_.intra_node_bus_bandwidth <= 0) {
        throw InputError(profile_.file + ": device profile " + profile_.name +
                         " has no intra-node bus bandwidth (no intra_node block): give the system's "
                         "network.nvlink_bandwidth_bytes_per_s");
    }
    // NVLS: the same bus-bandwidth formula at the in-switch reduction's bus bandwidth.
    const double bus = kind == CollectiveKind::all_reduce && profile_.intra_node_nvls_bus_bandwidth > 0
                           ? profile_.intra_node_nvls_bus_bandwidth
                           : profile_.intra_node_bus_bandwidth;
    return Time::from_us(ring_steps(kind, ranks) * profile_.intra_node_step_latency_us) +
           Time::from_seconds(double(per_rank.value) / bus);
}

int CostModel::gemm_sms(const GemmShape& g) const { return std::max(1, profile_.sm_count - std::max(0, g.sm_margin)); }

double CostModel::gemm_waves(const GemmShape& g) const {
    const GemmShape one = g.largest_chunk();
    const std::int64_t tm = std::max<std::int64_t>(profile_.gemm_tile_m, 1), tn = std::max<std::int64_t>(profile_.gemm_tile_n, 1);
    return double((one.m + tm - 1) / tm) * double((one.n + tn - 1) / tn) * double(one.batch) / double(gemm_sms(g));
}

Time CostModel::compute_step(const Step& step) const {
    Time t = Time::zero();
    for (const auto& k : step.kernels) t += kernel(k).time;
    return t;
}

PowerMix CostModel::power_mix(const std::vector<const std::vector<Step>*>& passes, int ranks, int context_ranks,
                              bool collectives) const {
    PowerMix mix;
    for (const auto* pass : passes) {
        for (const Step& s : *pass) {
            if (s.kind == Step::Kind::compute) {
                for (const Kernel& k : s.kernels) {
                    const double t = kernel(k).time.seconds();
                    if (k.is_gemm()) {
                        (k.gemm.fp8 ? mix.gemm_fp8_s : mix.gemm_s) += t;
                    } else if (k.is_fused_attention()) {
                        mix.attention_s += t;
                    } else {
                        mix.other_s += t;
                    }
                }
            } else if (collectives && !s.overlapped) {  // the compute waits: a collective's kernels move bytes, the SMs idle
                mix.other_s +=
                    tp_collective(s.collective.kind, s.collective.context_group ? context_ranks : ranks, s.collective.message)
                        .seconds();
            }
        }
    }
    return mix;
}

SustainedClock CostModel::sustain(const PowerMix& mix) {
    sustained_ = sustained_clock(profile_.power, mix);
    return sustained_;
}

Time CostModel::pass_time(const std::vector<Step>& pass, int ranks, const ContextRing& ring) const {
    Time total = Time::zero();
    for (std::size_t i = 0; i < pass.size(); ++i) {
        const Step& s = pass[i];
        if (s.kind == Step::Kind::compute) {
            total += compute_step(s);
            continue;
        }
        const Time c = collective_time(s.collective, ranks, ring);
        if (s.overlapped && i + 1 < pass.size() && pass[i + 1].kind == Step::Kind::compute) {
            const int sms =
                s.collective.context_group && ring.sms ? ring.sms(s.collective.message) : sms_held(s.collective);
            total += std::max(c + ring_tail(s.collective, pass[i + 1]),
                              slowed_compute(compute_step(pass[i + 1]), c, step_sm_fraction(pass[i + 1], sms)));
            ++i;
        } else {
            total += c;
        }
    }
    return total;
}

}  // namespace strata
