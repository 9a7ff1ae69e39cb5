// The spec structs: what to simulate, as plain data (model, execution, system and a scenario combining
// them). No loader lives here: sim/scenario reads them from YAML; any caller may also fill them in code.
#pragma once

#include "strata/profile.hpp"
#include "strata/units.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class Recompute { none, selective, full };
enum class Schedule { one_f_one_b, interleaved, gpipe };
/// fp8: Transformer Engine's FP8 training as Megatron-Core uses it (delayed scaling, per tensor): the transformer
/// layers' linear GEMMs in FP8, everything else and the optimizer as with bf16.
enum class Precision { bf16, fp16, fp8 };
/// The MLP: GeLU (two matrices), SwiGLU (gated: three), or squared ReLU (Nemotron: two matrices, relu(x)^2).
enum class Mlp { gelu, swiglu, squared_relu };
enum class Norm { layernorm, rmsnorm };
enum class PositionEmbedding { learned, rope };
/// The attention core: unfused (GEMMs, softmax, dropout as separate kernels), flash (one fused kernel each way at the
/// device profile's fused-attention figures: cuDNN's on Hopper, as Transformer Engine prefers there), or flash2
/// (FlashAttention-2's kernels: Transformer Engine with NVTE_FUSED_ATTN=0, or the flash-attn package; the profile's
/// fused-attention figures times its flash2 ratios).
enum class Attention { unfused, flash, flash2 };
/// Whether the attention core is one fused kernel each way (flash or flash2).
[[nodiscard]] inline bool fused_attention(Attention a) { return a != Attention::unfused; }
/// The loss: Megatron-LM's vocabulary-parallel cross-entropy in eager PyTorch on fp32 logits (unfused, the default),
/// Megatron-Core's own fused version of it (fused: --cross-entropy-loss-fusion with the native implementation, each
/// step one compiled kernel, still on fp32 logits; NeMo's 2024-25 recipes), or Transformer Engine's fused Triton
/// kernels (te: --cross-entropy-fusion-impl te, as Megatron-Bridge's recipes run it).
enum class CrossEntropy { unfused, fused, te };
/// Whose modules make the transformer layer's linear layers (Megatron-LM's --transformer-impl), which decides where the
/// bias gradients are computed: local (Megatron's own ColumnParallelLinear / RowParallelLinear, the paper's: a
/// separate 16-bit reduction over the tokens for QKV's; fc1's from the bias-GeLU's gradient, autograd's sum),
/// transformer_engine (Megatron-Core's Transformer Engine spec: QKV's in TE's weight-gradient GEMM epilogue, or in
/// FP8 its output gradient's cast-transpose; fc1 as local, its bias returned to Megatron's bias-GeLU),
/// te_transformer_layer (TE's own TransformerLayer, NeMo 1.x with transformer_engine and no mcore_gpt: QKV's as
/// transformer_engine, fc1's inside LayerNormMLP's fused bias-GeLU backward; in FP8 with GeLU and delayed scaling its
/// GeLU writes fc2's input in FP8 and its backward fc1's FP8 output gradient, no casts of their own). Everywhere the
/// row-parallel layers' biases (projection, fc2) are returned and added in the bias-dropout-add, whose backward sums
/// their gradients over this rank's tokens. automatic (the default): transformer_engine where only TE runs the case
/// (FP8, or TE's userbuffer overlap, tp_comm_overlap), else local.
enum class TransformerImpl { automatic, local, transformer_engine, te_transformer_layer };
/// `t` with automatic resolved (see TransformerImpl).
[[nodiscard]] inline TransformerImpl transformer_impl_for(TransformerImpl t, bool fp8, bool tp_comm_overlap) {
    if (t != TransformerImpl::automatic) return t;
    return fp8 || tp_comm_overlap ? TransformerImpl::transformer_engine : TransformerImpl::local;
}
/// FP8 scaling (Transformer Engine): delayed (from the amax history) or current (tensorwise: each cast first reads its
/// 16-bit operand for the amax, 2 more bytes per element).
enum class Fp8Recipe { delayed, current };
/// FP8 delayed scaling's amax-history and scale update (Transformer Engine): per_region (TE >= 1.6: once per FP8
/// region and pass, one fused multi-tensor kernel after the region's amax reduction, not charged), per_module (TE
/// 1.0-1.2, base.py prepare_forward / _prepare_backward: every FP8 module, before its forward and before its backward,
/// copies its reduced amaxes into its history and runs amax_and_scale_update, compiled (jit_fuser): three kernels,
/// the copy, the history's max reduction with the scales after it, the rolled history) or per_module_fused (TE
/// 1.4-1.5: the same calls, the update one CUDA kernel, tex.fused_amax_and_scale_update: two kernels). TE 1.3 runs
/// the update as TorchScript (kernel count not read; neither value is its own).
enum class Fp8ScaleUpdate { per_region, per_module, per_module_fused };
/// How Transformer Engine's userbuffer overlap (tp_comm_overlap) reduce-scatters a forward GEMM's output (its ub_cfg
/// `method` for proj_fprop and fc2_fprop): pipeline (TE's default: 4 column chunks, each chunk's reduce-scatter during
/// the next, the last chunk's alone after the GEMM) or ring_exchange (t row chunks passed round the ring by the copy
/// engines under the GEMM, the rank's own shard last, then the received partial sums added after it).
enum class TpOverlapRs { pipeline, ring_exchange };
/// Transformer Engine's userbuffer overlaps, by their ub_cfg names (transformer_engine/pytorch/module/base.py,
/// initialize_ub): the ring exchanges (qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad), the forward reduce-scatters
/// (proj_fprop, fc2_fprop: pipeline or ring_exchange, TpOverlapRs) and the bulk overlaps of the column-parallel layers'
/// backward (qkv_dgrad, fc1_dgrad: the input's all-gather beside the data-gradient GEMM; qkv_wgrad, fc1_wgrad: the
/// input gradient's reduce-scatter beside the weight-gradient GEMM).
enum class TpOverlap : std::uint8_t {
    qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad, proj_fprop, fc2_fprop, qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad
};
inline constexpr std::array<std::string_view, 10> kTpOverlapNames = {
    "qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad", "proj_fprop", "fc2_fprop",
    "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"};
/// A userbuffer configuration's settings per overlap (TE's ub_cfg), as strata models them. num_sm: a pipeline or bulk
/// overlap's communication is a kernel of num_sm CTAs (1024 threads each) beside the GEMM while it moves its bytes; a
/// ring exchange's moves by the copy engines (TE's use_ce), no SM. sm_margin (set_sm_margin): TE tells cuBLASLt to
/// run the GEMM on the SMs less num_sm (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), every chunk, its whole length.
/// aggregate (ring-exchange all-gathers only): a first exchange of one chunk between pairs of ranks, exposed, then
/// t / 2 GEMM chunks of two chunks' rows, each pair of chunks passed on under the GEMM. The defaults are TE 1.x's
/// (num_sm 16 for pipeline and bulk, 1 for ring_exchange; no margin, no aggregation); TE >= 2.0 defaults set_sm_margin
/// for pipeline and bulk (list them in tp_overlap_sm_margin).
struct TpOverlapConfig {
    std::array<int, 10> num_sm = {1, 1, 1, 1, 16, 16, 16, 16, 16, 16};
    std::array<bool, 10> sm_margin{};
    std::array<bool, 10> aggregate{};
    /// fp8_buf (proj_fprop, fc2_fprop only): under FP8 the forward reduce-scatter's userbuffer is FP8, so the GEMM
    /// writes its output in FP8 and the reduce-scatter moves 1 byte per element, summing into 16 bits (TE >= 1.6's
    /// initialize_ub: FP8 when use_fp8 and the ub_cfg sets fp8_buf; TE <= 1.5 proj_fprop only, by NVTE_UB_FP8_RS=1).
    std::array<bool, 10> fp8_buf{};
    [[nodiscard]] int sms(TpOverlap o) const { return num_sm[static_cast<std::size_t>(o)]; }
    /// The SMs the overlap's GEMM leaves to communication: num_sm with set_sm_margin, else none.
    [[nodiscard]] int margin(TpOverlap o) const { return sm_margin[static_cast<std::size_t>(o)] ? sms(o) : 0; }
    [[nodiscard]] bool aggregated(TpOverlap o) const { return aggregate[static_cast<std::size_t>(o)]; }
    friend bool operator==(const TpOverlapConfig&, const TpOverlapConfig&) = default;
};
/// The ring-exchange all-gathers, the overlaps TE can aggregate (kTpOverlapNames' first four).
inline constexpr std::array<std::string_view, 4> kTpOverlapRingGathers = {"qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"};
/// The forward reduce-scatters, the overlaps whose userbuffer fp8_buf can make FP8.
inline constexpr std::array<std::string_view, 2> kTpOverlapForwardScatters = {"proj_fprop", "fc2_fprop"};
/// The overlaps set in `set` (sm_margin, aggregate, fp8_buf), in kTpOverlapNames' order.
[[nodiscard]] std::vector<std::string> overlap_names(const std::array<bool, 10>& set);
/// Each overlap's num_sm as `name:n`, space-separated, in kTpOverlapNames' order (the CSV's cell).
[[nodiscard]] std::string num_sm_text(const TpOverlapConfig& config);
enum class RecomputeMethod { uniform, block };
/// How the data-parallel gradients are averaged. scale: the gradient buffer is multiplied by 1 / replicas in place
/// before the reduction when there is more than one replica (Megatron-Core's DDP, gradient_scaling_factor);
/// scale_always: also with one replica (Megatron-LM's local DDP from March 2021 to August 2023,
/// `buffer_.data /= data_parallel_world_size` in megatron/model/distributed.py); in_collective: NCCL averages in the
/// reduction (--ddp-average-in-collective), no pass. The pass reads and writes every gradient once on the compute stream.
enum class GradientAverage { scale, scale_always, in_collective };

/// How the overlapped gradient reduction (overlap_grad_reduce) is cut into buckets: `layer` (each transformer layer
/// its own bucket as its backward ends, the embeddings, output layer and final norm after the last backward: an
/// idealised framework) or `megatron_core` (Megatron-Core's DDP, megatron_gradient_buckets: a model chunk's tensors
/// in reverse order, a bucket closed once it holds bucket_size parameters; bucketing off where Megatron-Core turns it
/// off, megatron_chunk_bucket_size), `nemo_apex` (NeMo 1 with Apex's DistributedFusedAdam, nemo_apex_gradient_buckets:
/// a group per layer, per model chunk with interleaving, what NeMo keeps out of them in the first; with
/// overlap_param_gather Apex steps that group first and gathers it under the rest of the step) or `nemo_apex_layers`
/// (the same with a group per layer also with interleaving: NeMo 2.0.0rc0-rc1). The parameter all-gather uses the
/// same buckets (docs/execution.md).
enum class GradBuckets { layer, megatron_core, nemo_apex, nemo_apex_layers };
/// NeMo's groups for Apex's optimizer (nemo_apex or nemo_apex_layers).
[[nodiscard]] constexpr bool nemo_apex(GradBuckets b) { return b == GradBuckets::nemo_apex || b == GradBuckets::nemo_apex_layers; }

/// What selective recompute re-runs (Megatron-Core's recompute_modules): the attention core (the paper's
/// selective recompute, the default), the norms (their outputs, the linear layers' inputs, are not kept; only with
/// transformer_impl local, where each norm is a module of its own: Transformer Engine's layers fuse them into the
/// linear layers and Megatron-Core skips the module), the MLP (the whole module checkpointed: its forward again from
/// its input, fc1, the activation, fc2 and fc2's tensor-parallel reduction, with Transformer Engine's layers the norm
/// fused into fc1 first; fc1's output, the activation's and, with the norm fused, fc1's input are not kept).
struct RecomputeModules {
    bool core_attn = true;
    bool layernorm = false;
    bool mlp = false;
    friend bool operator==(const RecomputeModules&, const RecomputeModules&) = default;
};

/// What Megatron-Core's fine-grained activation offloading (fine_grained_activation_offloading, offload_modules;
/// Megatron-LM since 2026-01) copies to pinned host memory during the forward and back before the backward, for a dense
/// layer of Transformer Engine's layers: every tensor of at least 2^20 elements that autograd saves inside the module
/// (qkv_linear: TE's LayerNormLinear, the layer input and the norm's output; core_attn: q, k, v, the output and, when
/// large enough, the softmax statistics; attn_proj: the projection's input). attn_norm and mlp_norm name norm modules
/// that Transformer Engine's layers fuse away (IdentityOp), and Megatron-Core offers no dense MLP module.
struct OffloadModules {
    bool attn_norm = false;
    bool qkv_linear = false;
    bool core_attn = false;
    bool attn_proj = false;
    bool mlp_norm = false;
    [[nodiscard]] bool any() const { return attn_norm || qkv_linear || core_attn || attn_proj || mlp_norm; }
    friend bool operator==(const OffloadModules&, const OffloadModules&) = default;
};

[[nodiscard]] const char* to_string(Recompute r);
[[nodiscard]] const char* to_string(Schedule s);
[[nodiscard]] const char* to_string(Precision p);
[[nodiscard]] const char* to_string(Mlp m);
[[nodiscard]] const char* to_string(Norm n);
[[nodiscard]] const char* to_string(PositionEmbedding p);
[[nodiscard]] const char* to_string(Attention a);
[[nodiscard]] const char* to_string(CrossEntropy c);
[[nodiscard]] const char* to_string(TransformerImpl t);
[[nodiscard]] const char* to_string(Fp8Recipe r);
[[nodiscard]] const char* to_string(Fp8ScaleUpdate u);
[[nodiscard]] const char* to_string(RecomputeMethod m);
[[nodiscard]] const char* to_string(GradientAverage g);
[[nodiscard]] const char* to_string(GradBuckets b);
[[nodiscard]] const char* to_string(TpOverlapRs m);

/// The value whose to_string is `name`, if any (one table of names for the loader and the command line).
[[nodiscard]] std::optional<Precision> precision_named(std::string_view name);
[[nodiscard]] std::optional<Attention> attention_named(std::string_view name);
[[nodiscard]] std::optional<CrossEntropy> cross_entropy_named(std::string_view name);
[[nodiscard]] std::optional<TransformerImpl> transformer_impl_named(std::string_view name);
[[nodiscard]] std::optional<Fp8Recipe> fp8_recipe_named(std::string_view name);
[[nodiscard]] std::optional<Fp8ScaleUpdate> fp8_scale_update_named(std::string_view name);
[[nodiscard]] std::optional<GradientAverage> gradient_average_named(std::string_view name);
[[nodiscard]] std::optional<GradBuckets> grad_buckets_named(std::string_view name);
[[nodiscard]] std::optional<TpOverlapRs> tp_overlap_rs_named(std::string_view name);

/// Megatron-Core's names of the selective-recompute modules, in RecomputeModules' order.
inline constexpr std::array<std::string_view, 3> kRecomputeModuleNames = {"core_attn", "layernorm", "mlp"};
/// The modules listed (by kRecomputeModuleNames); an unknown name is an error (the loader checks first).
[[nodiscard]] RecomputeModules recompute_modules_named(const std::vector<std::string>& names);
/// The names of the modules set, in kRecomputeModuleNames' order.
[[nodiscard]] std::vector<std::string> names_of(const RecomputeModules& modules);
/// Megatron-Core's names of the dense offload modules, in OffloadModules' order.
inline constexpr std::array<std::string_view, 5> kOffloadModuleNames = {"attn_norm", "qkv_linear", "core_attn", "attn_proj",
                                                                        "mlp_norm"};
/// The modules listed (by kOffloadModuleNames); an unknown name is an error (the loader checks first).
[[nodiscard]] OffloadModules offload_modules_named(const std::vector<std::string>& names);
/// The names of the modules set, in kOffloadModuleNames' order.
[[nodiscard]] std::vector<std::string> names_of(const OffloadModules& modules);

/// A decoder-only transformer: the paper's GPT by default (Table 3 notation in comments), or a Llama-class model.
struct ModelSpec {
    std::string name;
    int heads = 0;           ///< a
    int hidden = 0;          ///< h
    int layers = 0;          ///< L
    int seq_len = 0;         ///< s
    int vocab = 0;           ///< v
    int ffn_hidden = 0;      ///< 4h unless given; with swiglu the gated width (Llama's intermediate size)
    bool tied_embeddings = true;
    int kv_heads = 0;        ///< g, query groups (GQA / MQA); 0 means one per head (g = a)
    Mlp mlp = Mlp::gelu;     ///< gelu, squared_relu: two matrices h x f; swiglu: three (gate, up, down)
    Norm norm = Norm::layernorm;
    bool linear_bias = true; ///< biases on the linear layers (GPT yes, Llama no)
    double dropout = 0.1;    ///< attention and hidden dropout probability; 0 removes the kernels and masks
    PositionEmbedding position_embedding = PositionEmbedding::learned;  ///< learned table, or rotary (RoPE)

    [[nodiscard]] int query_groups() const { return kv_heads > 0 ? kv_heads : heads; }
    /// A model of today's kind (grouped-query attention, SwiGLU, RMSNorm or rotary positions: Llama's), which today's
    /// stacks train with fused attention: `strata run` and `strata search` note when one runs the paper's unfused.
    [[nodiscard]] bool todays_kind() const {
        return query_groups() < heads || mlp == Mlp::swiglu || norm == Norm::rmsnorm ||
               position_embedding == PositionEmbedding::rope;
    }
    [[nodiscard]] int head_dim() const { return hidden / heads; }
    [[nodiscard]] bool has_dropout() const { return dropout > 0; }
};

/// How the model is trained: parallelism, recomputation, batch, schedule.
struct ExecutionSpec {
    int tensor = 1;               ///< t
    int pipeline = 1;             ///< p
    int data = 1;                 ///< d
    /// c: context parallelism (Megatron-Core): each sequence split over c GPUs (2c chunks, load-balanced for the
    /// causal mask), attention by a ring exchange of K and V; placed after tensor parallelism in the rank order.
    int context = 1;
    int interleave = 1;           ///< m, model chunks per pipeline stage
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    int microbatch = 1;           ///< b
    int global_batch = 1;         ///< B
    Schedule schedule = Schedule::one_f_one_b;
    bool distributed_optimizer = false;
    /// Megatron-FSDP with --data-parallel-sharding-strategy optim_grads_params (ZeRO-3; Megatron-Core's
    /// mcore_fsdp_adapter, v1): weights, gradients and optimizer state sharded over the data x context ranks. Each
    /// transformer layer (the FSDP unit) is all-gathered before its forward and again before its backward (one unit
    /// prefetched: the double buffer), its gradient reduce-scattered after its backward on every microbatch; the
    /// embedding and output layer stay gathered after the step's first forward, their gradients reduce-scattered every
    /// microbatch too. Needs distributed_optimizer (Megatron-LM sets it); implies the overlaps (overlap_grad_reduce and
    /// overlap_param_gather are Megatron-FSDP's own with this strategy and read no further).
    bool fsdp = false;
    bool overlap_grad_reduce = false;   ///< overlap the data-parallel gradient reduction with backward
    /// With the distributed optimizer, the updated parameters' all-gather overlaps the next iteration's forward
    /// (Megatron-LM's --overlap-param-gather): simulated as the previous iteration's gather running under this
    /// iteration's first forward of each chunk (its flows share the links from time zero), bucket by bucket in forward
    /// order, each piece of that forward (embedding, layer, output layer) waiting for its bucket.
    bool overlap_param_gather = false;
    /// Megatron-Core's --overlap-param-gather-with-optimizer-step (interleaved schedule, with overlap_param_gather):
    /// the optimizer steps each stage's first model chunk first and launches that chunk's parameter all-gather at
    /// once, under the step of the other chunks (megatron/core/optimizer: ChainedOptimizer._step, force_dispatch).
    /// Simulated by cutting the steady-state iteration there: each GPU begins with the previous step's later-chunk
    /// part (the step's time over those chunks' share of the stage's parameters) while the first chunk's buckets
    /// are gathered, and ends with the rest of the step.
    bool overlap_param_gather_with_optimizer_step = false;
    GradBuckets grad_buckets = GradBuckets::layer;
    /// With grad_buckets megatron_core: parameters per bucket (Megatron-Core's DDP bucket_size); 0 = its default,
    /// max(40 M, 1 M x data) (distributed_data_parallel.py, 0.8-0.11: larger buckets for large data parallelism).
    double bucket_size = 0;
    /// The bucket size in force with grad_buckets megatron_core.
    [[nodiscard]] double megatron_bucket_size() const {
        return bucket_size > 0 ? bucket_size : std::max(40e6, 1e6 * data);
    }
    /// What the reports say: megatron_bucket_size with Megatron-Core's buckets and overlap_grad_reduce (its first
    /// stage's first chunk), 0 otherwise (one per layer, or none; with fsdp Megatron-FSDP's own, a layer each).
    [[nodiscard]] std::int64_t bucket_size_in_force() const {
        if (grad_buckets != GradBuckets::megatron_core || !overlap_grad_reduce || fsdp) return 0;
        return static_cast<std::int64_t>(megatron_bucket_size());
    }
    GradientAverage gradient_average = GradientAverage::scale;
    /// Whether the gradients are averaged by a pass over the buffer (see GradientAverage).
    [[nodiscard]] bool averages_by_pass() const {
        return gradient_average == GradientAverage::scale_always ||
               (gradient_average == GradientAverage::scale && data * context > 1);
    }
    bool gradient_accumulation_fusion = true;  ///< weight-gradient GEMMs add into the main gradient
    /// Megatron-Core's grad_reduce_in_fp32 (its DDP config): the main-gradient buffer, the accumulation into it and the
    /// data-parallel reduction in fp32 (true: Megatron-LM forces it for BF16 until 2025's --grad-reduce-in-bf16), or in
    /// the parameters' 16 bits (false: NeMo's and Megatron-Bridge's performance recipes). FP16 training keeps 16-bit
    /// gradients whatever this says (see fp32_gradients).
    bool grad_reduce_in_fp32 = true;
    /// Whether the main gradients (buffer, accumulation, data-parallel reduction) are fp32.
    [[nodiscard]] bool fp32_gradients() const { return grad_reduce_in_fp32 && precision != Precision::fp16; }
    bool async_tp_comm = true;          ///< backward tensor-parallel collectives overlap the GEMMs
    /// Megatron-LM's --tp-comm-overlap (Transformer Engine userbuffers): the sequence-parallel all-gathers and
    /// reduce-scatters of the forward (and the backward's output-gradient all-gathers) overlap their GEMMs.
    bool tp_comm_overlap = false;
    /// With tp_comm_overlap: TE's method for the attention projection's and fc2's forward reduce-scatters (ub_cfg
    /// proj_fprop / fc2_fprop; TE's default pipeline, NeMo 2.0's and Megatron-Bridge's FP8 configs ring_exchange).
    TpOverlapRs tp_overlap_proj_fprop = TpOverlapRs::pipeline;
    TpOverlapRs tp_overlap_fc2_fprop = TpOverlapRs::pipeline;
    /// With tp_comm_overlap: each overlap's ub_cfg num_sm, set_sm_margin, aggregate and fp8_buf (execution keys
    /// tp_overlap_num_sm, tp_overlap_sm_margin, tp_overlap_aggregate, tp_overlap_fp8_buf).
    TpOverlapConfig tp_overlap_config{};
    Precision precision = Precision::bf16;
    Attention attention = Attention::unfused;  ///< flash: one fused kernel each way (FlashAttention)
    CrossEntropy cross_entropy = CrossEntropy::unfused;  ///< the loss's kernels (see CrossEntropy)
    TransformerImpl transformer_impl =
        TransformerImpl::automatic;  ///< the linear layers' modules (see TransformerImpl)
    /// transformer_impl with automatic resolved (transformer_impl_for).
    [[nodiscard]] TransformerImpl transformer_impl_in_force() const {
        return transformer_impl_for(transformer_impl, precision == Precision::fp8, tp_comm_overlap);
    }
    Fp8Recipe fp8_recipe = Fp8Recipe::delayed;  ///< with FP8: the scaling recipe (see Fp8Recipe)
    /// With FP8 delayed scaling: where the amax histories and scales are updated (see Fp8ScaleUpdate; inert otherwise).
    Fp8ScaleUpdate fp8_scale_update = Fp8ScaleUpdate::per_region;
    /// With FP8 and the distributed optimizer: the parameter all-gather moves the transformer layers' parameters in
    /// FP8 (1 byte each; Megatron-Core's --fp8-param-gather); embeddings, output layer and norms stay 16-bit. The
    /// layer weights are then FP8 primary weights (TE's fp8_model_init): an FP8 copy and its transpose, no 16-bit one.
    bool fp8_param_gather = false;
    /// With FP8 delayed scaling: Transformer Engine reduces the amaxes of each FP8 region (Megatron-Core: a transformer
    /// block's forward for one microbatch) by an all-reduce (max) over the amax-reduction group as the region's
    /// forward ends, and again as its backward ends (TE 1.6+ fp8.py reduce_and_update_fp8_tensors, async_op=False: the
    /// compute stream waits). That group is tensor x data x context parallel, the whole stage (Megatron-Core's
    /// get_amax_reduction_group), so every replica of the stage meets at each region; Megatron-Core's tp_only_amax_red
    /// (from 0.9; 0.8 always did so; TE <= 1.5 with NVTE_DP_AMAX_REDUCE_INTERVAL=0) keeps it to tensor x context
    /// parallel. Current scaling has no such reduction; without FP8 delayed scaling the key is inert.
    bool tp_only_amax_red = false;
    /// Whether FP8 delayed scaling's amax all-reduces run (each FP8 region's forward and backward end).
    [[nodiscard]] bool reduces_fp8_amax() const {
        return precision == Precision::fp8 && fp8_recipe == Fp8Recipe::delayed;
    }
    /// Under SP the embedding's partial outputs are reduce-scattered over the tensor-parallel group (Megatron-Core
    /// since 2024-04); false: all-reduced, then split (Megatron-LM before, the paper's software).
    bool embedding_reduce_scatter = true;
    /// Megatron-Core DDP's check_for_nan_in_grad (Megatron-LM's --check-for-nan-in-loss-and-grad, on by default for
    /// BF16 training; NeMo 2.0's recipes): before each bucket's reduction its gradients' norm is computed and tested on
    /// the host (`assert not norm.isnan()`), a read of every gradient and a host synchronisation per bucket.
    bool check_for_nan_in_grad = false;
    /// NeMo's with_fp32_embedding_grads (its default true; NeMo 2.0.0rc0-2.1's megatron_gpt_model.py
    /// configure_optimizers, Apex's DistributedFusedAdam path, grad_buckets nemo_apex / nemo_apex_layers): the word
    /// embedding on the first stage, its tied copy on the last (p > 1) and a learned position table carry
    /// _with_fp32_optimizer, so NeMo's distributed_adam.py gives them Apex buckets of fp32 gradients
    /// (init_params_bucket, grad_sync_dtype float32): their main gradients, their reduce-scatter and the tied copies'
    /// all-reduce move 4 bytes per parameter where the rest moves 16-bit ones. Inert where the gradients are fp32
    /// anyway (fp32_gradients).
    bool fp32_embedding_grads = false;
    /// Megatron-Core's defer_embedding_wgrad_compute (p > 1, with gradient_accumulation_fusion; NeMo's and Megatron-
    /// Bridge's performance recipes): the output layer's backward on the last stage skips its weight gradient (and,
    /// under SP, the gather of its input for it) for the first wgrad_deferral_limit microbatches (0: all), keeping
    /// each one's input and 16-bit output gradient; after its last backward the stage runs the deferred GEMMs, each
    /// input's gather overlapping the GEMM before it (finish_embedding_wgrad_compute, before finalize_model_grads).
    bool defer_embedding_wgrad_compute = false;
    int wgrad_deferral_limit = 0;
    /// How many microbatches' output-layer weight gradients the last stage defers (0 without the deferral).
    [[nodiscard]] int deferred_wgrad_microbatches() const {
        if (!defer_embedding_wgrad_compute) return 0;
        return wgrad_deferral_limit == 0 ? microbatches() : std::min(wgrad_deferral_limit, microbatches());
    }
    /// Megatron's --overlap-p2p-communication with the interleaved schedule (its default there since Megatron-Core):
    /// pipeline sends and receives are posted asynchronously; a unit waits only for the transfer bringing its input
    /// and, on the sender, for its previous send of the same direction (the schedule's wait handles).
    bool overlap_p2p_comm = false;
    /// With overlap_p2p_comm: the pipeline calls are single isend / irecv ops (Megatron-Core's _p2p_ops, batch_p2p_comm
    /// off), and PyTorch runs the ops between a pair of ranks on one NCCL stream in the order posted, both directions
    /// together (one stream per peer key; pytorch/pytorch#132852), so a transfer waits for the pair's earlier ones,
    /// a receive posted early holding back the sends posted after it. With two stages Megatron-Core puts one direction
    /// on the world group, so each direction has its own stream. Off: each transfer starts once both sides posted it.
    bool p2p_pair_order = true;
    /// host_gap_forward / _backward: GPU idle before every forward (backward) unit while the host, synchronised with
    /// the GPU, issues the unit's first kernels. Megatron-LM before August 2022 (the paper's and SC21's software) timed every forward and
    /// backward step with torch.cuda.synchronize() around it (its _Timer start / stop) and synchronised after every
    /// pipeline call, so each unit started from an empty GPU queue; the host then ran the step's Python (get_batch's
    /// broadcasts and masks on every stage, the autograd engine's start) before the first kernel. Zero (the default):
    /// the host is ahead of the GPU, as with Megatron-Core, whose timers do not synchronise at the default level.
    Time host_gap_forward{};
    Time host_gap_backward{};
    [[nodiscard]] bool host_gaps() const { return host_gap_forward > Time::zero() || host_gap_backward > Time::zero(); }
    /// Uneven pipeline split (Megatron-LM's decoder_first / _last_pipeline_num_layers): transformer layers on the
    /// first and on the last stage (0: an even share); the middle stages share the rest evenly.
    int first_stage_layers = 0;
    int last_stage_layers = 0;
    /// Megatron-Core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split: the input
    /// embedding (the output layer and loss) counts as one layer when the transformer layers are split evenly over
    /// the pipeline x interleave model chunks, so the model's first (last) chunk holds one transformer layer fewer
    /// (Llama 3.1 405B: 126 layers + 2 over 8 x 8 chunks, 2 each, 1 in the first and in the last chunk).
    bool embedding_in_pipeline_split = false;
    bool loss_in_pipeline_split = false;
    /// Megatron-LM's partial full recompute (recompute_num_layers, recompute_method), with recompute: full.
    /// uniform: every layer is recomputed, in groups of recompute_layers whose inputs alone are kept;
    /// block: only the first recompute_layers layers of each model chunk are recomputed, the rest keep everything.
    /// 0: one layer at a time, every layer (the paper's full recompute).
    int recompute_layers = 0;
    RecomputeMethod recompute_method = RecomputeMethod::uniform;
    RecomputeModules recompute_modules{};   ///< with recompute: selective
    OffloadModules offload_modules{};       ///< fine-grained activation offloading (none: off)
    /// What the reports say: recompute_modules with selective recompute, none otherwise.
    [[nodiscard]] RecomputeModules recompute_modules_in_force() const {
        return recompute == Recompute::selective ? recompute_modules : RecomputeModules{false, false, false};
    }
    /// Whether the layers in force can recompute `modules` as Megatron-Core does: layernorm only where each norm is a
    /// module of its own (local: Transformer Engine's layers fuse them into the linear layers), and Transformer
    /// Engine's own TransformerLayer only the attention core.
    [[nodiscard]] bool can_recompute(const RecomputeModules& modules) const {
        const TransformerImpl impl = transformer_impl_in_force();
        if (impl == TransformerImpl::te_transformer_layer) return modules == RecomputeModules{};
        return impl == TransformerImpl::local || !modules.layernorm;
    }

    [[nodiscard]] int gpus() const { return tensor * context * pipeline * data; }
    [[nodiscard]] int microbatches() const { return global_batch / (microbatch * data); }
    /// Transformer layers of pipeline stage `stage` when the model has `layers` (the split is validated by
    /// find_problem: whole numbers that add up, each stage's divisible by the interleave).
    [[nodiscard]] int layers_on_stage(int layers, int stage) const;
    /// Transformer layers of the model chunk at virtual stage `v` (chunk x pipeline + stage): a stage's layers over
    /// the interleave, less the embedding's or the loss's place when they count in the split.
    [[nodiscard]] int layers_in_chunk(int layers, int v) const;
    /// A GPU's global rank in Megatron's order (tensor innermost, then context, then data, then pipeline).
    [[nodiscard]] int global_rank(int stage, int replica, int context_rank, int tensor_rank) const {
        return ((stage * data + replica) * context + context_rank) * tensor + tensor_rank;
    }
    /// Whether the embedding or the loss takes a layer's place in the pipeline split.
    [[nodiscard]] bool split_counts_ends() const { return embedding_in_pipeline_split || loss_in_pipeline_split; }
    /// Of a chunk's `chunk_layers` layers, how many full recompute re-runs (all, or the block's first ones).
    [[nodiscard]] int recomputed_layers(int chunk_layers) const {
        if (recompute != Recompute::full) return 0;
        if (recompute_method == RecomputeMethod::block && recompute_layers > 0) return std::min(recompute_layers, chunk_layers);
        return chunk_layers;
    }
    /// Layers recomputed together, whose activations are live at once in the backward (uniform groups).
    [[nodiscard]] int recompute_group(int chunk_layers) const {
        if (recompute != Recompute::full) return 0;
        if (recompute_method == RecomputeMethod::uniform && recompute_layers > 0) return std::min(recompute_layers, chunk_layers);
        return chunk_layers > 0 ? 1 : 0;
    }
};

/// How a fat tree's switches pick among the equal-cost links up towards the spines (and cores).
enum class Routing {
    /// Each (source, destination) pair's flow is pinned to one path, picked by a hash of the pair: static routing, as
    /// Ethernet ECMP does per flow and as InfiniBand's destination-based forwarding tables do without adaptive routing.
    /// Two flows can collide on one uplink while another stays idle.
    hash,
    /// The switches spread every flow's packets over all equal-cost uplinks by their load (InfiniBand adaptive
    /// routing, Spectrum-X): a leaf's uplinks act as one link of their summed bandwidth (a fluid model of it).
    adaptive,
};

[[nodiscard]] const char* to_string(Routing r);
[[nodiscard]] std::optional<Routing> routing_named(std::string_view name);

/// Inter-node and intra-node network of the system (see fabric.hpp for the topology it builds).
struct NetworkSpec {
    BytesPerSecond nvlink_bandwidth{};   ///< per GPU per direction, effective (NCCL bus bandwidth)
    Time nvlink_latency;
    int rails = 8;
    BytesPerSecond nic_bandwidth{};      ///< per NIC per direction, effective
    Time nic_latency;
    int nodes_per_leaf = 20;
    int spines_per_rail = 0;
    double oversubscription = 1.0;
    int tiers = 2;
    Routing routing = Routing::hash;
    Time switch_latency;
    Time collective_step_latency_intra;
    Time collective_step_latency_inter;
    bool hierarchical_collectives = true;
    Time p2p_latency;                    ///< software overhead of one pipeline send/recv
    /// A GPU's copies to and from pinned host memory (PCIe), per direction, effective with every GPU of the node copying
    /// at once (0: not given; activation offloading needs them).
    BytesPerSecond device_to_host_bandwidth{};
    BytesPerSecond host_to_device_bandwidth{};
    Time host_copy_latency;              ///< per copy: the launch and the DMA's start
    /// Each GPU's own PCIe link (to its PCIe switch), per direction, effective: its NIC's traffic and its copies to and
    /// from host memory both cross it. Modelled only with activation offloading, where those copies share it with the
    /// pipeline's and the data-parallel reduction's inter-node flows (0: not given; the copies then run unshared).
    BytesPerSecond pcie_bandwidth{};
    /// NCCL channels (one SM each) per NIC a GPU drives in an inter-node collective: a data-parallel collective
    /// with g GPUs of its group per node holds min(device nccl_channels, this x min(rails, g)) SMs.
    int nccl_channels_per_nic = 2;
    /// Leaves of a rail that share one group of spines (0: every leaf reaches every spine of its rail);
    /// more leaves than that need the third (core) tier. Not a scenario key yet: tests set it.
    int leaves_per_spine_group = 0;
};

/// Optimizer step cost model: the step streams over each parameter's state.
struct OptimizerSpec {
    double bytes_per_param_step = 0;     ///< HBM bytes read + written per parameter in the Adam step (bf16)
    double bytes_per_param_step_fp16 = 0;  ///< the same with fp16 (loss scaling: grad copy, unscale)
    /// The step's bytes per parameter for a training precision.
    [[nodiscard]] double bytes_per_param(Precision p) const {
        return p == Precision::fp16 ? bytes_per_param_step_fp16 : bytes_per_param_step;
    }
    Time fixed_overhead;                 ///< grad-norm / overflow checks, launches
};

/// Variation of kernel times between GPUs and between runs (see docs/fidelity.md, "GPU-to-GPU variation"). A
/// synchronous job waits for its slowest members; both are off (0) unless the system file gives them.
struct VariationSpec {
    double gpu_sigma = 0;     ///< relative standard deviation of a GPU's persistent kernel speed (GPU to GPU)
    double span_sigma = 0;    ///< relative standard deviation of each compute span's time (run to run)
    std::uint64_t seed = 1;   ///< which GPU gets which speed; which span which draw
    /// How long a draw holds: 0, each span its own; else each GPU's level lasts this long of its compute (a clock level
    /// that holds for tens of ms), each span drawn at the level its start falls in.
    Time span_hold{};
};

/// What a GPU's memory offers the training state: its usable capacity, less what the runtime reserves.
struct DeviceMemory {
    Bytes capacity;   ///< usable HBM per GPU
    Bytes reserved;   ///< CUDA context, NCCL buffers, library workspaces
};

struct SystemSpec {
    std::string name;
    DeviceProfile device;
    int gpus_per_node = 8;
    Bytes memory_capacity;               ///< usable HBM per GPU
    /// Held outside the training state on every GPU: CUDA context, NCCL buffers, library workspaces.
    Bytes memory_reserved;
    NetworkSpec network;
    OptimizerSpec optimizer;
    VariationSpec variation;
    /// The system file's power_limit_w: the boards' power limit in watts over the device profile's power.limit_w
    /// (0: none, the profile's rates); unset: the profile's. apply_power_limit() puts it into `device`.
    std::optional<double> power_limit_w;

    /// Puts power_limit_w into the device profile (again after `--profile` replaced it). Throws InputError where
    /// the profile has no power block to limit, or the limit is not above what its bandwidth-bound kernels draw.
    void apply_power_limit();

    [[nodiscard]] DeviceMemory device_memory() const { return {memory_capacity, memory_reserved}; }

    /// A device profile calibrated on one GPU has no intra_node block: its tensor-parallel collectives then use
    /// the system's NVLink bandwidth (the system file names such a profile, or `--profile` puts one in).
    void use_nvlink_for_missing_intra_node() {
        if (device.intra_node_bus_bandwidth <= 0) device.intra_node_bus_bandwidth = network.nvlink_bandwidth.value;
    }

    /// Time to stream `bytes` through HBM at the device's elementwise bandwidth (an HBM-bound pass of eager kernels).
    [[nodiscard]] double hbm_pass_seconds(double bytes) const {
        return bytes / (device.hbm_bandwidth * device.elementwise_bandwidth_efficiency);
    }
    /// HBM-bound time of the optimizer step on one GPU that holds `params` parameters and updates `shard` of them
    /// (all of them without the distributed optimizer), without the fixed overhead: the step's bytes per parameter
    /// at the device's elementwise bandwidth, over the shard, except the zeroing of the gradient buffer for the next
    /// iteration (one write of each gradient, `gradient_bytes_per_param`, part of those bytes), which covers every
    /// parameter the GPU holds (Megatron zeroes its whole buffer: `grad_data.zero_()`, `buffer_.zero()`). With 16-bit
    /// main gradients outside FP16 training (ExecutionSpec::grad_reduce_in_fp32 false) the BF16 step first copies them
    /// to fp32 (read 2, write 4 bytes: Megatron's _copy_model_grads_to_main_grads, as FP16's step does) and its
    /// zeroing writes 2 bytes, not 4.
    [[nodiscard]] double optimizer_step_seconds(double shard, double params, Precision precision,
                                                double gradient_bytes_per_param) const {
        double bytes = optimizer.bytes_per_param(precision);
        if (precision != Precision::fp16 && gradient_bytes_per_param < 4)
            bytes += (gradient_bytes_per_param + 4) - (4 - gradient_bytes_per_param);
        const double zero = std::min(bytes, gradient_bytes_per_param);
        return hbm_pass_seconds(shard * (bytes - zero) + params * zero);
    }
    /// HBM-bound time of the gradient-averaging pass (ExecutionSpec::gradient_average) over `params` parameters
    /// whose gradients take `gradient_bytes_per_param` each: every gradient read and written once.
    [[nodiscard]] double gradient_average_seconds(double params, double gradient_bytes_per_param) const {
        return hbm_pass_seconds(2.0 * params * gradient_bytes_per_param);
    }
    /// Time of the NaN check before a bucket's reduction (ExecutionSpec::check_for_nan_in_grad) over `params`
    /// gradients of `gradient_bytes_per_param` each: the norm reads each once (grad_data.norm(p=2)), a second kernel
    /// tests it (isnan), and the host, synchronised by the assert, launches the next kernel only then: three launches.
    [[nodiscard]] double gradient_check_seconds(double params, double gradient_bytes_per_param) const {
        return 3.0 * device.kernel_launch_us * 1e-6 + hbm_pass_seconds(params * gradient_bytes_per_param);
    }
    /// An all-reduce of a few bytes (FP8 amaxes) over `ranks_per_node` ranks on each of `nodes` nodes, by NCCL's tree
    /// (its choice for small messages: a chain inside each node, a binary tree across the nodes, reduced up and then
    /// broadcast down, NCCL's tuning model src/graph/tuning.cc): 2 x ((ranks_per_node - 1) x the intra-node step
    /// latency + ceil(log2 nodes) x the inter-node one). Bandwidth plays no part at this size; NCCL's base latency per
    /// collective (its baseLat, a few us) and the launch are left out, so this is a lower bound.
    [[nodiscard]] Time small_all_reduce_latency(int ranks_per_node, int nodes) const {
        int depth = 0;
        while ((1 << depth) < nodes) ++depth;
        return (network.collective_step_latency_intra * std::max(0, ranks_per_node - 1) +
                network.collective_step_latency_inter * depth) *
               2;
    }
};

struct Scenario {
    std::string name;          ///< case name
    std::string source;        ///< file:line of the case, for messages
    ModelSpec model;
    ExecutionSpec execution;
    SystemSpec system;
    /// Set for a sweep combination that cannot run (the reason); such cases are reported, not dropped.
    std::string infeasible;
};

/// A cross-part inconsistency: the part ("model" or "execution"), the key, and what is wrong.
struct SpecProblem {
    std::string part;
    std::string key;
    std::string message;
};

/// What the simulator accepts at most; find_problem reports a scenario beyond them (sizes whose products would
/// overflow, or whose task graph or simulated time could not be held).
inline constexpr std::int64_t kMaxSimulatedGpus = 1 << 20;     ///< tensor x context x pipeline x data
inline constexpr std::int64_t kMaxMicrobatches = 1 << 20;      ///< per pipeline per iteration (task labels: 20 bits)
inline constexpr std::int64_t kMaxScheduleUnits = 1 << 26;    ///< forward + backward units of all stages
inline constexpr double kMaxTensorElements = 281474976710656.0;  ///< 2^48 elements in one microbatch's tensor
inline constexpr double kMaxParameters = 1e15;                 ///< 1000 x today's largest models
inline constexpr double kMaxIterationSeconds = 1e5;            ///< simulated time is 64-bit picoseconds (106 days)

/// The first cross-part inconsistency of a scenario (divisibility, schedule constraints), if any.
[[nodiscard]] std::optional<SpecProblem> find_problem(const Scenario& scenario);

/// Checks cross-part consistency (divisibility, schedule constraints). Throws InputError.
void validate(const Scenario& scenario);

}  // namespace strata
