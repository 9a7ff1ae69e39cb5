// One Megatron GPT layer as ops and passes (see include/strata/layer.hpp). Somewhat longer than 500 lines: the
// layer's passes (with the optional overlaps), its stored bytes and the embedding / output plans share the op
// helpers of the anonymous namespace below; the FLOPs count lives in flops.cpp.
//
// Notation (paper): s sequence, b microbatch, h hidden, a heads, t tensor-parallel size, f ffn hidden,
// n = s*b tokens; with sequence parallelism (SP) the layer norms and dropouts work on n/t tokens.
// Activations are 2-byte (fp16/bf16), dropout masks 1 byte. Per-op stored bytes follow Section 4.1;
// their sum reproduces Table 2 exactly (tests/test_layer.cpp checks all 24 cases).
//
// Communication (Megatron-LM with async tensor-parallel communication):
//   forward, no SP : all-reduce after the attention projection and after fc2 (exposed)
//   forward, SP    : all-gather before QKV and fc1, reduce-scatter after projection and fc2 (exposed)
//   backward, no SP: all-reduce of the QKV / fc1 input gradient, overlapped with the weight-gradient GEMM
//   backward, SP   : all-gather of the output gradient before projection / fc2 (exposed); the QKV / fc1
//                    input is re-gathered (overlapped with the data-gradient GEMM) and the input gradient
//                    reduce-scattered (overlapped with the weight-gradient GEMM).
// Older Megatron-LM (2021, the SC21 paper's) had neither this asynchronous communication nor
// gradient-accumulation fusion: execution keys `async_tp_comm` and `gradient_accumulation_fusion` (both
// default on) switch each off; the backward collectives then run after the GEMMs, exposed, and each weight
// gradient is written in 16 bits and added to the main gradient by a separate kernel.
#include "strata/layer.hpp"

#include "strata/errors.hpp"

namespace strata {

namespace {

struct Dims {
    std::int64_t s, b, h, a, t, f, v, n, n_sp, d, heads_t;
    std::int64_t c;        ///< context-parallel size: s is this GPU's s / c tokens, s_kv the whole sequence
    std::int64_t s_kv;
    std::int64_t g;        ///< query groups (kv heads)
    std::int64_t kv_w;     ///< width of K (or V) per rank: g d / t
    std::int64_t qkv_out;  ///< QKV GEMM output per rank: (h + 2 g d) / t
    std::int64_t fc1_out;  ///< fc1 output per rank: f / t, or 2 f / t for swiglu (gate and up)
    bool swiglu, squared_relu, rms, bias, dropout, rope, flash, flash2;
    RecomputeModules modules;
    bool tp_overlap;       ///< tp_comm_overlap (with SP)
    TpOverlapRs proj_rs, fc2_rs;  ///< with tp_overlap: TE's method for those forward reduce-scatters
    TpOverlapConfig ub;    ///< with tp_overlap: each userbuffer overlap's settings (SMs, margin, aggregate, fp8_buf)
    bool fp8;              ///< FP8 linear layers
    bool fp8_current;      ///< current (tensorwise) scaling: an amax pass before each cast
    bool fp8_transposes;   ///< each backward transposes its FP8 weights first (LayerConfig::fp8_weight_transposes)
    bool sp;
    bool qkv_bias_in_te;    ///< QKV's bias gradient inside Transformer Engine's GEMM or cast (TransformerImpl)
    bool te_layernorm_mlp;  ///< TE's LayerNormMLP (te_transformer_layer): fc1's bias gradient in its fused bias-GeLU
                            ///< backward
    bool norm_fused;        ///< the norms inside the next linear layer (Transformer Engine's LayerNormLinear / MLP)
    bool fused_wgrad;              ///< gradient-accumulation fusion
    bool async_comm;               ///< backward collectives overlapped with the GEMMs
    std::int64_t main_grad_bytes;  ///< 4 (fp32 main gradients) or 2
    std::int64_t gather_msg;       ///< a sequence-parallel all-gather of a linear layer's input: n h elements, 1 byte
                                   ///< each in FP8 (Transformer Engine casts before it gathers), else 2
};

Dims dims_of(const LayerConfig& c) {
    if (c.model == nullptr) throw Error("build_layer: no model");
    const ModelSpec& m = *c.model;
    Dims d{};
    d.c = c.context;
    d.s = m.seq_len / d.c;
    d.s_kv = m.seq_len;
    d.b = c.microbatch;
    d.h = m.hidden;
    d.a = m.heads;
    d.t = c.tensor;
    d.f = m.ffn_hidden;
    d.v = m.vocab;
    d.n = d.s * d.b;
    d.sp = c.sequence_parallel && c.tensor > 1;
    d.n_sp = d.sp ? d.n / d.t : d.n;
    d.d = d.h / d.a;
    d.heads_t = d.a / d.t;
    d.g = m.query_groups();
    d.kv_w = d.g * d.d / d.t;
    d.qkv_out = (d.h + 2 * d.g * d.d) / d.t;
    d.swiglu = m.mlp == Mlp::swiglu;
    d.squared_relu = m.mlp == Mlp::squared_relu;
    d.fc1_out = (d.swiglu ? 2 : 1) * d.f / d.t;
    d.rms = m.norm == Norm::rmsnorm;
    d.bias = m.linear_bias;
    d.dropout = m.has_dropout();
    d.rope = m.position_embedding == PositionEmbedding::rope;
    d.flash = fused_attention(c.attention);
    d.flash2 = c.attention == Attention::flash2;
    d.modules = c.modules;
    d.tp_overlap = c.tp_comm_overlap && c.sequence_parallel && c.tensor > 1;
    d.proj_rs = c.tp_overlap_proj_fprop;
    d.fc2_rs = c.tp_overlap_fc2_fprop;
    d.ub = c.tp_overlap_config;
    d.fp8 = c.fp8;
    d.fp8_current = c.fp8_current_scaling;
    d.fp8_transposes = c.fp8 && c.fp8_weight_transposes;
    const TransformerImpl impl = transformer_impl_for(c.transformer_impl, c.fp8, c.tp_comm_overlap);
    if (impl == TransformerImpl::local && (c.fp8 || c.tp_comm_overlap))
        throw Error(
            "build_layer: FP8 and tp_comm_overlap run in Transformer Engine's layers, not transformer_impl local");
    d.qkv_bias_in_te = impl != TransformerImpl::local;
    d.te_layernorm_mlp = impl == TransformerImpl::te_transformer_layer;
    d.norm_fused = impl != TransformerImpl::local;
    if (d.norm_fused && c.recompute == Recompute::selective && c.modules.layernorm)
        throw Error(
            "build_layer: recompute_modules layernorm needs transformer_impl local (Transformer Engine's layers "
            "fuse the norms into the linear layers)");
    d.fused_wgrad = c.gradient_accumulation_fusion;
    d.async_comm = c.async_tp_comm;
    d.main_grad_bytes = c.fp32_main_grads ? 4 : 2;
    d.gather_msg = (d.fp8 ? 1 : 2) * d.n * d.h;
    return d;
}

Kernel gemm(std::string name, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch = 1) {
    Kernel kr;
    kr.name = std::move(name);
    kr.kind = batch > 1 ? KernelKind::batched_gemm : KernelKind::gemm;
    kr.gemm = GemmShape{m, n, k, batch};
    kr.bytes = kr.gemm.bytes();
    return kr;
}

constexpr Kernel::Linear kFwd = Kernel::Linear::forward, kDgrad = Kernel::Linear::data_grad;
using Layer = Kernel::Layer;

/// The kernel names' stem of a linear layer.
std::string name_of(Layer layer) {
    switch (layer) {
        case Layer::qkv:
            return "qkv";
        case Layer::proj:
            return "proj";
        case Layer::fc1:
            return "fc1";
        case Layer::fc2:
            return "fc2";
        case Layer::none:
            break;
    }
    throw Error("name_of: no linear layer");
}

/// A linear layer's forward or data-gradient GEMM (see Kernel::Linear), named `prefix` + the layer (+ ".dgrad").
Kernel linear(Layer layer, Kernel::Linear role, std::int64_t m, std::int64_t n, std::int64_t k,
              const std::string& prefix = "") {
    Kernel kr = gemm(prefix + name_of(layer) + (role == kDgrad ? ".dgrad" : ""), m, n, k);
    kr.linear = role;
    kr.layer = layer;
    return kr;
}

Kernel elementwise(std::string name, std::string op_class, std::int64_t bytes) {
    Kernel kr;
    kr.name = std::move(name);
    kr.kind = KernelKind::elementwise;
    kr.bytes = Bytes(bytes);
    kr.op_class = std::move(op_class);
    return kr;
}

Step compute(std::vector<Kernel> ks) {
    Step s;
    s.kind = Step::Kind::compute;
    s.kernels = std::move(ks);
    return s;
}

Step collective(std::string name, CollectiveKind kind, std::int64_t message, bool overlapped = false,
                bool context_group = false) {
    Step s;
    s.kind = Step::Kind::collective;
    s.collective = TpCollective{std::move(name), kind, Bytes(message), context_group};
    s.overlapped = overlapped;
    return s;
}

/// A collective moved by Transformer Engine's userbuffers: by a kernel of `sms` CTAs, or (sms 0) the copy engines.
Step ub_collective(std::string name, CollectiveKind kind, std::int64_t message, bool overlapped, int sms) {
    Step s = collective(std::move(name), kind, message, overlapped);
    s.collective.engine = sms > 0 ? CommEngine::userbuffers : CommEngine::copy_engine;
    s.collective.sms = sms;
    return s;
}

/// Appends kernels to the trailing compute step, or starts a new one.
void add(std::vector<Step>& pass, std::vector<Kernel> ks) {
    if (!pass.empty() && pass.back().kind == Step::Kind::compute) {
        for (auto& k : ks) pass.back().kernels.push_back(std::move(k));
    } else {
        pass.push_back(compute(std::move(ks)));
    }
}

// Elementwise traffic per element (bytes read + written), fp16/bf16 tensors, 1-byte masks.
constexpr std::int64_t kLayerNormFwd = 4, kLayerNormBwd = 6;   // x -> y; (x, dy) -> dx
constexpr std::int64_t kSoftmaxFwd = 4, kSoftmaxBwd = 6;       // fused scale-mask-softmax
constexpr std::int64_t kDropoutFwd = 5, kDropoutBwd = 5;       // x -> y, mask; (dy, mask) -> dx
constexpr std::int64_t kGeluFwd = 4, kGeluBwd = 6;             // bias-GeLU fused
constexpr std::int64_t kBdaFwd = 7, kBdaBwd = 5;               // bias-dropout-add: (x, residual) -> y, mask
constexpr std::int64_t kAddFwd = 6;                            // without dropout: (x, residual) -> y
constexpr std::int64_t kSwigluFwd = 6, kSwigluBwd = 10;        // per gated element: (gate, up) -> y; (dy, gate, up) -> d
constexpr std::int64_t kRope = 4;                              // rotate q and k in place: read + write

const char* norm_class(const Dims& d, bool fwd) {
    if (d.rms) return fwd ? "rmsnorm_fwd" : "rmsnorm_bwd";
    return fwd ? "layernorm_fwd" : "layernorm_bwd";
}

/// The residual add after attention or the MLP: Megatron's fused bias-dropout-add, or a plain add.
Kernel residual_add(const Dims& d, const std::string& name) {
    if (d.dropout) return elementwise(name + ".bias-dropout-add", "bias_dropout_add_fwd", kBdaFwd * d.n_sp * d.h);
    return elementwise(name + ".residual-add", "bias_dropout_add_fwd", kAddFwd * d.n_sp * d.h);
}

/// The whole sequence's K and V for this tensor rank's query groups (2 tensors, 2 bytes): what the ring moves.
std::int64_t kv_ring_bytes(const Dims& d) { return 2 * 2 * d.s_kv * d.b * d.kv_w; }

/// A FlashAttention kernel: its shape is one attention GEMM's (see KernelKind).
Kernel flash(std::string name, const Dims& d, bool forward) {
    Kernel kr;
    kr.name = std::move(name);
    kr.kind = forward ? KernelKind::flash_attention_fwd : KernelKind::flash_attention_bwd;
    kr.flash2 = d.flash2;
    kr.dropout = d.dropout;
    kr.gemm = GemmShape{d.s, d.s_kv, d.d, d.b * d.heads_t};  // local queries against every key (ring)
    // HBM traffic: q, k, v and o (and their gradients backward), 2 bytes each, plus the fp32 row statistics.
    const std::int64_t qkvo = 2 * d.n * (2 * d.h / d.t + 2 * d.kv_w);
    kr.bytes = Bytes((forward ? 1 : 2) * qkvo + 4 * d.b * d.heads_t * d.s);
    return kr;
}

/// Bias gradient: a 16-bit reduction of the output gradient over `tokens` (reads tokens x out, 2 bytes), where the
/// layer has biases and no Transformer Engine kernel computes it on the way (`in_te`; see TransformerImpl). Where each
/// is made (Megatron-LM's layers and Megatron-Core's alike): QKV's after its weight gradient (local layers); fc1's
/// as the bias-GeLU's gradient reaches the bias (autograd's sum of the returned gradient); the projection's and fc2's
/// in the bias-dropout-add's backward, over this rank's n_sp tokens (their biases are added after the reduction).
std::vector<Kernel> bias_grad(const Dims& d, Layer layer, std::int64_t tokens, std::int64_t out, bool in_te = false) {
    if (!d.bias || in_te) return {};
    return {elementwise(name_of(layer) + ".bias-grad", "", 2 * tokens * out)};
}

/// Weight-gradient GEMM dW[in, out] = X^T dY. With gradient-accumulation fusion it adds straight into the
/// main gradient in its epilogue (modelled as an fp32 read-modify-write of C); without, it writes a 16-bit
/// gradient and a separate kernel adds it to the main gradient (Megatron's grad hook: main_grad.add_(grad)),
/// reading the 16-bit gradient and the main gradient and writing the main gradient.
/// This form: the output layer's (named `name`, not a linear layer of the transformer layer).
std::vector<Kernel> wgrad(const Dims& d, const std::string& name, std::int64_t in, std::int64_t out,
                          std::int64_t tokens) {
    Kernel k = gemm(name + ".wgrad", in, out, tokens);
    if (d.fused_wgrad) {
        k.gemm.accumulate_fp32 = true;
        k.bytes = k.gemm.bytes();
        return {k};
    }
    return {k, elementwise(name + ".main-grad-add", "", in * out * (2 + 2 * d.main_grad_bytes))};
}
/// A transformer layer's linear layer's weight gradient, named after it (Kernel::Linear::weight_grad).
std::vector<Kernel> wgrad(const Dims& d, Layer layer, std::int64_t in, std::int64_t out, std::int64_t tokens) {
    std::vector<Kernel> w = wgrad(d, name_of(layer), in, out, tokens);
    w.front().linear = Kernel::Linear::weight_grad;
    w.front().layer = layer;
    return w;
}

/// Appends `b` to `a`.
std::vector<Kernel> operator+(std::vector<Kernel> a, std::vector<Kernel> b) {
    for (auto& k : b) a.push_back(std::move(k));
    return a;
}

/// Autograd sums the gradients of a tensor used twice (residual stream and layer-norm input):
/// read two, write one 2-byte tensor.
Kernel residual_grad_add(const std::string& name, std::int64_t elements) {
    return elementwise(name, "", 6 * elements);
}

// Context parallelism's bookkeeping around the ring's attention kernels (Transformer Engine's AttnFuncWithCP, read at
// bfe21c3d (1.6.0.dev0) attention.py; v2.4's context_parallel.py does the same): with the load-balanced causal
// chunks, the forward first concatenates K and V into the ring's buffer; then half of the c - 1 received steps attend
// with a contiguous copy of half the keys and values, the other half with a copy of the second half of the queries
// (and in the backward of the output and its gradient too); after the loop every step's partial output is merged
// into the output by its softmax statistics (the forward's corrections, c of them, half of them over half the
// queries), and in the backward every step's query gradient and key-value gradient is added into the running ones
// inside the loop. q and kv: a query-sized and a key-and-value-sized 16-bit tensor of this GPU's tokens. Elementwise
// HBM traffic, read and written, averaged over the ring's ranks (the rank that does the most moves 10-30% more of
// these bytes: about 0.3% of a 1,024K-token layer); the softmax statistics themselves (1/32 of q), and the dK / dV
// concatenation TE up to 2.2 makes after each step with cuDNN's kernels, are left out.
std::int64_t cp_q_bytes(const Dims& d) {
    return 2 * d.n * d.h / d.t;
}
std::int64_t cp_kv_bytes(const Dims& d) {
    return 2 * 2 * d.n * d.kv_w;
}
/// The forward's copies inside the ring's loop: K and V into its buffer (2 kv), then per received step half the
/// steps copy kv / 2 and half q / 2 (each read and written).
std::vector<Kernel> cp_copies_forward(const Dims& d) {
    if (d.c <= 1) return {};
    const std::int64_t q = cp_q_bytes(d), kv = cp_kv_bytes(d), steps = d.c - 1;
    return {elementwise("attn.cp-copies", "", 2 * kv + steps * (kv + q) / 2)};
}
/// The forward's output corrections after the ring's loop: the zeroed output (q written), the own step's (3 q: the
/// step's output and the output read, the output written), each received step's on the whole or on half the queries
/// (2.25 q on average).
std::vector<Kernel> cp_out_correction(const Dims& d) {
    if (d.c <= 1) return {};
    const std::int64_t q = cp_q_bytes(d), steps = d.c - 1;
    return {elementwise("attn.cp-out-correction", "", q + 3 * q + steps * 9 * q / 4)};
}
std::vector<Kernel> cp_bookkeeping_backward(const Dims& d) {
    if (d.c <= 1) return {};
    const std::int64_t q = cp_q_bytes(d), kv = cp_kv_bytes(d), steps = d.c - 1;
    // Copies: the keys and values into the ring's buffer (2 kv), then per received step half the steps copy kv / 2
    // and half copy the second halves of q, the output and its gradient (3 q / 2 each read and written). The query
    // and key-value gradients accumulated: the own step's whole (3 q + 3 kv), each received step's on the whole or
    // half (2.25 (q + kv) on average), less the first step's, a copy rather than an add (q + kv less).
    return {elementwise("attn.cp-copies.bwd", "", 2 * kv + steps * (kv + 3 * q) / 2),
            elementwise("attn.cp-grad-accumulate", "", 2 * (q + kv) + steps * 9 * (q + kv) / 4)};
}

// What the ring's attention holds while it runs (Transformer Engine's AttnFuncWithCP: bfe21c3d (1.6.0.dev0)
// attention.py, v2.4's context_parallel.py): the forward keeps every step's received keys and values in its list of c
// buffers (the first a concatenated copy of its own; the last is the one saved for the backward, counted in the layer's
// stored bytes), and every step's partial output and fp32 softmax statistics until the corrections after the loop (on
// the busiest rank, the last, every step's output covers all its queries), with two steps' contiguous copies (of half
// the keys and values or half the queries) in flight on its two streams (TE 1.x copies for every backend; v2.4 only for
// cuDNN's fused attention, FlashAttention-2 taking views: a bound there, as the copies' traffic above). The backward
// allocates two double buffers each of keys and values and of their gradient (4 kv, the first filled with a copy of the
// saved kv) and, per step, the attention kernel's query and key-value gradients and a contiguous copy (half the
// queries, the output and its gradient: 3 q / 2, or half the keys and values); its own dq, dk and dv are the layer's
// gradients, as without the ring.
Bytes cp_workspace_forward(const Dims& d) {
    if (d.c <= 1 || !d.flash) return Bytes(0);
    const std::int64_t q = cp_q_bytes(d), kv = cp_kv_bytes(d), lse = 4 * d.b * d.heads_t * d.s;
    return Bytes((d.c - 1) * kv + d.c * (q + lse) + std::max(kv, q));
}
Bytes cp_workspace_backward(const Dims& d) {
    if (d.c <= 1 || !d.flash) return Bytes(0);
    const std::int64_t q = cp_q_bytes(d), kv = cp_kv_bytes(d);
    return Bytes(4 * kv + q + kv + std::max(kv / 2, 3 * q / 2));
}

std::vector<Kernel> attention_core_forward(const Dims& d) {
    if (d.flash) return std::vector<Kernel>{flash("attn.flash", d, true)} + cp_copies_forward(d);
    const std::int64_t e = d.b * d.heads_t * d.s * d.s;  // score elements per GPU
    std::vector<Kernel> k;
    if (d.g < d.a) {
        // Grouped-query attention, unfused (Megatron's repeat_interleave): K and V expanded to every head.
        k.push_back(elementwise("attn.kv-expand", "", 2 * (2 * d.n * d.kv_w + 2 * d.n * d.h / d.t)));
    }
    k.push_back(gemm("attn.qk", d.s, d.s, d.d, d.b * d.heads_t));
    k.push_back(elementwise("attn.softmax", "softmax_fwd", kSoftmaxFwd * e));
    if (d.dropout) k.push_back(elementwise("attn.dropout", "dropout_fwd", kDropoutFwd * e));
    k.push_back(gemm("attn.av", d.s, d.d, d.s, d.b * d.heads_t));
    return k;
}

std::vector<Kernel> attention_core_backward(const Dims& d) {
    if (d.flash) return std::vector<Kernel>{flash("attn.flash.bwd", d, false)} + cp_bookkeeping_backward(d);
    const std::int64_t e = d.b * d.heads_t * d.s * d.s;
    std::vector<Kernel> k = {gemm("attn.av.dgrad-probs", d.s, d.s, d.d, d.b * d.heads_t),
                             gemm("attn.av.dgrad-values", d.s, d.d, d.s, d.b * d.heads_t)};
    if (d.dropout) k.push_back(elementwise("attn.dropout.bwd", "dropout_bwd", kDropoutBwd * e));
    k.push_back(elementwise("attn.softmax.bwd", "softmax_bwd", kSoftmaxBwd * e));
    k.push_back(gemm("attn.qk.dgrad-q", d.s, d.d, d.s, d.b * d.heads_t));
    k.push_back(gemm("attn.qk.dgrad-k", d.s, d.d, d.s, d.b * d.heads_t));
    if (d.g < d.a) k.push_back(elementwise("attn.kv-expand.bwd", "", 2 * (2 * d.n * d.kv_w + 2 * d.n * d.h / d.t)));
    return k;
}

/// `ks` with each name prefixed (the rerun's "recompute.").
std::vector<Kernel> prefixed(std::vector<Kernel> ks, const std::string& prefix) {
    for (Kernel& k : ks)
        k.name = prefix + k.name;
    return ks;
}

/// Context parallelism's attention forward (`prefix` "recompute." for its rerun): the ring of K and V overlapped with
/// the attention kernel and the copies Transformer Engine makes inside its loop, then the output corrections it makes
/// after the loop, no longer beside the ring.
void ring_attention_forward(std::vector<Step>& p, const Dims& d, const std::string& prefix) {
    p.push_back(collective(prefix + "attn.cp-kv-ring", CollectiveKind::all_gather, kv_ring_bytes(d), true, true));
    p.push_back(compute(prefixed(attention_core_forward(d), prefix)));
    p.push_back(compute(prefixed(cp_out_correction(d), prefix)));
}

/// The norm before QKV or fc1 (a column-parallel linear layer's input). Under FP8 with delayed scaling Transformer
/// Engine's norm writes its output in FP8 itself (layernorm_fwd_fp8 / rmsnorm_fwd_fp8: 1 byte per element written
/// instead of 2, and no cast kernel); with current scaling it writes 16 bits, quantised after it (sp_gather,
/// apply_fp8).
Kernel norm_forward(const Dims& d, const std::string& name) {
    const std::int64_t bytes = d.fp8 && !d.fp8_current ? kLayerNormFwd - 1 : kLayerNormFwd;
    return elementwise(name, norm_class(d, true), bytes * d.n_sp * d.h);
}

/// The MLP's activation: bias-GeLU, SwiGLU on the gate and up halves of fc1's output, or squared ReLU (Transformer
/// Engine's srelu: the same bytes as GeLU, an element read and one written forward, two read and one written back).
Kernel activation_forward(const Dims& d) {
    if (d.swiglu) return elementwise("swiglu", "swiglu_fwd", kSwigluFwd * d.n * d.f / d.t);
    if (d.squared_relu) return elementwise("squared_relu", "squared_relu_fwd", kGeluFwd * d.n * d.f / d.t);
    return elementwise("gelu", "gelu_fwd", kGeluFwd * d.n * d.f / d.t);
}
Kernel activation_backward(const Dims& d) {
    if (d.swiglu) return elementwise("swiglu.bwd", "swiglu_bwd", kSwigluBwd * d.n * d.f / d.t);
    if (d.squared_relu) return elementwise("squared_relu.bwd", "squared_relu_bwd", kGeluBwd * d.n * d.f / d.t);
    return elementwise("gelu.bwd", "gelu_bwd", kGeluBwd * d.n * d.f / d.t);
}

// Transformer Engine's userbuffer overlap (--tp-comm-overlap) splits the GEMMs it overlaps, by its defaults
// (transformer_engine/pytorch/module/base.py, initialize_ub): `ring_exchange` (QKV and fc1 forward, projection and
// fc2 data gradients) as t GEMMs of n / t rows, one per ring step; `pipeline` (projection and fc2 forward) as 4
// GEMMs of a quarter of the output's columns each (pipelined() below), each chunk reduce-scattered during the next; `bulk` (the QKV / fc1 backward GEMMs) whole. A run's
// userbuffer configuration may reduce-scatter projection and fc2 by ring exchange instead (execution keys
// tp_overlap_proj_fprop / tp_overlap_fc2_fprop). Each overlap's SMs (TpOverlapConfig): a ring exchange moves its chunks
// by the copy engines (no SM), a pipeline or bulk overlap by a userbuffers kernel of num_sm CTAs beside the GEMM, and
// with set_sm_margin the GEMM runs on the SMs less num_sm; with `aggregate` a ring all-gather's first exchange is
// exposed and its GEMM runs as t / 2 chunks (ring_gather).
constexpr std::int64_t kTePipelineSplits = 4;
/// The CTAs of the pipeline's last reduce-scatter, after the last GEMM chunk, whatever num_sm is (TE's UB_MAX_SM).
constexpr int kTeMaxSms = 32;

/// A GEMM of userbuffer overlap `o`, with its SM margin.
Kernel with_margin(const Dims& d, Kernel k, TpOverlap o) {
    k.gemm.sm_margin = d.ub.margin(o);
    return k;
}
Kernel ring_exchange(const Dims& d, Kernel k, TpOverlap o) {
    k = with_margin(d, std::move(k), o);
    k.gemm.chunks = d.ub.aggregated(o) ? std::max<std::int64_t>(d.t / 2, 1) : d.t;
    k.bytes = k.gemm.bytes();
    return k;
}
/// TE's split_overlap_rs splits the output's columns (the features), each chunk reduce-scattered over the tokens.
Kernel pipelined(const Dims& d, Kernel k, TpOverlap o) {
    k = with_margin(d, std::move(k), o);
    k.gemm.chunks = kTePipelineSplits;
    k.gemm.chunk_columns = true;
    k.bytes = k.gemm.bytes();
    return k;
}

/// The all-gather of a ring exchange (copy engines) beside its GEMM. With TE's `aggregate` a first exchange of one
/// chunk between pairs of ranks runs before any GEMM chunk, exposed, then pairs of chunks go round under the GEMM;
/// both parts are costed as ring all-gathers of their share of the bytes (the first: one of the t - 1 chunks each rank
/// receives).
void ring_gather(std::vector<Step>& p, const Dims& d, const std::string& name, std::int64_t message, TpOverlap o) {
    std::int64_t rest = message;
    if (d.ub.aggregated(o)) {
        const std::int64_t first = message / (d.t - 1);
        p.push_back(ub_collective(name + ".first-exchange", CollectiveKind::all_gather, first, false, 0));
        rest -= first;
    }
    if (rest > 0) p.push_back(ub_collective(name, CollectiveKind::all_gather, rest, true, 0));
}

/// A sequence-parallel all-gather of a linear layer's input before the GEMM `consumer` that uses it, at
/// Dims::gather_msg: with tp_comm_overlap TE's ring exchange beside the GEMM (ring_gather); without, Megatron's
/// synchronous all-gather, exposed; none without SP. Under FP8 what is gathered is the FP8 shard, cast first: a
/// row-parallel layer's output gradient (proj_dgrad, fc2_dgrad) is cast on the shard (read 2, write 1); a
/// column-parallel layer's input (qkv_fprop, fc1_fprop) needs no cast under delayed scaling (the norm writes FP8:
/// norm_forward). Current scaling computes the shard's amax (read 2), all-reduces it over the tensor-parallel group (4
/// bytes) so that every rank casts with one scale (TE >= 2.2: the quantizer's with_amax_reduction for a column-parallel
/// layer's input and a row-parallel layer's output gradient under SP, module/linear.py), then casts.
void sp_gather(std::vector<Step>& p, const Dims& d, const std::string& name, TpOverlap o, const std::string& consumer) {
    if (!d.sp) return;
    if (d.fp8) {
        const bool row_grad = o == TpOverlap::proj_dgrad || o == TpOverlap::fc2_dgrad;
        if (d.fp8_current) {
            add(p, {elementwise(consumer + ".fp8-amax", "", 2 * d.n_sp * d.h)});
            p.push_back(collective(name + ".amax-all-reduce", CollectiveKind::all_reduce, 4));
        }
        if (d.fp8_current || row_grad) add(p, {elementwise(consumer + ".fp8-cast", "", 3 * d.n_sp * d.h)});
    }
    if (d.tp_overlap)
        ring_gather(p, d, name, d.gather_msg, o);
    else
        p.push_back(collective(name, CollectiveKind::all_gather, d.gather_msg));
}

/// A GEMM whose output TE reduce-scatters chunk by chunk. `pipeline` (TE's split_overlap_rs): each of 4 column
/// chunks' reduce-scatter runs during the next chunk's GEMM, so the last chunk's (a quarter of the collective) runs
/// alone after the GEMM. `ring_exchange` (split_overlap_rs_p2p): t row chunks, each passed on by the copy engines
/// during the next chunk's GEMM; the last chunk is the rank's own shard, which is not sent, so the transfers overlap
/// the GEMM whole, and then each rank adds the t partial outputs of its shard (reads t shards, writes one). With an
/// FP8 userbuffer (fp8_buf under FP8) the GEMM writes FP8 partial outputs and the transfers and the sum read 1 byte per
/// element (TE's reducescatter2_userbuff_stridedoutput_fp8 / reduce_fp8_in_bf16_out, summing into 16 bits).
void overlapped_reduce_scatter(std::vector<Step>& p, const Dims& d, TpOverlapRs method, TpOverlap o,
                               const std::string& name, Kernel gemm) {
    const std::int64_t element = d.fp8 && d.ub.fp8_buf[static_cast<std::size_t>(o)] ? 1 : 2;
    const std::int64_t message = element * d.n * d.h;
    if (method == TpOverlapRs::ring_exchange) {
        p.push_back(ub_collective(name, CollectiveKind::reduce_scatter, message, true, 0));
        p.push_back(compute({ring_exchange(d, std::move(gemm), o)}));
        p.push_back(compute({elementwise(name + ".sum", "", element * d.n * d.h + 2 * d.n_sp * d.h)}));
        return;
    }
    const std::int64_t last = message / kTePipelineSplits;
    p.push_back(ub_collective(name, CollectiveKind::reduce_scatter, message - last, true, d.ub.sms(o)));
    p.push_back(compute({pipelined(d, std::move(gemm), o)}));
    p.push_back(ub_collective(name + ".last-chunk", CollectiveKind::reduce_scatter, last, false, kTeMaxSms));
}

/// The forward pass with Megatron-LM's --tp-comm-overlap: each sequence-parallel all-gather runs with the GEMM that
/// consumes it and each reduce-scatter with the GEMM that produces it (chunked as above), so each pairs with
/// exactly that GEMM; everything else as without.
std::vector<Step> forward_pass_overlapped(const Dims& d) {
    std::vector<Step> p;
    p.push_back(compute({norm_forward(d, "ln1")}));
    sp_gather(p, d, "attn.all-gather", TpOverlap::qkv_fprop, "qkv");
    p.push_back(compute({ring_exchange(d, linear(Layer::qkv, kFwd, d.n, d.qkv_out, d.h), TpOverlap::qkv_fprop)}));
    if (d.rope) p.push_back(compute({elementwise("rope", "rope_fwd", kRope * d.n * (d.h / d.t + d.kv_w))}));
    if (d.c > 1) {
        ring_attention_forward(p, d, "");
    } else {
        p.push_back(compute(attention_core_forward(d)));
    }
    overlapped_reduce_scatter(p, d, d.proj_rs, TpOverlap::proj_fprop, "attn.reduce-scatter",
                              linear(Layer::proj, kFwd, d.n, d.h, d.h / d.t));
    p.push_back(compute({residual_add(d, "attn"), norm_forward(d, "ln2")}));
    sp_gather(p, d, "mlp.all-gather", TpOverlap::fc1_fprop, "fc1");
    p.push_back(compute({ring_exchange(d, linear(Layer::fc1, kFwd, d.n, d.fc1_out, d.h), TpOverlap::fc1_fprop)}));
    p.push_back(compute({activation_forward(d)}));
    overlapped_reduce_scatter(p, d, d.fc2_rs, TpOverlap::fc2_fprop, "mlp.reduce-scatter",
                              linear(Layer::fc2, kFwd, d.n, d.h, d.f / d.t));
    p.push_back(compute({residual_add(d, "mlp")}));
    return p;
}

std::vector<Step> forward_pass(const Dims& d) {
    if (d.tp_overlap) return forward_pass_overlapped(d);
    std::vector<Step> p;
    const auto reduce = d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    const std::int64_t msg = 2 * d.n * d.h;
    add(p, {norm_forward(d, "ln1")});
    sp_gather(p, d, "attn.all-gather", TpOverlap::qkv_fprop, "qkv");
    add(p, {linear(Layer::qkv, kFwd, d.n, d.qkv_out, d.h)});
    if (d.rope) add(p, {elementwise("rope", "rope_fwd", kRope * d.n * (d.h / d.t + d.kv_w))});
    if (d.c > 1) {
        // Ring attention: the K and V shards travel round the c ranks while each block is computed (overlapped).
        ring_attention_forward(p, d, "");
        add(p, {linear(Layer::proj, kFwd, d.n, d.h, d.h / d.t)});
    } else {
        add(p, attention_core_forward(d));
        add(p, {linear(Layer::proj, kFwd, d.n, d.h, d.h / d.t)});
    }
    p.push_back(collective(d.sp ? "attn.reduce-scatter" : "attn.all-reduce", reduce, msg));
    add(p, {residual_add(d, "attn"), norm_forward(d, "ln2")});
    sp_gather(p, d, "mlp.all-gather", TpOverlap::fc1_fprop, "fc1");
    add(p, {linear(Layer::fc1, kFwd, d.n, d.fc1_out, d.h), activation_forward(d),
            linear(Layer::fc2, kFwd, d.n, d.h, d.f / d.t)});
    p.push_back(collective(d.sp ? "mlp.reduce-scatter" : "mlp.all-reduce", reduce, msg));
    add(p, {residual_add(d, "mlp")});
    return p;
}

/// Backward of a column-parallel linear layer (QKV, fc1): input gradient and weight gradient. With
/// asynchronous communication the input all-gather (SP) overlaps the data-gradient GEMM and the
/// input-gradient reduction overlaps the weight-gradient GEMM; without, the all-gather runs first and the
/// reduction after both GEMMs (autograd reaches the communication op after the linear layer's backward).
/// With tp_comm_overlap both are Transformer Engine's bulk overlaps (`dgrad`: the all-gather beside the data-gradient
/// GEMM; `wgrad`: the reduce-scatter beside the weight-gradient GEMM), each by a userbuffers kernel of its num_sm CTAs.
/// `bias`: the bias gradient's kernels after the weight gradient (QKV's in local layers; see bias_grad).
void column_linear_backward(std::vector<Step>& p, const Dims& d, Layer layer, std::int64_t in, std::int64_t out,
                            TpOverlap dgrad, TpOverlap wgrad_overlap, const std::vector<Kernel>& bias) {
    const std::string name = name_of(layer);
    const std::int64_t msg = 2 * d.n * d.h;
    const auto reduce = d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    const std::string reduce_name = name + (d.sp ? ".grad-reduce-scatter" : ".grad-all-reduce");
    if (d.tp_overlap) {
        p.push_back(
            ub_collective(name + ".input-all-gather", CollectiveKind::all_gather, d.gather_msg, true, d.ub.sms(dgrad)));
        p.push_back(compute({with_margin(d, linear(layer, kDgrad, d.n, in, out), dgrad)}));
        p.push_back(ub_collective(reduce_name, reduce, msg, true, d.ub.sms(wgrad_overlap)));
        std::vector<Kernel> w = wgrad(d, layer, in, out, d.n);
        w.front() = with_margin(d, std::move(w.front()), wgrad_overlap);
        p.push_back(compute(std::move(w) + bias));
        return;
    }
    if (d.sp)
        p.push_back(collective(name + ".input-all-gather", CollectiveKind::all_gather, d.gather_msg, d.async_comm));
    if (!d.async_comm) {
        add(p, std::vector<Kernel>{linear(layer, kDgrad, d.n, in, out)} + wgrad(d, layer, in, out, d.n) + bias);
        p.push_back(collective(reduce_name, reduce, msg));
        return;
    }
    p.push_back(compute({linear(layer, kDgrad, d.n, in, out)}));
    p.push_back(collective(reduce_name, reduce, msg, true));
    p.push_back(compute(wgrad(d, layer, in, out, d.n) + bias));
}

std::vector<Step> backward_pass(const Dims& d, Recompute rc) {
    std::vector<Step> p;
    if (rc == Recompute::full) p = forward_pass(d);  // re-run the whole layer forward first
    // Without dropout the residual add's gradient passes through: no kernel.
    if (d.dropout) add(p, {elementwise("mlp.bias-dropout-add.bwd", "bias_dropout_add_bwd", kBdaBwd * d.n_sp * d.h)});
    add(p, bias_grad(d, Layer::fc2, d.n_sp, d.h));
    // With tp_comm_overlap the output-gradient all-gathers are ring exchanges (copy engines) beside the data-gradient
    // GEMMs: fc2's comes in fc2's backward, after any selective recompute below.
    const bool selective = rc == Recompute::selective;
    // With the MLP checkpointed the gather runs inside its backward, after the recompute (below).
    const bool mlp_recompute = selective && d.modules.mlp;
    if (!d.tp_overlap && !mlp_recompute) sp_gather(p, d, "mlp.grad-all-gather", TpOverlap::fc2_dgrad, "fc2.dgrad");
    // Selective recompute of the norms (Megatron-Core's local layers, where a norm is a module of its own, output-
    // discarding checkpointing) re-creates their outputs (the linear layers' inputs) before they are used.
    if (selective && d.modules.layernorm) add(p, {norm_forward(d, "recompute.ln2")});
    if (mlp_recompute) {
        // Megatron-Core checkpoints the whole MLP module (transformer_layer.py: tensor_parallel.checkpoint, in FP8
        // te_checkpoint), so its forward runs again from its kept input: with Transformer Engine's layers the norm
        // fused into fc1 first (LayerNormLinear), then fc1 (its input gathered again under SP), the activation, fc2 and
        // fc2's reduce-scatter (all-reduce without SP). With tp_comm_overlap TE's module overlaps them again.
        if (d.norm_fused) add(p, {norm_forward(d, "recompute.ln2")});
        sp_gather(p, d, "recompute.mlp.all-gather", TpOverlap::fc1_fprop, "recompute.fc1");
        Kernel act = activation_forward(d);
        act.name = "recompute." + act.name;
        Kernel fc1 = linear(Layer::fc1, kFwd, d.n, d.fc1_out, d.h, "recompute.");
        Kernel fc2 = linear(Layer::fc2, kFwd, d.n, d.h, d.f / d.t, "recompute.");
        if (d.tp_overlap) {
            p.push_back(compute({ring_exchange(d, std::move(fc1), TpOverlap::fc1_fprop)}));
            p.push_back(compute({act}));
            overlapped_reduce_scatter(p, d, d.fc2_rs, TpOverlap::fc2_fprop, "recompute.mlp.reduce-scatter",
                                      std::move(fc2));
        } else {
            add(p, {fc1, act, fc2});
            p.push_back(collective(d.sp ? "recompute.mlp.reduce-scatter" : "recompute.mlp.all-reduce",
                                   d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, 2 * d.n * d.h));
            sp_gather(p, d, "mlp.grad-all-gather", TpOverlap::fc2_dgrad, "fc2.dgrad");
        }
    }
    if (d.tp_overlap) {
        // The output-gradient all-gather runs with fc2's data-gradient GEMM (TE's ring exchange).
        sp_gather(p, d, "mlp.grad-all-gather", TpOverlap::fc2_dgrad, "fc2.dgrad");
        p.push_back(compute({ring_exchange(d, linear(Layer::fc2, kDgrad, d.n, d.f / d.t, d.h), TpOverlap::fc2_dgrad)}));
        p.push_back(compute(wgrad(d, Layer::fc2, d.f / d.t, d.h, d.n) + std::vector<Kernel>{activation_backward(d)} +
                            bias_grad(d, Layer::fc1, d.n, d.fc1_out, d.te_layernorm_mlp)));
    } else {
        add(p, std::vector<Kernel>{linear(Layer::fc2, kDgrad, d.n, d.f / d.t, d.h)} +
                   wgrad(d, Layer::fc2, d.f / d.t, d.h, d.n) + std::vector<Kernel>{activation_backward(d)} +
                   bias_grad(d, Layer::fc1, d.n, d.fc1_out, d.te_layernorm_mlp));
    }
    column_linear_backward(p, d, Layer::fc1, d.h, d.fc1_out, TpOverlap::fc1_dgrad, TpOverlap::fc1_wgrad, {});
    add(p, {elementwise("ln2.bwd", norm_class(d, false), kLayerNormBwd * d.n_sp * d.h),
            residual_grad_add("mlp.residual-grad-add", d.n_sp * d.h)});
    if (d.dropout) add(p, {elementwise("attn.bias-dropout-add.bwd", "bias_dropout_add_bwd", kBdaBwd * d.n_sp * d.h)});
    add(p, bias_grad(d, Layer::proj, d.n_sp, d.h));
    sp_gather(p, d, "attn.grad-all-gather", TpOverlap::proj_dgrad, "proj.dgrad");
    if (d.tp_overlap) {
        p.push_back(
            compute({ring_exchange(d, linear(Layer::proj, kDgrad, d.n, d.h / d.t, d.h), TpOverlap::proj_dgrad)}));
        p.push_back(compute(wgrad(d, Layer::proj, d.h / d.t, d.h, d.n)));
    } else {
        add(p, std::vector<Kernel>{linear(Layer::proj, kDgrad, d.n, d.h / d.t, d.h)} +
                   wgrad(d, Layer::proj, d.h / d.t, d.h, d.n));
    }
    if (selective && d.modules.core_attn) {
        if (d.c > 1) {
            ring_attention_forward(p, d, "recompute.");
        } else {
            add(p, prefixed(attention_core_forward(d), "recompute."));
        }
    }
    if (d.c > 1) {
        // Backward ring: K and V again, and their gradients back (twice the bytes), overlapped with the kernel.
        p.push_back(collective("attn.cp-kv-dkv-ring", CollectiveKind::all_gather, 2 * kv_ring_bytes(d), true, true));
        p.push_back(compute(attention_core_backward(d)));
    } else {
        add(p, attention_core_backward(d));
    }
    if (d.rope) add(p, {elementwise("rope.bwd", "rope_bwd", kRope * d.n * (d.h / d.t + d.kv_w))});
    if (selective && d.modules.layernorm) add(p, {norm_forward(d, "recompute.ln1")});
    column_linear_backward(p, d, Layer::qkv, d.h, d.qkv_out, TpOverlap::qkv_dgrad, TpOverlap::qkv_wgrad,
                           bias_grad(d, Layer::qkv, d.n, d.qkv_out, d.qkv_bias_in_te));
    add(p, {elementwise("ln1.bwd", norm_class(d, false), kLayerNormBwd * d.n_sp * d.h),
            residual_grad_add("attn.residual-grad-add", d.n_sp * d.h)});
    return p;
}

/// FP8 (Transformer Engine, per-tensor delayed or current scaling, as every TE from 1.x to 2.x runs a linear layer):
/// the transformer layer's linear GEMMs (forward, data and weight gradients, and the recomputed fc1) take FP8
/// operands. Hopper's FP8 GEMMs take only the TN layout, so the weight-gradient GEMMs need the transposes of both
/// operands. What TE does to get its operands (transformer_engine/pytorch/module/{layernorm_linear,linear,base}.py):
/// - a column-parallel layer's input (QKV, fc1: the norm's output): with delayed scaling the norm writes FP8
///   itself (norm_forward: layernorm_fwd_fp8), no cast kernel; with current scaling the norm writes 16 bits and the
///   shard is quantised after it (amax, then cast: 5 bytes per element; under SP before the gather, sp_gather). Under
///   SP the FP8 shard is what is all-gathered (Dims::gather_msg), and its gathered copy is transposed for the weight
///   gradient (read 1 byte, write 1);
/// - a row-parallel layer's input (projection, fc2: this rank's own) is cast and transposed in one kernel
///   (fp8_cast_transpose_fused: read 2, write 1 + 1; current scaling an amax pass before, 2 more); under SP TE 1.x
///   only casts it (linear.py: `and not sequence_parallel`) and transposes it for the weight gradient;
/// - a column-parallel layer's output gradient (local) likewise, cast and transposed in one kernel;
/// - a row-parallel layer's output gradient: under SP the shard is cast (read 2, write 1) before the gather
///   (sp_gather), and the gathered copy transposed for the weight gradient; without SP cast and transposed in one;
/// - the bias gradient, where there are biases, as in 16 bits (bias_grad): QKV's in its output gradient's
///   cast-transpose (fp8_cast_transpose_bgrad_fused), fc1's in TE's LayerNormMLP (te_transformer_layer) in its fused
///   GeLU backward; the rest are returned biases, their gradients 16-bit sums outside TE;
/// - in TE's LayerNormMLP (te_transformer_layer) with GeLU and delayed scaling (TE 1.x layernorm_mlp.py): the GeLU
///   writes fc2's input in FP8 itself (read 2, write 1; no cast), transposed for fc2's weight gradient (read 1,
///   write 1; with or without SP), and the GeLU's backward writes fc1's output gradient in FP8 and its transpose
///   (fp8_cast_transpose_bgrad_dgelu_fused: read 2 + 2, write 1 + 1, the bytes of the 16-bit GeLU backward; no
///   cast-transpose of its own).
/// The attention core, the norms (but for that FP8 write) and the output layer stay in 16 bits. Weights are cast once
/// per iteration (see stage memory). Left out: TE 2.x's fused cast-transpose of a row-parallel layer's input under SP
/// (TE 1.x's cast and later transpose are modelled).
void apply_fp8(std::vector<Step>& pass, const Dims& d) {
    const std::int64_t amax = d.fp8_current ? 2 : 0;  // current scaling reads the 16-bit operand once more first
    const bool fp8_gelu = d.te_layernorm_mlp && !d.fp8_current && !d.swiglu && !d.squared_relu;
    for (Step& st : pass) {
        if (st.kind != Step::Kind::compute) continue;
        std::vector<Kernel> out;
        for (Kernel& k : st.kernels) {
            if (fp8_gelu && k.op_class == "gelu_fwd") k.bytes = Bytes(3 * d.n * d.f / d.t);  // recomputed too
            if (k.linear != Kernel::Linear::none) {
                const Layer layer = k.layer;
                if (layer == Layer::none) throw Error("apply_fp8: a linear GEMM without its layer: " + k.name);
                const bool column = layer == Layer::qkv || layer == Layer::fc1;
                const std::int64_t operand = k.gemm.m * k.gemm.k;  // the 16-bit operand of a forward or dgrad GEMM
                switch (k.linear) {
                    case Kernel::Linear::forward:
                        if (fp8_gelu && layer == Layer::fc2) break;  // the GeLU wrote it in FP8
                        if (!column && d.sp)
                            out.push_back(elementwise(k.name + ".fp8-cast", "", (3 + amax) * operand));
                        else if (!column)
                            out.push_back(elementwise(k.name + ".fp8-cast-transpose", "", (4 + amax) * operand));
                        else if (d.fp8_current && !d.sp)  // under SP cast on the shard before the gather (sp_gather)
                            out.push_back(elementwise(k.name + ".fp8-cast", "", 5 * operand));
                        break;
                    case Kernel::Linear::data_grad:
                        // GEMM (tokens, out, in): the weight out x in, transposed from its gathered FP8 copy.
                        if (d.fp8_transposes)
                            out.push_back(elementwise(k.name + ".fp8-weight-transpose", "", 2 * k.gemm.k * k.gemm.n));
                        if (fp8_gelu && layer == Layer::fc1) break;  // the GeLU's backward wrote it and its transpose
                        if (column || !d.sp)  // a row-parallel layer's under SP: on the shard before the gather
                            out.push_back(elementwise(k.name + ".fp8-cast-transpose", "", (4 + amax) * operand));
                        break;
                    case Kernel::Linear::weight_grad:
                        // GEMM (in, out, tokens): the operands transposed here, n x in (a column-parallel layer's
                        // gathered input; a row-parallel one's input under SP) and n x out (a row-parallel layer's
                        // gathered output gradient).
                        if (column)
                            out.push_back(elementwise(k.name + ".fp8-transpose", "", 2 * k.gemm.k * k.gemm.m));
                        else if (d.sp)
                            out.push_back(
                                elementwise(k.name + ".fp8-transpose", "", 2 * k.gemm.k * (k.gemm.m + k.gemm.n)));
                        else if (fp8_gelu && layer == Layer::fc2)  // the GeLU's FP8 output, not cast-transposed
                            out.push_back(elementwise(k.name + ".fp8-transpose", "", 2 * k.gemm.k * k.gemm.m));
                        break;
                    case Kernel::Linear::none:
                        break;
                }
                k.gemm.fp8 = true;
                k.bytes = k.gemm.bytes();
            }
            out.push_back(std::move(k));
        }
        st.kernels = std::move(out);
    }
}

/// What each forward op keeps for its backward (paper Section 4.1 for the GPT layer), and which selective
/// recompute module drops and re-creates it.
std::vector<LayerOp> layer_ops(const Dims& d) {
    const std::int64_t nh = d.n * d.h;
    const std::int64_t sp_nh = d.n_sp * d.h;
    const std::int64_t scores = d.b * d.heads_t * d.s * d.s;  // a s^2 b / t
    using M = LayerOp::Module;
    const std::int64_t lin = d.fp8 ? 1 : 2;  // bytes per element of a linear layer's saved input (FP8: 1)
    std::vector<LayerOp> ops = {
        {"ln1.input", Bytes(2 * sp_nh), M::none},
        {"qkv.input", Bytes(lin * sp_nh), M::layernorm},  // ln1's output; SP keeps the shard and re-gathers it
    };
    if (d.flash) {
        // FlashAttention keeps its inputs q, k, v (k and v per query group) and the fp32 row statistics; the
        // output is the projection's input (below). No s^2 term.
        ops.push_back({"attn.q-k-v", Bytes(2 * d.n * (d.h / d.t + 2 * d.kv_w)), M::none});
        ops.push_back({"attn.softmax-statistics", Bytes(4 * d.b * d.heads_t * d.s), M::core_attn});
        // It keeps its 16-bit output too (the softmax backward needs it): in 16-bit training the same tensor as the
        // projection's saved input; in FP8 the projection keeps its FP8 cast instead (TE Linear saves its quantized
        // input), so the output is a tensor of its own (TE FusedAttention's save_for_backward: q, k, v, out).
        if (d.fp8) ops.push_back({"attn.output", Bytes(2 * nh / d.t), M::core_attn});
    } else {
        // Unfused: q and k (expanded to every head under GQA, as Megatron's repeat_interleave leaves them),
        // the softmax output, the dropout mask and output (with dropout), the values.
        ops.push_back({"attn.q-and-k", Bytes(4 * nh / d.t), M::none});
        ops.push_back({"attn.softmax-output", Bytes(2 * scores), M::core_attn});
        if (d.dropout) {
            ops.push_back({"attn.dropout-mask", Bytes(scores), M::core_attn});
            ops.push_back({"attn.dropout-output", Bytes(2 * scores), M::core_attn});
        }
        ops.push_back({"attn.values", Bytes(2 * nh / d.t), M::none});
    }
    ops.push_back({"proj.input", Bytes(lin * nh / d.t), M::none});
    if (d.dropout) ops.push_back({"attn.bias-dropout-add.mask", Bytes(sp_nh), M::none});
    ops.push_back({"ln2.input", Bytes(2 * sp_nh), M::none});
    // fc1's input, ln2's output: with the norm fused into fc1 (Transformer Engine) kept inside the MLP module, which
    // MLP recompute re-runs from ln2's input; with a norm module of its own (local) the norm's recompute drops it.
    ops.push_back({"fc1.input", Bytes(lin * sp_nh), d.norm_fused ? M::mlp : M::layernorm});
    ops.push_back({d.swiglu ? "swiglu.input" : d.squared_relu ? "squared_relu.input" : "gelu.input", Bytes(2 * d.n * d.fc1_out), M::mlp});
    ops.push_back({"fc2.input", Bytes(lin * d.n * d.f / d.t), M::mlp});
    if (d.dropout) ops.push_back({"mlp.bias-dropout-add.mask", Bytes(sp_nh), M::none});
    return ops;
}

bool recomputed(const RecomputeModules& m, LayerOp::Module module) {
    switch (module) {
        case LayerOp::Module::none: return false;
        case LayerOp::Module::core_attn: return m.core_attn;
        case LayerOp::Module::layernorm: return m.layernorm;
        case LayerOp::Module::mlp: return m.mlp;
    }
    return false;
}

Bytes stored_under(const std::vector<LayerOp>& ops, const Dims& d, Recompute rc) {
    if (rc == Recompute::full) return Bytes(2 * d.n_sp * d.h);  // only the layer input
    Bytes total{};
    for (const auto& op : ops) {
        if (rc == Recompute::selective && recomputed(d.modules, op.module)) continue;
        total += op.stored;
    }
    return total;
}

/// Smallest tensor Megatron-Core offloads (min_offloaded_tensor_size's default, 1024 x 1024 elements).
constexpr std::int64_t kMinOffloadElements = std::int64_t{1} << 20;

/// What fine-grained activation offloading moves for one layer (LayerOffload), from the tensors each module saves
/// with Transformer Engine's layers (read in Megatron-Core's fine_grained_activation_offload.py, attention.py and TE's
/// modules): qkv_linear, TE's LayerNormLinear, keeps the layer input (the norm's) and the norm's output (FP8 in FP8
/// training); core_attn, the fused attention, q, k, v (freed at once: Megatron-Core releases their storage), its 16-bit
/// output and the fp32 softmax statistics; attn_proj the projection's input (its FP8 cast in FP8 training; in 16-bit
/// training the attention's output itself, whose storage it releases). A recomputed attention core (selective
/// core_attn) saves nothing of its own: Megatron-Core skips its group.
LayerOffload offload_of(const Dims& d, const OffloadModules& o, Recompute rc) {
    LayerOffload out;
    const auto tensor = [&](std::int64_t elements, std::int64_t bytes_per_element, bool freed) {
        if (elements < kMinOffloadElements) return Bytes(0);
        out.copied += Bytes(elements * bytes_per_element);
        out.reloaded += Bytes(elements * bytes_per_element);
        if (freed) out.freed += Bytes(elements * bytes_per_element);
        ++out.copies;
        return Bytes(elements * bytes_per_element);
    };
    const std::int64_t lin = d.fp8 ? 1 : 2;
    const std::int64_t attn_out = d.n * d.h / d.t;  // q and the output, per rank
    if (o.qkv_linear) {
        out.layer_input = tensor(d.n_sp * d.h, 2, true);  // the layer input (ln1.input)
        tensor(d.n_sp * d.h, lin, true);                  // the norm's output (qkv.input)
    }
    const bool core_recomputed = rc == Recompute::selective && d.modules.core_attn;
    if (o.core_attn && !core_recomputed) {
        tensor(attn_out, 2, true);  // q
        if (d.c > 1) {
            tensor(2 * d.n * d.kv_w, 2, true);  // context parallelism: TE saves k and v as one tensor (kv)
        } else {
            tensor(d.n * d.kv_w, 2, true);  // k
            tensor(d.n * d.kv_w, 2, true);  // v
        }
        tensor(d.b * d.heads_t * d.s, 4, true);    // softmax statistics
        tensor(attn_out, 2, d.fp8);                // the output: in 16-bit training the projection's input too
    }
    if (o.attn_proj) tensor(attn_out, lin, true);
    return out;
}

}  // namespace

LayerConfig layer_config(const ModelSpec& model, const ExecutionSpec& e) {
    LayerConfig c;
    c.model = &model;
    c.tensor = e.tensor;
    c.sequence_parallel = e.sequence_parallel;
    c.recompute = e.recompute;
    c.microbatch = e.microbatch;
    c.gradient_accumulation_fusion = e.gradient_accumulation_fusion;
    c.async_tp_comm = e.async_tp_comm;
    c.fp32_main_grads = e.fp32_gradients();
    c.attention = e.attention;
    c.context = e.context;
    c.modules = e.recompute_modules;
    c.tp_comm_overlap = e.tp_comm_overlap;
    c.tp_overlap_proj_fprop = e.tp_overlap_proj_fprop;
    c.tp_overlap_fc2_fprop = e.tp_overlap_fc2_fprop;
    c.tp_overlap_config = e.tp_overlap_config;
    c.fp8 = e.precision == Precision::fp8;
    c.cross_entropy = e.cross_entropy;
    c.transformer_impl = e.transformer_impl;  // automatic resolved in dims_of (transformer_impl_for)
    c.fp8_current_scaling = e.fp8_recipe == Fp8Recipe::current;
    c.fp8_scale_update_kernels = e.fp8_scale_update == Fp8ScaleUpdate::per_module         ? 3
                                 : e.fp8_scale_update == Fp8ScaleUpdate::per_module_fused ? 2
                                                                                          : 0;
    c.embedding_reduce_scatter = e.embedding_reduce_scatter;
    c.offload = e.offload_modules;
    c.fp8_weight_transposes = e.fsdp && e.fp8_param_gather;
    return c;
}

LayerPlan build_layer(const LayerConfig& cfg) {
    const Dims d = dims_of(cfg);
    LayerPlan plan;
    plan.ops = layer_ops(d);
    plan.forward = forward_pass(d);
    plan.backward = backward_pass(d, cfg.recompute);
    if (d.fp8) {
        apply_fp8(plan.forward, d);
        apply_fp8(plan.backward, d);
        if (cfg.fp8_scale_update_kernels > 0 && !d.fp8_current) {
            // TE <= 1.5: each FP8 module (QKV, projection, and fc1 and fc2 or TE's LayerNormMLP) copies its reduced
            // amaxes into its history and updates its scales before its forward and before its backward: the copy
            // and the update, two kernels under torch.compile in TE 1.0-1.2 (the history's max reduction with the
            // scales after it, the rolled history), one CUDA kernel in TE 1.4-1.5 (tex.fused_amax_and_scale_update);
            // launch-bound (the recomputed forward of full recompute updates nothing).
            const int modules = d.te_layernorm_mlp ? 3 : 4;
            std::vector<Kernel> update;
            for (int i = 0; i < cfg.fp8_scale_update_kernels * modules; ++i)
                update.push_back(elementwise("fp8.scale-update", "", 0));
            plan.forward.insert(plan.forward.begin(), compute(update));
            plan.backward.insert(plan.backward.begin(), compute(update));
        }
    }
    plan.stored_bytes = stored_under(plan.ops, d, cfg.recompute);
    if (cfg.recompute == Recompute::full) {
        plan.recompute_peak_bytes = stored_under(plan.ops, d, Recompute::none);
    } else if (cfg.recompute == Recompute::selective) {
        for (const LayerOp& op : plan.ops)
            if (recomputed(cfg.modules, op.module)) plan.recompute_peak_bytes += op.stored;
    }
    plan.attention_workspace_forward = cp_workspace_forward(d);
    plan.attention_workspace_backward = cp_workspace_backward(d);
    // Full recompute reruns the whole forward, ring included; selective recompute where its modules rerun the ring.
    const bool reruns_ring =
        cfg.recompute == Recompute::full || std::any_of(plan.backward.begin(), plan.backward.end(), [](const Step& s) {
            return s.kind == Step::Kind::collective && s.collective.context_group &&
                   s.collective.name.rfind("recompute.", 0) == 0;
        });
    if (reruns_ring)
        plan.attention_workspace_backward =
            std::max(plan.attention_workspace_backward, plan.attention_workspace_forward);
    if (cfg.offload.any()) {
        if (cfg.recompute == Recompute::full || !d.norm_fused || (cfg.offload.core_attn && !d.flash))
            throw Error("build_layer: activation offloading is modelled for Transformer Engine's layers with fused "
                        "attention and without full recompute");
        plan.offload = offload_of(d, cfg.offload, cfg.recompute);
    }
    return plan;
}

LayerPlan build_layer_left_alone(LayerConfig cfg) {
    if (cfg.recompute == Recompute::full) cfg.recompute = Recompute::none;
    return build_layer(cfg);
}

Bytes activation_bytes_per_layer(const ModelSpec& model, int tensor, bool sequence_parallel, Recompute recompute,
                                 int microbatch, Attention attention) {
    LayerConfig c{&model, tensor, sequence_parallel, recompute, microbatch};
    c.attention = attention;
    const Dims d = dims_of(c);
    return stored_under(layer_ops(d), d, recompute);
}

EmbeddingPlan build_embedding(const LayerConfig& cfg) {
    const Dims d = dims_of(cfg);
    EmbeddingPlan e;
    const std::int64_t msg = 2 * d.n * d.h;
    // Vocabulary-parallel lookup: each rank writes its rows (zeros elsewhere), then the ranks reduce: under SP into
    // each rank's sequence shard (Megatron-Core since 2024-04, "Do RS for embeddings instead of AR"), or, as before,
    // all-reduced whole and then split (the split is a view: no kernel).
    e.forward.push_back(compute({elementwise("embedding.lookup", "", 4 * d.n * d.h)}));
    const bool scatter = d.sp && cfg.embedding_reduce_scatter;
    e.forward.push_back(collective(scatter ? "embedding.reduce-scatter" : "embedding.all-reduce",
                                   scatter ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, msg));
    if (d.dropout) {
        e.forward.push_back(compute({elementwise("embedding.dropout", "dropout_fwd", kDropoutFwd * d.n_sp * d.h)}));
        e.backward.push_back(compute({elementwise("embedding.dropout.bwd", "dropout_bwd", kDropoutBwd * d.n_sp * d.h)}));
    }
    if (d.sp) e.backward.push_back(collective("embedding.grad-all-gather", CollectiveKind::all_gather, msg));
    // The lookup's backward is PyTorch's embedding_dense_backward: a dense 16-bit gradient of all the rank's
    // vocabulary rows, zero-filled, the tokens' rows added into it. Megatron's gradient hook then adds that into
    // the main gradient (param.main_grad.add_(param.grad): the 16-bit gradient read, the main gradient read and
    // written; megatron/core/distributed/distributed_data_parallel.py, and megatron/model/distributed.py before
    // it), every microbatch: the embedding is no linear layer, so no GEMM fuses the accumulation. Learned
    // positions: the same for their s rows.
    const std::int64_t rows = (d.v / d.t + (d.rope ? 0 : d.s_kv)) * d.h;
    e.backward.push_back(compute({elementwise("embedding.grad-scatter-add", "", 6 * d.n * d.h + 2 * rows),
                                  elementwise("embedding.main-grad-add", "", (2 + 2 * d.main_grad_bytes) * rows)}));
    e.stored_per_microbatch = Bytes(d.dropout ? d.n_sp * d.h : 0);  // dropout mask
    return e;
}

std::vector<Step> build_sequence_parallel_grad_sync(const LayerConfig& cfg, int layers, bool final_norm) {
    const Dims d = dims_of(cfg);
    std::vector<Step> p;
    if (!d.sp) return p;
    // Per layer: two norms (gamma, and beta for LayerNorm) and, with biases, the projection's and fc2's (row-parallel
    // layers' biases are whole on every rank); the final norm on the last stage. Each tensor holds h elements.
    const std::int64_t norm_tensors = d.rms ? 1 : 2;
    const std::int64_t tensors = layers * (2 * norm_tensors + (d.bias ? 2 : 0)) + (final_norm ? norm_tensors : 0);
    if (tensors == 0) return p;
    const std::int64_t bytes = d.main_grad_bytes * tensors * d.h;
    // torch.cat (_flatten_dense_tensors) takes at most 128 inputs per kernel (CAT_ARRAY_BATCH_SIZE); each reads and
    // writes its share.
    const std::int64_t cats = (tensors + 127) / 128;
    std::vector<Kernel> flatten;
    for (std::int64_t i = 0; i < cats; ++i)
        flatten.push_back(elementwise("sp-grad-sync.flatten", "", 2 * bytes * std::min<std::int64_t>(128, tensors - 128 * i) / tensors));
    p.push_back(compute(std::move(flatten)));
    p.push_back(collective("sp-grad-sync.all-reduce", CollectiveKind::all_reduce, bytes));
    std::vector<Kernel> copies;  // buf.copy_(synced), one kernel per tensor
    for (std::int64_t i = 0; i < tensors; ++i)
        copies.push_back(elementwise("sp-grad-sync.copy", "", 2 * bytes * (i + 1) / tensors - 2 * bytes * i / tensors));
    p.push_back(compute(std::move(copies)));
    return p;
}

OutputPlan build_output(const LayerConfig& cfg) {
    const Dims d = dims_of(cfg);
    OutputPlan o;
    const std::int64_t msg = 2 * d.n * d.h;
    const std::int64_t logits = d.n * d.v / d.t;
    const std::int64_t stat = 4 * d.n;  // one fp32 per token
    add(o.forward, {elementwise("final-ln", norm_class(d, true), kLayerNormFwd * d.n_sp * d.h)});
    if (d.sp) o.forward.push_back(collective("logits.all-gather", CollectiveKind::all_gather, msg));
    // Logits GEMM, then Megatron-LM's vocabulary-parallel cross-entropy (megatron/core/tensor_parallel/
    // cross_entropy.py, the default unfused path) in eager PyTorch on fp32 logits, HBM bytes per logit:
    //   logits.float() 2 + 4, max 4 | max all-reduce | logits -= max 4 + 4, exp in place 4 + 4, sum 4
    //   | target and sum all-reduces | softmax = exp / sum in place 4 + 4: 38 forward;
    //   backward: softmax * grad_output in place 4 + 4, the cast's backward to 16 bits 4 + 2: 14.
    const bool te = cfg.cross_entropy == CrossEntropy::te;
    if (cfg.cross_entropy == CrossEntropy::fused) {
        // Megatron-Core's native fusion (megatron/core/fusions/fused_cross_entropy.py: the same steps, each function
        // one torch.compile kernel, its in-place results written back), HBM bytes per logit: cast to fp32 with the max
        // 2 + 4 | subtract, exp in place and sum 4 + 4 | normalise in place 4 + 4: 22 forward; backward: the target's
        // update and the multiply by grad_output in place 4 + 4, the 16-bit copy 2: 10.
        add(o.forward, {gemm("logits", d.n, d.v / d.t, d.h), elementwise("cross-entropy.cast-max", "", 6 * logits)});
        o.forward.push_back(collective("cross-entropy.max-all-reduce", CollectiveKind::all_reduce, stat));
        add(o.forward, {elementwise("cross-entropy.sub-exp-sum", "", 8 * logits)});
        o.forward.push_back(collective("cross-entropy.target-sum-all-reduce", CollectiveKind::all_reduce, 2 * stat));
        add(o.forward, {elementwise("cross-entropy.normalize", "", 8 * logits)});
        add(o.backward, {elementwise("cross-entropy.bwd", "", 10 * logits)});
    } else if (!te) {
        add(o.forward, {gemm("logits", d.n, d.v / d.t, d.h), elementwise("cross-entropy.cast-max", "", 10 * logits)});
        o.forward.push_back(collective("cross-entropy.max-all-reduce", CollectiveKind::all_reduce, stat));
        add(o.forward, {elementwise("cross-entropy.sub-exp-sum", "", 20 * logits)});
        o.forward.push_back(collective("cross-entropy.target-all-reduce", CollectiveKind::all_reduce, stat));
        o.forward.push_back(collective("cross-entropy.sum-all-reduce", CollectiveKind::all_reduce, stat));
        add(o.forward, {elementwise("cross-entropy.normalize", "", 8 * logits)});
        add(o.backward, {elementwise("cross-entropy.bwd", "", 14 * logits)});
    } else {
        // Transformer Engine's Triton cross-entropy (transformer_engine/pytorch/triton/cross_entropy.py): an online
        // softmax reads each 16-bit logit once (a running max and sum per token); each rank's (max, sum, target
        // logit), 3 fp32 per token, are all-gathered over the tensor-parallel group and the loss comes from them;
        // the backward reads each logit again and writes its gradient in place: 2 bytes per logit forward, 4
        // backward.
        add(o.forward, {gemm("logits", d.n, d.v / d.t, d.h), elementwise("cross-entropy.online-softmax", "", 2 * logits)});
        o.forward.push_back(collective("cross-entropy.stats-all-gather", CollectiveKind::all_gather, 3 * stat * d.t));
        add(o.backward, {elementwise("cross-entropy.bwd", "", 4 * logits)});
    }
    // The output layer is a column-parallel linear layer (Megatron's LinearWithGradAccumulationAndAsyncCommunication,
    // megatron/mpu/layers.py in 2022, megatron/core/tensor_parallel/layers.py since): under SP it saved its input
    // ungathered and all-gathers it again in its backward, launched before the data-gradient GEMM and waited for after
    // it, for the weight gradient. A deferred microbatch (defer_embedding_wgrad_compute) skips the gather and the
    // weight gradient, so its data gradient's reduction waits alone (Megatron-Core 0.7-0.13: wgrad_compute false).
    const auto logits_reduce = d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    const char* logits_reduce_name = d.sp ? "logits.grad-reduce-scatter" : "logits.grad-all-reduce";
    const Kernel dgrad = gemm("logits.dgrad", d.n, d.h, d.v / d.t);
    o.backward_deferred = o.backward;  // the loss's backward
    add(o.backward_deferred, {dgrad});
    o.backward_deferred.push_back(collective(logits_reduce_name, logits_reduce, msg));
    if (d.sp) o.backward.push_back(collective("logits.input-all-gather", CollectiveKind::all_gather, msg, d.async_comm));
    add(o.backward, {dgrad});
    if (d.async_comm) {
        o.backward.push_back(collective(logits_reduce_name, logits_reduce, msg, true));
        o.backward.push_back(compute(wgrad(d, "logits", d.h, d.v / d.t, d.n)));
    } else {
        add(o.backward, wgrad(d, "logits", d.h, d.v / d.t, d.n));
        o.backward.push_back(collective(logits_reduce_name, logits_reduce, msg));
    }
    for (std::vector<Step>* pass : {&o.backward, &o.backward_deferred})
        add(*pass, {elementwise("final-ln.bwd", norm_class(d, false), kLayerNormBwd * d.n_sp * d.h)});
    // What a deferred microbatch keeps past its backward: the layer's input as saved (2 n_sp h bytes) and the 16-bit
    // gradient of its logits (2 n v / t); under SP the drain's two gather buffers (Megatron's global memory buffers
    // "mpu_0" and "mpu_1", kept once made).
    o.deferred_per_microbatch = Bytes(2 * d.n_sp * d.h + 2 * logits);
    o.deferral_buffers = Bytes(d.sp ? 2 * msg : 0);
    // Final layer-norm input and logits-GEMM input (2 bytes each), fp32 logits: 4sbh/t + 4sbv/t with SP; Transformer
    // Engine's kernels keep the 16-bit logits (their gradient is written over them): 2sbv/t.
    o.stored_per_microbatch = Bytes(4 * d.n_sp * d.h + (te ? 2 : 4) * logits);
    return o;
}

std::vector<Step> build_deferred_wgrad(const LayerConfig& cfg, int microbatches) {
    // Megatron-Core's drain_embedding_wgrad_compute (megatron/core/utils.py, 0.6-0.13): under SP the first input is
    // gathered and waited for; then each GEMM runs with the next input's gather beside it (double-buffered).
    const Dims d = dims_of(cfg);
    std::vector<Step> p;
    const std::int64_t msg = 2 * d.n * d.h;
    if (d.sp && microbatches > 0) p.push_back(collective("logits.deferred-input-all-gather", CollectiveKind::all_gather, msg));
    for (int i = 0; i < microbatches; ++i) {
        if (d.sp && i + 1 < microbatches)
            p.push_back(collective("logits.deferred-input-all-gather", CollectiveKind::all_gather, msg, true));
        p.push_back(compute(wgrad(d, "logits", d.h, d.v / d.t, d.n)));
    }
    return p;
}

}  // namespace strata
