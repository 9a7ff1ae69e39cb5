// The layer model: one Megatron GPT transformer layer as a list of ops, as one GPU of a t-way
// tensor-parallel group sees it, plus the passes (forward, backward, recompute) built from them.
#pragma once

#include "strata/collective.hpp"
#include "strata/spec.hpp"
#include "strata/units.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace strata {

/// flash_attention_fwd / _bwd: one fused FlashAttention kernel over `gemm` = one attention GEMM's shape
/// (s x s x head_dim, batch b x heads / t); it executes 2 such GEMMs forward and 5 backward (recomputing the
/// scores), half of each under the causal mask, at the device profile's FlashAttention efficiency.
enum class KernelKind { gemm, batched_gemm, elementwise, flash_attention_fwd, flash_attention_bwd };

/// C[m,n] = A[m,k] * B[k,n], `batch` independent products.
struct GemmShape {
    std::int64_t m = 0, n = 0, k = 0, batch = 1;
    /// C is an fp32 accumulator read and written in place (C += A B): Megatron's gradient-accumulation
    /// fusion for weight gradients, which adds into the fp32 main gradient inside the GEMM epilogue.
    bool accumulate_fp32 = false;
    /// A and B in FP8 (1 byte each): Transformer Engine's FP8 GEMMs, at the device's FP8 peak.
    bool fp8 = false;
    /// Run as `chunks` GEMMs back to back (Transformer Engine's userbuffer overlap splits a GEMM so that each chunk's
    /// communication overlaps another chunk): of m / chunks rows each (B read per chunk), or with chunk_columns of
    /// n / chunks columns each (A read per chunk); the FLOPs are the whole GEMM's.
    std::int64_t chunks = 1;
    bool chunk_columns = false;
    /// SMs the GEMM leaves free for communication (Transformer Engine's set_sm_margin: cuBLASLt's SM count target is
    /// the device's SMs less this): it runs on the rest, every chunk, its whole length.
    int sm_margin = 0;
    /// The extent the chunks split (m, or n with chunk_columns).
    [[nodiscard]] std::int64_t split_extent() const { return chunk_columns ? n : m; }
    /// The chunks that run: `chunks`, but never more than the split extent (none empty).
    [[nodiscard]] std::int64_t chunk_parts() const { return std::min(chunks, std::max<std::int64_t>(split_extent(), 1)); }
    /// The largest of the chunks that run, as a whole GEMM (this shape unchunked when it runs whole).
    [[nodiscard]] GemmShape largest_chunk() const;
    /// One chunk as a whole GEMM: this shape with the split extent `size`.
    [[nodiscard]] GemmShape chunk(std::int64_t size) const {
        GemmShape c = *this;
        (chunk_columns ? c.n : c.m) = size;
        c.chunks = 1;
        c.chunk_columns = false;
        return c;
    }
    [[nodiscard]] Flops flops() const { return Flops(2.0 * double(m) * double(n) * double(k) * double(batch)); }
    /// HBM bytes: A and B at 2 bytes per element; C written at 2, or read and written at 4 when accumulating.
    [[nodiscard]] Bytes bytes() const {
        const std::int64_t a_reads = chunk_columns ? chunk_parts() : 1, b_reads = chunk_columns ? 1 : chunk_parts();
        return Bytes(batch * ((fp8 ? 1 : 2) * (a_reads * m * k + b_reads * k * n) + (accumulate_fp32 ? 8 : 2) * m * n));
    }
};
inline GemmShape GemmShape::largest_chunk() const {
    const std::int64_t parts = chunk_parts();
    return chunk((split_extent() + parts - 1) / parts);
}

/// One GPU kernel. Elementwise kernels carry the name calibration uses (layernorm_fwd, ...).
struct Kernel {
    std::string name;
    KernelKind kind = KernelKind::elementwise;
    GemmShape gemm;          ///< for (batched) GEMMs
    Bytes bytes;             ///< HBM bytes read + written (elementwise)
    std::string op_class;    ///< calibration op name for elementwise kernels
    /// A transformer layer's linear GEMM (QKV, projection, fc1, fc2) and its role: what FP8 training casts and runs
    /// in FP8 (the attention core and the output layer are none).
    enum class Linear : std::uint8_t { none, forward, data_grad, weight_grad } linear = Linear::none;
    /// With linear set: which linear layer, column-parallel (QKV, fc1) or row-parallel (projection, fc2).
    enum class Layer : std::uint8_t { none, qkv, proj, fc1, fc2 } layer = Layer::none;
    /// A fused-attention kernel of FlashAttention-2 (attention: flash2), not the profile's own fused attention.
    bool flash2 = false;
    /// A fused-attention kernel with dropout on the attention probabilities: it draws the mask's random numbers in
    /// the forward and draws them again in the backward (nothing stored), at the profile's dropout_time_factor.
    bool dropout = false;
    [[nodiscard]] bool is_gemm() const { return kind == KernelKind::gemm || kind == KernelKind::batched_gemm; }
    [[nodiscard]] bool is_fused_attention() const {
        return kind == KernelKind::flash_attention_fwd || kind == KernelKind::flash_attention_bwd;
    }
};

/// What moves a collective's bytes, and so what the kernels that run beside it lose of the SMs: an NCCL kernel (one
/// SM per channel: the device profile's intra_node.nccl_channels), a Transformer Engine userbuffers kernel of
/// TpCollective::sms CTAs (pipeline and bulk overlaps), or the copy engines (TE's ring exchange: no SM).
enum class CommEngine : std::uint8_t { nccl, userbuffers, copy_engine };

/// A tensor-parallel collective over the t GPUs of the group, on a buffer of `message` bytes
/// (the full, unsharded tensor).
struct TpCollective {
    std::string name;
    CollectiveKind kind = CollectiveKind::all_reduce;
    Bytes message;
    /// Over the context-parallel group (c GPUs with the same tensor rank) instead of the tensor-parallel one.
    bool context_group = false;
    CommEngine engine = CommEngine::nccl;
    int sms = 0;  ///< userbuffers: the kernel's CTAs (ub_cfg num_sm), each holding an SM while it runs
};

/// One step of a pass: kernels run back to back on the compute stream, or a collective. A collective
/// with `overlapped` set runs concurrently with the next compute step (async all-reduce / all-gather
/// in the backward pass); the step after that waits for both.
struct Step {
    enum class Kind { compute, collective } kind = Kind::compute;
    std::vector<Kernel> kernels;
    TpCollective collective;
    bool overlapped = false;
};

/// One forward op of the layer (paper Section 4.1 granularity) with what it keeps for backward.
struct LayerOp {
    std::string name;
    Bytes stored;                 ///< activation bytes kept for backward with no recompute
    /// Which selective-recompute module re-creates it (dropped from storage when that module is recomputed).
    enum class Module : std::uint8_t { none, core_attn, layernorm, mlp } module = Module::none;
};

/// Fine-grained activation offloading of one layer and microbatch (LayerConfig::offload, Megatron-Core's
/// offload_modules): what the forward copies to host memory, what those copies free on the GPU, and what the backward's
/// reloads allocate again. A tensor two modules save is copied and reloaded by each (Megatron-Core does not deduplicate
/// across modules: in 16-bit training the attention's output is core_attn's and attn_proj's), and freed once; a tensor
/// another module still holds is copied but not freed. Tensors under 2^20 elements stay (min_offloaded_tensor_size).
struct LayerOffload {
    Bytes copied;    ///< device to host, each forward
    Bytes freed;     ///< GPU bytes released once the copies are done
    Bytes reloaded;  ///< host to device before the layer's backward; freed with the layer's activations
    /// Of `freed`, the layer input's bytes (qkv_linear's copy of it): a chunk after the pipeline's first receives its
    /// first layer's input from the stage before, and Megatron-Core's schedule holds that tensor (input_tensors) until
    /// the backward, so there the copy frees nothing of it (and the reload brings a second copy).
    Bytes layer_input;
    int copies = 0;  ///< tensors copied each way (each its own copy call)
    /// What the copies free for a chunk's layer `layer` at virtual stage `v` (see layer_input).
    [[nodiscard]] Bytes freed_at(int v, int layer) const { return v > 0 && layer == 0 ? freed - layer_input : freed; }
    [[nodiscard]] bool any() const { return copies > 0; }
};

struct LayerPlan {
    std::vector<LayerOp> ops;     ///< forward ops in order, with stored activations
    std::vector<Step> forward;
    std::vector<Step> backward;   ///< includes recompute steps for the policy
    Bytes stored_bytes;           ///< per layer under the policy (what the forward pass keeps)
    Bytes recompute_peak_bytes;   ///< extra bytes live while one layer recomputes (full: the layer's activations)
    /// Bytes a layer's attention holds only while it runs, beyond what it stores: context parallelism's ring buffers,
    /// each step's partial outputs and copies (Transformer Engine's AttnFuncWithCP), in the forward, and in the
    /// backward its double buffers of keys, values and their gradients with a step's gradients (or the forward's,
    /// where the backward reruns the attention and that is more). None without context parallelism.
    Bytes attention_workspace_forward;
    Bytes attention_workspace_backward;
    LayerOffload offload;         ///< with offload modules
};

struct LayerConfig {
    const ModelSpec* model = nullptr;
    int tensor = 1;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    int microbatch = 1;
    /// Weight-gradient GEMMs add into the fp32 main gradient in their epilogue (Megatron-LM since late
    /// 2021); without it the GEMM writes a 16-bit gradient that a separate kernel adds to the main gradient.
    bool gradient_accumulation_fusion = true;
    /// Backward tensor-parallel collectives overlap the data- / weight-gradient GEMMs (Megatron-LM's
    /// asynchronous tensor-parallel communication); without it they run after both GEMMs, exposed.
    bool async_tp_comm = true;
    /// Main gradients (and the data-parallel reduction) in fp32, else in the 16-bit training type.
    bool fp32_main_grads = true;
    Attention attention = Attention::unfused;
    int context = 1;   ///< c: this GPU holds s / c tokens of each sequence (context parallelism)
    RecomputeModules modules{};   ///< what selective recompute re-runs
    bool tp_comm_overlap = false; ///< forward SP collectives (and backward output-gradient gathers) overlap GEMMs
    TpOverlapRs tp_overlap_proj_fprop = TpOverlapRs::pipeline;  ///< with tp_comm_overlap: TE's method there
    TpOverlapRs tp_overlap_fc2_fprop = TpOverlapRs::pipeline;
    TpOverlapConfig tp_overlap_config{};  ///< with tp_comm_overlap: each overlap's num_sm, set_sm_margin, aggregate
    bool fp8 = false;             ///< the linear layers' GEMMs in FP8, their saved inputs in FP8
    CrossEntropy cross_entropy = CrossEntropy::unfused;  ///< the loss's kernels (output layer)
    /// The linear layers' modules: where the bias gradients are computed, and TE LayerNormMLP's FP8 GeLU (see
    /// TransformerImpl; automatic: transformer_impl_for; local with fp8 or tp_comm_overlap is an error).
    TransformerImpl transformer_impl = TransformerImpl::automatic;
    bool fp8_current_scaling = false;  ///< with fp8: each cast reads its operand once more for the amax
    /// With fp8 delayed scaling: the kernels every FP8 module runs to update its amax history and scales before its
    /// forward and before its backward (Fp8ScaleUpdate::per_module: 3, TE 1.0-1.2; per_module_fused: 2, TE 1.4-1.5;
    /// per_region: 0).
    int fp8_scale_update_kernels = 0;
    /// Under SP the embedding's partial outputs are reduce-scattered (Megatron-Core since 2024-04), else all-reduced
    /// and then split (Megatron-LM before: VocabParallelEmbedding's reduce, then scatter_to_sequence_parallel_region).
    bool embedding_reduce_scatter = true;
    /// Fine-grained activation offloading: the modules whose saved tensors go to host memory (find_problem's rules
    /// hold: Transformer Engine's layers, fused attention for core_attn, no full recompute).
    OffloadModules offload{};
    /// With fp8: the weights arrive in FP8 without their transposes for every backward (Megatron-FSDP with FP8
    /// parameters, which gathers each layer again for its backward): each data-gradient GEMM's weight is transposed
    /// first (read and written once, 1 byte each).
    bool fp8_weight_transposes = false;
};

/// The layer configuration of a scenario's execution.
[[nodiscard]] LayerConfig layer_config(const ModelSpec& model, const ExecutionSpec& execution);

/// Builds the ops and passes of one transformer layer.
LayerPlan build_layer(const LayerConfig& cfg);
/// The layer as partial full recompute (recompute_method: block) leaves it: the same layer without recompute
/// (for any other policy, the layer itself).
LayerPlan build_layer_left_alone(LayerConfig cfg);

/// Activation bytes per layer from the op list (sum of `stored` under the policy).
Bytes activation_bytes_per_layer(const ModelSpec& model, int tensor, bool sequence_parallel, Recompute recompute,
                                 int microbatch, Attention attention = Attention::unfused);
/// FLOPs a FlashAttention kernel executes (causal: half of the s x s work).
[[nodiscard]] Flops flash_attention_flops(const Kernel& kernel);

/// Model-level pieces outside the transformer layers (paper Section 4.5).
struct EmbeddingPlan {
    std::vector<Step> forward, backward;  ///< embedding (first stage)
    Bytes stored_per_microbatch;          ///< embedding dropout mask
};
struct OutputPlan {
    std::vector<Step> forward, backward;  ///< final layer norm, logits GEMM, cross-entropy (last stage)
    /// The backward of a microbatch whose weight gradient is deferred (defer_embedding_wgrad_compute).
    std::vector<Step> backward_deferred;
    Bytes stored_per_microbatch;          ///< 4sbh/t + 4sbv/t with SP (paper eq. in 4.5)
    Bytes deferred_per_microbatch;        ///< kept from a deferred backward to the drain: input and logits' gradient
    Bytes deferral_buffers;               ///< the drain's two input-gather buffers (SP), kept once made
};
/// Under sequence parallelism (t > 1), after the backward and before the optimizer step: the gradients of the
/// parameters every rank of the tensor-parallel group holds whole but computes from its own sequence shard (the
/// norms' weights, and the row-parallel layers' biases) are summed over the group: flattened into one buffer
/// (torch.cat, one kernel per 128 tensors), all-reduced, and copied back one kernel per tensor. Megatron-LM 2022's
/// optimizer.allreduce_layernorm_grads; Megatron-Core's finalize_model_grads (_allreduce_layernorm_grads). For a
/// GPU holding `layers` transformer layers, and the final norm when `final_norm`; empty without SP.
std::vector<Step> build_sequence_parallel_grad_sync(const LayerConfig& cfg, int layers, bool final_norm);
EmbeddingPlan build_embedding(const LayerConfig& cfg);
OutputPlan build_output(const LayerConfig& cfg);
/// After the last stage's last backward, the output layer's deferred weight-gradient GEMMs of `microbatches`
/// microbatches (defer_embedding_wgrad_compute).
std::vector<Step> build_deferred_wgrad(const LayerConfig& cfg, int microbatches);

/// Model FLOPs per iteration, Megatron-LM's convention (num_floating_point_operations):
///   12 B s L h^2 [(1 + g/a + s/h)(q/h) + (f/h) k + v/(2 L h)], q = a x head_dim, k = 1.5 for swiglu else 1;
/// for a GPT (g = a, q = h, f = 4h, gelu) it is the paper's 72 B s L h^2 (1 + s/(6h) + v/(12hL)), computed in that
/// form so that the paper's figures stay exact.
Flops model_flops_per_iteration(const ModelSpec& model, int global_batch);
/// Hardware FLOPs: the model FLOPs plus what recompute runs again (the paper's conventions: selective adds the
/// attention-core term once more, full recompute a third of the layers' part) and, with FlashAttention, the
/// attention scores its backward recomputes (a sixth of the attention-core term).
/// `recomputed_fraction`: the share of layers full recompute re-runs (1 unless partial, recompute_layers).
/// `modules`: what selective recompute re-runs (the attention core by default; the MLP's first GEMM adds its FLOPs).
Flops hardware_flops_per_iteration(const ModelSpec& model, int global_batch, Recompute recompute,
                                   Attention attention = Attention::unfused, double recomputed_fraction = 1.0,
                                   RecomputeModules modules = {});

}  // namespace strata
