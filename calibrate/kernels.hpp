// Host-side launchers for strata-calibrate's own CUDA kernels (kernels.cu): layer norm, GeLU, fused
// scale-mask-softmax, dropout (Philox counter-based RNG, 1-byte mask), bias-dropout-add, data fill.
// Row-major tensors of 16-bit elements (bf16 or fp16, fp32 math). Element counts and row lengths must
// be multiples of 8: every kernel moves 16-byte vectors.
#pragma once

#include "gpu.hpp"

#include <cstdint>

namespace strata::calibrate::kern {

/// Uniform values in [lo, hi) from a counter-based hash of (seed, index).
void fill_uniform(DType dt, void* p, std::size_t n, float lo, float hi, std::uint64_t seed, cudaStream_t s);
void empty(cudaStream_t s);

/// y = (x - mean) * rstd * gamma + beta over rows of `cols`; saves per-row mean and rstd (fp32).
void layernorm_fwd(DType dt, const void* x, const void* gamma, const void* beta, void* y, float* mean, float* rstd,
                   std::int64_t rows, int cols, cudaStream_t s);
/// Floats of scratch layernorm_bwd needs for per-block dgamma/dbeta partial sums.
std::size_t layernorm_bwd_scratch_floats(std::int64_t rows, int cols);
/// dx (+ dres if non-null, the residual branch's gradient), dgamma, dbeta (fp32).
void layernorm_bwd(DType dt, const void* dy, const void* x, const float* mean, const float* rstd, const void* gamma,
                   const void* dres, void* dx, float* dgamma, float* dbeta, float* scratch, std::int64_t rows,
                   int cols, cudaStream_t s);

/// y = gelu_tanh(x + bias[col]); dx = dy * gelu_tanh'(x + bias[col]).
void gelu_fwd(DType dt, const void* x, const void* bias, void* y, std::int64_t rows, int cols, cudaStream_t s);
void gelu_bwd(DType dt, const void* dy, const void* x, const void* bias, void* dx, std::int64_t rows, int cols,
              cudaStream_t s);

/// Dropout with probability p: mask[i] = 1 if kept; y = x * mask / (1 - p). Same seed, same mask.
void dropout_fwd(DType dt, const void* x, void* y, std::uint8_t* mask, std::size_t n, float p, std::uint64_t seed,
                 cudaStream_t s);
/// dx = dy * mask / (1 - p). Also the backward of bias-dropout-add (the residual gradient is dy itself).
void dropout_bwd(DType dt, const void* dy, const std::uint8_t* mask, void* dx, std::size_t n, float p,
                 cudaStream_t s);
/// out = residual + dropout(x + bias[col]).
void bias_dropout_add_fwd(DType dt, const void* x, const void* bias, const void* residual, void* out,
                          std::uint8_t* mask, std::int64_t rows, int cols, float p, std::uint64_t seed,
                          cudaStream_t s);

/// Row softmax of x*scale over `cols`; causal: rows are [.., s, s] score matrices (cols == s) and in row
/// i of each matrix the columns j > i are masked (probability 0).
void softmax_fwd(DType dt, const void* x, void* y, std::int64_t rows, int cols, float scale, bool causal,
                 cudaStream_t s);
/// dx = scale * y * (dy - sum(dy * y)).
void softmax_bwd(DType dt, const void* y, const void* dy, void* dx, std::int64_t rows, int cols, float scale,
                 cudaStream_t s);

/// Holds `blocks` SMs the way an NCCL collective's kernel does while it runs: one block per SM with `smem_bytes` of
/// dynamic shared memory (so that no GEMM block fits beside it), launched in thread-block clusters of `cluster`
/// (1: none; NCCL launches its kernels in clusters of 4 on sm90). Each block adds one to `*started`, then spins
/// until `*release` is non-zero (at most 0.5 s). Returns false (nothing launched) if the GPU refuses the clusters.
bool hold_sms(int blocks, int cluster, int smem_bytes, int* started, const int* release, cudaStream_t s);
/// Spins until `*started >= target` (at most 0.5 s): what runs after it on the stream starts once the holder's
/// blocks are resident.
void wait_at_least(const int* started, int target, cudaStream_t s);
/// `*flag = value`.
void set_flag(int* flag, int value, cudaStream_t s);

/// Threshold used by the dropout kernels: an element is kept when its 16-bit random value >= this.
std::uint32_t dropout_threshold(float p);

}  // namespace strata::calibrate::kern
