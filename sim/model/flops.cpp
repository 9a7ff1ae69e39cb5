// FLOPs per iteration: Megatron-LM's count and the paper's conventions (see include/strata/layer.hpp).
#include "strata/layer.hpp"

namespace strata {

namespace {

/// A GPT of the paper's shape: the paper's forms of the FLOPs count apply exactly.
bool paper_shaped(const ModelSpec& m) {
    return m.query_groups() == m.heads && m.mlp == Mlp::gelu && m.ffn_hidden == 4 * m.hidden;
}

/// The terms of Megatron-LM's count, per 12 B s L h^2: attention linear layers, attention core, MLP, logits.
struct FlopTerms {
    double linear_attention, core, mlp, logits;
};

FlopTerms flop_terms(const ModelSpec& m) {
    const double s = m.seq_len, L = m.layers, h = m.hidden, v = m.vocab;
    const double q = double(m.heads) * m.head_dim();   // query projection width
    const double g_over_a = double(m.query_groups()) / m.heads;
    const double gated = m.mlp == Mlp::swiglu ? 1.5 : 1.0;
    return {(1.0 + g_over_a) * (q / h), (s / h) * (q / h), (double(m.ffn_hidden) / h) * gated, v / (2.0 * L * h)};
}

double base(const ModelSpec& m, int global_batch) {
    const double h = m.hidden;
    return 12.0 * double(global_batch) * m.seq_len * m.layers * h * h;
}

}  // namespace

Flops flash_attention_flops(const Kernel& k) {
    // Forward: QK^T and PV; backward: the scores again, dV, dP, dQ, dK. Causal: half of each.
    const double gemms = k.kind == KernelKind::flash_attention_fwd ? 2.0 : 5.0;
    return Flops(0.5 * gemms * k.gemm.flops().value);
}

Flops model_flops_per_iteration(const ModelSpec& m, int global_batch) {
    if (paper_shaped(m)) {
        const double B = global_batch, s = m.seq_len, L = m.layers, h = m.hidden, v = m.vocab;
        return Flops(72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * h * L)));
    }
    const FlopTerms t = flop_terms(m);
    return Flops(base(m, global_batch) * (t.linear_attention + t.core + t.mlp + t.logits));
}

Flops hardware_flops_per_iteration(const ModelSpec& m, int global_batch, Recompute recompute, Attention attention,
                                   double recomputed_fraction, RecomputeModules modules) {
    const FlopTerms t = flop_terms(m);
    // FlashAttention's backward recomputes the scores: one attention GEMM of the core's six (2 forward, 4 backward).
    const Flops flash = fused_attention(attention) ? Flops(base(m, global_batch) * t.core / 6.0) : Flops(0);
    if (paper_shaped(m) && recomputed_fraction == 1.0 && modules == RecomputeModules{}) {
        const double B = global_batch, s = m.seq_len, L = m.layers, h = m.hidden, v = m.vocab;
        switch (recompute) {
            case Recompute::none: return model_flops_per_iteration(m, global_batch) + flash;
            case Recompute::selective:
                return Flops(72.0 * B * s * L * h * h * (1.0 + s / (3.0 * h) + v / (12.0 * h * L))) + flash;
            case Recompute::full: return Flops(96.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * h * L))) + flash;
        }
    }
    const Flops model = model_flops_per_iteration(m, global_batch);
    switch (recompute) {
        case Recompute::none: return model + flash;
        case Recompute::selective: {
            // The MLP's forward again (Megatron-Core checkpoints the whole module): fc1, 2 n h f (x2 for swiglu's gate
            // and up), and fc2, 2 n f h: (f/h)(gated ? 3 : 2) / 6 of the base per layer.
            const double mlp = (double(m.ffn_hidden) / m.hidden) * (m.mlp == Mlp::swiglu ? 3.0 : 2.0) / 6.0;
            return model +
                   Flops(base(m, global_batch) * ((modules.core_attn ? t.core : 0.0) + (modules.mlp ? mlp : 0.0))) +
                   flash;
        }
        case Recompute::full:
            return model + Flops(base(m, global_batch) * (t.linear_attention + t.core + t.mlp) / 3.0 * recomputed_fraction) +
                   flash;
    }
    return model;
}

}  // namespace strata
