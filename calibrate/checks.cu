// Correctness checks, run before anything is timed: every kernel on small sizes against a reference
// (GEMMs vs a naive CUDA kernel; softmax, layer norm, GeLU, dropout and bias-dropout-add vs CPU code in
// double precision). A mismatch throws CheckFailed: strata-calibrate then exits without writing.
#include "device.cuh"
#include "gemm.hpp"
#include "kernels.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace strata::calibrate {
namespace {

struct Checker {
    DType dt;
    int dev = 0;
    cudaStream_t s = nullptr;
    std::uint64_t seed = 1234;

    DeviceBuffer random(std::size_t n, float lo, float hi) {
        DeviceBuffer b(n * kElem, dev);
        kern::fill_uniform(dt, b.get(), n, lo, hi, seed++, s);
        return b;
    }
    DeviceBuffer zeros(std::size_t bytes) {
        DeviceBuffer b(bytes, dev);
        CAL_CUDA(cudaMemsetAsync(b.get(), 0, bytes, s));
        return b;
    }
    std::vector<float> get(const DeviceBuffer& b, std::size_t n) {   // 16-bit tensor -> floats
        std::vector<std::uint16_t> raw(n);
        CAL_CUDA(cudaStreamSynchronize(s));
        CAL_CUDA(cudaMemcpy(raw.data(), b.get(), n * kElem, cudaMemcpyDeviceToHost));
        std::vector<float> out(n);
        for (std::size_t i = 0; i < n; ++i) out[i] = bits_to_float(dt, raw[i]);
        return out;
    }
    template <class U>
    std::vector<U> get_raw(const DeviceBuffer& b, std::size_t n) {
        std::vector<U> out(n);
        CAL_CUDA(cudaStreamSynchronize(s));
        CAL_CUDA(cudaMemcpy(out.data(), b.get(), n * sizeof(U), cudaMemcpyDeviceToHost));
        return out;
    }
};

void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref,
                  double atol, double rtol) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
        if (!(std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]))) {
            throw CheckFailed(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                              ", expected " + std::to_string(ref[i]) + " (tolerance " + std::to_string(atol) +
                              " + " + std::to_string(rtol) + " * |expected|)");
        }
    }
}

void check_gemms(Checker& c, Blas& blas) {
    std::vector<GemmDesc> cases;
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb) cases.emplace_back("lt", 96, 80, 72, ta, tb);
    GemmDesc strided("strided_batched", 64, 48, 32, false, true, 4);   // attention-like interleaved layout
    strided.lda = 4 * 32, strided.stride_a = 32, strided.ldb = 4 * 32, strided.stride_b = 32;
    strided.ldc = 4 * 48, strided.stride_c = 48;
    cases.push_back(strided);
    for (auto& d : cases) {
        d.packed();
        Gemm g(blas, c.dt, d);
        DeviceBuffer A = c.random(d.a_elems(), -1, 1), B = c.random(d.b_elems(), -1, 1);
        DeviceBuffer C = c.zeros(d.c_elems() * kElem), R = c.zeros(d.c_elems() * sizeof(float));
        g.run(A.get(), B.get(), C.get(), c.s);
        reference_gemm(c.dt, d, A.get(), B.get(), R.as<float>(), c.s);
        auto got = c.get(C, d.c_elems());
        auto ref = c.get_raw<float>(R, d.c_elems());
        std::vector<float> g2;
        std::vector<double> r2;
        for (int z = 0; z < d.batch; ++z)
            for (std::int64_t i = 0; i < d.m; ++i)
                for (std::int64_t j = 0; j < d.n; ++j) {
                    const std::size_t at = static_cast<std::size_t>(z * d.stride_c + i * d.ldc + j);
                    g2.push_back(got[at]);
                    r2.push_back(ref[at]);
                }
        expect_close("GEMM " + d.name + " m=" + std::to_string(d.m) + " n=" + std::to_string(d.n) + " k=" +
                         std::to_string(d.k) + " batch=" + std::to_string(d.batch) + " ta=" + std::to_string(d.ta) +
                         " tb=" + std::to_string(d.tb),
                     g2, r2, 2e-2, 1e-2);
    }
}

void check_softmax(Checker& c) {
    struct Case { std::int64_t rows; int cols; bool causal; };
    for (Case k : {Case{128, 64, true}, Case{4, 4096, false}, Case{512, 256, true}}) {
        const std::size_t n = static_cast<std::size_t>(k.rows) * k.cols;
        const float scale = 0.125f;
        DeviceBuffer x = c.random(n, -8, 8), y = c.zeros(n * kElem), dy = c.random(n, -1, 1), dx = c.zeros(n * kElem);
        kern::softmax_fwd(c.dt, x.get(), y.get(), k.rows, k.cols, scale, k.causal, c.s);
        kern::softmax_bwd(c.dt, y.get(), dy.get(), dx.get(), k.rows, k.cols, scale, c.s);
        auto hx = c.get(x, n), hy = c.get(y, n), hdy = c.get(dy, n), hdx = c.get(dx, n);
        std::vector<double> ry(n), rdx(n);
        for (std::int64_t r = 0; r < k.rows; ++r) {
            const std::size_t o = static_cast<std::size_t>(r) * k.cols;
            const int last = k.causal ? static_cast<int>(r % k.cols) : k.cols - 1;
            double mx = -INFINITY, sum = 0, ysum = 0, dot = 0;
            for (int j = 0; j <= last; ++j) mx = std::max(mx, double(hx[o + j]) * scale);
            for (int j = 0; j <= last; ++j) sum += std::exp(double(hx[o + j]) * scale - mx);
            for (int j = 0; j < k.cols; ++j) {
                ry[o + j] = j <= last ? std::exp(double(hx[o + j]) * scale - mx) / sum : 0.0;
                ysum += hy[o + j];
                dot += double(hy[o + j]) * hdy[o + j];
                if (j > last && hy[o + j] != 0.f)
                    throw CheckFailed("softmax: masked element (row " + std::to_string(r) + ", col " +
                                      std::to_string(j) + ") is not 0");
            }
            if (std::fabs(ysum - 1.0) > 1e-2)
                throw CheckFailed("softmax: row " + std::to_string(r) + " sums to " + std::to_string(ysum));
            for (int j = 0; j < k.cols; ++j) rdx[o + j] = scale * hy[o + j] * (hdy[o + j] - dot);
        }
        const std::string what = "softmax (cols " + std::to_string(k.cols) + (k.causal ? ", causal)" : ")");
        expect_close(what + " forward", hy, ry, 2e-3, 1e-2);
        expect_close(what + " backward", hdx, rdx, 2e-3, 2e-2);
    }
}

void check_layernorm(Checker& c) {
    for (int cols : {1024, 12288}) {   // fused backward, and the wide-row path
        const std::int64_t rows = 16;
        const std::size_t n = static_cast<std::size_t>(rows) * cols;
        DeviceBuffer x = c.random(n, -2, 3), g = c.random(cols, 0.5f, 1.5f), b = c.random(cols, -0.5f, 0.5f);
        DeviceBuffer y = c.zeros(n * kElem), mean = c.zeros(rows * 4), rstd = c.zeros(rows * 4);
        DeviceBuffer dy = c.random(n, -1, 1), dres = c.random(n, -1, 1), dx = c.zeros(n * kElem);
        DeviceBuffer dg = c.zeros(cols * 4), db = c.zeros(cols * 4);
        DeviceBuffer scratch = c.zeros(kern::layernorm_bwd_scratch_floats(rows, cols) * 4);
        kern::layernorm_fwd(c.dt, x.get(), g.get(), b.get(), y.get(), mean.as<float>(), rstd.as<float>(), rows, cols,
                            c.s);
        kern::layernorm_bwd(c.dt, dy.get(), x.get(), mean.as<float>(), rstd.as<float>(), g.get(), dres.get(),
                            dx.get(), dg.as<float>(), db.as<float>(), scratch.as<float>(), rows, cols, c.s);
        auto hx = c.get(x, n), hg = c.get(g, cols), hb = c.get(b, cols), hy = c.get(y, n);
        auto hdy = c.get(dy, n), hdr = c.get(dres, n), hdx = c.get(dx, n);
        auto hdg = c.get_raw<float>(dg, cols), hdb = c.get_raw<float>(db, cols);
        std::vector<double> ry(n), rdx(n), rdg(cols, 0.0), rdb(cols, 0.0);
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::size_t o = static_cast<std::size_t>(r) * cols;
            double mu = 0, var = 0, m1 = 0, m2 = 0;
            for (int j = 0; j < cols; ++j) mu += hx[o + j];
            mu /= cols;
            for (int j = 0; j < cols; ++j) var += (hx[o + j] - mu) * (hx[o + j] - mu);
            const double rs = 1.0 / std::sqrt(var / cols + 1e-5);
            for (int j = 0; j < cols; ++j) {
                const double xh = (hx[o + j] - mu) * rs, gd = double(hg[j]) * hdy[o + j];
                ry[o + j] = xh * hg[j] + hb[j];
                m1 += gd / cols;
                m2 += gd * xh / cols;
                rdg[j] += hdy[o + j] * xh;
                rdb[j] += hdy[o + j];
            }
            for (int j = 0; j < cols; ++j) {
                const double xh = (hx[o + j] - mu) * rs, gd = double(hg[j]) * hdy[o + j];
                rdx[o + j] = rs * (gd - m1 - xh * m2) + hdr[o + j];
            }
        }
        const std::string what = "layer norm (cols " + std::to_string(cols) + ")";
        expect_close(what + " forward", hy, ry, 2e-2, 1e-2);
        expect_close(what + " backward dx", hdx, rdx, 2e-2, 2e-2);
        expect_close(what + " backward dgamma", hdg, rdg, 2e-2, 1e-2);
        expect_close(what + " backward dbeta", hdb, rdb, 2e-2, 1e-2);
    }
}

void check_gelu(Checker& c) {
    const std::int64_t rows = 8;
    const int cols = 1024;
    const std::size_t n = rows * cols;
    DeviceBuffer x = c.random(n, -4, 4), b = c.random(cols, -1, 1), y = c.zeros(n * kElem);
    DeviceBuffer dy = c.random(n, -1, 1), dx = c.zeros(n * kElem);
    kern::gelu_fwd(c.dt, x.get(), b.get(), y.get(), rows, cols, c.s);
    kern::gelu_bwd(c.dt, dy.get(), x.get(), b.get(), dx.get(), rows, cols, c.s);
    auto hx = c.get(x, n), hb = c.get(b, cols), hy = c.get(y, n), hdy = c.get(dy, n), hdx = c.get(dx, n);
    std::vector<double> ry(n), rdx(n);
    const double A = std::sqrt(2.0 / 3.14159265358979323846), C = 0.044715;
    for (std::size_t i = 0; i < n; ++i) {
        const double v = double(hx[i]) + hb[i % cols], th = std::tanh(A * (v + C * v * v * v));
        ry[i] = 0.5 * v * (1 + th);
        rdx[i] = hdy[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * A * (1 + 3 * C * v * v));
    }
    expect_close("GeLU forward", hy, ry, 1e-2, 1e-2);
    expect_close("GeLU backward", hdx, rdx, 1e-2, 1e-2);
}

void check_dropout(Checker& c) {
    const std::size_t n = std::size_t{1} << 22;
    const float p = 0.1f, scale = 1.f / (1.f - p);
    DeviceBuffer x = c.random(n, -1, 1), y = c.zeros(n * kElem), m1 = c.zeros(n), m2 = c.zeros(n), m3 = c.zeros(n);
    DeviceBuffer dx = c.zeros(n * kElem);
    kern::dropout_fwd(c.dt, x.get(), y.get(), m1.as<std::uint8_t>(), n, p, 42, c.s);
    kern::dropout_fwd(c.dt, x.get(), y.get(), m2.as<std::uint8_t>(), n, p, 42, c.s);
    kern::dropout_fwd(c.dt, x.get(), y.get(), m3.as<std::uint8_t>(), n, p, 43, c.s);
    kern::dropout_bwd(c.dt, x.get(), m1.as<std::uint8_t>(), dx.get(), n, p, c.s);
    auto hx = c.get(x, n), hy = c.get(y, n), hdx = c.get(dx, n);
    auto a = c.get_raw<std::uint8_t>(m1, n), b = c.get_raw<std::uint8_t>(m2, n), d = c.get_raw<std::uint8_t>(m3, n);
    if (a != b) throw CheckFailed("dropout: the same seed gave a different mask (recompute would differ)");
    if (a == d) throw CheckFailed("dropout: different seeds gave the same mask");
    std::size_t kept = 0;
    std::vector<double> ry(n), rdx(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (a[i] > 1) throw CheckFailed("dropout: mask byte " + std::to_string(i) + " is not 0 or 1");
        kept += a[i];
        ry[i] = a[i] ? double(hx[i]) * scale : 0.0;
        rdx[i] = ry[i];   // backward of x itself: dx = x * mask * scale
    }
    const double rate = double(kept) / n, sigma = std::sqrt(p * (1.0 - p) / n);
    if (std::fabs(rate - (1.0 - p)) > 6 * sigma + 1e-4)
        throw CheckFailed("dropout: keep rate " + std::to_string(rate) + ", expected " + std::to_string(1.0 - p));
    // y came from the seed-43 call: compare against its own mask.
    std::vector<double> ry3(n);
    for (std::size_t i = 0; i < n; ++i) ry3[i] = d[i] ? double(hx[i]) * scale : 0.0;
    expect_close("dropout forward (kept values scaled by 1/(1-p), dropped are 0)", hy, ry3, 1e-6, 1e-2);
    expect_close("dropout backward", hdx, rdx, 1e-6, 1e-2);

    // bias-dropout-add: out = residual + mask * (x + bias) * scale
    const std::int64_t rows = 64;
    const int cols = 1024;
    const std::size_t m = rows * cols;
    DeviceBuffer bx = c.random(m, -1, 1), bias = c.random(cols, -1, 1), res = c.random(m, -1, 1);
    DeviceBuffer out = c.zeros(m * kElem), mask = c.zeros(m);
    kern::bias_dropout_add_fwd(c.dt, bx.get(), bias.get(), res.get(), out.get(), mask.as<std::uint8_t>(), rows, cols,
                               p, 7, c.s);
    auto hbx = c.get(bx, m), hbias = c.get(bias, cols), hres = c.get(res, m), hout = c.get(out, m);
    auto hm = c.get_raw<std::uint8_t>(mask, m);
    std::vector<double> rout(m);
    std::size_t bkept = 0;
    for (std::size_t i = 0; i < m; ++i) {
        bkept += hm[i];
        rout[i] = hres[i] + (hm[i] ? (double(hbx[i]) + hbias[i % cols]) * scale : 0.0);
    }
    const double brate = double(bkept) / m, bsigma = std::sqrt(p * (1.0 - p) / m);
    if (std::fabs(brate - (1.0 - p)) > 6 * bsigma + 1e-4)
        throw CheckFailed("bias-dropout-add: keep rate " + std::to_string(brate));
    expect_close("bias-dropout-add forward", hout, rout, 2e-2, 1e-2);
}

}  // namespace

void run_checks(const Context& ctx) {
    DeviceGuard guard(0);
    Checker c{ctx.dtype, 0};
    CAL_CUDA(cudaStreamCreate(&c.s));
    struct StreamFree {
        cudaStream_t s;
        ~StreamFree() { cudaStreamDestroy(s); }
    } free_stream{c.s};
    Blas blas(0);
    check_gemms(c, blas);
    progress("check: GEMMs (cuBLASLt, 4 transpose cases; strided-batched) match the reference kernel");
    check_softmax(c);
    progress("check: causal scale-mask-softmax forward/backward match the CPU reference, rows sum to 1");
    check_layernorm(c);
    progress("check: layer norm forward/backward match the CPU reference");
    check_gelu(c);
    progress("check: GeLU forward/backward match the CPU reference");
    check_dropout(c);
    progress("check: dropout keep rate ~ 1-p, scaling 1/(1-p), same seed same mask; bias-dropout-add matches");
    CAL_CUDA(cudaStreamSynchronize(c.s));
}

}  // namespace strata::calibrate
