// Memory per GPU: parameters, gradients, optimizer state and activations, against the device capacity.
#pragma once

#include "strata/layer.hpp"
#include "strata/schedule.hpp"
#include "strata/spec.hpp"
#include "strata/units.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

/// Bytes per parameter held by each GPU (Megatron-LM mixed precision with Adam):
///   bf16: 2 (weights) + 4 (fp32 gradients) + 12 (fp32 master weights, Adam m and v)          = 18
///   fp16: 2 (weights) + 2 (fp16 gradients) + 16 (fp32 master weights and gradients, m, v)   = 20
///   bf16 with 16-bit main gradients (ExecutionSpec::grad_reduce_in_fp32 false): as fp16         = 20
/// A distributed optimizer shards the optimizer part over the d x c data- (and context-) parallel ranks. Apex's
/// DistributedFusedAdam as NeMo sets it up (ExecutionSpec::grad_buckets nemo_apex, nemo_apex_layers) keeps per parameter
/// of its shard Adam's m and v (fp32, 8), the bf16 weight's remainder to fp32 (int16, 2; with FP8 parameters or fp16
/// weights an fp32 copy, 4) and the reduced gradient shard (the gradients' bytes): with bf16 weights 12 with 16-bit
/// gradients, 14 with fp32 (stage_state adds 2 for fp32 embedding gradients' shards).
struct BytesPerParam {
    double weights = 2, gradients = 4, optimizer = 12;
};
BytesPerParam bytes_per_param(const ExecutionSpec& exec);

/// Weight bytes one GPU of the stage holds: 16-bit weights, plus with FP8 Transformer Engine's cached FP8 copy of
/// each transformer-layer weight and of its transpose (2 bytes per layer parameter); with FP8 primary weights
/// (ExecutionSpec::fp8_param_gather) the layer weights are that copy and transpose alone (2 bytes, as 16-bit).
Bytes stage_weight_bytes(const ModelSpec& model, const ExecutionSpec& exec, int stage);
/// HBM bytes one GPU of the stage moves once per iteration to make its FP8 layer weights (0 without FP8): with 16-bit
/// weights Transformer Engine casts each on the iteration's first microbatch with its transpose (read 2, write 1 + 1;
/// current scaling reads it once more for the amax: 6); FP8 primary weights (fp8_param_gather) arrive from the
/// all-gather without their transpose, which is made again (read 1, write 1).
double fp8_weight_cast_bytes(const ModelSpec& model, const ExecutionSpec& exec, int stage);
/// Parameters held by one GPU of pipeline stage `stage` (tensor sharding applied).
double parameters_on_stage(const ModelSpec& model, const ExecutionSpec& exec, int stage);
/// Of them, those whose gradients stay fp32 where the rest are 16-bit (ExecutionSpec::fp32_embedding_grads, NeMo's
/// with_fp32_embedding_grads): the word embedding and a learned position table on the first stage, the word
/// embedding's tied copy on the last (p > 1). 0 without the key or where every gradient is fp32.
double fp32_embedding_parameters(const ModelSpec& model, const ExecutionSpec& exec, int stage);
/// Bytes of the gradients of `params` parameters, `fp32_params` of them fp32 (fp32_embedding_parameters) and the rest at
/// bytes_per_param(exec).gradients: the buffer they take, the message their reduction moves.
double gradient_bytes(const ExecutionSpec& exec, double params, double fp32_params);
/// Parameters of one transformer layer held by one GPU of a t-way tensor-parallel group.
double layer_parameters_per_gpu(const ModelSpec& model, int tensor);
/// Of those, the linear layers' weights (QKV, projection, fc1, fc2): what FP8 parameters hold in FP8.
double layer_linear_weights_per_gpu(const ModelSpec& model, int tensor);
/// Bytes of one transformer layer's weights as Megatron-FSDP gathers them to one GPU (ExecutionSpec::fsdp): the linear
/// weights in FP8 with FP8 parameters (fp8_param_gather), everything else in 16 bits.
double fsdp_layer_gather_bytes(const ModelSpec& model, const ExecutionSpec& exec);
/// Parameters of the input embedding held by one GPU of the first stage: its vocabulary shard (and a learned
/// position table).
double embedding_parameters_per_gpu(const ModelSpec& model, int tensor);
/// All parameters of the model (unsharded).
double total_parameters(const ModelSpec& model);

/// One bucket (bucket group) of Megatron-Core's data-parallel gradient (and parameter) buffers of a model chunk
/// (ExecutionSpec::grad_buckets megatron_core), or one of NeMo's groups for Apex (nemo_apex, nemo_apex_layers):
/// reduced, and gathered, as one.
struct GradientBucket {
    double parameters = 0;      ///< per GPU
    double linear_weights = 0;  ///< of them, the layers' linear weights (gathered in FP8 with fp8_param_gather)
    /// The chunk's backward passes it spans, numbered as the backward runs them: the output layer's (on the last
    /// virtual stage), the layers' last to first, the input embedding's (on the first). It is complete when pass
    /// last_piece reaches ready_event: in a layer, 0 fc2's weight gradient, 1 fc1's and the second norm's, 2 the
    /// projection's, 3 QKV's and the first norm's (kernel order; the pass's end outside layers).
    int first_piece = 0, last_piece = -1;
    int ready_event = 0;
    /// Of its parameters, those whose gradients stay fp32 (fp32_embedding_parameters) where the rest are 16-bit.
    double fp32_parameters = 0;
    /// NeMo's group for Apex that takes the parameters NeMo marks _disable_overlap_grad_sync (nemo_apex_gradient_buckets'
    /// moved ones): Apex's hooks never launch it, NeMo's _finish_bucket_grad_sync does, after the schedule.
    bool after_schedule = false;
};
/// The buckets of a model chunk of `layers` transformer layers, with the input embedding if `embedding` and the final
/// norm and output layer if `output`, as Megatron-Core's DDP makes them (param_and_grad_buffer.py, 0.8-0.11): the
/// chunk's parameter tensors in reverse registration order (output layer, final norm; per layer fc2, fc1, its norm,
/// QKV, its norm, the projection, biases apart; the embedding last), a bucket closed after the tensor that brings it
/// to `bucket_size` parameters (0: one bucket), a tied word embedding (p > 1, distributed optimizer: shared_embedding)
/// a bucket of its own. With FP8 parameters (fp8_param_gather, Megatron-Core >= 0.9) the layers' linear weights are a
/// buffer of their own, cut alone, and every bucket of the 16-bit rest joins the last FP8 bucket's group. Returned in
/// the order the backward completes them; padding to the data-parallel size left out.
std::vector<GradientBucket> megatron_gradient_buckets(const ModelSpec& model, const ExecutionSpec& exec, int layers,
                                                      bool embedding, bool output, double bucket_size);
/// What one model chunk of a stage holds: its transformer layers, and the input embedding / the final norm and output
/// layer where it is the first / last virtual stage.
struct ChunkContents {
    int layers = 0;
    bool embedding = false;
    bool output = false;
};
/// NeMo 1's bucket groups for Apex's DistributedFusedAdam (ExecutionSpec::grad_buckets nemo_apex, nemo_apex_layers;
/// NeMo megatron_gpt_model.py configure_optimizers and nemo/core/optim/distributed_adam.py, v1.20-v2.1; Apex
/// distributed_fused_adam.py), for a stage's chunks in order: one group per transformer layer, or with interleaving
/// (nemo_apex: NeMo up to 1.20 and from 24.09; 1.21-1.23 kept the rest as a last group of its own) one per model
/// chunk; each reduced as one (the bucket_cap_mb buckets of a group wait for all its gradients and are
/// reduce-scattered together). The first layer's group (the first chunk's) also holds what NeMo keeps out of the
/// others: in groups by layer everything outside the layers (embeddings, final norm, output layer); under sequence
/// parallelism the norms and the row-parallel biases (_disable_overlap_grad_sync); with FP8 parameters everything but
/// the layers' FP8 weights; a tied word embedding with p > 1. A group is complete at its last pass's end (event 3: in a
/// layer after QKV's and the first norm's gradients). With fp32_embedding_grads a group's fp32_parameters are the
/// embeddings it holds (fp32_embedding_parameters). Per chunk, its groups in the order the backward completes them.
std::vector<std::vector<GradientBucket>> nemo_apex_gradient_buckets(const ModelSpec& model, const ExecutionSpec& exec,
                                                                    const std::vector<ChunkContents>& chunks);
/// The bucket size Megatron-Core's DDP gives model chunk `chunk` of pipeline stage `stage` (ExecutionSpec::
/// megatron_bucket_size), or 0 (one bucket) where it has bucketing off: on every stage after the first, for every chunk
/// after the first and for all with overlap_param_gather_with_optimizer_step (disable_bucketing), and without
/// overlap_grad_reduce (distributed_data_parallel.py, 0.8-0.11; training.py, NeMo 2, Megatron-Bridge).
double megatron_chunk_bucket_size(const ExecutionSpec& exec, int stage, int chunk);

/// What a GPU's memory holds, by category: the analytical stage memory and the simulated memory pools
/// (engine pool categories, in this order) share it.
enum class MemoryCategory : std::uint32_t {
    weights,
    gradients,
    optimizer,
    activations,       ///< transformer layers' stored activations
    embedding_output,  ///< embedding dropout masks (first virtual stage), output layer's activations (last)
    recompute,         ///< one layer's recomputed activations while its backward runs
    attention,         ///< an attention's transient buffers while it runs (context parallelism's ring)
    reserved,          ///< runtime: CUDA context, NCCL buffers, workspaces
};
inline constexpr std::size_t kMemoryCategoryCount = 8;
[[nodiscard]] const char* to_string(MemoryCategory c);
/// Every category's name, in index order.
[[nodiscard]] std::vector<std::string> memory_category_names();
[[nodiscard]] constexpr std::uint32_t index(MemoryCategory c) { return static_cast<std::uint32_t>(c); }

/// Activation bytes one unit of a stage's program allocates when its forward starts and frees when its
/// backward ends.
struct UnitActivations {
    Bytes layers;      ///< the chunk's transformer layers
    Bytes embedding;   ///< first virtual stage only
    Bytes output;      ///< last virtual stage only
};

/// Per-microbatch activation sizes of an execution, and what each model chunk of each stage stores.
struct ActivationPlan {
    schedule::Shape shape;
    Bytes per_layer;              ///< one layer, one microbatch, under the recompute policy (Table 2)
    std::vector<Bytes> chunk_layers;     ///< per virtual stage (chunk x pipeline + stage): the chunk's transformer
                                         ///< layers (uneven splits and partial recompute make chunks differ)
    Bytes embedding;              ///< per microbatch, first virtual stage
    Bytes output;                 ///< per microbatch, last virtual stage
    std::vector<Bytes> workspace;        ///< per virtual stage: live while a backward recomputes (one layer, or a group)
    /// Live while a unit's attention runs (LayerPlan::attention_workspace_*): held from the unit's start, as a bound.
    Bytes attention_forward, attention_backward;
    /// defer_embedding_wgrad_compute: the first `deferred_microbatches` backwards of the last virtual stage keep
    /// `deferred_output` each until the drain after the stage's last backward; `deferral_buffers` held throughout.
    int deferred_microbatches = 0;
    Bytes deferred_output;
    Bytes deferral_buffers;
    [[nodiscard]] UnitActivations of(int stage, int chunk) const;
    /// The backward of `microbatch` of the chunk defers its output layer's weight gradient (the last virtual stage's
    /// first deferred_microbatches).
    [[nodiscard]] bool defers(int stage, int chunk, int microbatch) const {
        return microbatch < deferred_microbatches && schedule::virtual_stage(shape, stage, chunk) == shape.virtual_stages() - 1;
    }
    /// The stage runs the deferred weight-gradient GEMMs after its program (the last stage, when deferring).
    [[nodiscard]] bool drains(int stage) const { return deferred_microbatches > 0 && stage == shape.stages - 1; }
    /// What the backward of `microbatch` of the chunk keeps past its end (a deferred weight gradient's operands).
    [[nodiscard]] Bytes kept_after_backward(int stage, int chunk, int microbatch) const {
        return defers(stage, chunk, microbatch) ? deferred_output : Bytes(0);
    }
    /// What the stage holds from the start for the deferral (the drain's gather buffers).
    [[nodiscard]] Bytes held_for_deferral(int stage) const { return drains(stage) ? deferral_buffers : Bytes(0); }
    [[nodiscard]] Bytes recompute_workspace(int stage, int chunk) const {
        return workspace[static_cast<std::size_t>(schedule::virtual_stage(shape, stage, chunk))];
    }
    /// What a unit of the chunk holds while its attention runs: none for a chunk without layers.
    [[nodiscard]] Bytes attention_workspace(int stage, int chunk, bool forward) const {
        if (layers_of(stage, chunk) == 0) return Bytes(0);
        return forward ? attention_forward : attention_backward;
    }
    /// Fine-grained activation offloading (ExecutionSpec::offload_modules), per layer and microbatch (every layer the
    /// same: full recompute, the only policy that makes layers differ, is not offloaded); none without it.
    LayerOffload offload;
    std::vector<int> layer_count;        ///< per virtual stage: the chunk's transformer layers
    [[nodiscard]] int layers_of(int stage, int chunk) const {
        return layer_count[static_cast<std::size_t>(schedule::virtual_stage(shape, stage, chunk))];
    }
};

/// Fine-grained activation offloading along a stage's program (schedule::unit_order): for each unit, whether its
/// chunk's last layer goes to host memory too. Megatron-Core keeps each module's last group of the chunk that runs
/// backward next on the GPU (fine_grained_activation_offload.py): a forward whose own backward is the stage's next
/// backward keeps its last layer, every other offloads it; a backward unit reads what its forward did. An offloaded
/// last layer is reloaded during the backward before it, as that one's first layer finishes its MLP's backward
/// (Megatron-Core reloads the next backward chunk's last group when a chunk runs out of groups); the other layers one
/// layer ahead, as the layer after them (in the forward's order) finishes its MLP's backward.
[[nodiscard]] std::vector<bool> offloads_last_layer(const std::vector<schedule::Unit>& order);
/// The place in `order` of the first backward unit after place `i` (order.size(): none).
[[nodiscard]] std::size_t next_backward(const std::vector<schedule::Unit>& order, std::size_t i);
[[nodiscard]] ActivationPlan activation_plan(const ModelSpec& model, const ExecutionSpec& exec);

struct StageMemory {
    int stage = 0;
    Bytes weights, gradients, optimizer;
    Bytes activations_layers;     ///< transformer layers
    Bytes activations_embedding;  ///< embedding dropout masks (first stage)
    Bytes activations_output;     ///< final norm, logits input, fp32 logits (last stage)
    Bytes recompute_workspace;    ///< one layer's recomputed activations (full / selective recompute)
    Bytes attention_workspace;    ///< an attention's transient buffers (context parallelism's ring)
    Bytes reserved;               ///< runtime: CUDA context, NCCL buffers, workspaces (system memory_reserved_bytes)
    int units_in_flight = 0;      ///< model-chunk activations held at the peak
    [[nodiscard]] Bytes total() const {
        return weights + gradients + optimizer + activations_layers + activations_embedding + activations_output +
               recompute_workspace + attention_workspace + reserved;
    }
    /// The bytes of one category (embedding and output share one).
    [[nodiscard]] Bytes bytes(MemoryCategory c) const;
};

/// What one GPU of the stage holds for the whole iteration: weights (stage_weight_bytes), gradients, optimizer state
/// and the runtime reserve; the activation fields are zero. The simulated pools start from exactly this.
[[nodiscard]] StageMemory stage_state(const ModelSpec& model, const ExecutionSpec& exec, const DeviceMemory& device,
                                      int stage);

/// One stage's memory at its peak: the static state plus the largest activation footprint met while walking
/// the stage's schedule program (schedule::unit_order), unit by unit, exactly as the simulation allocates. With
/// activation offloading the walk goes layer by layer and is a bound that holds while the host link keeps pace: a
/// layer's copy to the host ends within the next layer's forward, each reload is counted from the start of the layer
/// before it (in backward order), the simulation issuing it later; a slower link leaves copies in flight longer, which
/// the simulated memory shows and this does not.
[[nodiscard]] StageMemory stage_memory(const ModelSpec& model, const ExecutionSpec& exec, const DeviceMemory& device,
                                       int stage);
/// stage_memory's walk with fine-grained activation offloading (plan.offload), layer by layer, from the stage's static
/// state `state`: the bound stage_memory describes.
[[nodiscard]] StageMemory offloading_stage_memory(StageMemory state, const ActivationPlan& plan, int stage);

struct MemoryReport {
    Bytes activation_per_layer;          ///< one layer, one microbatch (Table 2)
    Bytes activation_first_stage;        ///< eq. 5 (x interleave factor) plus Section 4.5 extras
    Bytes activation_first_stage_layers; ///< eq. 5 part only
    StageMemory first_stage;
    StageMemory peak_stage;              ///< the stage with the largest total
    std::vector<StageMemory> stages;     ///< every pipeline stage at its own peak, in stage order
    Bytes capacity;
    [[nodiscard]] bool fits() const { return peak_stage.total() <= capacity; }
    [[nodiscard]] Bytes margin() const { return capacity - peak_stage.total(); }
};

/// Analytical memory model (the discrete-event engine checks the same through the schedule; a CTest property
/// test holds the two equal, stage by stage).
MemoryReport estimate_memory(const ModelSpec& model, const ExecutionSpec& exec, const DeviceMemory& device);

}  // namespace strata
