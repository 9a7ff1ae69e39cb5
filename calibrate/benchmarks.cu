// Single-GPU benchmarks of strata-calibrate, all on GPU 0 and all through the one timing loop:
//  - basics: kernel launch overhead, cudaMemcpy device-to-device bandwidth;
//  - GEMMs: the 12 GEMMs of a Megatron layer for the model dims, plus a square size sweep;
//  - elementwise: own layer-norm, GeLU, bias-dropout-add kernels at the layer's sizes;
//  - attention core: its 6 batched GEMMs, softmax and dropout forward/backward.
// Each measured op is a small descriptor (name, bytes or FLOPs, run); buffers that do not fit are
// skipped and reported.
#include "kernels.hpp"
#include "layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::calibrate {
namespace {

struct Gpu0 {
    DeviceGuard guard{0};
    cudaStream_t s = nullptr;
    Gpu0() { CAL_CUDA(cudaStreamCreate(&s)); }
    ~Gpu0() { cudaStreamDestroy(s); }
    std::vector<StreamOn> streams() const { return {{0, s}}; }
};

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

/// An elementwise (memory-bound) op: `bytes` read + written per run.
struct ElemOp {
    const char* op;
    std::int64_t elements, bytes;
    std::function<void(cudaStream_t)> run;
};

void time_elementwise(const Context& c, Profile& p, Gpu0& g, const ElemOp& e) {
    const double us = time_us(g.streams(), [&] { e.run(g.s); }, c.timing);
    ElementwiseResult r{e.op, e.elements, e.bytes, round_sig(us), round_sig(e.bytes / (us * 1e-6) / 1e9)};
    p.elementwise.push_back(r);
    const double copy = p.copy_bandwidth_bytes_per_s;
    progress(std::string(e.op) + ": " + fmt("%.1f us, ", us) + fmt("%.0f GB/s", r.gbps) +
             (copy > 0 ? fmt(" (%.0f%% of device-to-device copy)", 100.0 * r.gbps * 1e9 / copy) : ""));
}

void skip(Profile& p, const std::string& what, const OutOfMemory& e) {
    p.skipped.push_back(what + ": " + e.what());
    progress("skipped " + what + ": " + e.what());
}

DeviceBuffer random_buffer(const Context& c, std::size_t elems, cudaStream_t s, float lo = -1, float hi = 1) {
    DeviceBuffer b(elems * kElem, 0);
    static std::uint64_t seed = 1;
    kern::fill_uniform(c.dtype, b.get(), elems, lo, hi, seed++, s);
    return b;
}

}  // namespace

ElementwiseSummary run_basics(const Context& c, Profile& p) {
    Gpu0 g;
    ElementwiseSummary out;
    constexpr int kLaunches = 100;
    out.kernel_launch_us = round_sig(
        time_us(g.streams(), [&] { for (int i = 0; i < kLaunches; ++i) kern::empty(g.s); }, c.timing) / kLaunches, 3);
    progress("kernel launch: " + fmt("%.2f us per back-to-back empty kernel", out.kernel_launch_us));
    for (std::size_t bytes = std::size_t{c.quick ? 256u : 1024u} << 20; bytes >= (std::size_t{32} << 20); bytes /= 2) {
        try {
            DeviceBuffer a(bytes, 0), b(bytes, 0);
            CAL_CUDA(cudaMemsetAsync(a.get(), 1, bytes, g.s));
            const double us = time_us(
                g.streams(), [&] { CAL_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, g.s)); },
                c.timing);
            out.copy_bandwidth_bytes_per_s = round_sig(2.0 * bytes / (us * 1e-6));   // read + write
            progress("device-to-device copy of " + gib(double(bytes)) + ": " +
                     fmt("%.0f GB/s (read + write)", out.copy_bandwidth_bytes_per_s / 1e9));
            break;
        } catch (const OutOfMemory& e) {
            skip(p, "copy bandwidth with " + gib(double(bytes)) + " buffers", e);
        }
    }
    p.copy_bandwidth_bytes_per_s = out.copy_bandwidth_bytes_per_s;
    return out;
}

/// Back-to-back 8192^3 GEMMs for `--soak` seconds (default none): a GEMM-bound loop draws the board's power limit
/// and the SM clock settles well below the boost clock within a second (H100 SXM at 700 W: 1980 -> 1200-1400 MHz,
/// nvidia-smi dmon) while the GPU heats. Measured on an H100, GEMMs timed after a 10 s soak predicted the layer worse
/// (6.5% against 4.0-5.4% worst), so it is an option, not the default; --gemm-mix addresses the clock instead.
static void heat_soak(const Context& c, Gpu0& g, Blas& blas) {
    const GemmDesc d("soak", 8192, 8192, 8192);
    DeviceBuffer A = random_buffer(c, d.a_elems(), g.s), B = random_buffer(c, d.b_elems(), g.s);
    DeviceBuffer C(d.c_elems() * kElem, 0);
    Gemm gemm(blas, c.dtype, d);
    cudaEvent_t e0, e1;
    CAL_CUDA(cudaEventCreate(&e0));
    CAL_CUDA(cudaEventCreate(&e1));
    constexpr int kBlock = 20;
    double first = 0, last = 0, elapsed_s = 0;
    int blocks = 0;
    while (elapsed_s < c.soak_s) {
        CAL_CUDA(cudaEventRecord(e0, g.s));
        for (int i = 0; i < kBlock; ++i) gemm.run(A.get(), B.get(), C.get(), g.s);
        CAL_CUDA(cudaEventRecord(e1, g.s));
        CAL_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        CAL_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        last = kBlock * d.flops() / (ms * 1e-3) / 1e12;
        if (blocks++ == 0) first = last;
        elapsed_s += ms * 1e-3;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    progress("heat soak: " + std::to_string(blocks) + " blocks of " + std::to_string(kBlock) + " 8192^3 GEMMs in " +
             fmt("%.1f s: ", elapsed_s) + fmt("first block %.0f TFLOP/s, ", first) + fmt("last %.0f TFLOP/s", last));
}

/// A GEMM's time among memory-bound work: before each timed launch, device-to-device copies lasting about
/// `mix` x the GEMM's time (a first back-to-back measurement gives that time); only the GEMM is between the events.
/// A GEMM-only loop holds the board at its power limit and the SM clock drops (H100, 700 W: 1980 -> 1200-1400 MHz,
/// nvidia-smi dmon); inside a layer, where about a third of the time is memory-bound, the clock stays higher. Measured
/// on an H100: layer GEMMs timed back to back after a 10 s soak predicted a 22B layer's forward 4-6.5% slow.
static double time_gemm_in_mix(const Context& c, Gpu0& g, const std::function<void()>& gemm, double copy_bw) {
    const double alone_us = time_us(g.streams(), gemm, c.timing);
    if (c.gemm_mix <= 0 || copy_bw <= 0) return alone_us;
    constexpr std::size_t kChunk = std::size_t{64} << 20;   // one copy: 64 MiB read + written
    DeviceBuffer from, to;
    try {
        from = DeviceBuffer(kChunk, 0);
        to = DeviceBuffer(kChunk, 0);
    } catch (const OutOfMemory&) {
        return alone_us;   // no room for the copies: back to back (the profile's header says which mix was asked)
    }
    const double copy_us = 2.0 * double(kChunk) / copy_bw * 1e6;
    const int copies = std::max(1, static_cast<int>(std::lround(c.gemm_mix * alone_us / copy_us)));
    std::vector<cudaEvent_t> ev(2 * static_cast<std::size_t>(c.timing.iters));
    for (auto& e : ev) CAL_CUDA(cudaEventCreate(&e));
    std::vector<double> samples;
    try {
        for (int r = 0; r < std::max(1, c.timing.repeats); ++r) {
            for (int it = 0; it < c.timing.iters; ++it) {
                for (int k = 0; k < copies; ++k)
                    CAL_CUDA(cudaMemcpyAsync(to.get(), from.get(), kChunk, cudaMemcpyDeviceToDevice, g.s));
                CAL_CUDA(cudaEventRecord(ev[2 * it], g.s));
                gemm();
                CAL_CUDA(cudaEventRecord(ev[2 * it + 1], g.s));
            }
            CAL_CUDA(cudaEventSynchronize(ev.back()));
            double sum_ms = 0;
            for (int it = 0; it < c.timing.iters; ++it) {
                float ms = 0;
                CAL_CUDA(cudaEventElapsedTime(&ms, ev[2 * it], ev[2 * it + 1]));
                sum_ms += ms;
            }
            samples.push_back(sum_ms * 1e3 / c.timing.iters);
        }
    } catch (...) {
        for (auto& e : ev) cudaEventDestroy(e);
        throw;
    }
    for (auto& e : ev) cudaEventDestroy(e);
    return median(std::move(samples));
}

void run_gemms(const Context& c, Profile& p) {
    Gpu0 g;
    Blas blas(0);
    if (c.soak_s > 0) {
        try {
            heat_soak(c, g, blas);
        } catch (const OutOfMemory& e) {
            skip(p, "heat soak (8192^3 GEMMs)", e);
        }
    }
    std::vector<GemmDesc> list = layer_gemms(ModelDims::from(c));
    std::vector<std::int64_t> sweep = c.quick ? std::vector<std::int64_t>{1024, 4096, 8192}
                                              : std::vector<std::int64_t>{1024, 2048, 4096, 8192, 16384};
    for (std::int64_t n : sweep) list.emplace_back("square_" + std::to_string(n), n, n, n);
    for (const GemmDesc& d : list) {
        const std::string what = "gemm " + d.name + " m=" + std::to_string(d.m) + " n=" + std::to_string(d.n) +
                                 " k=" + std::to_string(d.k);
        try {
            DeviceBuffer A = random_buffer(c, d.a_elems(), g.s), B = random_buffer(c, d.b_elems(), g.s);
            DeviceBuffer C(d.c_elems() * kElem, 0);
            Gemm gemm(blas, c.dtype, d);
            const double us = time_gemm_in_mix(c, g, [&] { gemm.run(A.get(), B.get(), C.get(), g.s); },
                                               p.copy_bandwidth_bytes_per_s);
            GemmResult r{d.name, d.m, d.n, d.k, d.batch, dtype_name(c.dtype), round_sig(us),
                         round_sig(d.flops() / (us * 1e-6) / 1e12)};
            p.gemms.push_back(r);
            progress(what + ": " + fmt("%.1f us, ", us) + fmt("%.1f TFLOP/s", r.tflops));
        } catch (const OutOfMemory& e) {
            skip(p, what, e);
        }
    }
}

void run_sms_held(const Context& c, Profile& p) {
    // The layer's GEMMs, each alone and with k SMs held by a kernel that stands for an NCCL collective's (one block
    // per SM, all of the SM's shared memory, clusters of 4 on sm90 as NCCL launches them; 2 SMs in a cluster of 2):
    // the slowdown for k is the median over the GEMMs of (time with k held) / (time alone). Levels alternate round
    // by round so that clock drift falls on all alike.
    Gpu0 g;
    Blas blas(0);
    int dev = 0, sms = 0, smem = 0, major = 0;
    CAL_CUDA(cudaGetDevice(&dev));
    CAL_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CAL_CUDA(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CAL_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    std::vector<int> levels;
    for (int k : c.quick ? std::vector<int>{2, 16} : std::vector<int>{2, 4, 16, 32})
        if (k < sms / 2) levels.push_back(k);
    if (levels.empty()) return;
    auto cluster_of = [&](int k) { return major >= 9 ? (k == 2 ? 2 : 4) : 1; };
    cudaStream_t side = nullptr;
    cudaEvent_t reset = nullptr, done = nullptr;
    CAL_CUDA(cudaStreamCreate(&side));
    CAL_CUDA(cudaEventCreateWithFlags(&reset, cudaEventDisableTiming));
    CAL_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    struct Cleanup {
        cudaStream_t s;
        cudaEvent_t a, b;
        ~Cleanup() {
            cudaStreamSynchronize(s);
            cudaEventDestroy(a);
            cudaEventDestroy(b);
            cudaStreamDestroy(s);
        }
    } cleanup{side, reset, done};
    DeviceBuffer flags(2 * sizeof(int), 0);
    int* started = flags.as<int>();
    int* release = started + 1;
    bool clusters = true;
    std::vector<GemmDesc> list = layer_gemms(ModelDims::from(c));
    if (c.quick && list.size() > 4) list.resize(4);
    std::map<int, std::vector<double>> ratios;
    const TimingOpts opts{2, c.quick ? 3 : 5, 3};
    for (const GemmDesc& d : list) {
        try {
            DeviceBuffer A = random_buffer(c, d.a_elems(), g.s), B = random_buffer(c, d.b_elems(), g.s);
            DeviceBuffer C(d.c_elems() * kElem, 0);
            Gemm gemm(blas, c.dtype, d);
            auto call = [&](int k) {
                kern::set_flag(started, 0, g.s);
                kern::set_flag(release, 0, g.s);
                CAL_CUDA(cudaEventRecord(reset, g.s));
                CAL_CUDA(cudaStreamWaitEvent(side, reset, 0));
                if (k > 0 && !kern::hold_sms(k, clusters ? cluster_of(k) : 1, smem, started, release, side)) {
                    clusters = false;   // the GPU refused the clusters: plain blocks from here on
                    (void)kern::hold_sms(k, 1, smem, started, release, side);
                }
                kern::wait_at_least(started, k, g.s);
                gemm.run(A.get(), B.get(), C.get(), g.s);
                kern::set_flag(release, 1, g.s);
                CAL_CUDA(cudaEventRecord(done, side));
                CAL_CUDA(cudaStreamWaitEvent(g.s, done, 0));
            };
            std::map<int, std::vector<double>> us;
            std::vector<int> all = {0};
            all.insert(all.end(), levels.begin(), levels.end());
            for (int round = 0; round < 3; ++round)
                for (int k : all) us[k].push_back(time_us(g.streams(), [&] { call(k); }, opts));
            const double alone = median(us[0]);
            std::string line = "gemm " + d.name + " with SMs held:";
            for (int k : levels) {
                ratios[k].push_back(median(us[k]) / alone);
                line += " " + std::to_string(k) + " -> " + fmt("%.3f", ratios[k].back());
            }
            progress(line);
        } catch (const OutOfMemory& e) {
            skip(p, "gemm " + d.name + " with SMs held", e);
        }
    }
    for (int k : levels) {
        if (ratios[k].empty()) continue;
        p.sms_held.push_back({k, round_sig(std::max(1.0, median(ratios[k])), 4),
                              "median of " + std::to_string(ratios[k].size()) + " layer GEMMs; " +
                                  (clusters && cluster_of(k) > 1 ? "clusters of " + std::to_string(cluster_of(k))
                                                                 : std::string("no clusters"))});
    }
}

void run_elementwise(const Context& c, Profile& p) {
    Gpu0 g;
    const ModelDims m = ModelDims::from(c);
    const std::int64_t rows = m.sb(), h = m.h, f = 4 * m.h / m.t;
    const int H = static_cast<int>(h), F = static_cast<int>(f);
    const std::size_t n = static_cast<std::size_t>(rows * h), nf = static_cast<std::size_t>(rows * f);
    const std::int64_t E = kElem;
    try {   // layer norm over [s*b, h]
        DeviceBuffer x = random_buffer(c, n, g.s), y(n * E, 0), dy = random_buffer(c, n, g.s), dx(n * E, 0);
        DeviceBuffer gm = random_buffer(c, h, g.s, 0.9f, 1.1f), bt = random_buffer(c, h, g.s);
        DeviceBuffer mean(rows * 4, 0), rstd(rows * 4, 0), dg(h * 4, 0), db(h * 4, 0);
        DeviceBuffer scratch(kern::layernorm_bwd_scratch_floats(rows, H) * 4, 0);
        const std::int64_t N = static_cast<std::int64_t>(n);
        time_elementwise(c, p, g, {"layernorm_fwd", N, 2 * N * E + rows * 8, [&](cudaStream_t s) {
            kern::layernorm_fwd(c.dtype, x.get(), gm.get(), bt.get(), y.get(), mean.as<float>(), rstd.as<float>(),
                                rows, H, s);
        }});
        time_elementwise(c, p, g, {"layernorm_bwd", N, 3 * N * E + rows * 8, [&](cudaStream_t s) {
            kern::layernorm_bwd(c.dtype, dy.get(), x.get(), mean.as<float>(), rstd.as<float>(), gm.get(), nullptr,
                                dx.get(), dg.as<float>(), db.as<float>(), scratch.as<float>(), rows, H, s);
        }});
    } catch (const OutOfMemory& e) {
        skip(p, "layernorm over [" + std::to_string(rows) + ", " + std::to_string(h) + "]", e);
    }
    try {   // GeLU over [s*b, 4h/t]
        DeviceBuffer x = random_buffer(c, nf, g.s), y(nf * E, 0), dy = random_buffer(c, nf, g.s);
        DeviceBuffer bias = random_buffer(c, f, g.s);
        const std::int64_t N = static_cast<std::int64_t>(nf);
        time_elementwise(c, p, g, {"gelu_fwd", N, 2 * N * E, [&](cudaStream_t s) {
            kern::gelu_fwd(c.dtype, x.get(), bias.get(), y.get(), rows, F, s);
        }});
        time_elementwise(c, p, g, {"gelu_bwd", N, 3 * N * E, [&](cudaStream_t s) {
            kern::gelu_bwd(c.dtype, dy.get(), x.get(), bias.get(), y.get(), rows, F, s);
        }});
    } catch (const OutOfMemory& e) {
        skip(p, "gelu over [" + std::to_string(rows) + ", " + std::to_string(f) + "]", e);
    }
    try {   // bias-dropout-add over [s*b, h]
        DeviceBuffer x = random_buffer(c, n, g.s), res = random_buffer(c, n, g.s), out(n * E, 0), mask(n, 0);
        DeviceBuffer bias = random_buffer(c, h, g.s);
        const std::int64_t N = static_cast<std::int64_t>(n);
        time_elementwise(c, p, g, {"bias_dropout_add_fwd", N, 3 * N * E + N, [&](cudaStream_t s) {
            kern::bias_dropout_add_fwd(c.dtype, x.get(), bias.get(), res.get(), out.get(), mask.as<std::uint8_t>(),
                                       rows, H, 0.1f, 5, s);
        }});
        time_elementwise(c, p, g, {"bias_dropout_add_bwd", N, 2 * N * E + N, [&](cudaStream_t s) {
            kern::dropout_bwd(c.dtype, out.get(), mask.as<std::uint8_t>(), x.get(), n, 0.1f, s);
        }});
    } catch (const OutOfMemory& e) {
        skip(p, "bias-dropout-add over [" + std::to_string(rows) + ", " + std::to_string(h) + "]", e);
    }
}

void run_attention(const Context& c, Profile& p) {
    Gpu0 g;
    Blas blas(0);
    const ModelDims m = ModelDims::from(c);
    const std::int64_t E = kElem;
    try {
        AttentionCore attn(blas, c.dtype, m, 0.1f);
        const std::size_t ns = attn.score_elems(), nq = static_cast<std::size_t>(m.sb() * 3 * m.h / m.t),
                          nc = static_cast<std::size_t>(m.sb() * m.h / m.t);
        const float qk = 1.f / std::sqrt(std::sqrt(static_cast<float>(m.d())));
        DeviceBuffer qkv = random_buffer(c, nq, g.s, -qk, qk), dqkv(nq * E, 0);
        DeviceBuffer ctx(nc * E, 0), dctx = random_buffer(c, nc, g.s);
        DeviceBuffer scores(ns * E, 0), probs(ns * E, 0), dropped(ns * E, 0), mask(ns, 0);
        auto* mk = mask.as<std::uint8_t>();
        attn.forward(qkv.get(), scores.get(), probs.get(), mk, dropped.get(), ctx.get(), 9, g.s);
        // the six batched GEMMs, with the operands they see in the layer
        const char* q = static_cast<const char*>(qkv.get());
        const std::int64_t d = m.d();
        struct Operands { const void *a, *b; void* c; };
        char* dq = static_cast<char*>(dqkv.get());
        const Operands ops[AttentionCore::kGemms] = {
            {q, q + d * E, scores.get()},          {dropped.get(), q + 2 * d * E, ctx.get()},
            {dctx.get(), q + 2 * d * E, scores.get()}, {dropped.get(), dctx.get(), dq + 2 * d * E},
            {scores.get(), q + d * E, dq},         {scores.get(), q, dq + d * E}};
        for (int i = 0; i < AttentionCore::kGemms; ++i) {
            const Gemm& gm = attn.gemm(i);
            const GemmDesc& dd = gm.desc();
            const double us = time_gemm_in_mix(c, g, [&] { gm.run(ops[i].a, ops[i].b, ops[i].c, g.s); },
                                               p.copy_bandwidth_bytes_per_s);
            GemmResult r{dd.name, dd.m, dd.n, dd.k, dd.batch, dtype_name(c.dtype), round_sig(us),
                         round_sig(dd.flops() / (us * 1e-6) / 1e12)};
            p.gemms.push_back(r);
            progress("gemm " + dd.name + " batch=" + std::to_string(dd.batch) + " m=" + std::to_string(dd.m) +
                     " n=" + std::to_string(dd.n) + " k=" + std::to_string(dd.k) + ": " + fmt("%.1f us, ", us) +
                     fmt("%.1f TFLOP/s", r.tflops));
        }
        attn.forward(qkv.get(), scores.get(), probs.get(), mk, dropped.get(), ctx.get(), 9, g.s);
        const std::int64_t N = static_cast<std::int64_t>(ns), rows = m.batch() * m.s;
        const int S = static_cast<int>(m.s);
        const float scale = 1.f / std::sqrt(static_cast<float>(d));
        time_elementwise(c, p, g, {"softmax_fwd", N, 2 * N * E, [&](cudaStream_t s) {
            kern::softmax_fwd(c.dtype, scores.get(), probs.get(), rows, S, scale, true, s);
        }});
        time_elementwise(c, p, g, {"softmax_bwd", N, 3 * N * E, [&](cudaStream_t s) {
            kern::softmax_bwd(c.dtype, probs.get(), dropped.get(), scores.get(), rows, S, scale, s);
        }});
        time_elementwise(c, p, g, {"dropout_fwd", N, 2 * N * E + N, [&](cudaStream_t s) {
            kern::dropout_fwd(c.dtype, probs.get(), dropped.get(), mk, ns, 0.1f, 9, s);
        }});
        time_elementwise(c, p, g, {"dropout_bwd", N, 2 * N * E + N, [&](cudaStream_t s) {
            kern::dropout_bwd(c.dtype, dropped.get(), mk, scores.get(), ns, 0.1f, s);
        }});
        const double fwd = time_us(g.streams(), [&] {
            attn.forward(qkv.get(), scores.get(), probs.get(), mk, dropped.get(), ctx.get(), 9, g.s);
        }, c.timing);
        const double bwd = time_us(g.streams(), [&] {
            attn.backward(qkv.get(), probs.get(), mk, dropped.get(), dctx.get(), scores.get(), dqkv.get(), g.s);
        }, c.timing);
        progress("attention core: " + fmt("forward %.1f us, ", fwd) + fmt("backward %.1f us", bwd));
    } catch (const OutOfMemory& e) {
        skip(p, "attention core (b*a/t=" + std::to_string(m.batch()) + ", s=" + std::to_string(m.s) + ")", e);
    }
}

}  // namespace strata::calibrate
