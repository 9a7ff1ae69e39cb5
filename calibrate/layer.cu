// Whole-layer measurement: one Megatron GPT layer (pre-LN; QKV, attention core, projection,
// bias-dropout-add, LN, fc1, GeLU, fc2, bias-dropout-add) forward then backward, as one GPU of a t-way
// tensor-parallel group sees it, with recompute none / selective / full and with or without sequence
// parallelism. With t GPUs available the layer runs on t GPUs with the real NCCL collectives
// (all-reduce for TP; all-gather / reduce-scatter for SP); otherwise on one GPU with the collectives
// skipped (compute-only times). Bias gradients are not computed; the QKV bias is not added.
//
// Activation accounting: every tensor the implementation keeps from forward to backward is listed in
// the stash for the mode; activation_bytes is the sum of their allocated sizes (layer-norm mean/rstd,
// rows x 8 bytes, are left out as in the paper). A self-check proves the stash suffices: after the
// forward, every activation that is not in the stash is overwritten with NaN, and the backward must
// produce the same input gradient as with recompute none.
#include "comm.hpp"
#include "device.cuh"
#include "kernels.hpp"
#include "layer.hpp"

#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

namespace strata::calibrate {

std::vector<GemmDesc> layer_gemms(const ModelDims& m) {
    const std::int64_t sb = m.sb(), h = m.h, t = m.t;
    auto block = [&](const std::string& n, std::int64_t in, std::int64_t out) {   // W [out, in]
        return std::vector<GemmDesc>{GemmDesc(n + "_fwd", sb, out, in, false, true),
                                     GemmDesc(n + "_dgrad", sb, in, out, false, false),
                                     GemmDesc(n + "_wgrad", out, in, sb, true, false)};
    };
    std::vector<GemmDesc> all;
    for (auto& v : {block("qkv", h, 3 * h / t), block("proj", h / t, h), block("fc1", h, 4 * h / t),
                    block("fc2", 4 * h / t, h)})
        all.insert(all.end(), v.begin(), v.end());
    return all;
}

// ---- attention core ---------------------------------------------------------------------------------

AttentionCore::AttentionCore(Blas& blas, DType dt, const ModelDims& m, float p) : dt_(dt), m_(m), p_(p) {
    const std::int64_t s = m.s, d = m.d(), B = m.batch();
    const std::int64_t ld_qkv = m.b * 3 * m.h / m.t, ld_ctx = m.b * m.h / m.t;
    auto mk = [&](const char* name, std::int64_t mm, std::int64_t nn, std::int64_t kk, bool ta, bool tb,
                  std::int64_t lda, std::int64_t sa, std::int64_t ldb, std::int64_t sbs, std::int64_t ldc,
                  std::int64_t sc) {
        GemmDesc g(name, mm, nn, kk, ta, tb, static_cast<int>(B));
        g.lda = lda, g.stride_a = sa, g.ldb = ldb, g.stride_b = sbs, g.ldc = ldc, g.stride_c = sc;
        gemms_.push_back(std::make_unique<Gemm>(blas, dt, g));
    };
    // per (b_i, head) matrix z = b_i*np + head: Q/K/V rows are tokens (stride ld_qkv), start z*3d (+d, +2d)
    mk("attn_qk_fwd", s, s, d, false, true, ld_qkv, 3 * d, ld_qkv, 3 * d, s, s * s);    // scores = Q K^T
    mk("attn_pv_fwd", s, d, s, false, false, s, s * s, ld_qkv, 3 * d, ld_ctx, d);       // ctx = P V
    mk("attn_dp_bwd", s, s, d, false, true, ld_ctx, d, ld_qkv, 3 * d, s, s * s);        // dP = dctx V^T
    mk("attn_dv_bwd", s, d, s, true, false, s, s * s, ld_ctx, d, ld_qkv, 3 * d);        // dV = P^T dctx
    mk("attn_dq_bwd", s, d, s, false, false, s, s * s, ld_qkv, 3 * d, ld_qkv, 3 * d);   // dQ = dS K
    mk("attn_dk_bwd", s, d, s, true, false, s, s * s, ld_qkv, 3 * d, ld_qkv, 3 * d);    // dK = dS^T Q
}

std::size_t AttentionCore::score_elems() const { return static_cast<std::size_t>(m_.batch() * m_.s * m_.s); }

namespace {
const char* at(const void* p, std::int64_t elems) { return static_cast<const char*>(p) + elems * kElem; }
char* at(void* p, std::int64_t elems) { return static_cast<char*>(p) + elems * kElem; }
}  // namespace

void AttentionCore::probabilities(const void* qkv, void* scores, void* probs, std::uint8_t* mask, void* dropped,
                                  std::uint64_t seed, cudaStream_t s) const {
    const std::int64_t d = m_.d(), rows = m_.batch() * m_.s;
    gemms_[0]->run(qkv, at(qkv, d), scores, s);
    kern::softmax_fwd(dt_, scores, probs, rows, static_cast<int>(m_.s), 1.f / std::sqrt(static_cast<float>(d)),
                      true, s);
    kern::dropout_fwd(dt_, probs, dropped, mask, score_elems(), p_, seed, s);
}

void AttentionCore::forward(const void* qkv, void* scores, void* probs, std::uint8_t* mask, void* dropped,
                            void* ctx, std::uint64_t seed, cudaStream_t s) const {
    probabilities(qkv, scores, probs, mask, dropped, seed, s);
    gemms_[1]->run(dropped, at(qkv, 2 * m_.d()), ctx, s);
}

void AttentionCore::backward(const void* qkv, const void* probs, const std::uint8_t* mask, const void* dropped,
                             const void* dctx, void* scratch, void* dqkv, cudaStream_t s) const {
    const std::int64_t d = m_.d(), rows = m_.batch() * m_.s;
    gemms_[3]->run(dropped, dctx, at(dqkv, 2 * d), s);                  // dV
    gemms_[2]->run(dctx, at(qkv, 2 * d), scratch, s);                   // dP (dropout output grad)
    kern::dropout_bwd(dt_, scratch, mask, scratch, score_elems(), p_, s);
    kern::softmax_bwd(dt_, probs, scratch, scratch, rows, static_cast<int>(m_.s),
                      1.f / std::sqrt(static_cast<float>(d)), s);       // dS, in place
    gemms_[4]->run(scratch, at(qkv, d), dqkv, s);                       // dQ
    gemms_[5]->run(scratch, qkv, at(dqkv, d), s);                       // dK
}

// ---- the layer ----------------------------------------------------------------------------------------

namespace {

enum class Mode { none, selective, full };
const char* mode_name(Mode m) { return m == Mode::none ? "none" : m == Mode::selective ? "selective" : "full"; }

// Which activations a mode keeps from forward to backward.
enum class Keep { always, unless_full, none_only, scratch, input, gather, grad };
bool kept(Keep k, Mode m) {
    return k == Keep::always || (k == Keep::unless_full && m != Mode::full) || (k == Keep::none_only && m == Mode::none);
}

struct Tensor {
    DeviceBuffer own;
    void* p = nullptr;
    std::size_t bytes = 0;
    Keep keep = Keep::scratch;
    bool alias = false;
    template <class T = void> T* as() const { return static_cast<T*>(p); }
};

constexpr float kDropout = 0.1f;
constexpr std::uint64_t kSeedAttn = 101, kSeedBda1 = 102, kSeedBda2 = 103;

struct Rank {
    int dev = 0;
    cudaStream_t st = nullptr;
    std::unique_ptr<Blas> blas;
    std::vector<std::unique_ptr<Gemm>> g;   // layer_gemms order
    std::unique_ptr<AttentionCore> attn;
    // parameters and their gradients
    DeviceBuffer w_qkv, w_proj, w_fc1, w_fc2, b_proj, b_fc1, b_fc2, ln1_g, ln1_b, ln2_g, ln2_b;
    DeviceBuffer gw_qkv, gw_proj, gw_fc1, gw_fc2, dgamma, dbeta, ln_scratch;
    DeviceBuffer mean1, rstd1, mean2, rstd2;
    // activations (forward) and gradients (backward)
    Tensor x, ln1, ln1_full, qkv, scores, probs, mask_attn, dropped, ctx, proj_part, proj_red, mask1, res1, ln2,
        ln2_full, fc1, gelu, fc2_part, fc2_red, mask2, out;
    Tensor dout, d_fc2, d_fc2_full, d_mlp, d_ln2_part, d_ln2, d_res1, d_proj, d_proj_full, d_ctx, d_qkv,
        d_ln1_part, d_ln1, dx;
    std::vector<Tensor*> all() {
        return {&x, &ln1, &ln1_full, &qkv, &scores, &probs, &mask_attn, &dropped, &ctx, &proj_part, &proj_red,
                &mask1, &res1, &ln2, &ln2_full, &fc1, &gelu, &fc2_part, &fc2_red, &mask2, &out, &dout, &d_fc2,
                &d_fc2_full, &d_mlp, &d_ln2_part, &d_ln2, &d_res1, &d_proj, &d_proj_full, &d_ctx, &d_qkv,
                &d_ln1_part, &d_ln1, &dx};
    }
    ~Rank() {
        // cuBLAS handles (and the plans that use them) go before the stream they were last bound to.
        attn.reset();
        g.clear();
        blas.reset();
        if (st) {
            cudaSetDevice(dev);
            cudaStreamDestroy(st);
        }
    }
};

class Layer {
public:
    Layer(const Context& c, bool sp, int ranks);
    ~Layer() {
        // While an exception unwinds, a peer may never reach its collective: ncclCommDestroy would wait for
        // it (and cudaFree behind it would block on the spinning kernels); ncclCommAbort stops them.
        const bool unwinding = std::uncaught_exceptions() > 0;
        for (auto comm : comms_)
            if (comm) (void)(unwinding ? ncclCommAbort(comm) : ncclCommDestroy(comm));
    }
    void forward();
    void backward();
    std::int64_t stash_bytes() const;
    std::vector<StreamOn> streams() const;
    void poison_unkept();
    std::vector<float> input_grad();   // rank 0's dx as floats
    Mode mode = Mode::none;
    bool multi() const { return ranks_.size() > 1; }
    /// While set, forward() records an event on rank 0's stream after each op (the in-layer time of each op).
    std::vector<std::pair<const char*, cudaEvent_t>>* marks = nullptr;

private:
    void mark(const Rank& r, const char* op) {
        if (!marks || &r != ranks_.front().get()) return;
        cudaEvent_t e;
        CAL_CUDA(cudaEventCreate(&e));
        marks->emplace_back(op, e);
        CAL_CUDA(cudaEventRecord(e, r.st));
    }
    void each(const std::function<void(Rank&)>& f) {
        for (auto& r : ranks_) {
            CAL_CUDA(cudaSetDevice(r->dev));
            f(*r);
        }
    }
    void gather(Tensor Rank::*src, Tensor Rank::*dst);
    void reduce(Tensor Rank::*src, Tensor Rank::*dst);
    void alloc(Rank& r, Tensor& t, std::size_t bytes, Keep k);
    void alias(Tensor& t, const Tensor& of, std::size_t bytes, Keep k);

    DType dt_;
    ModelDims m_;
    bool sp_;
    std::int64_t rows_;   // rows of the layer-norm / dropout tensors: s*b, or s*b/t with SP
    std::vector<std::unique_ptr<Rank>> ranks_;
    std::vector<ncclComm_t> comms_;
};

void Layer::alloc(Rank& r, Tensor& t, std::size_t bytes, Keep k) {
    t.own = DeviceBuffer(bytes, r.dev);
    t.p = t.own.get();
    t.bytes = bytes;
    t.keep = k;
}
void Layer::alias(Tensor& t, const Tensor& of, std::size_t bytes, Keep k) {
    t.p = of.p;
    t.bytes = bytes;
    t.keep = k;
    t.alias = true;
}

Layer::Layer(const Context& c, bool sp, int nranks) : dt_(c.dtype), m_(ModelDims::from(c)), sp_(sp) {
    const std::int64_t sb = m_.sb(), h = m_.h, t = m_.t;
    rows_ = sp ? sb / t : sb;
    const std::size_t E = kElem, RH = static_cast<std::size_t>(rows_ * h), SH = static_cast<std::size_t>(sb * h);
    const bool single = nranks == 1;
    for (int i = 0; i < nranks; ++i) {
        auto rp = std::make_unique<Rank>();
        Rank& r = *rp;
        r.dev = i;
        DeviceGuard guard(i);
        CAL_CUDA(cudaStreamCreate(&r.st));
        r.blas = std::make_unique<Blas>(i);
        for (auto& d : layer_gemms(m_)) r.g.push_back(std::make_unique<Gemm>(*r.blas, dt_, d));
        r.attn = std::make_unique<AttentionCore>(*r.blas, dt_, m_, kDropout);
        auto param = [&](DeviceBuffer& b, std::size_t elems, float lo, float hi) {
            b = DeviceBuffer(elems * E, i);
            kern::fill_uniform(dt_, b.get(), elems, lo, hi, 7 + i * 1000 + elems % 997, r.st);
        };
        auto weight = [&](DeviceBuffer& b, std::int64_t out, std::int64_t in) {   // +-1/sqrt(fan_in)
            const float a = 1.f / std::sqrt(static_cast<float>(in));
            param(b, static_cast<std::size_t>(out * in), -a, a);
        };
        weight(r.w_qkv, 3 * h / t, h);
        weight(r.w_proj, h, h / t);
        weight(r.w_fc1, 4 * h / t, h);
        weight(r.w_fc2, h, 4 * h / t);
        param(r.b_proj, h, -0.1f, 0.1f);
        param(r.b_fc1, 4 * h / t, -0.1f, 0.1f);
        param(r.b_fc2, h, -0.1f, 0.1f);
        param(r.ln1_g, h, 0.9f, 1.1f);
        param(r.ln1_b, h, -0.1f, 0.1f);
        param(r.ln2_g, h, 0.9f, 1.1f);
        param(r.ln2_b, h, -0.1f, 0.1f);
        r.gw_qkv = DeviceBuffer(r.w_qkv.bytes(), i);
        r.gw_proj = DeviceBuffer(r.w_proj.bytes(), i);
        r.gw_fc1 = DeviceBuffer(r.w_fc1.bytes(), i);
        r.gw_fc2 = DeviceBuffer(r.w_fc2.bytes(), i);
        r.dgamma = DeviceBuffer(h * 4, i);
        r.dbeta = DeviceBuffer(h * 4, i);
        r.ln_scratch = DeviceBuffer(kern::layernorm_bwd_scratch_floats(rows_, static_cast<int>(h)) * 4, i);
        for (DeviceBuffer* b : {&r.mean1, &r.rstd1, &r.mean2, &r.rstd2}) *b = DeviceBuffer(rows_ * 4, i);

        const std::size_t scores = r.attn->score_elems(), qkv = SH * 3 / t, ctx = SH / t, mlp = SH * 4 / t;
        alloc(r, r.x, RH * E, Keep::always);
        alloc(r, r.ln1, RH * E, Keep::unless_full);
        alloc(r, r.qkv, qkv * E, Keep::unless_full);
        alloc(r, r.scores, scores * E, Keep::scratch);
        alloc(r, r.probs, scores * E, Keep::none_only);
        alloc(r, r.mask_attn, scores, Keep::none_only);
        alloc(r, r.dropped, scores * E, Keep::none_only);
        alloc(r, r.ctx, ctx * E, Keep::unless_full);
        alloc(r, r.proj_part, SH * E, Keep::scratch);
        alloc(r, r.mask1, RH, Keep::unless_full);
        alloc(r, r.res1, RH * E, Keep::unless_full);
        alloc(r, r.ln2, RH * E, Keep::unless_full);
        alloc(r, r.fc1, mlp * E, Keep::unless_full);
        alloc(r, r.gelu, mlp * E, Keep::unless_full);
        alloc(r, r.fc2_part, SH * E, Keep::scratch);
        alloc(r, r.mask2, RH, Keep::unless_full);
        alloc(r, r.out, RH * E, Keep::scratch);
        alloc(r, r.dout, RH * E, Keep::input);
        alloc(r, r.d_fc2, RH * E, Keep::grad);
        alloc(r, r.d_mlp, mlp * E, Keep::grad);
        alloc(r, r.d_ln2_part, SH * E, Keep::grad);
        alloc(r, r.d_res1, RH * E, Keep::grad);
        alloc(r, r.d_proj, RH * E, Keep::grad);
        alloc(r, r.d_ctx, ctx * E, Keep::grad);
        alloc(r, r.d_qkv, qkv * E, Keep::grad);
        alloc(r, r.d_ln1_part, SH * E, Keep::grad);
        alloc(r, r.dx, RH * E, Keep::grad);
        // Collective outputs. Without SP the gathers are identities; on one GPU the reductions are skipped
        // (the partial sums are used) and the SP gathers too (their buffers keep random contents).
        struct Link {
            Tensor *src, *dst;
        };
        for (Link l : {Link{&r.ln1, &r.ln1_full}, Link{&r.ln2, &r.ln2_full}, Link{&r.d_fc2, &r.d_fc2_full},
                       Link{&r.d_proj, &r.d_proj_full}}) {
            if (!sp) {
                alias(*l.dst, *l.src, l.src->bytes, l.src->keep);
            } else {
                alloc(r, *l.dst, SH * E, Keep::gather);
                if (single) kern::fill_uniform(dt_, l.dst->p, SH, -1, 1, 55, r.st);
            }
        }
        for (Link l : {Link{&r.proj_part, &r.proj_red}, Link{&r.fc2_part, &r.fc2_red},
                       Link{&r.d_ln2_part, &r.d_ln2}, Link{&r.d_ln1_part, &r.d_ln1}}) {
            if (single) alias(*l.dst, *l.src, RH * E, l.src->keep);
            else alloc(r, *l.dst, RH * E, l.src->keep);
        }
        kern::fill_uniform(dt_, r.x.p, RH, -1, 1, 11 + i, r.st);
        kern::fill_uniform(dt_, r.dout.p, RH, -1e-2f, 1e-2f, 12 + i, r.st);
        CAL_CUDA(cudaStreamSynchronize(r.st));
        ranks_.push_back(std::move(rp));
    }
    if (!single) {
        comms_.resize(nranks);
        std::vector<int> devs(nranks);
        for (int i = 0; i < nranks; ++i) devs[i] = i;
        CAL_NCCL(ncclCommInitAll(comms_.data(), nranks, devs.data()));
    }
}

void Layer::gather(Tensor Rank::*src, Tensor Rank::*dst) {
    if (!sp_ || !multi()) return;
    const ncclDataType_t ty = nccl_type(dt_);
    CAL_NCCL(ncclGroupStart());
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        Rank& r = *ranks_[i];
        CAL_NCCL(ncclAllGather((r.*src).p, (r.*dst).p, static_cast<std::size_t>(rows_ * m_.h), ty, comms_[i], r.st));
    }
    CAL_NCCL(ncclGroupEnd());
}

void Layer::reduce(Tensor Rank::*src, Tensor Rank::*dst) {
    if (!multi()) return;
    const ncclDataType_t ty = nccl_type(dt_);
    CAL_NCCL(ncclGroupStart());
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
        Rank& r = *ranks_[i];
        if (sp_)
            CAL_NCCL(ncclReduceScatter((r.*src).p, (r.*dst).p, static_cast<std::size_t>(rows_ * m_.h), ty, ncclSum,
                                       comms_[i], r.st));
        else
            CAL_NCCL(ncclAllReduce((r.*src).p, (r.*dst).p, static_cast<std::size_t>(m_.sb() * m_.h), ty, ncclSum,
                                   comms_[i], r.st));
    }
    CAL_NCCL(ncclGroupEnd());
}

void Layer::forward() {
    const std::int64_t R = rows_;
    const int H = static_cast<int>(m_.h);
    each([&](Rank& r) {
        mark(r, "start");
        kern::layernorm_fwd(dt_, r.x.p, r.ln1_g.get(), r.ln1_b.get(), r.ln1.p, r.mean1.as<float>(),
                            r.rstd1.as<float>(), R, H, r.st);
        mark(r, "layernorm_fwd");
    });
    gather(&Rank::ln1, &Rank::ln1_full);
    each([&](Rank& r) {
        r.g[0]->run(r.ln1_full.p, r.w_qkv.get(), r.qkv.p, r.st);
        mark(r, "qkv_fwd");
        r.attn->forward(r.qkv.p, r.scores.p, r.probs.p, r.mask_attn.as<std::uint8_t>(), r.dropped.p, r.ctx.p,
                        kSeedAttn, r.st);
        mark(r, "attention core");
        r.g[3]->run(r.ctx.p, r.w_proj.get(), r.proj_part.p, r.st);
        mark(r, "proj_fwd");
    });
    reduce(&Rank::proj_part, &Rank::proj_red);
    each([&](Rank& r) {
        kern::bias_dropout_add_fwd(dt_, r.proj_red.p, r.b_proj.get(), r.x.p, r.res1.p, r.mask1.as<std::uint8_t>(), R,
                                   H, kDropout, kSeedBda1, r.st);
        mark(r, "bias_dropout_add_fwd");
        kern::layernorm_fwd(dt_, r.res1.p, r.ln2_g.get(), r.ln2_b.get(), r.ln2.p, r.mean2.as<float>(),
                            r.rstd2.as<float>(), R, H, r.st);
        mark(r, "layernorm_fwd");
    });
    gather(&Rank::ln2, &Rank::ln2_full);
    each([&](Rank& r) {
        r.g[6]->run(r.ln2_full.p, r.w_fc1.get(), r.fc1.p, r.st);
        mark(r, "fc1_fwd");
        kern::gelu_fwd(dt_, r.fc1.p, r.b_fc1.get(), r.gelu.p, m_.sb(), static_cast<int>(4 * m_.h / m_.t), r.st);
        mark(r, "gelu_fwd");
        r.g[9]->run(r.gelu.p, r.w_fc2.get(), r.fc2_part.p, r.st);
        mark(r, "fc2_fwd");
    });
    reduce(&Rank::fc2_part, &Rank::fc2_red);
    each([&](Rank& r) {
        kern::bias_dropout_add_fwd(dt_, r.fc2_red.p, r.b_fc2.get(), r.res1.p, r.out.p, r.mask2.as<std::uint8_t>(), R,
                                   H, kDropout, kSeedBda2, r.st);
        mark(r, "bias_dropout_add_fwd");
    });
}

void Layer::backward() {
    if (mode == Mode::full) forward();   // re-run the whole forward from the kept input
    const std::int64_t R = rows_;
    const int H = static_cast<int>(m_.h);
    const std::size_t RH = static_cast<std::size_t>(R * m_.h);
    each([&](Rank& r) {   // bias-dropout-add backward: the residual gradient is dout itself
        kern::dropout_bwd(dt_, r.dout.p, r.mask2.as<std::uint8_t>(), r.d_fc2.p, RH, kDropout, r.st);
    });
    gather(&Rank::d_fc2, &Rank::d_fc2_full);
    gather(&Rank::ln2, &Rank::ln2_full);   // SP: re-gather the fc1 input for its weight gradient
    each([&](Rank& r) {
        r.g[10]->run(r.d_fc2_full.p, r.w_fc2.get(), r.d_mlp.p, r.st);          // fc2 dgrad
        r.g[11]->run(r.d_fc2_full.p, r.gelu.p, r.gw_fc2.get(), r.st);         // fc2 wgrad
        kern::gelu_bwd(dt_, r.d_mlp.p, r.fc1.p, r.b_fc1.get(), r.d_mlp.p, m_.sb(), static_cast<int>(4 * m_.h / m_.t),
                       r.st);
        r.g[7]->run(r.d_mlp.p, r.w_fc1.get(), r.d_ln2_part.p, r.st);          // fc1 dgrad
        r.g[8]->run(r.d_mlp.p, r.ln2_full.p, r.gw_fc1.get(), r.st);           // fc1 wgrad
    });
    reduce(&Rank::d_ln2_part, &Rank::d_ln2);
    each([&](Rank& r) {
        kern::layernorm_bwd(dt_, r.d_ln2.p, r.res1.p, r.mean2.as<float>(), r.rstd2.as<float>(), r.ln2_g.get(),
                            r.dout.p, r.d_res1.p, r.dgamma.as<float>(), r.dbeta.as<float>(),
                            r.ln_scratch.as<float>(), R, H, r.st);
        kern::dropout_bwd(dt_, r.d_res1.p, r.mask1.as<std::uint8_t>(), r.d_proj.p, RH, kDropout, r.st);
    });
    gather(&Rank::d_proj, &Rank::d_proj_full);
    gather(&Rank::ln1, &Rank::ln1_full);   // SP: re-gather the QKV input for its weight gradient
    each([&](Rank& r) {
        r.g[4]->run(r.d_proj_full.p, r.w_proj.get(), r.d_ctx.p, r.st);        // proj dgrad
        r.g[5]->run(r.d_proj_full.p, r.ctx.p, r.gw_proj.get(), r.st);         // proj wgrad
        if (mode == Mode::selective)   // re-run the attention core's softmax and dropout
            r.attn->probabilities(r.qkv.p, r.scores.p, r.probs.p, r.mask_attn.as<std::uint8_t>(), r.dropped.p,
                                  kSeedAttn, r.st);
        r.attn->backward(r.qkv.p, r.probs.p, r.mask_attn.as<std::uint8_t>(), r.dropped.p, r.d_ctx.p, r.scores.p,
                         r.d_qkv.p, r.st);
        r.g[1]->run(r.d_qkv.p, r.w_qkv.get(), r.d_ln1_part.p, r.st);          // qkv dgrad
        r.g[2]->run(r.d_qkv.p, r.ln1_full.p, r.gw_qkv.get(), r.st);           // qkv wgrad
    });
    reduce(&Rank::d_ln1_part, &Rank::d_ln1);
    each([&](Rank& r) {
        kern::layernorm_bwd(dt_, r.d_ln1.p, r.x.p, r.mean1.as<float>(), r.rstd1.as<float>(), r.ln1_g.get(),
                            r.d_res1.p, r.dx.p, r.dgamma.as<float>(), r.dbeta.as<float>(), r.ln_scratch.as<float>(),
                            R, H, r.st);
    });
}

std::int64_t Layer::stash_bytes() const {
    std::int64_t sum = 0;
    for (Tensor* t : ranks_[0]->all())
        if (!t->alias && kept(t->keep, mode)) sum += static_cast<std::int64_t>(t->bytes);
    return sum;
}

std::vector<StreamOn> Layer::streams() const {
    std::vector<StreamOn> v;
    for (auto& r : ranks_) v.push_back({r->dev, r->st});
    return v;
}

void Layer::poison_unkept() {
    each([&](Rank& r) {
        for (Tensor* t : r.all()) {
            if (t->keep == Keep::input || kept(t->keep, mode)) continue;
            if (t->keep == Keep::gather && !multi()) continue;   // skipped gathers: never rewritten
            CAL_CUDA(cudaMemsetAsync(t->p, 0xff, t->bytes, r.st));   // 0xffff is NaN in bf16 and fp16
        }
    });
}

std::vector<float> Layer::input_grad() {
    Rank& r = *ranks_[0];
    DeviceGuard g(r.dev);
    for (auto& rk : ranks_) {
        CAL_CUDA(cudaSetDevice(rk->dev));
        CAL_CUDA(cudaStreamSynchronize(rk->st));
    }
    CAL_CUDA(cudaSetDevice(r.dev));
    const std::size_t n = r.dx.bytes / kElem;
    std::vector<std::uint16_t> raw(n);
    CAL_CUDA(cudaMemcpy(raw.data(), r.dx.p, r.dx.bytes, cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = bits_to_float(dt_, raw[i]);
    return out;
}

}  // namespace

namespace {
/// Each forward op's time inside the layer (events between consecutive ops on one GPU, mean of the timed
/// iterations), printed beside the standalone measurements: what an op costs in the layer's company.
void print_in_layer_ops(Layer& layer, const Context& c, const std::string& what) {
    std::vector<std::pair<const char*, cudaEvent_t>> marks;
    std::vector<std::pair<std::string, double>> sum;
    const int iters = std::max(1, c.timing.iters);
    for (int it = 0; it < iters + 2; ++it) {
        layer.marks = &marks;
        layer.forward();
        layer.marks = nullptr;
        CAL_CUDA(cudaEventSynchronize(marks.back().second));
        if (it >= 2) {   // two warm-up passes
            if (sum.empty())
                for (std::size_t i = 1; i < marks.size(); ++i) sum.emplace_back(marks[i].first, 0.0);
            for (std::size_t i = 1; i < marks.size(); ++i) {
                float ms = 0;
                CAL_CUDA(cudaEventElapsedTime(&ms, marks[i - 1].second, marks[i].second));
                sum[i - 1].second += ms;
            }
        }
        for (auto& m : marks) cudaEventDestroy(m.second);
        marks.clear();
    }
    std::string line = what + " forward ops in the layer (us):";
    double total = 0;
    for (const auto& [op, ms] : sum) {
        line += " " + op + " " + std::to_string(static_cast<int>(std::lround(ms * 1e3 / iters)));
        total += ms / iters;
    }
    progress(line + "; sum " + std::to_string(static_cast<int>(std::lround(total * 1e3))) + " us");
}
}  // namespace

void run_layers(const Context& c, Profile& p) {
    const ModelDims m = ModelDims::from(c);
    const int nranks = (c.tensor > 1 && c.gpus >= c.tensor) ? c.tensor : 1;
    const std::string note = nranks > 1 ? std::to_string(nranks) + " GPUs, NCCL collectives included"
                                        : (c.tensor > 1 ? "1 GPU: tensor-parallel collectives skipped (compute only)"
                                                        : "1 GPU (t = 1: no collectives)");
    progress("layer: a=" + std::to_string(m.a) + " h=" + std::to_string(m.h) + " s=" + std::to_string(m.s) +
             " b=" + std::to_string(m.b) + " t=" + std::to_string(m.t) + " on " + note);
    for (bool sp : {false, true}) {
        if (sp && m.t == 1) continue;   // sequence parallelism needs t > 1
        try {
            Layer layer(c, sp, nranks);
            std::vector<float> ref;
            for (Mode mode : {Mode::none, Mode::selective, Mode::full}) {
                layer.mode = mode;
                const std::string what = std::string("layer sp=") + (sp ? "on" : "off") + " recompute=" +
                                         mode_name(mode);
                // Self-check: the stash alone must give the same input gradient.
                layer.forward();
                layer.poison_unkept();
                layer.backward();
                std::vector<float> dx = layer.input_grad();
                double worst = 0, scale = 0;
                for (std::size_t i = 0; i < dx.size(); ++i) {
                    if (!std::isfinite(dx[i]))
                        throw CheckFailed(what + ": input gradient has non-finite values: the backward read an "
                                                 "activation that is not kept");
                    if (!ref.empty()) {
                        worst = std::max(worst, static_cast<double>(std::fabs(dx[i] - ref[i])));
                        scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
                    }
                }
                if (ref.empty()) ref = std::move(dx);
                else if (worst > 1e-3 * scale + 1e-6)
                    throw CheckFailed(what + ": input gradient differs from recompute=none by " +
                                      std::to_string(worst) + " (max |dx| " + std::to_string(scale) + ")");
                const auto streams = layer.streams();
                const double fwd = time_us(streams, [&] { layer.forward(); }, c.timing);
                const double bwd = time_us(streams, [&] { layer.backward(); }, c.timing);
                LayerResult r;
                r.heads = c.heads, r.hidden = c.hidden, r.seq_len = c.seq, r.microbatch = c.microbatch;
                r.tensor = c.tensor, r.sequence_parallel = sp, r.recompute = mode_name(mode);
                r.forward_ms = round_sig(fwd / 1e3), r.backward_ms = round_sig(bwd / 1e3);
                r.activation_bytes = layer.stash_bytes();
                r.formula_bytes = static_cast<std::int64_t>(std::llround(table2_activation_bytes(
                    double(m.s), double(m.b), double(m.h), double(m.a), double(m.t), sp, r.recompute)));
                r.note = note;
                p.layers.push_back(r);
                if (mode == Mode::none && !layer.multi()) print_in_layer_ops(layer, c, what);
                progress(what + ": forward " + std::to_string(r.forward_ms) + " ms, backward " +
                         std::to_string(r.backward_ms) + " ms, activations " + gib(double(r.activation_bytes)) +
                         " (Table 2: " + gib(double(r.formula_bytes)) + "), stash self-check ok");
            }
        } catch (const OutOfMemory& e) {
            const std::string s = std::string("layer sp=") + (sp ? "on" : "off") + " (all recompute modes): " + e.what();
            p.skipped.push_back(s);
            progress("skipped " + s);
        }
    }
}

}  // namespace strata::calibrate
