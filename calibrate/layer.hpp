// Shapes and building blocks of one Megatron GPT layer as one GPU of a t-way tensor-parallel group sees
// it: the 12 GEMMs (forward, data-gradient and weight-gradient of QKV, projection, fc1, fc2) and the
// attention core (batched QK^T and .V in Megatron's [s, b, heads, 3, d] layout, scale-mask-softmax,
// dropout) forward and backward. Weights are stored [out, in] as in Megatron (forward Y = X W^T).
#pragma once

#include "gemm.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace strata::calibrate {

struct ModelDims {
    std::int64_t s, b, h, a, t;
    std::int64_t sb() const { return s * b; }
    std::int64_t d() const { return h / a; }            // head size
    std::int64_t np() const { return a / t; }           // heads on this GPU
    std::int64_t batch() const { return b * np(); }     // attention batch b*a/t
    static ModelDims from(const Context& c) { return {c.seq, c.microbatch, c.hidden, c.heads, c.tensor}; }
};

/// qkv_fwd, qkv_dgrad, qkv_wgrad, proj_*, fc1_*, fc2_* (in that order per block: fwd, dgrad, wgrad).
std::vector<GemmDesc> layer_gemms(const ModelDims& m);

/// Attention core on one GPU. qkv: [s*b, 3h/t] (row = token s_i*b+b_i, columns [heads][q,k,v][d]);
/// ctx: [s*b, h/t]; scores/probs/dropped: [b*a/t, s, s]; mask: 1 byte per probability.
class AttentionCore {
public:
    AttentionCore(Blas& blas, DType dt, const ModelDims& m, float dropout_p);
    /// scores = Q K^T; probs = softmax(scores / sqrt(d), causal); dropped = dropout(probs).
    void probabilities(const void* qkv, void* scores, void* probs, std::uint8_t* mask, void* dropped,
                       std::uint64_t seed, cudaStream_t s) const;
    /// probabilities(), then ctx = dropped V.
    void forward(const void* qkv, void* scores, void* probs, std::uint8_t* mask, void* dropped, void* ctx,
                 std::uint64_t seed, cudaStream_t s) const;
    /// dqkv from dctx; `scratch` ([b*a/t, s, s]) receives dP, then dS in place.
    void backward(const void* qkv, const void* probs, const std::uint8_t* mask, const void* dropped,
                  const void* dctx, void* scratch, void* dqkv, cudaStream_t s) const;

    std::size_t score_elems() const;
    const Gemm& gemm(int i) const { return *gemms_[i]; }   // 0 qk, 1 pv, 2 dp, 3 dv, 4 dq, 5 dk
    static constexpr int kGemms = 6;

private:
    DType dt_;
    ModelDims m_;
    float p_;
    std::vector<std::unique_ptr<Gemm>> gemms_;
};

}  // namespace strata::calibrate
