// One Megatron GPT layer as ops and passes (see include/strata/layer.hpp).
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
    bool sp;
    bool fused_wgrad;              ///< gradient-accumulation fusion
    bool async_comm;               ///< backward collectives overlapped with the GEMMs
    std::int64_t main_grad_bytes;  ///< 4 (fp32 main gradients) or 2
};

Dims dims_of(const LayerConfig& c) {
    if (c.model == nullptr) throw Error("build_layer: no model");
    const ModelSpec& m = *c.model;
    Dims d{};
    d.s = m.seq_len;
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
    d.fused_wgrad = c.gradient_accumulation_fusion;
    d.async_comm = c.async_tp_comm;
    d.main_grad_bytes = c.fp32_main_grads ? 4 : 2;
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

Step collective(std::string name, CollectiveKind kind, std::int64_t message, bool overlapped = false) {
    Step s;
    s.kind = Step::Kind::collective;
    s.collective = TpCollective{std::move(name), kind, Bytes(message)};
    s.overlapped = overlapped;
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

/// Bias gradient: a reduction of the output gradient over the tokens (reads n x out, 2 bytes).
Kernel bias_grad(const std::string& name, std::int64_t tokens, std::int64_t out) {
    return elementwise(name + ".bias-grad", "", 2 * tokens * out);
}

/// Weight-gradient GEMM dW[in, out] = X^T dY. With gradient-accumulation fusion it adds straight into the
/// main gradient in its epilogue (modelled as an fp32 read-modify-write of C); without, it writes a 16-bit
/// gradient and a separate kernel adds it to the main gradient (Megatron's grad hook: main_grad.add_(grad)),
/// reading the 16-bit gradient and the main gradient and writing the main gradient.
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

std::vector<Kernel> attention_core_forward(const Dims& d) {
    const std::int64_t e = d.b * d.heads_t * d.s * d.s;  // score elements per GPU
    return {gemm("attn.qk", d.s, d.s, d.d, d.b * d.heads_t),
            elementwise("attn.softmax", "softmax_fwd", kSoftmaxFwd * e),
            elementwise("attn.dropout", "dropout_fwd", kDropoutFwd * e),
            gemm("attn.av", d.s, d.d, d.s, d.b * d.heads_t)};
}

std::vector<Step> forward_pass(const Dims& d) {
    std::vector<Step> p;
    const auto reduce = d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    const std::int64_t msg = 2 * d.n * d.h;
    add(p, {elementwise("ln1", "layernorm_fwd", kLayerNormFwd * d.n_sp * d.h)});
    if (d.sp) p.push_back(collective("attn.all-gather", CollectiveKind::all_gather, msg));
    add(p, {gemm("qkv", d.n, 3 * d.h / d.t, d.h)});
    add(p, attention_core_forward(d));
    add(p, {gemm("proj", d.n, d.h, d.h / d.t)});
    p.push_back(collective(d.sp ? "attn.reduce-scatter" : "attn.all-reduce", reduce, msg));
    add(p, {elementwise("attn.bias-dropout-add", "bias_dropout_add_fwd", kBdaFwd * d.n_sp * d.h),
            elementwise("ln2", "layernorm_fwd", kLayerNormFwd * d.n_sp * d.h)});
    if (d.sp) p.push_back(collective("mlp.all-gather", CollectiveKind::all_gather, msg));
    add(p, {gemm("fc1", d.n, d.f / d.t, d.h), elementwise("gelu", "gelu_fwd", kGeluFwd * d.n * d.f / d.t),
            gemm("fc2", d.n, d.h, d.f / d.t)});
    p.push_back(collective(d.sp ? "mlp.reduce-scatter" : "mlp.all-reduce", reduce, msg));
    add(p, {elementwise("mlp.bias-dropout-add", "bias_dropout_add_fwd", kBdaFwd * d.n_sp * d.h)});
    return p;
}

/// Backward of a column-parallel linear layer (QKV, fc1): input gradient and weight gradient. With
/// asynchronous communication the input all-gather (SP) overlaps the data-gradient GEMM and the
/// input-gradient reduction overlaps the weight-gradient GEMM; without, the all-gather runs first and the
/// reduction after both GEMMs (autograd reaches the communication op after the linear layer's backward).
void column_linear_backward(std::vector<Step>& p, const Dims& d, const std::string& name, std::int64_t in,
                            std::int64_t out) {
    const std::int64_t msg = 2 * d.n * d.h;
    const auto reduce = d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    const std::string reduce_name = name + (d.sp ? ".grad-reduce-scatter" : ".grad-all-reduce");
    if (d.sp) p.push_back(collective(name + ".input-all-gather", CollectiveKind::all_gather, msg, d.async_comm));
    if (!d.async_comm) {
        add(p, std::vector<Kernel>{gemm(name + ".dgrad", d.n, in, out)} + wgrad(d, name, in, out, d.n) +
                   std::vector<Kernel>{bias_grad(name, d.n, out)});
        p.push_back(collective(reduce_name, reduce, msg));
        return;
    }
    p.push_back(compute({gemm(name + ".dgrad", d.n, in, out)}));
    p.push_back(collective(reduce_name, reduce, msg, true));
    p.push_back(compute(wgrad(d, name, in, out, d.n) + std::vector<Kernel>{bias_grad(name, d.n, out)}));
}

std::vector<Step> backward_pass(const Dims& d, Recompute rc) {
    std::vector<Step> p;
    const std::int64_t msg = 2 * d.n * d.h;
    const std::int64_t e = d.b * d.heads_t * d.s * d.s;
    if (rc == Recompute::full) p = forward_pass(d);  // re-run the whole layer forward first
    add(p, {elementwise("mlp.bias-dropout-add.bwd", "bias_dropout_add_bwd", kBdaBwd * d.n_sp * d.h)});
    if (d.sp) p.push_back(collective("mlp.grad-all-gather", CollectiveKind::all_gather, msg));
    add(p, std::vector<Kernel>{gemm("fc2.dgrad", d.n, d.f / d.t, d.h)} + wgrad(d, "fc2", d.f / d.t, d.h, d.n) +
               std::vector<Kernel>{bias_grad("fc2", d.n, d.h),
                                   elementwise("gelu.bwd", "gelu_bwd", kGeluBwd * d.n * d.f / d.t)});
    column_linear_backward(p, d, "fc1", d.h, d.f / d.t);
    add(p, {elementwise("ln2.bwd", "layernorm_bwd", kLayerNormBwd * d.n_sp * d.h),
            residual_grad_add("mlp.residual-grad-add", d.n_sp * d.h),
            elementwise("attn.bias-dropout-add.bwd", "bias_dropout_add_bwd", kBdaBwd * d.n_sp * d.h)});
    if (d.sp) p.push_back(collective("attn.grad-all-gather", CollectiveKind::all_gather, msg));
    add(p, std::vector<Kernel>{gemm("proj.dgrad", d.n, d.h / d.t, d.h)} + wgrad(d, "proj", d.h / d.t, d.h, d.n) +
               std::vector<Kernel>{bias_grad("proj", d.n, d.h)});
    if (rc == Recompute::selective) {
        std::vector<Kernel> re = attention_core_forward(d);
        for (auto& k : re) k.name = "recompute." + k.name;
        add(p, std::move(re));
    }
    add(p, {gemm("attn.av.dgrad-probs", d.s, d.s, d.d, d.b * d.heads_t),
            gemm("attn.av.dgrad-values", d.s, d.d, d.s, d.b * d.heads_t),
            elementwise("attn.dropout.bwd", "dropout_bwd", kDropoutBwd * e),
            elementwise("attn.softmax.bwd", "softmax_bwd", kSoftmaxBwd * e),
            gemm("attn.qk.dgrad-q", d.s, d.d, d.s, d.b * d.heads_t),
            gemm("attn.qk.dgrad-k", d.s, d.d, d.s, d.b * d.heads_t)});
    column_linear_backward(p, d, "qkv", d.h, 3 * d.h / d.t);
    add(p, {elementwise("ln1.bwd", "layernorm_bwd", kLayerNormBwd * d.n_sp * d.h),
            residual_grad_add("attn.residual-grad-add", d.n_sp * d.h)});
    return p;
}

std::vector<LayerOp> layer_ops(const Dims& d) {
    const std::int64_t nh = d.n * d.h;
    const std::int64_t sp_nh = d.n_sp * d.h;
    const std::int64_t scores = d.b * d.heads_t * d.s * d.s;  // a s^2 b / t
    const std::int64_t ffn_t = d.n * d.f / d.t;
    return {
        {"ln1.input", Bytes(2 * sp_nh), false},
        {"qkv.input", Bytes(2 * sp_nh), false},  // SP keeps the shard and re-gathers it in backward
        {"attn.q-and-k", Bytes(4 * nh / d.t), false},
        {"attn.softmax-output", Bytes(2 * scores), true},
        {"attn.dropout-mask", Bytes(scores), true},
        {"attn.dropout-output", Bytes(2 * scores), true},
        {"attn.values", Bytes(2 * nh / d.t), false},
        {"proj.input", Bytes(2 * nh / d.t), false},
        {"attn.bias-dropout-add.mask", Bytes(sp_nh), false},
        {"ln2.input", Bytes(2 * sp_nh), false},
        {"fc1.input", Bytes(2 * sp_nh), false},
        {"gelu.input", Bytes(2 * ffn_t), false},
        {"fc2.input", Bytes(2 * ffn_t), false},
        {"mlp.bias-dropout-add.mask", Bytes(sp_nh), false},
    };
}

Bytes stored_under(const std::vector<LayerOp>& ops, const Dims& d, Recompute rc) {
    if (rc == Recompute::full) return Bytes(2 * d.n_sp * d.h);  // only the layer input
    Bytes total{};
    for (const auto& op : ops) {
        if (rc == Recompute::selective && op.attention_core) continue;
        total += op.stored;
    }
    return total;
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
    c.fp32_main_grads = e.precision == Precision::bf16;
    return c;
}

LayerPlan build_layer(const LayerConfig& cfg) {
    const Dims d = dims_of(cfg);
    LayerPlan plan;
    plan.ops = layer_ops(d);
    plan.forward = forward_pass(d);
    plan.backward = backward_pass(d, cfg.recompute);
    plan.stored_bytes = stored_under(plan.ops, d, cfg.recompute);
    if (cfg.recompute == Recompute::full) {
        plan.recompute_peak_bytes = stored_under(plan.ops, d, Recompute::none);
    } else if (cfg.recompute == Recompute::selective) {
        plan.recompute_peak_bytes = plan.ops[3].stored + plan.ops[4].stored + plan.ops[5].stored;
    }
    return plan;
}

Bytes activation_bytes_per_layer(const ModelSpec& model, int tensor, bool sequence_parallel, Recompute recompute,
                                 int microbatch) {
    LayerConfig c{&model, tensor, sequence_parallel, recompute, microbatch};
    const Dims d = dims_of(c);
    return stored_under(layer_ops(d), d, recompute);
}

EmbeddingPlan build_embedding(const LayerConfig& cfg) {
    const Dims d = dims_of(cfg);
    EmbeddingPlan e;
    const std::int64_t msg = 2 * d.n * d.h;
    // Vocabulary-parallel lookup: each rank writes its rows (zeros elsewhere), then the ranks reduce.
    e.forward.push_back(compute({elementwise("embedding.lookup", "", 4 * d.n * d.h)}));
    e.forward.push_back(collective(d.sp ? "embedding.reduce-scatter" : "embedding.all-reduce",
                                   d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce, msg));
    e.forward.push_back(compute({elementwise("embedding.dropout", "dropout_fwd", kDropoutFwd * d.n_sp * d.h)}));
    e.backward.push_back(compute({elementwise("embedding.dropout.bwd", "dropout_bwd", kDropoutBwd * d.n_sp * d.h)}));
    if (d.sp) e.backward.push_back(collective("embedding.grad-all-gather", CollectiveKind::all_gather, msg));
    e.backward.push_back(compute({elementwise("embedding.grad-scatter-add", "", 6 * d.n * d.h)}));
    e.stored_per_microbatch = Bytes(d.n_sp * d.h);  // dropout mask
    return e;
}

OutputPlan build_output(const LayerConfig& cfg) {
    const Dims d = dims_of(cfg);
    OutputPlan o;
    const std::int64_t msg = 2 * d.n * d.h;
    const std::int64_t logits = d.n * d.v / d.t;
    const std::int64_t stat = 4 * d.n;  // one fp32 per token
    add(o.forward, {elementwise("final-ln", "layernorm_fwd", kLayerNormFwd * d.n_sp * d.h)});
    if (d.sp) o.forward.push_back(collective("logits.all-gather", CollectiveKind::all_gather, msg));
    // Logits GEMM, then vocabulary-parallel cross-entropy in fp32: max, target logit and sum all-reduces.
    add(o.forward, {gemm("logits", d.n, d.v / d.t, d.h), elementwise("cross-entropy.max", "", 2 * logits)});
    o.forward.push_back(collective("cross-entropy.max-all-reduce", CollectiveKind::all_reduce, stat));
    add(o.forward, {elementwise("cross-entropy.softmax", "softmax_fwd", 6 * logits)});
    o.forward.push_back(collective("cross-entropy.target-all-reduce", CollectiveKind::all_reduce, stat));
    o.forward.push_back(collective("cross-entropy.sum-all-reduce", CollectiveKind::all_reduce, stat));
    add(o.backward, {elementwise("cross-entropy.bwd", "softmax_bwd", 6 * logits),
                     gemm("logits.dgrad", d.n, d.h, d.v / d.t)});
    const auto logits_reduce = d.sp ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    const char* logits_reduce_name = d.sp ? "logits.grad-reduce-scatter" : "logits.grad-all-reduce";
    if (d.async_comm) {
        o.backward.push_back(collective(logits_reduce_name, logits_reduce, msg, true));
        o.backward.push_back(compute(wgrad(d, "logits", d.h, d.v / d.t, d.n)));
    } else {
        add(o.backward, wgrad(d, "logits", d.h, d.v / d.t, d.n));
        o.backward.push_back(collective(logits_reduce_name, logits_reduce, msg));
    }
    add(o.backward, {elementwise("final-ln.bwd", "layernorm_bwd", kLayerNormBwd * d.n_sp * d.h)});
    // Final layer-norm input and logits-GEMM input (2 bytes each), fp32 logits: 4sbh/t + 4sbv/t with SP.
    o.stored_per_microbatch = Bytes(4 * d.n_sp * d.h + 4 * logits);
    return o;
}

Flops model_flops_per_iteration(const ModelSpec& m, int global_batch) {
    const double B = global_batch, s = m.seq_len, L = m.layers, h = m.hidden, v = m.vocab;
    return Flops(72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * L)));
}

Flops hardware_flops_per_iteration(const ModelSpec& m, int global_batch, Recompute recompute) {
    const double B = global_batch, s = m.seq_len, L = m.layers, h = m.hidden, v = m.vocab;
    switch (recompute) {
        case Recompute::none: return model_flops_per_iteration(m, global_batch);
        case Recompute::selective: return Flops(72.0 * B * s * L * h * h * (1.0 + s / (3.0 * h) + v / (12.0 * h * L)));
        case Recompute::full: return Flops(96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * h * L)));
    }
    return Flops(0);
}

}  // namespace strata
