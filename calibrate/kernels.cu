// strata-calibrate's own CUDA kernels (see kernels.hpp). Elementwise kernels move one 16-byte vector
// (8 elements) per thread; row kernels (layer norm, softmax) give each row one block and keep the row in
// registers (at most 4 vectors per thread, so rows up to 32768 elements). Dropout draws its randomness
// from Philox4x32-10 keyed by the seed with the vector index as counter (so a recompute with the same
// seed reproduces the mask), 16 bits per element.
#include "kernels.hpp"

#include "device.cuh"

#include <curand_kernel.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace strata::calibrate::kern {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxV = 4;               // vectors per thread in row kernels
constexpr int kLnBwdBlocks = 512;      // blocks (and dgamma/dbeta partial rows) of the fused LN backward

unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
void launched() { CAL_CUDA(cudaGetLastError()); }

void need(bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("kernel shape: ") + what);
}
int row_threads(int cols) {
    need(cols % 8 == 0 && cols > 0, "row length must be a positive multiple of 8");
    need(cols <= 8 * kMaxV * 1024, "row length at most 32768");
    int t = (cols / 8 + kMaxV - 1) / kMaxV;
    return std::max(32, (t + 31) / 32 * 32);
}

// ---- random numbers ------------------------------------------------------------------------------
__device__ __forceinline__ uint4 philox(unsigned long long counter, unsigned long long seed) {
    return curand_Philox4x32_10(make_uint4(static_cast<unsigned>(counter), static_cast<unsigned>(counter >> 32),
                                           0x5eedu, 0u),
                                make_uint2(static_cast<unsigned>(seed), static_cast<unsigned>(seed >> 32)));
}
// 8 keep flags (one per element of a vector) from one Philox draw, 16 bits each.
__device__ __forceinline__ void keep8(unsigned long long vec, unsigned long long seed, unsigned thr, bool k[8]) {
    uint4 r = philox(vec, seed);
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) k[j] = ((w[j / 2] >> (16 * (j % 2))) & 0xffffu) >= thr;
}
__device__ __forceinline__ uint2 pack_mask(const bool k[8]) {
    unsigned lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        lo |= static_cast<unsigned>(k[j]) << (8 * j);
        hi |= static_cast<unsigned>(k[j + 4]) << (8 * j);
    }
    return make_uint2(lo, hi);
}
__device__ __forceinline__ bool mask_at(uint2 m, int j) { return ((j < 4 ? m.x : m.y) >> (8 * (j % 4))) & 0xffu; }

template <class T>
__global__ void fill_k(T* p, std::size_t n, float lo, float hi, unsigned long long seed) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const float u = static_cast<float>(philox(i, seed).x) * 2.3283064e-10f;
        p[i] = to<T>(lo + (hi - lo) * u);
    }
}

__global__ void empty_k() {}

// ---- SMs held (the interference of a collective's kernel) -------------------------------------------
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
constexpr unsigned long long kSpinLimitNs = 500000000ull;

__global__ void hold_k(int* started, const int* release) {
    extern __shared__ unsigned char reserved[];
    if (threadIdx.x == 0) {
        reserved[0] = 0;
        atomicAdd(started, 1);
        const unsigned long long t0 = global_ns();
        while (*reinterpret_cast<const volatile int*>(release) == 0 && global_ns() - t0 < kSpinLimitNs) {
        }
    }
    __syncthreads();
}
__global__ void wait_at_least_k(const int* started, int target) {
    const unsigned long long t0 = global_ns();
    while (*reinterpret_cast<const volatile int*>(started) < target && global_ns() - t0 < kSpinLimitNs) {
    }
}
__global__ void set_flag_k(int* flag, int value) { *flag = value; }

// ---- GeLU (tanh approximation) ---------------------------------------------------------------------
constexpr float kGeluA = 0.7978845608028654f, kGeluC = 0.044715f;
__device__ __forceinline__ float tanh_fast(float u) { return 1.f - 2.f / (__expf(2.f * u) + 1.f); }
__device__ __forceinline__ float gelu(float x) {
    return 0.5f * x * (1.f + tanh_fast(kGeluA * (x + kGeluC * x * x * x)));
}
__device__ __forceinline__ float gelu_grad(float x) {
    const float th = tanh_fast(kGeluA * (x + kGeluC * x * x * x));
    return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kGeluA * (1.f + 3.f * kGeluC * x * x);
}

template <class T>
__global__ void gelu_fwd_k(const Vec<T>* x, const Vec<T>* bias, Vec<T>* y, std::size_t nvec, int cvec) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i >= nvec) return;
    const Vec<T> a = x[i], b = bias[i % cvec];
    Vec<T> o;
#pragma unroll
    for (int j = 0; j < 8; ++j) o.v[j] = to<T>(gelu(f32(a.v[j]) + f32(b.v[j])));
    y[i] = o;
}

template <class T>
__global__ void gelu_bwd_k(const Vec<T>* dy, const Vec<T>* x, const Vec<T>* bias, Vec<T>* dx, std::size_t nvec,
                           int cvec) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i >= nvec) return;
    const Vec<T> d = dy[i], a = x[i], b = bias[i % cvec];
    Vec<T> o;
#pragma unroll
    for (int j = 0; j < 8; ++j) o.v[j] = to<T>(f32(d.v[j]) * gelu_grad(f32(a.v[j]) + f32(b.v[j])));
    dx[i] = o;
}

// ---- dropout ---------------------------------------------------------------------------------------
template <class T>
__global__ void dropout_fwd_k(const Vec<T>* x, Vec<T>* y, uint2* mask, std::size_t nvec, unsigned thr, float scale,
                              unsigned long long seed) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i >= nvec) return;
    bool k[8];
    keep8(i, seed, thr, k);
    const Vec<T> a = x[i];
    Vec<T> o;
#pragma unroll
    for (int j = 0; j < 8; ++j) o.v[j] = to<T>(k[j] ? f32(a.v[j]) * scale : 0.f);
    y[i] = o;
    mask[i] = pack_mask(k);
}

template <class T>
__global__ void dropout_bwd_k(const Vec<T>* dy, const uint2* mask, Vec<T>* dx, std::size_t nvec, float scale) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i >= nvec) return;
    const uint2 m = mask[i];
    const Vec<T> d = dy[i];
    Vec<T> o;
#pragma unroll
    for (int j = 0; j < 8; ++j) o.v[j] = to<T>(mask_at(m, j) ? f32(d.v[j]) * scale : 0.f);
    dx[i] = o;
}

template <class T>
__global__ void bias_dropout_add_k(const Vec<T>* x, const Vec<T>* bias, const Vec<T>* res, Vec<T>* out, uint2* mask,
                                   std::size_t nvec, int cvec, unsigned thr, float scale, unsigned long long seed) {
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i >= nvec) return;
    bool k[8];
    keep8(i, seed, thr, k);
    const Vec<T> a = x[i], b = bias[i % cvec], r = res[i];
    Vec<T> o;
#pragma unroll
    for (int j = 0; j < 8; ++j)
        o.v[j] = to<T>(f32(r.v[j]) + (k[j] ? (f32(a.v[j]) + f32(b.v[j])) * scale : 0.f));
    out[i] = o;
    mask[i] = pack_mask(k);
}

// ---- block reductions ------------------------------------------------------------------------------
struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
// blockDim.x must be a multiple of 32; every thread gets the result.
template <class Op>
__device__ float block_reduce(float v, Op op, float init) {
    __shared__ float sh[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();   // the previous call's readers are done with sh
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : init;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- layer norm ------------------------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(1024) ln_fwd_k(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                                                 float* rstd, int cols) {
    const std::size_t row = blockIdx.x;
    const int nvec = cols >> 3;
    const Vec<T>* xr = reinterpret_cast<const Vec<T>*>(x + row * cols);
    float v[kMaxV][8] = {};
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxV; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nvec) {
            const Vec<T> a = xr[c];
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += (v[i][j] = f32(a.v[j]));
        }
    }
    const float mu = block_reduce(sum, SumOp{}, 0.f) / cols;
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxV; ++i)
        if (threadIdx.x + i * blockDim.x < nvec)
#pragma unroll
            for (int j = 0; j < 8; ++j) sq += (v[i][j] - mu) * (v[i][j] - mu);
    const float rs = rsqrtf(block_reduce(sq, SumOp{}, 0.f) / cols + 1e-5f);
    const Vec<T>* g = reinterpret_cast<const Vec<T>*>(gamma);
    const Vec<T>* b = reinterpret_cast<const Vec<T>*>(beta);
    Vec<T>* yr = reinterpret_cast<Vec<T>*>(y + row * cols);
#pragma unroll
    for (int i = 0; i < kMaxV; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nvec) {
            const Vec<T> gg = g[c], bb = b[c];
            Vec<T> o;
#pragma unroll
            for (int j = 0; j < 8; ++j) o.v[j] = to<T>((v[i][j] - mu) * rs * f32(gg.v[j]) + f32(bb.v[j]));
            yr[c] = o;
        }
    }
    if (threadIdx.x == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

// dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)) [+ dres]. ACCUM: the block also sums
// dy*xhat and dy for its columns over its rows (registers) and writes one partial row per block.
template <class T, bool ACCUM>
__global__ void __launch_bounds__(ACCUM ? 256 : 1024)
    ln_bwd_k(const T* dy, const T* x, const float* mean, const float* rstd, const T* gamma, const T* dres, T* dx,
             float* part_g, float* part_b, std::int64_t rows, int cols) {
    const int nvec = cols >> 3;
    const Vec<T>* g = reinterpret_cast<const Vec<T>*>(gamma);
    float ag[ACCUM ? kMaxV : 1][8] = {}, ab[ACCUM ? kMaxV : 1][8] = {};
    for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float mu = mean[row], rs = rstd[row];
        const std::size_t off = static_cast<std::size_t>(row) * cols;
        const Vec<T>* xr = reinterpret_cast<const Vec<T>*>(x + off);
        const Vec<T>* dr = reinterpret_cast<const Vec<T>*>(dy + off);
        Vec<T> xv[kMaxV], dv[kMaxV];
        float s1 = 0.f, s2 = 0.f;
#pragma unroll
        for (int i = 0; i < kMaxV; ++i) {
            const int c = threadIdx.x + i * blockDim.x;
            if (c < nvec) {
                xv[i] = xr[c];
                dv[i] = dr[c];
                const Vec<T> gg = g[c];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float xh = (f32(xv[i].v[j]) - mu) * rs, d = f32(dv[i].v[j]), gd = f32(gg.v[j]) * d;
                    s1 += gd;
                    s2 += gd * xh;
                    if constexpr (ACCUM) {
                        ag[i][j] += d * xh;
                        ab[i][j] += d;
                    }
                }
            }
        }
        const float m1 = block_reduce(s1, SumOp{}, 0.f) / cols;
        const float m2 = block_reduce(s2, SumOp{}, 0.f) / cols;
        Vec<T>* out = reinterpret_cast<Vec<T>*>(dx + off);
        const Vec<T>* rr = reinterpret_cast<const Vec<T>*>(dres ? dres + off : nullptr);
#pragma unroll
        for (int i = 0; i < kMaxV; ++i) {
            const int c = threadIdx.x + i * blockDim.x;
            if (c < nvec) {
                const Vec<T> gg = g[c];
                Vec<T> r{}, o;
                if (rr) r = rr[c];
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const float xh = (f32(xv[i].v[j]) - mu) * rs, gd = f32(gg.v[j]) * f32(dv[i].v[j]);
                    o.v[j] = to<T>(rs * (gd - m1 - xh * m2) + (rr ? f32(r.v[j]) : 0.f));
                }
                out[c] = o;
            }
        }
    }
    if constexpr (ACCUM) {
#pragma unroll
        for (int i = 0; i < kMaxV; ++i) {
            const int c = threadIdx.x + i * blockDim.x;
            if (c < nvec) {
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    part_g[static_cast<std::size_t>(blockIdx.x) * cols + c * 8 + j] = ag[i][j];
                    part_b[static_cast<std::size_t>(blockIdx.x) * cols + c * 8 + j] = ab[i][j];
                }
            }
        }
    }
}

// Wide rows (ACCUM would need too many registers): dgamma/dbeta partials by a column pass.
template <class T>
__global__ void ln_gamma_part_k(const T* dy, const T* x, const float* mean, const float* rstd, std::int64_t rows,
                                int cols, std::int64_t chunk, float* part_g, float* part_b) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const std::int64_t r0 = blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float g = 0.f, b = 0.f;
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::size_t i = static_cast<std::size_t>(r) * cols + col;
        const float d = f32(dy[i]);
        g += d * (f32(x[i]) - mean[r]) * rstd[r];
        b += d;
    }
    part_g[static_cast<std::size_t>(blockIdx.y) * cols + col] = g;
    part_b[static_cast<std::size_t>(blockIdx.y) * cols + col] = b;
}

__global__ void ln_finalize_k(const float* part_g, const float* part_b, int parts, int cols, float* dgamma,
                              float* dbeta) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    float g = 0.f, b = 0.f;
    for (int k = 0; k < parts; ++k) {
        g += part_g[static_cast<std::size_t>(k) * cols + col];
        b += part_b[static_cast<std::size_t>(k) * cols + col];
    }
    dgamma[col] = g;
    dbeta[col] = b;
}

// ---- softmax ---------------------------------------------------------------------------------------
template <class T>
__global__ void __launch_bounds__(1024) softmax_fwd_k(const T* x, T* y, int cols, float scale, bool causal) {
    const std::size_t row = blockIdx.x;
    const int nvec = cols >> 3;
    const int last = causal ? static_cast<int>(row % cols) : cols - 1;   // columns > last are masked
    const Vec<T>* xr = reinterpret_cast<const Vec<T>*>(x + row * cols);
    float v[kMaxV][8] = {};
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMaxV; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nvec) {
            const Vec<T> a = xr[c];
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                v[i][j] = c * 8 + j > last ? -INFINITY : f32(a.v[j]) * scale;
                mx = fmaxf(mx, v[i][j]);
            }
        }
    }
    mx = block_reduce(mx, MaxOp{}, -INFINITY);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxV; ++i)
        if (threadIdx.x + i * blockDim.x < nvec)
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += (v[i][j] = __expf(v[i][j] - mx));
    const float inv = 1.f / block_reduce(sum, SumOp{}, 0.f);
    Vec<T>* yr = reinterpret_cast<Vec<T>*>(y + row * cols);
#pragma unroll
    for (int i = 0; i < kMaxV; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nvec) {
            Vec<T> o;
#pragma unroll
            for (int j = 0; j < 8; ++j) o.v[j] = to<T>(v[i][j] * inv);
            yr[c] = o;
        }
    }
}

template <class T>
__global__ void __launch_bounds__(1024) softmax_bwd_k(const T* y, const T* dy, T* dx, int cols, float scale) {
    const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
    const int nvec = cols >> 3;
    const Vec<T>* yr = reinterpret_cast<const Vec<T>*>(y + off);
    const Vec<T>* dr = reinterpret_cast<const Vec<T>*>(dy + off);
    Vec<T> yv[kMaxV], dv[kMaxV];
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxV; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nvec) {
            yv[i] = yr[c];
            dv[i] = dr[c];
#pragma unroll
            for (int j = 0; j < 8; ++j) dot += f32(yv[i].v[j]) * f32(dv[i].v[j]);
        }
    }
    dot = block_reduce(dot, SumOp{}, 0.f);
    Vec<T>* out = reinterpret_cast<Vec<T>*>(dx + off);
#pragma unroll
    for (int i = 0; i < kMaxV; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < nvec) {
            Vec<T> o;
#pragma unroll
            for (int j = 0; j < 8; ++j) o.v[j] = to<T>(scale * f32(yv[i].v[j]) * (f32(dv[i].v[j]) - dot));
            out[c] = o;
        }
    }
}

float keep_scale(float p) { return p < 1.f ? 1.f / (1.f - p) : 0.f; }

}  // namespace

// ---- launchers -------------------------------------------------------------------------------------

std::uint32_t dropout_threshold(float p) {
    if (!(p > 0.f)) return 0;
    if (p >= 1.f) return 65536;
    return static_cast<std::uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
}

void fill_uniform(DType dt, void* p, std::size_t n, float lo, float hi, std::uint64_t seed, cudaStream_t s) {
    if (n == 0) return;
    const unsigned blocks = std::min<unsigned>(blocks_for(n), 8192);
    CAL_DISPATCH(dt, fill_k<T><<<blocks, kThreads, 0, s>>>(static_cast<T*>(p), n, lo, hi, seed));
    launched();
}

void empty(cudaStream_t s) {
    empty_k<<<1, 32, 0, s>>>();
    launched();
}

bool hold_sms(int blocks, int cluster, int smem_bytes, int* started, const int* release, cudaStream_t s) {
    need(blocks > 0 && cluster > 0 && blocks % cluster == 0, "held SMs must be a multiple of the cluster size");
    CAL_CUDA(cudaFuncSetAttribute(hold_k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = static_cast<std::size_t>(smem_bytes);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = cluster > 1 ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, hold_k, started, release);
    if (e == cudaSuccess) return true;
    if (cluster > 1 && (e == cudaErrorInvalidValue || e == cudaErrorNotSupported ||
                        e == cudaErrorInvalidConfiguration || e == cudaErrorInvalidClusterSize)) {
        (void)cudaGetLastError();
        return false;
    }
    CAL_CUDA(e);
    return false;
}

void wait_at_least(const int* started, int target, cudaStream_t s) {
    wait_at_least_k<<<1, 1, 0, s>>>(started, target);
    launched();
}

void set_flag(int* flag, int value, cudaStream_t s) {
    set_flag_k<<<1, 1, 0, s>>>(flag, value);
    launched();
}

void gelu_fwd(DType dt, const void* x, const void* bias, void* y, std::int64_t rows, int cols, cudaStream_t s) {
    need(cols % 8 == 0, "GeLU row length must be a multiple of 8");
    const std::size_t nvec = static_cast<std::size_t>(rows) * cols / 8;
    CAL_DISPATCH(dt, gelu_fwd_k<T><<<blocks_for(nvec), kThreads, 0, s>>>(
                         static_cast<const Vec<T>*>(x), static_cast<const Vec<T>*>(bias), static_cast<Vec<T>*>(y),
                         nvec, cols / 8));
    launched();
}

void gelu_bwd(DType dt, const void* dy, const void* x, const void* bias, void* dx, std::int64_t rows, int cols,
              cudaStream_t s) {
    need(cols % 8 == 0, "GeLU row length must be a multiple of 8");
    const std::size_t nvec = static_cast<std::size_t>(rows) * cols / 8;
    CAL_DISPATCH(dt, gelu_bwd_k<T><<<blocks_for(nvec), kThreads, 0, s>>>(
                         static_cast<const Vec<T>*>(dy), static_cast<const Vec<T>*>(x),
                         static_cast<const Vec<T>*>(bias), static_cast<Vec<T>*>(dx), nvec, cols / 8));
    launched();
}

void dropout_fwd(DType dt, const void* x, void* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                 cudaStream_t s) {
    need(n % 8 == 0, "dropout element count must be a multiple of 8");
    CAL_DISPATCH(dt, dropout_fwd_k<T><<<blocks_for(n / 8), kThreads, 0, s>>>(
                         static_cast<const Vec<T>*>(x), static_cast<Vec<T>*>(y), reinterpret_cast<uint2*>(mask),
                         n / 8, dropout_threshold(p), keep_scale(p), seed));
    launched();
}

void dropout_bwd(DType dt, const void* dy, const std::uint8_t* mask, void* dx, std::size_t n, float p,
                 cudaStream_t s) {
    need(n % 8 == 0, "dropout element count must be a multiple of 8");
    CAL_DISPATCH(dt, dropout_bwd_k<T><<<blocks_for(n / 8), kThreads, 0, s>>>(
                         static_cast<const Vec<T>*>(dy), reinterpret_cast<const uint2*>(mask),
                         static_cast<Vec<T>*>(dx), n / 8, keep_scale(p)));
    launched();
}

void bias_dropout_add_fwd(DType dt, const void* x, const void* bias, const void* residual, void* out,
                          std::uint8_t* mask, std::int64_t rows, int cols, float p, std::uint64_t seed,
                          cudaStream_t s) {
    need(cols % 8 == 0, "bias-dropout-add row length must be a multiple of 8");
    const std::size_t nvec = static_cast<std::size_t>(rows) * cols / 8;
    CAL_DISPATCH(dt, bias_dropout_add_k<T><<<blocks_for(nvec), kThreads, 0, s>>>(
                         static_cast<const Vec<T>*>(x), static_cast<const Vec<T>*>(bias),
                         static_cast<const Vec<T>*>(residual), static_cast<Vec<T>*>(out),
                         reinterpret_cast<uint2*>(mask), nvec, cols / 8, dropout_threshold(p), keep_scale(p), seed));
    launched();
}

void layernorm_fwd(DType dt, const void* x, const void* gamma, const void* beta, void* y, float* mean, float* rstd,
                   std::int64_t rows, int cols, cudaStream_t s) {
    const int threads = row_threads(cols);
    CAL_DISPATCH(dt, ln_fwd_k<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
                         static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
                         static_cast<T*>(y), mean, rstd, cols));
    launched();
}

namespace {
bool ln_bwd_fused(int cols) { return row_threads(cols) <= 256; }
int ln_bwd_parts(std::int64_t rows, int cols) {
    return static_cast<int>(std::min<std::int64_t>(rows, ln_bwd_fused(cols) ? kLnBwdBlocks : 64));
}
}  // namespace

std::size_t layernorm_bwd_scratch_floats(std::int64_t rows, int cols) {
    return 2 * static_cast<std::size_t>(ln_bwd_parts(rows, cols)) * cols;
}

void layernorm_bwd(DType dt, const void* dy, const void* x, const float* mean, const float* rstd, const void* gamma,
                   const void* dres, void* dx, float* dgamma, float* dbeta, float* scratch, std::int64_t rows,
                   int cols, cudaStream_t s) {
    const int threads = row_threads(cols), parts = ln_bwd_parts(rows, cols);
    float* part_g = scratch;
    float* part_b = scratch + static_cast<std::size_t>(parts) * cols;
    const unsigned cblocks = static_cast<unsigned>((cols + kThreads - 1) / kThreads);
    if (ln_bwd_fused(cols)) {
        CAL_DISPATCH(dt, ln_bwd_k<T, true><<<parts, threads, 0, s>>>(
                             static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
                             static_cast<const T*>(gamma), static_cast<const T*>(dres), static_cast<T*>(dx), part_g,
                             part_b, rows, cols));
    } else {
        const unsigned grid = static_cast<unsigned>(std::min<std::int64_t>(rows, 65535));
        CAL_DISPATCH(dt, ln_bwd_k<T, false><<<grid, threads, 0, s>>>(
                             static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd,
                             static_cast<const T*>(gamma), static_cast<const T*>(dres), static_cast<T*>(dx), nullptr,
                             nullptr, rows, cols));
        launched();
        const std::int64_t chunk = (rows + parts - 1) / parts;
        CAL_DISPATCH(dt, ln_gamma_part_k<T><<<dim3(cblocks, parts), kThreads, 0, s>>>(
                             static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, rows, cols, chunk,
                             part_g, part_b));
    }
    launched();
    ln_finalize_k<<<cblocks, kThreads, 0, s>>>(part_g, part_b, parts, cols, dgamma, dbeta);
    launched();
}

void softmax_fwd(DType dt, const void* x, void* y, std::int64_t rows, int cols, float scale, bool causal,
                 cudaStream_t s) {
    const int threads = row_threads(cols);
    CAL_DISPATCH(dt, softmax_fwd_k<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
                         static_cast<const T*>(x), static_cast<T*>(y), cols, scale, causal));
    launched();
}

void softmax_bwd(DType dt, const void* y, const void* dy, void* dx, std::int64_t rows, int cols, float scale,
                 cudaStream_t s) {
    const int threads = row_threads(cols);
    CAL_DISPATCH(dt, softmax_bwd_k<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
                         static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), cols, scale));
    launched();
}

}  // namespace strata::calibrate::kern
